"""A config whose model is remote, run twice. A ``gs://`` GGUF object, by ``jaxjudge sweep`` (fresh
processes): the first run fetches, hashes and converts the checkpoint once; the second, its
identity (generation, size) unchanged, reads no byte of it and hashes no file, its tokenizer,
config and content hash answered by the converted entry in the bucket cache
(`jaxjudge.models.source.source_header`), and writes the same arrays.

Bytes read are counted on the wire as in tests/models/test_source.py: the runs' storage clients
reach the Cloud Storage emulator (tests/conftest.py) through a fault proxy that logs every
answer (tests/store/fault_proxy.py), and what counts is the body of each media download of the
checkpoint object. Files hashed are counted in each run's process: every call of
`jaxjudge.store.file_sha256` (the one file hash that the cache, the pre-flight, the metadata
and the report's store check reach) on a checkpoint file; the run metadata's hashes of the
data files are not counted.

A Hub repo id (the Hub's answers from a stand-in, the snapshot from a Hub cache folder; no
network here): the second run fetches no snapshot and hashes no file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec, run_extractions
from jaxjudge.experiment import specs
from jaxjudge.models import weights_cache as jc
from jaxjudge.models import hf
from jaxjudge.models import source as js
from jaxjudge.report.stores import StoreModelMismatch, check_store_model
from jaxjudge.store import Store
from jaxjudge.store.location import location

from tests.cli.test_cli_e2e import REPO, _experiment, _stsb_folder
from tests.models.test_source import COMMIT, StandInHub, _read, counted  # noqa: F401 - counted: a fixture
from tests.models.test_source import REPO as REPO_ID
from tests.test_config_walk import PAIRS
from tests.tiny_judge import sha256 as file_sha256
from tests.xla_flags import xla_flags

pytestmark = pytest.mark.slow

# Runs the command line with `jaxjudge.store.file_sha256` counted (patched before any module
# binds it), then prints the files it hashed.
COUNTING = """
import json, sys
import jaxjudge.store as store, jaxjudge.store.keys as keys
real, hashed = keys.file_sha256, []
def counted(path, **kwargs):
    hashed.append(str(path))
    return real(path, **kwargs)
keys.file_sha256 = store.file_sha256 = counted
from jaxjudge.cli import main
try:
    rc = main(sys.argv[1:])
finally:
    print("HASHED " + json.dumps(hashed))
sys.exit(rc)
"""


def _sweep(tmp_path: Path, spec: Path, cache: str, stores: str) -> list[str]:
    """Runs ``jaxjudge sweep`` in a fresh process; returns the checkpoint files it hashed (the
    run metadata hashes the data files too)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAXJUDGE_CACHE": cache, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": xla_flags()}
    proc = subprocess.run([sys.executable, "-c", COUNTING, "sweep", str(spec), "--quiet", "--stores", stores,
                           "--results", str(tmp_path / "results")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    line = [x for x in proc.stdout.splitlines() if x.startswith("HASHED ")][-1]
    hashed = json.loads(line[len("HASHED "):])
    assert all(Path(h).parent == tmp_path / "stsb" for h in hashed if Path(h).name != "tiny.gguf")  # the data
    return [h for h in hashed if Path(h).name == "tiny.gguf"]


def _config(tmp_path: Path, model: ModelSpec) -> ExperimentConfig:
    """The tiny judge ``model`` on six STS-B pairs (two dev, four test), one scale, vanilla only."""
    rows = ["".join(json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": score,
                                "sentence1": a, "sentence2": b}) + "\n" for i, (a, b, score) in enumerate(part))
            for part in (PAIRS[:2], PAIRS[2:])]
    folder = _stsb_folder(tmp_path, rows[1])
    (folder / "stsb_dev.jsonl").write_text(rows[0])  # two dev pairs: the bootstrap resamples groups
    return ExperimentConfig(
        name="remote", models=(model,),
        tasks=(TaskSpec("stsb", ("similarity",), data=str(folder), split="original"),), scales=("1-5",),
        methods=("vanilla",), temperatures=(0.2,), lambdas_extended=None, prompt_style="raw", n_boot=10,
        metrics=("spearman",), store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))


def _assert_same_stores(one: Path, other: Path) -> None:
    """The same stores under both roots, holding the same arrays."""
    arrays = [{str(m.parent.relative_to(root)): Store.open(m.parent).load() for m in sorted(root.rglob("manifest.json"))}
              for root in (one, other)]
    assert arrays[0] and list(arrays[0]) == list(arrays[1])
    for name, got in arrays[0].items():
        assert got.keys() == arrays[1][name].keys()
        for k in got:
            np.testing.assert_array_equal(got[k], arrays[1][name][k])


