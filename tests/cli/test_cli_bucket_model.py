"""A config whose model is a ``gs://`` GGUF object, run twice by ``jaxjudge sweep`` (fresh
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
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec
from jaxjudge.models import source as js
from jaxjudge.report.stores import StoreModelMismatch, check_store_model
from jaxjudge.store import Store
from jaxjudge.store.location import location

from tests.cli.test_cli_e2e import REPO, _experiment, _stsb_folder
from tests.models.test_source import _read
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


def _arrays(root: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every store's arrays under ``root``, by store folder."""
    return {str(m.parent.relative_to(root)): Store.open(m.parent).load()
            for m in sorted(root.rglob("manifest.json"))}


def test_a_bucket_model_of_a_config_is_read_and_hashed_once_across_runs(
        gcs_bucket, proxied, tiny_gguf, tmp_path):
    src = location(gcs_bucket) / "models" / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    size, sha = Path(tiny_gguf).stat().st_size, file_sha256(tiny_gguf)
    rows = ["".join(json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": score,
                                "sentence1": a, "sentence2": b}) + "\n" for i, (a, b, score) in enumerate(part))
            for part in (PAIRS[:2], PAIRS[2:])]
    folder = _stsb_folder(tmp_path, rows[1])
    (folder / "stsb_dev.jsonl").write_text(rows[0])  # two dev pairs: the bootstrap resamples groups
    cfg = ExperimentConfig(
        name="bucket", models=(ModelSpec("tiny", str(src), sha),),
        tasks=(TaskSpec("stsb", ("similarity",), data=str(folder), split="original"),), scales=("1-5",),
        methods=("vanilla",), temperatures=(0.2,), lambdas_extended=None, prompt_style="raw", n_boot=10,
        metrics=("spearman",), store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    spec = _experiment(tmp_path, cfg, "bucket")
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
    cold, warm = _arrays(tmp_path / "cold"), _arrays(tmp_path / "warm")
    assert cold and list(cold) == list(warm)
    for name, arrays in cold.items():
        assert arrays.keys() == warm[name].keys()
        for k in arrays:
            np.testing.assert_array_equal(arrays[k], warm[name][k])
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
