"""A lost host ends the run in bounded time, and a restart finishes it: two processes, three
forced devices each, one SPMD program over ``data 2 x model 3`` (``jaxjudge extract`` with
``--coordinator``), a store on local disk or in a bucket (the emulator). Process 1 is SIGKILLed
once process 0 has published a chunk; process 0 exits non-zero within 60 s of the kill with one
line naming process 1 (the peers' watch, `jaxjudge.peers`, here with a 10 s silence: no C++
abort, no traceback). Both started again compute only the
chunks not yet published, and the store then equals one process's (six devices) within 1e-4.

Process 0 pauses after each chunk it publishes (a wrapper around `Store.write_chunk`, which also
records the chunks each run wrote), so that the kill lands mid-run on a loaded machine.

The judge is the tiny random one (tests/tiny_judge.py); slow (five interpreters load it and
compile) and alone (it starts processes of its own).
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tests.cli.test_cli_distributed import _arrays, _env, _experiment
from tests.processes import finish

pytestmark = pytest.mark.alone
STORE_ATOL = 1e-4
EXIT_BOUND_S = 60.0  # the acceptance's bound on a survivor's exit after the kill
LOST_AFTER_S = 10  # the watch's silence before a process is taken for lost (30 s by default)
WRAPPER = """
import os, sys, time
from jaxjudge.store.chunked import Store
from jaxjudge.cli import main

write = Store.write_chunk

def recorded(self, i, arrays):
    out = write(self, i, arrays)
    with open(os.environ["WRITES"], "a") as f:
        f.write(f"{i}\\n")
    time.sleep(float(os.environ.get("PAUSE", "0")))
    return out

Store.write_chunk = recorded
sys.exit(main(sys.argv[1:]))
"""


def _start(tmp_path, tag, devices, stores, writes, pause, *launch):
    (tmp_path / "wrapped.py").write_text(WRAPPER)
    env = _env(tmp_path, tag, devices, WRITES=str(writes), PAUSE=str(pause), JAXJUDGE_LOST_AFTER_S=str(LOST_AFTER_S))
    return subprocess.Popen([sys.executable, str(tmp_path / "wrapped.py"), "extract", "lost.py", "--quiet",
                             "--stores", str(stores), *launch],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _written(path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "bucket"])
def test_a_killed_process_ends_the_run_in_one_line_and_a_restart_finishes_it(tmp_path, coordinator, tiny_gguf,
                                                                              request, where):
    from jaxjudge.store.location import location

    # A score job only, one row per chunk (8 chunks), so that the kill lands between chunks.
    _experiment(tmp_path, tiny_gguf, {"data": 2, "model": 3}, "lost", methods=("vanilla",), engine={"chunk_size": 1})
    stores = tmp_path / "stores" if where == "local" else location(f"{request.getfixturevalue('gcs_bucket')}/stores")
    launch = lambda i: ("--coordinator", coordinator, "--num-processes", "2", "--process-id", str(i))  # noqa: E731
    first = [_start(tmp_path, f"p{i}", 3, stores, tmp_path / f"writes-{i}", 3, *launch(i)) for i in range(2)]
    procs = list(first)
    try:
        deadline = time.monotonic() + 600
        while not _written(tmp_path / "writes-0"):
            assert time.monotonic() < deadline and first[0].poll() is None, first[0].communicate()[1][-3000:]
            time.sleep(0.2)
        first[1].kill()
        killed = time.monotonic()
        out, err = first[0].communicate(timeout=EXIT_BOUND_S + 60)
        took = time.monotonic() - killed
        first[1].wait()
        published = sorted(_written(tmp_path / "writes-0"))
        assert first[0].returncode not in (0, None) and first[0].returncode > 0, (first[0].returncode, err[-3000:])
        assert took < EXIT_BOUND_S, (took, err[-3000:])
        assert "Traceback" not in err and "Check failure" not in err, err[-3000:]
        lost = [line for line in err.splitlines() if " lost (" in line]  # not the temp paths, which name the test
        assert len(lost) == 1 and lost[0].startswith("jaxjudge: process 1 of 2 lost"), err[-3000:]
        assert 1 <= len(published) < 8, published

        # Both again (no pause), and one process over six devices beside them as the reference.
        again = [_start(tmp_path, f"p{i}", 3, stores, tmp_path / f"again-{i}", 0, *launch(i)) for i in range(2)]
        alone = _start(tmp_path, "one", 6, tmp_path / "alone", tmp_path / "alone-writes", 0)
        procs = [*again, alone]
        finish(procs, 900)
    finally:  # the first run's processes, where a step before the second run failed
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    recomputed = sorted(_written(tmp_path / "again-0"))
    print(f"{where}: survivor exited {first[0].returncode} after {took:.1f} s; published before the kill {published}, "
          f"computed on restart {recomputed}")
    assert not set(recomputed) & set(published) and sorted(recomputed + published) == list(range(8)), (
        published, recomputed)
    a, b = _arrays(tmp_path / "alone"), _arrays(stores)
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        if k.endswith(":@seal"):
            continue
        if a[k].dtype.kind == "f":
            np.testing.assert_allclose(b[k], a[k], atol=STORE_ATOL, rtol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)
