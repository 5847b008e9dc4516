"""Two processes under ``jax.distributed`` on localhost split an extraction; the merged store
equals a single-process run.

Each subprocess initialises ``jax.distributed`` (CPU, loopback coordinator on a free port),
builds the same tiny judge as `test_engine.py`, and calls `jaxjudge.engine.extract` with a
shared store folder: it claims the chunks ``j % 2 == process_index`` first, then any chunk
nobody holds, waits for the chunks the other process holds, and returns the merged arrays,
which it saves for the comparison here. Then the same prompts on a second store with
``read_back=False`` (the experiment's jobs: the store is the result): each process tokenises only
the rows of the chunks it computes, reads no chunk back and returns those rows only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxjudge import engine
from jaxjudge.prompts import ScoreScale

from tests.xla_flags import xla_flags

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.alone  # it starts processes of its own
sys.path.insert(0, str(TESTS))

from test_engine import make_prompts, tiny_judge  # noqa: E402

WORKER = """
import sys
import jax
jax.distributed.initialize(coordinator_address={address!r}, num_processes=2, process_id={pid},
                           initialization_timeout=120)
sys.path.insert(0, {tests!r})
import numpy as np
from test_engine import make_prompts, tiny_judge
from jaxjudge import engine
from jaxjudge.prompts import ScoreScale

from jaxjudge.engine.tokens import TOKENISED
from jaxjudge.store import Store

reads, read_chunk = [], Store.read_chunk

def counted(store, i):
    reads.append(i)
    return read_chunk(store, i)

Store.read_chunk = counted
TOKENISED.log = []
judge, prompts = tiny_judge(), make_prompts(n_groups=6, per_group=3)
out = engine.extract(judge, prompts, ScoreScale(1, 10), chunk_size=3, progress=False, store={store!r},
                     min_prefix_tokens=4)
merged = dict(computed=np.asarray(out.computed_chunks, np.int64), **out.arrays())
# The same prompts on a second store, the result left in the store (read_back=False): the rows
# this process tokenised and the chunks it read, counted.
TOKENISED.log, merged_reads, reads = [], list(reads), []
own = engine.extract(judge, prompts, ScoreScale(1, 10), chunk_size=3, progress=False, store={store!r} + "-own",
                     min_prefix_tokens=4, read_back=False)
np.savez({result!r}, **merged, merged_reads=np.asarray(merged_reads, np.int64),
         own_computed=np.asarray(own.computed_chunks, np.int64), own_ids=np.asarray(own.example_ids, str),
         own_cand_logprobs=own.cand_logprobs, own_reads=np.asarray(reads, np.int64),
         own_tokenised=np.asarray([e for call in TOKENISED.log for e in call], str))
jax.distributed.shutdown()
"""


@pytest.mark.slow
def test_two_processes_split_and_merge(tmp_path, coordinator):
    address = coordinator
    store = tmp_path / "store"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1)}
    procs, results = [], []
    for pid in range(2):
        script = tmp_path / f"worker{pid}.py"
        result = tmp_path / f"result{pid}.npz"
        script.write_text(WORKER.format(address=address, pid=pid, tests=str(TESTS), store=str(store),
                                        result=str(result)))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
        results.append(result)
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=300)
            logs.append(out.decode(errors="replace")[-3000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for pid, p in enumerate(procs):
        assert p.returncode == 0, f"process {pid} failed:\n{logs[pid]}"

    single = engine.extract(tiny_judge(), make_prompts(n_groups=6, per_group=3), ScoreScale(1, 10), chunk_size=3,
                            progress=False, min_prefix_tokens=4)
    n_chunks = len(engine.plan.plan_chunks(np.repeat(np.arange(7), [3] * 6 + [1]), 3))
    got = [dict(np.load(r)) for r in results]
    # Every chunk computed once, by one process or the other: each claims its stripe first
    # (j % 2 == process_index), then any chunk nobody holds.
    first, second = (g["computed"].tolist() for g in got)
    assert not set(first) & set(second) and sorted(first + second) == list(range(n_chunks)), (first, second)
    assert first[:1] == [0] and second[:1] == [1]
    # Both processes return the merged result, identical to the single-process arrays.
    for g in got:
        for name, value in single.arrays().items():
            np.testing.assert_array_equal(g[name], value, err_msg=name)

    # With read_back=False each process returns the rows of the chunks it computed, reads no
    # chunk, and tokenised exactly those rows (whole prefix groups: a chunk here is one group).
    chunks = engine.plan.plan_chunks(np.repeat(np.arange(7), [3] * 6 + [1]), 3)
    own = [g["own_computed"].tolist() for g in got]
    assert not set(own[0]) & set(own[1]) and sorted(own[0] + own[1]) == list(range(n_chunks)), own
    row = {e: i for i, e in enumerate(single.example_ids)}
    for g, mine in zip(got, own):
        want = sorted(int(i) for c in mine for i in chunks[c].members)
        ids = g["own_ids"].tolist()
        assert [row[e] for e in ids] == want, (ids, want)
        assert sorted(row[e] for e in g["own_tokenised"].tolist()) == want
        np.testing.assert_array_equal(g["own_cand_logprobs"], single.cand_logprobs[want])
        assert g["own_reads"].tolist() == [], g["own_reads"]
    print(f"read_back=False: chunks computed {own[0]} and {own[1]}, rows tokenised "
          f"{[len(g['own_tokenised']) for g in got]}, chunks read {[len(g['own_reads']) for g in got]}; "
          f"the merged result read {[len(g['merged_reads']) for g in got]}")
