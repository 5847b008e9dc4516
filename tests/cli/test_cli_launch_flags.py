"""Launch flags of a multi-process run that cannot work (``--coordinator`` without the process
count and id, a coordinator that is not HOST:PORT, a process id out of range): one line on
stderr, exit 2, nothing written. One process each, failing before any join: they run beside
other files (the two-process runs are tests/cli/test_cli_distributed.py's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.test_cli_distributed import _env, _experiment


@pytest.mark.parametrize("flags, needle", [
    (["--coordinator", "127.0.0.1:1234"], "--num-processes, --process-id missing"),
    (["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"], "--coordinator: expected HOST:PORT"),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"], "--process-id: expected 0 .. 1"),
])
def test_bad_launch_flags_are_one_line(tmp_path, tiny_gguf, flags, needle):
    spec = _experiment(tmp_path, tiny_gguf)
    proc = subprocess.run([sys.executable, "-m", "jaxjudge.cli", "extract", str(spec), "--quiet", *flags],
                          cwd=tmp_path, env=_env(tmp_path, "x"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "stores").exists()
