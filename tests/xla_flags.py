"""``XLA_FLAGS`` for a process that a test starts: the flags of the test process kept (the
compiler flags that tests/run_by_file.py sets, see `compile_mode` there; any the caller set),
the host device count replaced or dropped."""

from __future__ import annotations

import os
import re

_COUNT = re.compile(r"--xla_force_host_platform_device_count=\S*")


def xla_flags(devices: int | None = None, flags: str | None = None) -> str:
    """The current ``XLA_FLAGS`` (or ``flags``) without its host device count, plus
    ``--xla_force_host_platform_device_count=devices`` when ``devices`` is given (none: one
    device, as a user's run has)."""
    rest = _COUNT.sub(" ", os.environ.get("XLA_FLAGS", "") if flags is None else flags).split()
    if devices is not None:
        rest.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(rest)
