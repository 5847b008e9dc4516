"""Run the test suite one file per pytest process, then print the totals.

`make test` uses this. One long process running every file crashed twice at the same place
(inside an XLA compile in `test_select.py`, late in the run: a segmentation fault, then an
abort), while that file passes alone. A fresh interpreter per file keeps
one module's native state (XLA, torch, compiled programs) from reaching the next.

    python tests/run_by_file.py [pytest options...]
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

COUNTS = ("passed", "failed", "skipped", "error", "errors", "xfailed", "xpassed")


def main(argv: list[str]) -> int:
    files = sorted(Path(__file__).resolve().parent.rglob("test_*.py"))
    totals = dict.fromkeys(COUNTS, 0)
    bad = []
    t0 = time.perf_counter()
    for f in files:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *argv, str(f)], capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        lines = out.rstrip().splitlines()
        name = f.relative_to(Path(__file__).resolve().parent)
        print(f"{name}: {lines[-1] if lines else '(no output)'}", flush=True)
        for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", lines[-1] if lines else ""):
            totals[what] += int(n)
        if proc.returncode not in (0, 5):  # 5: no test collected (every test deselected)
            bad.append(str(name))
            print(out[-6000:], flush=True)
    failed = totals["failed"] + totals["error"] + totals["errors"]
    print(f"\n{len(files)} files in {time.perf_counter() - t0:.0f} s" + (f"; failing: {', '.join(bad)}" if bad else ""))
    print(f"{totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
