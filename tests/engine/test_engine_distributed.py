"""Two processes under ``jax.distributed`` on localhost split an extraction; the merged store
equals a single-process run.

Each subprocess initialises ``jax.distributed`` (CPU, loopback coordinator on a free port),
builds the same tiny judge as `test_engine.py`, and calls `jaxjudge.engine.extract` with a
shared store folder: it claims the chunks ``j % 2 == process_index`` first, then any chunk
nobody holds, waits for the chunks the other process holds, and returns the merged arrays,
which it saves for the comparison here.
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

out = engine.extract(tiny_judge(), make_prompts(n_groups=6, per_group=3), ScoreScale(1, 10), chunk_size=3,
                     progress=False, store={store!r}, min_prefix_tokens=4)
np.savez({result!r}, computed=np.asarray(out.computed_chunks, np.int64), **out.arrays())
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