def test_a_bucket_model_of_a_config_is_read_and_hashed_once_across_runs(
        gcs_bucket, proxied, tiny_gguf, tmp_path):
    src = location(gcs_bucket) / "models" / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    size, sha = Path(tiny_gguf).stat().st_size, file_sha256(tiny_gguf)
    spec = _experiment(tmp_path, _config(tmp_path, ModelSpec("tiny", str(src), sha)), "bucket")
    cache = f"{gcs_bucket}/converted"

    proxied.sent.clear()
    cold_hashed = _sweep(tmp_path, spec, cache, str(tmp_path / "cold"))
    cold_read = _read(proxied, "models/tiny.gguf")
    proxied.sent.clear()
    warm_hashed = _sweep(tmp_path, spec, cache, str(tmp_path / "warm"))
    warm_read = _read(proxied, "models/tiny.gguf")
    print(f"cold: {cold_read} checkpoint bytes read, {len(cold_hashed)} checkpoint files hashed; "
          f"warm: {warm_read} read, {len(warm_hashed)} hashed (checkpoint {size} bytes)")
    assert cold_read == size and len(cold_hashed) == 1  # fetched once, hashed once, for checks and load
    assert warm_read == 0 and warm_hashed == []
    _assert_same_stores(tmp_path / "cold", tmp_path / "warm")
    key = Store.open(next((tmp_path / "warm").rglob("manifest.json")).parent).key
    assert key["model_sha256"] == sha  # the content hash the entry recorded, as a local file's store has

    # Other bytes under the name: a new generation, fetched and hashed again; the stores notice.
    data = bytearray(Path(tiny_gguf).read_bytes())
    data[-1] ^= 0xFF
    src.write_bytes(bytes(data))
    proxied.sent.clear()
    assert js.content_sha256(str(src)) == hashlib.sha256(data).hexdigest() != sha
    assert _read(proxied, "models/tiny.gguf") == size
    with pytest.raises(StoreModelMismatch, match="another model file"):
        check_store_model(key, ModelSpec("tiny", str(src)), "store")


def test_a_hub_model_of_a_config_is_fetched_only_while_its_entry_is_cold(tiny_hf, tmp_path, monkeypatch, counted):
    """The Hub's stand-in API (tests/models/test_source.py) answers for the repo, so the config's
    Hub id resolves to a `HubRepo` (nothing fetched); each run is `run_extractions` in this
    process, its per-process memos cleared first, as a fresh process has them."""
    constants = pytest.importorskip("huggingface_hub.constants")
    snapshot = tmp_path / "hub" / ("models--" + REPO_ID.replace("/", "--")) / "snapshots" / COMMIT
    shutil.copytree(tiny_hf, snapshot)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    hub = StandInHub(Path(tiny_hf), COMMIT)
    monkeypatch.setattr(js, "_hub_api", lambda: hub)
    monkeypatch.setenv("JAXJUDGE_CACHE", str(tmp_path / "cache"))
    fetched, real_resolve = [], hf.resolve_source
    monkeypatch.setattr(hf, "resolve_source", lambda *a, **k: fetched.append(a) or real_resolve(*a, **k))
    cfg = _config(tmp_path, ModelSpec("hub", REPO_ID, jc.source_sha256(tiny_hf)))

    def run(stores: str) -> tuple[int, int]:
        js._HEADERS.clear()
        specs._hub_answers.cache_clear()
        counted.calls, fetched[:] = 0, []
        run_extractions(cfg, store_root=tmp_path / stores, progress=False, log=lambda _: None)
        return counted.calls, len(fetched)

    cold, warm = run("cold"), run("warm")
    print(f"Hub model: cold {cold[0]} files hashed, {cold[1]} snapshot fetches; warm {warm[0]} and {warm[1]}")
    assert cold[0] == len(list(Path(tiny_hf).iterdir())) and cold[1] >= 1  # each file hashed once
    assert warm == (0, 0)
    _assert_same_stores(tmp_path / "cold", tmp_path / "warm")


def test_a_dry_run_of_a_bucket_model_reads_its_header_not_its_tensors(gcs_bucket, proxied, tiny_gguf, tmp_path,
                                                                      monkeypatch):
    """``--dry-run`` on a config whose judge is an uncached ``gs://`` GGUF object: the plan a local
    copy of the file gives, from the object's first bytes (`jaxjudge.models.source.source_outline`),
    no model loaded and no file hashed."""
    import jaxjudge.models as models
    from jaxjudge.experiment.dry_run import Launch, describe_run
    from jaxjudge.models.gguf_file import GGUFFile

    src = location(gcs_bucket) / "models" / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    size, header_end = Path(tiny_gguf).stat().st_size, GGUFFile(tiny_gguf).data_start
    monkeypatch.setenv("JAXJUDGE_CACHE", str(tmp_path / "cache"))
    launch = Launch(processes=1, process_id=0, local_devices=1, platform="cpu", kind="cpu")
    local = describe_run(_config(tmp_path, ModelSpec("tiny", str(tiny_gguf))), launch)
    monkeypatch.setattr(models, "load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded a model")))
    monkeypatch.setattr(jc, "file_sha256", lambda *a, **k: (_ for _ in ()).throw(AssertionError("hashed a file")))
    proxied.sent.clear()
    remote = describe_run(_config(tmp_path, ModelSpec("tiny", str(src))), launch)
    read = _read(proxied, "models/tiny.gguf")
    print(f"dry run of a {size}-byte gs:// judge: {read} bytes of it read (header {header_end} bytes)")
    assert header_end <= read <= max(js.HEAD_BYTES, 2 * header_end) and read < size
    model_line = next(x for x in remote if x.startswith("model tiny: "))
    assert model_line.startswith(f"model tiny: {src} (")
    # Every line but the model's path is the local file's: shapes, bytes per device, prompt lengths.
    assert [x for x in remote if x != model_line] == [x for x in local if not x.startswith("model tiny: ")]
    assert model_line.partition(" (")[2] == next(x for x in local if x.startswith("model tiny: ")).partition(" (")[2]
