"""Join or refuse: a Cloud TPU host whose slice has several workers, or a launch with explicit
flags, that cannot join its job stops before any work with one line naming the slice (or the
job), the worker count and the error; exit 2.

The TPU VM is a metadata server this test starts on 127.0.0.1 (JAX honours ``GCE_METADATA_IP``,
and so does `jaxjudge.experiment.tpu_slice`) describing a 4-worker v4-32 slice; GKE's is its
environment. The joins fail because no coordinator listens (the probe's bounded wait, set short
here by ``$JAXJUDGE_JOIN_TIMEOUT_S``), or because JAX, on this CPU, finds no TPU cluster.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import sys
import threading

import pytest

from jaxjudge.experiment import ConfigError, distributed
from jaxjudge.experiment.tpu_slice import tpu_slice

from tests.cli.test_cli_distributed import _env, _experiment

ENDPOINTS = "t1v-n-0-w-0:0:127.0.0.1,t1v-n-0-w-1:1:10.0.0.2,t1v-n-0-w-2:2:10.0.0.3,t1v-n-0-w-3:3:10.0.0.4"


@contextlib.contextmanager
def metadata_server(worker: int):
    """A GCE metadata server on 127.0.0.1 describing worker ``worker`` of a 4-worker v4-32 slice;
    yields its ``GCE_METADATA_IP`` (host:port)."""
    attributes = {"agent-worker-number": str(worker), "worker-network-endpoints": ENDPOINTS,
                  "accelerator-type": "v4-32"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            key = self.path.rsplit("/", 1)[-1]
            ok = self.path.startswith("/computeMetadata/v1/instance/attributes/") and key in attributes
            ok = ok and self.headers.get("Metadata-Flavor") == "Google"
            body = attributes[key].encode() if ok else b"not found"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_slice_is_read_from_the_metadata_server(monkeypatch):
    for var in ("TPU_WORKER_HOSTNAMES", "TPU_PROCESS_ADDRESSES", "MEGASCALE_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    with metadata_server(2) as where:
        monkeypatch.setenv("GCE_METADATA_IP", where)
        found = tpu_slice()
        assert found is not None and found.name == "v4-32" and found.worker_id == 2
        assert found.workers == ("127.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
        assert found.coordinator == "127.0.0.1:8482"
        assert distributed.launch_from_environment() == (4, 2)


def test_a_failed_join_on_a_gke_slice_of_several_workers_stops(monkeypatch):
    def fail(**_):
        raise RuntimeError("coordinator unreachable\ndetails")

    monkeypatch.setattr(distributed.jax.distributed, "initialize", fail)
    monkeypatch.delenv("GCE_METADATA_IP", raising=False)
    monkeypatch.delenv("TPU_WORKER_ID", raising=False)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-16")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-w-0,t1k-w-1,t1k-w-2,t1k-w-3")
    with pytest.raises(ConfigError, match=r"^joining the TPU slice v5litepod-16's 4 workers \(TPU_WORKER_HOSTNAMES\) "
                                          r"failed: coordinator unreachable; nothing was run$"):
        distributed.start(None)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-w-0")  # a single-host slice: one process, no join
    assert distributed.start(None) is False


def _extract(tmp_path, tiny_gguf, *flags: str, **env: str) -> subprocess.CompletedProcess:
    spec = _experiment(tmp_path, tiny_gguf)
    return subprocess.run([sys.executable, "-m", "jaxjudge.cli", "extract", str(spec), "--quiet", *flags],
                          cwd=tmp_path, env=_env(tmp_path, "x", JAXJUDGE_JOIN_TIMEOUT_S="2", **env),
                          capture_output=True, text=True, timeout=300)


def _one_line(proc: subprocess.CompletedProcess, tmp_path) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert not (tmp_path / "stores").exists()  # before any forward pass: nothing written
    return lines[0]


@pytest.mark.parametrize("worker", [1, 0])
def test_a_tpu_vm_whose_join_fails_stops_in_one_line(tmp_path, tiny_gguf, worker):
    with metadata_server(worker) as where:
        proc = _extract(tmp_path, tiny_gguf, GCE_METADATA_IP=where)
    line = _one_line(proc, tmp_path)
    assert line.startswith(f"jaxjudge extract: joining the TPU slice v4-32's 4 workers (metadata server {where}) "
                           f"as worker {worker} failed: "), line
    assert line.endswith("; nothing was run"), line
    if worker:  # the coordinator (worker 0's host, JAX's port) was probed and did not answer
        assert "no coordinator answered at 127.0.0.1:8482 within 2 s" in line, line


def test_explicit_flags_with_an_unreachable_coordinator_are_one_line(tmp_path, tiny_gguf):
    address = f"127.0.0.1:{_free_port()}"
    proc = _extract(tmp_path, tiny_gguf, "--coordinator", address, "--num-processes", "2", "--process-id", "1")
    line = _one_line(proc, tmp_path)
    assert line == (f"jaxjudge extract: joining the 2-process job at {address} as process 1 failed: no coordinator "
                    f"answered at {address} within 2 s (Connection refused); nothing was run"), line


@pytest.mark.parametrize("value, expected", [(None, 30.0), ("10", 10.0), ("1", 6.0), ("500", 50.0), ("x", 30.0)])
def test_the_silence_before_a_process_is_taken_for_lost(monkeypatch, value, expected):
    from jaxjudge import peers

    if value is None:
        monkeypatch.delenv("JAXJUDGE_LOST_AFTER_S", raising=False)
    else:
        monkeypatch.setenv("JAXJUDGE_LOST_AFTER_S", value)
    assert peers.lost_after() == expected  # within 3 beats and half the coordination service's heartbeat timeout
