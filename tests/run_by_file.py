"""Run the test suite one file per pytest process, two files at a time, then print the totals.

`make test` uses this. One long process running every file crashed twice at the same place
(inside an XLA compile in `test_select.py`, late in the run: a segmentation fault, then an
abort), while that file passes alone. A fresh interpreter per file keeps
one module's native state (XLA, torch, compiled programs) from reaching the next.

Two files run side by side (``--jobs``, default: 2, or 1 on a one-core machine): most files spend
their time in single-threaded XLA compiles and Python, so two share two cores well. Files that
start several processes of their own (``jax.distributed`` over gloo, workers sharing a store)
run first, one at a time with nothing beside them, so their processes get the cores they were
written for. Then the longest files start, so that the last file to finish is a short one. Each file gets its
own ``--basetemp`` (concurrent pytest processes then never clean up each other's folders) and
no pytest cache.

    python tests/run_by_file.py [--jobs N] [pytest options...]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COUNTS = ("passed", "failed", "skipped", "error", "errors", "xfailed", "xpassed")
HERE = Path(__file__).resolve().parent

# Files that start processes of their own and run with nothing beside them.
ALONE = {
    "cli/test_cli_distributed.py",
    "engine/test_engine_distributed.py",
    "engine/test_engine_spmd.py",
    "jobs/test_workers.py",
    "models/test_slices.py",
}
# The longest files (minutes each on 2 cores), started first; the others follow in name order.
FIRST = (
    "cli/test_demo.py",
    "engine/test_engine.py",
    "aot/test_aot.py",
    "models/test_gguf_gemma3.py",
    "experiment/test_hardware.py",
    "select/test_nested.py",
    "models/test_load.py",
)


def order(files: list[Path]) -> list[Path]:
    """The files that run alone, then the longest, then the rest by name."""
    rank = {name: i for i, name in enumerate(FIRST)}

    def key(f: Path):
        name = f.relative_to(HERE).as_posix()
        return (name not in ALONE, rank.get(name, len(FIRST)), f)

    return sorted(files, key=key)


def main(argv: list[str]) -> int:
    jobs = min(2, os.cpu_count() or 1)
    if argv[:1] == ["--jobs"]:
        jobs, argv = max(1, int(argv[1])), argv[2:]
    files = order(list(HERE.rglob("test_*.py")))
    totals = dict.fromkeys(COUNTS, 0)
    bad = []
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="jaxjudge-tests-"))
    running: dict[str, tuple[subprocess.Popen, object, float]] = {}

    def start(f: Path) -> None:
        name = f.relative_to(HERE).as_posix()
        log = open(tmp / (name.replace("/", "__") + ".log"), "w+")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--basetemp={tmp / name.replace('/', '__').removesuffix('.py')}", *argv, str(f)]
        running[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True), log,
                         time.perf_counter())

    def finish(name: str) -> None:
        proc, log, began = running.pop(name)
        log.seek(0)
        out = log.read()
        log.close()
        lines = out.rstrip().splitlines()
        last = lines[-1] if lines else "(no output)"
        print(f"{name}: {last} [{time.perf_counter() - began:.0f} s of wall time]", flush=True)
        for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", last):
            totals[what] += int(n)
        if proc.returncode not in (0, 5):  # 5: no test collected (every test deselected)
            bad.append(name)
            print(out[-6000:], flush=True)

    def wait_for_one() -> None:
        while True:
            for name, (proc, _, _) in list(running.items()):
                if proc.poll() is not None:
                    finish(name)
                    return
            time.sleep(0.5)

    for f in files:
        alone = f.relative_to(HERE).as_posix() in ALONE
        while running and (alone or len(running) >= jobs):
            wait_for_one()
        start(f)
        if alone:
            wait_for_one()
    while running:
        wait_for_one()
    shutil.rmtree(tmp, ignore_errors=True)
    failed = totals["failed"] + totals["error"] + totals["errors"]
    print(f"\n{len(files)} files in {time.perf_counter() - t0:.0f} s, {jobs} at a time"
          + (f"; failing: {', '.join(bad)}" if bad else ""))
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
