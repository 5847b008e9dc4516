"""`Confirmation`: what a confirmatory run registers beyond its primary endpoint.

A confirmatory config names its primary endpoint (`ExperimentConfig.primary`, with its margin)
and, in ``confirmation``, the rest of its registered plan: the secondary endpoints, the runs
registered together (one Holm family spans them: the same endpoint on several data sets), the
verdict rule, the power analysis behind the planned n, and what was left out and why. All of it
is part of the analysis plan, so `jaxjudge extract` records it under ``registrations/`` before
the first forward pass, and a report can print each endpoint's power beside its verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from jaxjudge.experiment.endpoint import Endpoint
from jaxjudge.experiment.typed import ConfigError, Typed, opt

__all__ = ["Confirmation", "EndpointPower", "VERDICT_RULE"]

VERDICT_RULE = (
    "Each registered endpoint on each data set is a one-sided test of effect <= margin, its p-value the share "
    "of the endpoint's bootstrap resamples (nested: the dev-side choice redone in each) at or below the margin; "
    "Holm's step-down over its family (the primary over the data sets; the secondary endpoints over endpoints x "
    "data sets) at one-sided alpha 0.025. Verdict: 'holds' where Holm rejects (for a family of one: the lower "
    "end of the 95% interval above the margin), 'equivalent' where the 95% interval lies inside [-margin, "
    "+margin], 'reversed' where its upper end lies below -margin, otherwise 'inconclusive'."
)


@dataclass(frozen=True)
class EndpointPower(Typed):
    """The power analysis of one registered endpoint on one data set (`experiments/power_analysis.py`).

    Attributes:
      endpoint: the endpoint's name in the plan (``"primary"``, ``"combination"``, ...).
      method, versus: its rows.
      family: the Holm family it belongs to (``"primary"`` or ``"secondary"``).
      pilot: the committed run whose stores gave ``sigma``.
      sigma: per-group standard deviation of the endpoint (grouped jackknife on the pilot).
      inflation: factor on the standard error for the dev-side choice redone per resample.
      planned_pairs, planned_groups: the report side's size.
      alpha_one_sided: the level the power is planned at (0.025 / the family's size).
      se, half_width: the planned standard error and interval half-width at that level.
      detectable_80: the true effect read as holding with 80% probability.
      power: plausible effect's name -> the probability of 'holds' at it.
      effects: plausible effect's name -> the effect (Spearman's rho, mean over ranges).
    """

    endpoint: str
    method: str
    versus: str
    family: Literal["primary", "secondary"]
    pilot: str
    sigma: float = opt(gt=0)
    inflation: float = opt(min=1)
    planned_pairs: int = opt(min=1)
    planned_groups: int = opt(min=1)
    alpha_one_sided: float = opt(gt=0, lt=1)
    se: float = opt(gt=0)
    half_width: float = opt(gt=0)
    detectable_80: float = 0.0
    power: Mapping[str, float] = opt(factory=dict, min=0, max=1)
    effects: Mapping[str, float] = opt(factory=dict)


@dataclass(frozen=True)
class Confirmation(Typed):
    """A confirmatory run's registered plan beyond ``primary`` (module docstring).

    Attributes:
      runs: the runs registered together (their run names), whose endpoints share Holm families.
      secondary: the registered secondary endpoints (each with its margin).
      rule: the verdict rule, in words.
      power: the power analysis, one entry per endpoint of this run (the primary's first).
      sample_size: why the planned n is what it is (the extraction rate it was chosen by).
      left_out: what the plan leaves out, and why (one line each).
    """

    runs: tuple[str, ...]
    secondary: tuple[Endpoint, ...] = opt((), empty=True)
    rule: str = VERDICT_RULE
    power: tuple[EndpointPower, ...] = opt((), empty=True)
    sample_size: str = opt("", empty=True)
    left_out: tuple[str, ...] = opt((), empty=True)

    def check(self) -> None:
        for i, e in enumerate(self.secondary):
            if e.margin is None:
                raise ConfigError(f"Confirmation.secondary[{i}]: a registered endpoint needs its margin")

    def endpoints(self, primary: Endpoint | None) -> tuple[Endpoint, ...]:
        """The primary (if any) and the secondary endpoints, in the plan's order."""
        return ((primary,) if primary is not None else ()) + self.secondary

    def power_of(self, method: str, versus: str | None) -> EndpointPower | None:
        """The power entry of the endpoint comparing ``method`` with ``versus`` (None: none)."""
        return next((p for p in self.power if (p.method, p.versus) == (method, versus)), None)
