"""Two independent workers on one store, in a bucket (the emulator of tests/conftest.py) and on a
local disk: one killed with SIGKILL mid-run, the other finishes its chunks (in a bucket after the
lease), the store equals an uninterrupted run's, no chunk is computed twice while its owner
lives, and a worker started again computes nothing.

The workers are processes running `jaxjudge.store.work.claimed_chunks` with a chunk function
that sleeps and returns arrays fixed by the chunk index, so that what is checked is the claims,
in seconds (tests/jobs/test_workers.py runs the same story through `jaxjudge extract`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.store import Store

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.alone  # it starts processes of its own

N_CHUNKS = 10
LEASE = 1.5

WORKER = """
import sys, time
import numpy as np
from jaxjudge.store import Store
from jaxjudge.store.work import claimed_chunks

root, log = sys.argv[1], sys.argv[2]

def note(text):
    with open(log, "a") as f:
        f.write(text + "\\n")

def make(i):
    note(f"start {i}")
    time.sleep(0.3)
    return {"example_ids": np.asarray([f"e{i}-{k}" for k in range(3)]),
            "values": np.sin(np.arange(3 * i, 3 * i + 3, dtype=np.float32))}

store = Store.open(root, {"test": "workers"}, n_chunks=%d)
claimed_chunks(store, store.missing_chunks(), make, %r, on_written=lambda i: note(f"done {i}"))
note("finished")
""" % (N_CHUNKS, LEASE)


def _start(tmp_path: Path, root: str, name: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return subprocess.Popen([sys.executable, str(script), root, str(tmp_path / f"{name}.log")], cwd=tmp_path, env=env,
                            stdout=open(tmp_path / f"{name}.out", "w"), stderr=subprocess.STDOUT)


def _log(tmp_path: Path, name: str) -> dict[str, list[int]]:
    path = tmp_path / f"{name}.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return {what: [int(x.split()[1]) for x in lines if x.startswith(what + " ")] for what in ("start", "done")}


def _wait(proc: subprocess.Popen, tmp_path: Path, name: str) -> None:
    assert proc.wait(timeout=120) == 0, (tmp_path / f"{name}.out").read_text()[-3000:]


@pytest.fixture(params=["local", "bucket"])
def roots(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "shared"), str(tmp_path / "alone")
    bucket = request.getfixturevalue("gcs_bucket")
    return f"{bucket}/shared", f"{bucket}/alone"


def test_a_killed_workers_chunks_are_done_by_the_other(tmp_path, roots):
    shared, alone = roots
    a = _start(tmp_path, shared, "a")
    b = _start(tmp_path, shared, "b")
    deadline = time.monotonic() + 60
    while not _log(tmp_path, "a")["done"]:
        assert a.poll() is None and time.monotonic() < deadline, (tmp_path / "a.out").read_text()[-3000:]
        time.sleep(0.02)
    time.sleep(0.1)  # into its next chunk
    a.send_signal(signal.SIGKILL)
    a.wait()
    _wait(b, tmp_path, "b")
    la, lb = _log(tmp_path, "a"), _log(tmp_path, "b")
    assert len(la["done"]) < N_CHUNKS and lb["done"], (la, lb)  # killed with work left, the other did some
    # Each chunk computed once, except the one the killed worker was computing when it died.
    assert sorted(la["done"] + lb["done"]) == list(range(N_CHUNKS))
    assert not set(la["done"]) & set(lb["start"])
    in_flight = set(la["start"]) - set(la["done"])
    assert len(in_flight) == 1 and in_flight <= set(lb["done"])  # killed mid-chunk; b took that chunk over
    assert set(lb["start"]) & set(la["start"]) == in_flight
    assert sorted(lb["start"]) == sorted(lb["done"])  # b finished every chunk it started

    store = Store.open(shared)
    assert store.missing_chunks(N_CHUNKS) == []
    assert not [p for p in (store.root / "chunks").iterdir() if p.name.endswith(".claim")]  # released or cleared

    # An uninterrupted worker in its own store gives the same arrays.
    c = _start(tmp_path, alone, "c")
    _wait(c, tmp_path, "c")
    got, want = Store.open(shared).load(), Store.open(alone).load()
    assert sorted(got) == sorted(want) == ["example_ids", "values"]
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)

    # The killed worker, started again, computes nothing.
    again = _start(tmp_path, shared, "again")
    _wait(again, tmp_path, "again")
    assert _log(tmp_path, "again") == {"start": [], "done": []}
    assert (tmp_path / "again.log").read_text() == "finished\n"
