"""End to end through the CLI (subprocesses): a tampered store, a flipped-byte model, an empty
data file, an unknown engine option and a store extracted under another config each end with
exit code 2 and one line naming the file or field, no traceback, and before any forward pass.

Slow: each case starts a fresh interpreter. The judge is the tiny random one with SmolLM2's
tokenizer (tests/tiny_judge.py): these check refusals and keys, not the judge's numbers.
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

from jaxjudge.experiment import ModelSpec, TaskSpec, config_to_dict

from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _experiment(tmp_path: Path, cfg, name: str) -> Path:
    """An experiment file whose get_config() returns ``cfg``."""
    data = tmp_path / f"{name}.json"
    data.write_text(json.dumps(config_to_dict(cfg)))
    path = tmp_path / f"{name}.py"
    path.write_text("import json\nfrom jaxjudge.experiment import config_from_dict\n\n\n"
                    f"def get_config(arg=None):\n    return config_from_dict(json.loads(open({str(data)!r}).read()))\n")
    return path


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAXJUDGE_CACHE": str(tmp_path / "cache"),
           "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = xla_flags()
    return subprocess.run([sys.executable, "-m", "jaxjudge.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def _assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def _pipeline_helpers():
    """The synthetic-store helpers of tests/report/test_pipeline.py."""
    sys.path.insert(0, str(REPO / "tests" / "report"))
    import test_pipeline  # noqa: PLC0415

    return test_pipeline._cfg, test_pipeline._synthetic_cells, test_pipeline._write_stores


def test_cli_refuses_tampered_store(tmp_path):
    _cfg, _synthetic_cells, _write_stores = _pipeline_helpers()

    from jaxjudge.store import Store

    cfg = _cfg(tmp_path, scales=("1-5",), methods=("vanilla",))
    root = Path(cfg.store_root)
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    _write_stores(cfg, _synthetic_cells(cfg), root, sha)
    spec = _experiment(tmp_path, cfg, "synthetic")
    ok = _cli(tmp_path, "report", str(spec), "--run", "before")
    assert ok.returncode == 0, ok.stderr[-3000:]
    # Reverse the score columns of the score store, as a valid .npz with its seal entry intact.
    chunk = Store.open(root / "score-1-5").chunk_path(0)
    with np.load(chunk, allow_pickle=False) as z:
        entries = {name: z[name] for name in z.files}
    entries["cand_logprobs"] = entries["cand_logprobs"][:, ::-1]
    with open(chunk, "wb") as f:
        np.savez(f, **entries)
    bad = _cli(tmp_path, "report", str(spec), "--run", "after")
    _assert_one_line_error(bad, str(chunk), "content does not match", "jaxjudge extract")
    assert not (tmp_path / "results" / "pipe" / "after").exists()


def _stsb_config(tmp_path: Path, model: ModelSpec, data: Path):
    from jaxjudge.experiment import ExperimentConfig

    return ExperimentConfig(
        name="e2e", models=(model,), tasks=(TaskSpec("stsb", ("similarity",), data=str(data), split="original"),),
        scales=("1-5",), methods=("vanilla",), temperatures=(0.2,), lambdas_extended=None, prompt_style="raw",
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))


def _stsb_folder(tmp_path: Path, test_rows: str) -> Path:
    folder = tmp_path / "stsb"
    folder.mkdir(exist_ok=True)
    row = {"genre": "g", "filename": "f", "year": "2012", "sid": "1", "score": 2.5,
           "sentence1": "A cat sat.", "sentence2": "A dog sat."}
    (folder / "stsb_dev.jsonl").write_text(json.dumps(row) + "\n")
    (folder / "stsb_test.jsonl").write_text(test_rows)
    return folder


def test_cli_refuses_empty_data_file_and_unknown_engine_option(tmp_path, tiny_gguf):
    from tests.tiny_judge import spec as tiny_spec

    folder = _stsb_folder(tmp_path, "")
    spec = _experiment(tmp_path, _stsb_config(tmp_path, tiny_spec(tiny_gguf), folder), "stsb")
    empty = _cli(tmp_path, "extract", str(spec), "--quiet")
    _assert_one_line_error(empty, str(folder / "stsb_test.jsonl"), "no rows")
    assert not (tmp_path / "stores").exists() or not any((tmp_path / "stores").rglob("*.npz"))
    option = _cli(tmp_path, "extract", str(spec), "--quiet", "--set", "engine={'batchsize':4}")
    _assert_one_line_error(option, "ExperimentConfig.engine", "unknown engine option 'batchsize'", "batch_size")


def test_cli_refuses_flipped_byte_model(tmp_path, tiny_gguf):
    from tests.tiny_judge import sha256

    want = sha256(tiny_gguf)
    data = bytearray(tiny_gguf.read_bytes())
    data[-1000] ^= 0x01  # inside the last tensor
    model = tmp_path / "flipped.gguf"
    model.write_bytes(bytes(data))
    folder = _stsb_folder(tmp_path, json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": "2",
                                                "score": 1.0, "sentence1": "x", "sentence2": "y"}) + "\n")
    spec = _experiment(tmp_path, _stsb_config(tmp_path, ModelSpec("tiny", str(model), want), folder), "flipped")
    for extra in ((), ("--verify",)):
        proc = _cli(tmp_path, "extract", str(spec), "--quiet", *extra)
        _assert_one_line_error(proc, "model 'tiny'", str(model), f"the config expects {want}")
    cache = tmp_path / "cache"
    assert not cache.exists() or not [p for p in cache.iterdir() if p.is_dir()]  # nothing converted


def test_cli_report_refuses_a_store_extracted_under_another_config(tmp_path, tiny_gguf):
    """Extract with a shorter context than the model's (an engine override), then report without
    that override: refused, naming the field; with it the report runs and records the keys."""
    rows = "".join(json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": i / 2,
                               "sentence1": f"A cat number {i} sat.", "sentence2": f"A dog number {i} lay."}) + "\n"
                   for i in range(4))
    folder = _stsb_folder(tmp_path, rows)
    from tests.tiny_judge import spec as tiny_spec

    spec = _experiment(tmp_path, _stsb_config(tmp_path, tiny_spec(tiny_gguf), folder), "short")
    short = ("--set", "engine={'context_length': 1024}")
    ext = _cli(tmp_path, "extract", str(spec), "--quiet", *short)
    assert ext.returncode == 0, ext.stderr[-3000:]
    bad = _cli(tmp_path, "report", str(spec), "--run", "plain")
    _assert_one_line_error(bad, "extracted under another config", "setup.engine.context_length: stored 1024, "
                                                                     "wanted None")
    assert not (tmp_path / "results" / "e2e" / "plain").exists()
    ok = _cli(tmp_path, "report", str(spec), "--run", "short", *short)
    assert ok.returncode == 0, ok.stderr[-3000:]
    meta = json.loads((tmp_path / "results" / "e2e" / "short" / "metadata.json").read_text())
    assert meta["config"]["engine"] == {"context_length": 1024}
    assert meta["stores"] and all(s["key"]["setup"]["engine"] == {"context_length": 1024} and s["key_hash"]
                                  for s in meta["stores"])
