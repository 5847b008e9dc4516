"""How an experiment file picks its variant: `pick_variant` over the file's ``VARIANTS`` dict,
and every variant of every experiment config loading as ``file.py:arg``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from jaxjudge.experiment import ExperimentConfig, FewLabelsConfig, load_config, pick_variant, validate_config

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
# The experiment configs (the files with a get_config), not the argparse scripts.
CONFIGS = ("combined", "contrastive", "demo", "few_labels", "random_number_debias", "score_range_bias")


def _module(name):
    folder = str(EXPERIMENTS)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(f"variants_{name}", EXPERIMENTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(folder)


def test_pick_variant_returns_the_named_variant_or_the_default():
    variants = {None: "base", "quick": "small", "stsb": "pairs"}
    assert pick_variant("x", None, variants) == "base"
    assert pick_variant("x", "stsb", variants) == "pairs"


def test_pick_variant_refuses_an_unknown_argument_naming_the_known_ones():
    variants = {None: 0, "stsb": 1, "semrel": 2, "quick": 3}
    with pytest.raises(ValueError, match=r"^x: unknown argument 'stsbb' \(did you mean 'stsb'\?\); "
                                         r"use one of \['quick', 'semrel', 'stsb'\]$"):
        pick_variant("x", "stsbb", variants)
    with pytest.raises(ValueError, match=r"^x: unknown argument 'nonsense'; use one of \['quick', 'semrel', 'stsb'\]$"):
        pick_variant("x", "nonsense", variants)
    # Without a None key there is no default.
    with pytest.raises(ValueError, match=r"^y: unknown argument None; use one of \['cpu'\]$"):
        pick_variant("y", None, {"cpu": 0})


@pytest.mark.parametrize("name", CONFIGS)
def test_every_variant_loads_and_an_unknown_one_is_refused(name):
    module = _module(name)
    assert module.VARIANTS, name
    for arg in module.VARIANTS:
        if arg is not None:  # the docstring says what each variant is, or the command that runs it
            assert f'``"{arg}"``' in module.__doc__ or f"experiments/{name}.py:{arg}" in module.__doc__, arg
        if name == "few_labels":  # a script: get_config builds a FewLabelsConfig
            cfg = module.get_config(arg)
            assert isinstance(cfg, FewLabelsConfig) and cfg.base.run == arg
            continue
        cfg = load_config(f"{EXPERIMENTS / name}.py" + (f":{arg}" if arg else ""))
        assert isinstance(cfg, ExperimentConfig) and cfg.name == name
        validate_config(cfg, check_files=False)
    with pytest.raises(ValueError, match=rf"^{name}: unknown argument 'nonsense'; use one of \["):
        module.get_config("nonsense")


def test_an_unknown_variant_on_the_command_line_is_one_line_and_exit_2(capsys):
    from jaxjudge.cli import main

    assert main(["report", str(EXPERIMENTS / "demo.py") + ":cii"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown argument 'cii' (did you mean 'ci'?)" in err
