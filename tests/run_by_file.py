"""Run the test suite in one pytest process per file (short files a few to a process), two
processes at a time, then print the totals.

`make test` uses this. Why not one process for the suite: one long process running every file crashed
twice at the same place (inside an XLA compile in `test_select.py`, late in the run: a
segmentation fault, then an abort) while that file passes alone; and pytest alone has no way
to keep two cores busy (pytest-xdist is not a dependency). A fresh interpreter per file keeps
one module's native state (XLA, torch, compiled programs) from reaching the next, and two
files side by side use both cores, since most files spend their time in single-threaded XLA
compiles and Python.

Scheduling, from the files themselves and the last run, never from a list kept here:

- A file whose module sets ``pytestmark`` with ``pytest.mark.alone`` (it starts processes of
  its own: ``jax.distributed`` over gloo, workers sharing a store) runs with nothing beside it,
  so that its processes get the cores they were written for. Those files run first.
- Files that took under `SHORT_S` in the last run share a process with other short ones, up to
  `BATCH_S` of last-run time each (the process start-up, a few seconds, is paid once), their
  times read back from pytest's JUnit XML.
- The others start longest first, by the wall time each took in the last run
  (``tests/durations.json``, rewritten after every run that ran every file), so that the last
  file to finish is a short one. A file the record does not know yet starts before the known
  ones (it may be long).

Each file gets its own ``--basetemp`` (concurrent pytest processes then never clean up each
other's folders) and no pytest cache. The run shares one XLA compile cache, a fresh folder each
run (``JAX_COMPILATION_CACHE_DIR`` for every process, ``JAXJUDGE_XLA_CACHE`` for the
``jaxjudge`` commands), so a program compiled by one file is read by the next.

    python tests/run_by_file.py [--jobs N] [--root DIR] [--logs DIR] [--optimized] [pytest options...]

Programs are compiled without most of XLA's backend optimisations (`compile_mode`; ``--optimized``
compiles as a user's run does), and every program goes into the run's cache however short its
compile.

``--logs DIR`` keeps each file's whole pytest output there (``--durations=N`` then shows where
a file's time went).
"""

from __future__ import annotations

import ast
import json
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
MARK = "alone"


def runs_alone(path: Path) -> bool:
    """Whether the module sets ``pytestmark`` to (a list holding) ``pytest.mark.alone``, read from
    its source without importing it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            continue
        for sub in ast.walk(node.value):
            # pytest.mark.alone, or mark.alone after `from pytest import mark`
            if isinstance(sub, ast.Attribute) and sub.attr == MARK and (
                    (isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark")
                    or (isinstance(sub.value, ast.Name) and sub.value.id == "mark")):
                return True
    return False


def load_durations(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("seconds", {}).items()}


def order(files: list[Path], root: Path, durations: dict[str, float]) -> list[tuple[Path, bool]]:
    """(file, alone) in the order they start: the files that run alone, then the rest; within
    each, unknown files first, then the longest by the last run's time, then by name."""

    def key(item: tuple[Path, bool]):
        f, alone = item
        name = f.relative_to(root).as_posix()
        known = name in durations
        return (not alone, known, -durations.get(name, 0.0), name)

    return sorted(((f, runs_alone(f)) for f in files), key=key)


SHORT_S = 25.0
"""A file that took less than this in the last run shares a pytest process with other short
ones (a process costs a few seconds of start-up: the interpreter, JAX, the collection)."""
BATCH_S = 60.0
"""The most seconds of last-run time packed into one shared process."""


def units(files: list[tuple[Path, bool]], root: Path, durations: dict[str, float]) -> list[tuple[list[Path], bool]]:
    """The pytest processes of a run, in `order`'s order: a file that runs alone, a long or
    unknown file, or several short ones (each under `SHORT_S` in the last run, together at most
    `BATCH_S`), which start where their longest would have."""
    out: list[tuple[list[Path], bool]] = []
    batch: list[Path] = []
    total = 0.0
    for f, alone in files:
        t = durations.get(f.relative_to(root).as_posix())
        if alone or t is None or t >= SHORT_S:
            out.append(([f], alone))
            continue
        if batch and total + t > BATCH_S:
            batch, total = [], 0.0
        if not batch:
            out.append((batch, False))
        batch.append(f)
        total += t
    return out


def split_times(report: Path, files: list[str], wall: float) -> dict[str, float]:
    """Per-file seconds of a shared process, from pytest's JUnit XML (each file's test times),
    the process's remaining time (start-up, collection) shared equally."""
    import xml.etree.ElementTree as ET

    own = dict.fromkeys(files, 0.0)
    try:
        cases = ET.parse(report).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return {f: wall / len(files) for f in files}
    for case in cases:
        mod = case.get("classname", "").split(".")
        for f in files:
            parts = f.removesuffix(".py").split("/")
            if mod[-len(parts):] == parts or mod[-len(parts) - 1:-1] == parts:  # test function or class
                own[f] += float(case.get("time", 0.0))
                break
    rest = max(0.0, wall - sum(own.values())) / len(files)
    return {f: own[f] + rest for f in files}


