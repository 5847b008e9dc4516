"""Every anticipated error through the CLI: one line naming the file, row, field or chunk, exit
code 2, no traceback; config problems (engine options, derived fields, run names) found before
any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxjudge.cli import main
from jaxjudge.experiment import ConfigError, ExperimentConfig, ModelSpec, TaskSpec, run_dir, with_overrides


@pytest.fixture(autouse=True)
def _no_persistent_compile_cache(monkeypatch):
    """`main` turns on JAX's on-disk compile cache, process-wide, for the rest of the pytest
    process: every later test would then write its programs there (one such write crashed the
    interpreter with a segmentation fault inside jax's cache writer). These in-process calls
    leave it off."""
    monkeypatch.setenv("JAXJUDGE_XLA_CACHE", "")

REPO = Path(__file__).resolve().parents[2]


def _cfg(tmp_path, **kw):
    model = tmp_path / "judge.gguf"
    if not model.exists():
        model.write_bytes(b"not a model")
    base = dict(name="cli", models=(ModelSpec("sim", str(model)),),
                tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),),
                scales=("1-5",), methods=("vanilla",), temperatures=(0.2,), lambdas_extended=None,
                store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    base.update(kw)
    return ExperimentConfig(**base)


def _write_config(tmp_path, **kw) -> Path:
    """An experiment file whose get_config() builds `_cfg(tmp_path, **kw)`."""
    path = tmp_path / "exp.py"
    path.write_text(
        "from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec\n"
        "def get_config(arg=None):\n"
        f"    return ExperimentConfig(name='cli', models=(ModelSpec('sim', {str(tmp_path / 'judge.gguf')!r}),),\n"
        "        tasks=(TaskSpec('summeval', ('coherence',), data='embedded', split='kfold', n_folds=4),),\n"
        "        scales=('1-5',), methods=('vanilla',), temperatures=(0.2,), lambdas_extended=None,\n"
        f"        store_root={str(tmp_path / 'stores')!r}, results_root={str(tmp_path / 'results')!r}, **{kw!r})\n")
    (tmp_path / "judge.gguf").write_bytes(b"not a model")
    return path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_engine_options_are_the_engines_own():
    from jaxjudge.engine import EngineOptions
    from jaxjudge.experiment import engine_options

    allowed = engine_options()
    assert set(allowed) == {"batch_size", "chunk_size", "topk", "overflow", "prefix_cache", "context_length",
                            "max_batch_tokens", "min_prefix_tokens", "groups_per_call"}
    assert set(allowed) == set(EngineOptions.names()) - {"mesh"}
    assert allowed["batch_size"] == EngineOptions().batch_size == 16 and allowed["context_length"] is None


def test_unknown_or_bad_engine_option_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.engine: unknown engine option 'batchsize' "
                                          r"\(did you mean 'batch_size'\?\); allowed: .*batch_size.*context_length"):
        _cfg(tmp_path, engine={"batchsize": 4})
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.engine\.batch_size: must be >= 1"):
        _cfg(tmp_path, engine={"batch_size": 0})
    with pytest.raises(ConfigError, match=r"engine\.overflow: unknown value 'cut'"):
        _cfg(tmp_path, engine={"overflow": "cut"})
    with pytest.raises(ConfigError, match=r"engine: unknown engine option 'store'"):
        _cfg(tmp_path, engine={"store": "x"})  # set per job by the runner
    with pytest.raises(ConfigError, match=r"engine: unknown engine option 'mesh'.*the mesh is ExperimentConfig\.mesh"):
        _cfg(tmp_path, engine={"mesh": [2, 2]})
    with pytest.raises(ConfigError, match=r"engine\.min_prefix_tokens: must be >= 0"):
        _cfg(tmp_path, engine={"min_prefix_tokens": -1})
    assert dict(_cfg(tmp_path, engine={"min_prefix_tokens": 0}).engine) == {"min_prefix_tokens": 0}
    with pytest.raises(ConfigError, match=r"engine\.groups_per_call: must be >= 1"):
        _cfg(tmp_path, engine={"groups_per_call": 0})
    assert dict(_cfg(tmp_path, engine={"groups_per_call": 2}).engine) == {"groups_per_call": 2}
    assert dict(_cfg(tmp_path, engine={"context_length": 400, "batch_size": 4}).engine) == {
        "context_length": 400, "batch_size": 4}


def test_overriding_metrics_moves_the_derived_ci_metrics(tmp_path):
    cfg = _cfg(tmp_path)
    new = with_overrides(cfg, ["metrics=spearman,pearson"])
    assert new.metrics == ("spearman", "pearson") and new.ci_metrics == ("spearman", "pearson")
    chosen = _cfg(tmp_path, metrics=("spearman", "pearson", "kendall"), ci_metrics=("spearman",))
    assert with_overrides(chosen, ["metrics=spearman,pearson"]).ci_metrics == ("spearman",)



def test_override_values_are_read_as_their_fields_types(tmp_path):
    cfg = with_overrides(_cfg(tmp_path), ["greedy=false", "lambdas_extended=none", "temperatures=0.5,1",
                                          "alpha=0.1", "deb_tp=[10]", "pairs=[]", "description=a b"])
    assert (cfg.greedy, cfg.lambdas_extended, cfg.temperatures, cfg.alpha, cfg.deb_tp, cfg.description) == (
        False, None, (0.5, 1.0), 0.1, (10,), "a b")
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.n_boot: must be an integer, got 'many'"):
        with_overrides(cfg, ["n_boot=many"])
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.greedy: must be a bool"):
        with_overrides(cfg, ["greedy=maybe"])
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.temperatures\[1\]: must be > 0, got 0\.0"):
        with_overrides(cfg, ["temperatures=0.5,0"])
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.alpha: must be in \(0, 1\), got 1\.5"):
        with_overrides(cfg, ["alpha=1.5"])
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.prompt_style: unknown value 'chatty' "
                                          r"\(did you mean 'chat'\?\)"):
        with_overrides(cfg, ["prompt_style=chatty"])

def test_run_names_stay_inside_the_results_root(tmp_path):
    cfg = _cfg(tmp_path)
    for bad in ("../../elsewhere", "a/b", "..", ".hidden", "/abs"):
        with pytest.raises(ConfigError, match=r"run: .* may only hold"):
            run_dir(cfg, bad)
        with pytest.raises(ConfigError, match=r"ExperimentConfig\.run"):
            _cfg(tmp_path, run=bad)
    assert run_dir(cfg, "first") == tmp_path / "results" / "cli" / "first"


def test_cli_unknown_engine_option_before_any_model(tmp_path, capsys):
    spec = _write_config(tmp_path)
    code = main(["extract", str(spec), "--quiet", "--set", "engine={'batchsize':4}"])
    line = _one_error_line(capsys)
    assert code == 2 and "unknown engine option 'batchsize'" in line and "batch_size" in line


def test_cli_bad_run_name(tmp_path, capsys):
    spec = _write_config(tmp_path)
    code = main(["report", str(spec), "--run", "../../elsewhere"])
    assert code == 2 and "run: '../../elsewhere'" in _one_error_line(capsys)
    assert not (tmp_path / "elsewhere").exists()


def test_cli_store_and_data_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from jaxjudge.data import DataError
    from jaxjudge.prompts.render import ContextOverflowError
    from jaxjudge.store import Store

    spec = _write_config(tmp_path)
    st = Store.open(tmp_path / "s", {"k": 1}, n_chunks=1)
    st.chunk_path(0).parent.mkdir(parents=True, exist_ok=True)
    st.chunk_path(0).write_bytes(b"")

    def zero_byte_chunk(*a, **k):
        st.read_chunk(0)

    cases = [
        (zero_byte_chunk, "000000.npz: unreadable chunk 0 (empty file)"),
        (lambda *a, **k: (_ for _ in ()).throw(DataError("f.jsonl", 3, "score", "missing")),
         "f.jsonl, line 3, field 'score': missing"),
        (lambda *a, **k: (_ for _ in ()).throw(ContextOverflowError("example 'd1/s0': prompt is 900 tokens")),
         "example 'd1/s0'"),
    ]
    import jaxjudge.experiment as experiment  # the CLI imports run_extractions from it when it runs

    for raise_it, expected in cases:
        monkeypatch.setattr(experiment, "run_extractions", raise_it)
        assert main(["extract", str(spec), "--quiet"]) == 2
        assert expected in _one_error_line(capsys)
    # An unanticipated error still shows its traceback.
    monkeypatch.setattr(experiment, "run_extractions", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["extract", str(spec), "--quiet"])


def _flipped_copy_of_the_embedded_model(tmp_path) -> Path:
    from jaxjudge.models.gguf import default_model_path

    src = default_model_path()
    dst = tmp_path / "flipped.gguf"
    data = bytearray(src.read_bytes())
    data[-1000] ^= 0x01  # a byte inside the last tensor
    dst.write_bytes(bytes(data))
    return dst


def test_flipped_byte_model_is_refused_before_any_weights_load(tmp_path, monkeypatch):
    import jaxjudge.models as M
    from experiments.registry import SMOLLM2
    from jaxjudge.experiment.extractions import run_extractions

    model = _flipped_copy_of_the_embedded_model(tmp_path)
    cfg = _cfg(tmp_path, models=(ModelSpec("smollm2-135m", str(model), SMOLLM2.sha256),), prompt_style="raw")
    monkeypatch.setattr(M, "load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    monkeypatch.setenv("JAXJUDGE_CACHE", str(tmp_path / "cache"))
    for verify in (False, True):
        with pytest.raises(ConfigError, match=r"model 'smollm2-135m': .*flipped\.gguf has sha256 [0-9a-f]{64}, "
                                              rf"the config expects {SMOLLM2.sha256}"):
            run_extractions(cfg, progress=False, verify=verify)
