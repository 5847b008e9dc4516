"""Options a method family declares for itself: read from the config's ``method_options``,
checked against the family's own options class, defaults where the config is silent."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jaxjudge.experiment import ConfigError, ExperimentConfig, TaskSpec
from jaxjudge.experiment.typed import build_dataclass
from jaxjudge.report.cell_inputs import MethodOptions
from experiments.registry import SMOLLM2


@dataclass(frozen=True)
class _Opts:
    grid: tuple[float, ...] = field(default=(0.0, 1.0), metadata={"min": 0.0})
    steps: int = 3


def test_build_dataclass_coerces_checks_bounds_and_names_unknown_fields():
    got = build_dataclass(_Opts, {"grid": [0, 2]}, "where")
    assert got == _Opts(grid=(0.0, 2.0), steps=3) and isinstance(got.grid, tuple)
    assert build_dataclass(_Opts, {}, "where") == _Opts()
    with pytest.raises(ConfigError, match=r"where: unknown field 'gird'.*did you mean 'grid'"):
        build_dataclass(_Opts, {"gird": [1.0]}, "where")
    with pytest.raises(ConfigError, match=r"where\.grid\[1\]: .*-1"):
        build_dataclass(_Opts, {"grid": [0.5, -1.0]}, "where")
    with pytest.raises(ConfigError, match=r"where\.steps: must be an integer"):
        build_dataclass(_Opts, {"steps": "3"}, "where")


def test_method_options_family_reads_the_configured_options_else_the_defaults():
    opts = MethodOptions(family_options=(("mine", _Opts(steps=5)),))
    assert opts.family("mine", _Opts) == _Opts(steps=5)
    assert opts.family("other", _Opts) == _Opts()


def test_method_options_for_a_family_without_options_is_refused_by_name(tmp_path):
    base = dict(name="opts", models=(SMOLLM2,), tasks=(TaskSpec("summeval", ("coherence",), data="embedded"),),
                methods=("vanilla",), store_root=str(tmp_path / "s"))
    assert ExperimentConfig(**base).family_options() == {}
    with pytest.raises(ConfigError, match=r"method_options: 'vanilla' is no configured method with options"):
        ExperimentConfig(**base, method_options={"vanilla": {"x": 1}})
