"""The few-labels experiment's config: a report config and the label-sampling protocol.

The computation is `jaxjudge.report.few_labels.run_few_labels`, which reads this config by its
fields; ``experiments/few_labels.py`` is the command.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jaxjudge.experiment.schema import ExperimentConfig, with_overrides
from jaxjudge.experiment.typed import ConfigError, Typed, opt, replace_fields

__all__ = ["FewLabelsConfig"]


@dataclass(frozen=True)
class FewLabelsConfig(Typed):
    """The few-labels experiment: a report config (whose stores give the judge's predictions)
    and the label-sampling protocol.

    Attributes:
      base: the `ExperimentConfig` whose tasks, scales, methods, splits and ``store_root`` make
        the predictions (its ``name``/``run`` name the results folder).
      score: the reading used, ``"expected@<T>"`` (a temperature of ``base``) or ``"greedy"``.
      n_labels: numbers of human labels drawn (increasing, each at least 2).
      repeats: draws per n (seeded).
      seed: seed of the draws.
      alpha: 1 - confidence level of every interval.
      clip: clip PPI++'s lam to [0, 1].
      min_clusters: fewest documents for the cluster-robust variance of the all-items mean.
      pair: two system names for the paired difference, or None (the two systems of highest
        mean vanilla judge score).
      kendall_n_boot: document-bootstrap resamples of the system-level tau.
      figure_scales: the ranges drawn in the width-against-n figure (None: every range).
    """

    base: ExperimentConfig
    score: str = "expected@0.2"
    n_labels: tuple[int, ...] = opt((25, 50, 100, 200), min=2)
    repeats: int = opt(200, min=1)
    seed: int = 0
    alpha: float = opt(0.05, gt=0, lt=1)
    clip: bool = False
    min_clusters: int = opt(20, min=1)
    pair: tuple[str, str] | None = None
    kendall_n_boot: int = opt(1000, min=1)
    figure_scales: tuple[str, ...] | None = None

    def check(self) -> None:
        w = self.where()
        kinds = [f"expected@{t:g}" for t in self.base.temperatures] + (["greedy"] if self.base.greedy else [])
        if self.score not in kinds:
            raise ConfigError(f"{w}.score {self.score!r} is not a reading of the base config; use one of {kinds}")
        if list(self.n_labels) != sorted(set(self.n_labels)):
            raise ConfigError(f"{w}.n_labels must be increasing integers >= 2, got {self.n_labels!r}")
        if self.pair is not None and self.pair[0] == self.pair[1]:
            raise ConfigError(f"{w}.pair must name two different systems, got {self.pair!r}")
        if self.figure_scales is not None:
            bad = sorted(set(self.figure_scales) - set(self.base.scales))
            if bad:
                raise ConfigError(f"{w}.figure_scales {bad} are not scales of the base config {self.base.scales}")

    @property
    def name(self) -> str:
        return self.base.name

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "base"}
        return json.loads(json.dumps(d, default=list))

    def with_overrides(self, overrides: Sequence[str]) -> FewLabelsConfig:
        """A copy with fields replaced from ``field=value`` strings (each read as its field's
        annotation); ``base.<field>=value`` overrides a field of the base config.

        Raises:
          ConfigError: an unknown field (named) or a bad value.
        """
        own, base = [], []
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like field=value")
            k, v = (s.strip() for s in item.split("=", 1))
            if k.startswith("base."):
                base.append(f"{k[len('base.'):]}={v}")
            elif k == "base":
                raise ConfigError("FewLabelsConfig.base is set field by field: base.<field>=value")
            else:
                own.append(f"{k}={v}")
        new_base = with_overrides(self.base, base) if base else self.base
        return dataclasses.replace(self, base=new_base, **replace_fields(self, own))