FAST_XLA_FLAGS = "--xla_cpu_use_fusion_emitters=false"
"""XLA's older CPU fusion emitters: with most optimisations off, the tiny judge's engine programs
(test_engine.py's several-groups test, 140 programs) compiled in 7.5 s instead of 17.9 s on the
2-core AMD EPYC this was measured on; with them on, as a user's run compiles, they made no
difference (the real-SmolLM2 demo smoke test, 35.4 s against 34.2 s), so `optimized` tests run
in the same processes unchanged."""


def compile_mode(optimized: bool, flags: str = "") -> dict[str, str]:
    """Environment of the test processes for XLA's compiler (``flags``: the caller's
    ``XLA_FLAGS``, kept). By default the tests compile with JAX's
    ``jax_disable_most_optimizations`` (LLVM's backend optimisation level 0 and none of its
    expensive passes) and `FAST_XLA_FLAGS`: the same HLO programs and the same operations,
    lowered to slower machine code in well under half the compile time, which is most of the
    suite's time (its programs are small and run once); tests marked ``optimized`` (real
    weights, simulations) compile as a user's run does (tests/conftest.py). ``--optimized``
    compiles every test that way. The processes that tests start keep these flags
    (tests/xla_flags.py)."""
    if optimized:
        return {}
    return {"JAXJUDGE_TEST_FAST_COMPILE": "1", "XLA_FLAGS": " ".join([flags, FAST_XLA_FLAGS]).strip()}


def main(argv: list[str]) -> int:
    jobs = min(2, os.cpu_count() or 1)
    root = HERE
    logs = None
    optimized = False
    while argv[:1] in (["--jobs"], ["--root"], ["--logs"], ["--optimized"]):
        if argv[0] == "--optimized":
            optimized = True
            argv = argv[1:]
            continue
        if argv[0] == "--jobs":
            jobs = max(1, int(argv[1]))
        elif argv[0] == "--root":
            root = Path(argv[1]).resolve()
        else:
            logs = Path(argv[1]).resolve()
            logs.mkdir(parents=True, exist_ok=True)
        argv = argv[2:]
    record = root / "durations.json"
    durations = load_durations(record)
    files = order(sorted(root.rglob("test_*.py")), root, durations)
    totals = dict.fromkeys(COUNTS, 0)
    bad = []
    took: dict[str, float] = {}
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="jaxjudge-tests-"))
    running: dict[str, tuple[subprocess.Popen, object, float]] = {}
    # One compile cache for the run, new each run (timings stay those of a cold start; nothing
    # is left in the home folder): every process the tests start reads JAX's own variable (the
    # test processes, notebook kernels, workers), the `jaxjudge` commands theirs too.
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp / "xla"))
    env.setdefault("JAXJUDGE_XLA_CACHE", env["JAX_COMPILATION_CACHE_DIR"])
    # Every program is cached, not only those that took a second to compile (JAX's default):
    # most of the suite's programs compile in a fraction of one, and many recur across files.
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env.update(compile_mode(optimized, env.get("XLA_FLAGS", "")))

    members: dict[str, list[str]] = {}

    def start(group: list[Path]) -> None:
        names = [f.relative_to(root).as_posix() for f in group]
        name = names[0] if len(names) == 1 else " + ".join(names)
        stem = names[0].replace("/", "__").removesuffix(".py") + ("" if len(names) == 1 else f"__and_{len(names) - 1}")
        log = open((logs or tmp) / (stem + ".log"), "w+")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp / stem}",
               *([f"--junitxml={tmp / stem}.xml"] if len(names) > 1 else []), *argv, *map(str, group)]
        members[name] = names
        running[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env), log,
                         time.perf_counter())

    def finish(name: str) -> None:
        proc, log, began = running.pop(name)
        wall = time.perf_counter() - began
        names = members[name]
        if len(names) == 1:
            took[name] = wall
        else:
            stem = names[0].replace("/", "__").removesuffix(".py") + f"__and_{len(names) - 1}"
            took.update(split_times(tmp / f"{stem}.xml", names, wall))
        log.seek(0)
        out = log.read()
        log.close()
        lines = out.rstrip().splitlines()
        last = lines[-1] if lines else "(no output)"
        print(f"{name}: {last} [{wall:.0f} s of wall time]", flush=True)
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
            time.sleep(0.2)

    for group, alone in units(files, root, durations):
        while running and (alone or len(running) >= jobs):
            wait_for_one()
        start(group)
        if alone:
            wait_for_one()
    while running:
        wait_for_one()
    shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    if len(took) == len(files) and not any(a.startswith(("-k", "-m")) for a in argv):
        # Every file ran with no selection: this run's times order the next run.
        record.write_text(json.dumps({"note": "wall seconds per test file in the last full run of "
                                               "tests/run_by_file.py (it orders and batches the next run; a "
                                               "file that shared a process has its tests' time and a share "
                                               "of the process's start-up)",
                                      "seconds": {k: round(v, 1) for k, v in sorted(took.items())}},
                                     indent=1) + "\n")
    longest = sorted(took.items(), key=lambda kv: -kv[1])[:5]
    failed = totals["failed"] + totals["error"] + totals["errors"]
    print(f"\n{len(files)} files in {wall:.0f} s, {jobs} at a time"
          + (f"; failing: {', '.join(bad)}" if bad else ""))
    print("longest: " + ", ".join(f"{k} {v:.0f} s" for k, v in longest))
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
