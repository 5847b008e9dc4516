"""`Endpoint`: the comparison a config declares as its primary endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jaxjudge.experiment.typed import ConfigError, Typed, opt
from jaxjudge.prompts import ScoreScale
from jaxjudge.report.methods import REFERENCE

__all__ = ["Endpoint"]


@dataclass(frozen=True)
class Endpoint(Typed):
    """One paired comparison of a report, named as the primary endpoint of a config.

    It is read at the config's own level (``alpha``, unadjusted) and printed first; every other
    comparison of the report is secondary and Holm-adjusted (`jaxjudge.report.ranges`).

    Attributes:
      method: the row (method variant) compared, e.g. ``"contrastive"`` or ``"deb_t_tp10"``.
      versus: what it is compared with: ``"vanilla"``, its matched baseline's row name or
        another method's row (a calibration baseline, or a pair in ``comparisons``); None: no
        comparison, the method's own ``mean`` or ``spread`` over ranges (e.g. the vanilla
        judge's spread: the score-range bias itself).
      statistic: ``"mean"`` (difference of the means over ranges), ``"spread"`` (difference of
        the spreads over ranges), ``"relative"`` (the relative improvement averaged over
        ranges) or one range (e.g. ``"1-5"``: the difference on that range).
      score: the reading, e.g. ``"expected@1.0"``, ``"greedy"``.
      judge, task, aspect: needed only where the report has several.
      selection: ``"nested"`` (default): where the method or its comparator is tuned on dev,
        the interval redoes that choice inside every bootstrap resample
        (`jaxjudge.select.nested_bootstrap`; the report computes it for these two rows at this
        reading), so it carries the selection's variability; ``"conditional"``: the report's
        interval, hyper-parameters held as chosen on the full dev side (as every secondary
        comparison is read). An endpoint with no tuned side is the same either way.
      margin: the smallest effect of interest (on the statistic's own scale, e.g. 0.02 of
        Spearman), declared with the endpoint: the verdict is "better" when the whole interval
        lies above +margin, "worse" below -margin, "equivalent" inside [-margin, +margin],
        otherwise "inconclusive". None: no verdict beyond the interval.
    """

    method: str
    score: str
    versus: str | None = REFERENCE
    statistic: str = "mean"
    judge: str | None = None
    task: str | None = None
    aspect: str | None = None
    selection: Literal["nested", "conditional"] = "nested"
    margin: float | None = opt(None, min=0)

    def check(self) -> None:
        if self.versus is None and self.statistic not in ("mean", "spread"):
            raise ConfigError(f"Endpoint.statistic: {self.statistic!r} needs a comparison (versus); "
                              "without one use 'mean' or 'spread'")
        if self.statistic not in ("mean", "spread", "relative"):
            try:
                ScoreScale.parse(self.statistic)
            except ValueError:
                raise ConfigError(
                    f"Endpoint.statistic: {self.statistic!r} is none of 'mean', 'spread', 'relative' or a range "
                    "such as '1-5'"
                ) from None
