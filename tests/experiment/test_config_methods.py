"""What a config reads from the method registry: row names, the methods that need a pair, the
readings of parsed generations. Expected names are written out by hand."""

from __future__ import annotations

import pytest

from jaxjudge.experiment import ConfigError, Endpoint, ExperimentConfig, ModelSpec, TaskSpec
from jaxjudge.report import method_variants


def _cfg(tmp_path, **kw):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(name.encode())
    base = dict(
        name="rows", models=(ModelSpec("big", str(tmp_path / "a.gguf")),),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),),
        scales=("1-5",), methods=("vanilla", "deb_r", "deb_t"), temperatures=(0.2,), deb_tp=(10, 100),
        lambdas_extended=None, store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"),
    )
    base.update(kw)
    return ExperimentConfig(**base)


def _pair(tmp_path, **kw):
    models = (ModelSpec("big", str(tmp_path / "a.gguf")), ModelSpec("small", str(tmp_path / "b.gguf")))
    return _cfg(tmp_path, models=models, pairs=(("big", "small"),), **kw)


def test_row_names_come_from_each_family(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"a")
    assert method_variants(_cfg(tmp_path)) == ["vanilla", "deb_r_tp10", "deb_r_tp100", "deb_t_tp10", "deb_t_tp100"]
    ext = _cfg(tmp_path, methods=("deb_t", "vanilla"), deb_tp=(10,), lambdas_extended=(0.5, 5.0))
    assert method_variants(ext) == ["deb_t_tp10", "deb_t_tp10_ext", "vanilla"]
    both = _pair(tmp_path, methods=("vanilla", "temperature", "contrastive", "contrastive_deb_t", "contrastive_generate"),
                 deb_tp=(10,), contrastive_fine=True)
    assert method_variants(both) == ["vanilla", "temperature", "temperature_fine", "contrastive", "contrastive_fine",
                                     "contrastive_deb_t_tp10", "contrastive_generate"]
    assert both.readings() == ("expected@0.2", "greedy", "generate")
    assert _cfg(tmp_path).readings() == ("expected@0.2", "greedy")


def test_a_named_row_must_be_one_the_methods_produce(tmp_path):
    ok = _cfg(tmp_path, primary=Endpoint(method="deb_t_tp100", versus="vanilla", score="expected@0.2", statistic="mean"),
              comparisons=(("deb_t_tp10", "deb_r_tp10"),))
    assert ok.primary.method == "deb_t_tp100"
    # A Tp the config does not run is no row, though its name starts with a configured family.
    with pytest.raises(ConfigError, match=r"primary.method: 'deb_t_tp50' is no row .*did you mean 'deb_t_tp10'"):
        _cfg(tmp_path, primary=Endpoint(method="deb_t_tp50", versus="vanilla", score="expected@0.2", statistic="mean"))
    with pytest.raises(ConfigError, match=r"comparisons\[0\]: 'deb_t_tp10_ext' is no row"):
        _cfg(tmp_path, comparisons=(("deb_t_tp10_ext", "vanilla"),))


def test_methods_that_read_or_run_the_assistant_need_a_pair(tmp_path):
    for method in ("contrastive", "contrastive_deb_t", "contrastive_generate"):
        with pytest.raises(ConfigError, match=rf"pairs: methods \['{method}'\] need at least one"):
            _cfg(tmp_path, methods=("vanilla", method))
    _cfg(tmp_path, methods=("vanilla", "temperature"))  # the matched baseline reads the judge alone
    # A judge without an assistant is refused when every method needs one.
    three = (ModelSpec("big", str(tmp_path / "a.gguf")), ModelSpec("small", str(tmp_path / "b.gguf")),
             ModelSpec("other", str(tmp_path / "a.gguf")))
    with pytest.raises(ConfigError, match=r"judges \['other'\] have no assistant"):
        _cfg(tmp_path, models=three, pairs=(("big", "small"),), judges=("big", "other"), methods=("contrastive",))


def test_a_primary_is_read_with_the_selection_inside_its_interval_unless_told(tmp_path):
    spec = dict(method="deb_t_tp10", versus="vanilla", score="expected@0.2", statistic="mean")
    assert _cfg(tmp_path, primary=Endpoint(**spec)).primary.selection == "nested"
    assert _cfg(tmp_path, primary=Endpoint(**spec, selection="conditional")).primary.selection == "conditional"
    with pytest.raises(ConfigError, match=r"primary.selection: 'nested' needs ci_method 'expanded' or 'percentile'"):
        _cfg(tmp_path, primary=Endpoint(**spec), ci_method="bca")
    _cfg(tmp_path, primary=Endpoint(**spec, selection="conditional"), ci_method="bca")
    with pytest.raises(ConfigError, match=r"selection"):
        _cfg(tmp_path, primary=Endpoint(**spec, selection="inner"))


def test_nested_rows_must_be_rows_and_need_a_nested_primary(tmp_path):
    primary = Endpoint(method="deb_t_tp10", versus="vanilla", statistic="mean", score="expected@0.2")
    cfg = _cfg(tmp_path, primary=primary, nested_rows=("deb_r_tp10", "deb_t_tp100"))
    assert cfg.nested_rows == ("deb_r_tp10", "deb_t_tp100")
    with pytest.raises(ConfigError, match=r"nested_rows\[1\]: 'deb_t_tp1000' is no row of the configured methods"):
        _cfg(tmp_path, primary=primary, nested_rows=("deb_r_tp10", "deb_t_tp1000"))
    with pytest.raises(ConfigError, match=r"nested_rows: needs a primary endpoint with selection 'nested'"):
        _cfg(tmp_path, nested_rows=("deb_r_tp10",))
    held = Endpoint(method="deb_t_tp10", versus="vanilla", statistic="mean", score="expected@0.2",
                    selection="conditional")
    with pytest.raises(ConfigError, match=r"nested_rows: needs a primary endpoint with selection 'nested'"):
        _cfg(tmp_path, primary=held, nested_rows=("deb_r_tp10",))
