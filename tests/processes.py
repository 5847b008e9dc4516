"""Subprocesses a test starts together (the processes of one distributed run, and a reference)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


def finish(procs: Sequence[subprocess.Popen], timeout: float) -> list[tuple[str, str]]:
    """Each process's ``(stdout, stderr)``, waited for in turn (at most ``timeout`` seconds each),
    asserting that each exited 0 (the message: the end of its stderr). Whatever happens, none is
    left running: a process still alive when a wait fails is killed."""
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return outs
