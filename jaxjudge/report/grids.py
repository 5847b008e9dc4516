"""The report's vocabulary: method families, metrics, and the hyper-parameter grids searched.

Experiment configs choose among these names (`jaxjudge.experiment.ExperimentConfig` checks its
fields against them); `jaxjudge.report.methods` implements them.
"""

from __future__ import annotations

from typing import Any

from jaxjudge.report.methods import METHODS as _REGISTRY

__all__ = [
    "METHODS",
    "METRICS",
    "SELECT_METRICS",
    "LAMBDA_GRID",
    "LAMBDA_GRID_EXTENDED",
    "CONTRASTIVE_LAMS",
    "CONTRASTIVE_TEMPS",
    "CONTRASTIVE_LAMS_FINE",
    "CONTRASTIVE_TEMPS_FINE",
    "method_variants",
]

# Method families, from the one registry (`jaxjudge.report.methods.METHODS`, where each family is
# declared with what it needs, its variants and its row names).
METHODS = tuple(_REGISTRY)
METRICS = ("pearson", "spearman", "kendall", "mse", "sdd", "validity")
SELECT_METRICS = ("pearson", "spearman", "kendall", "mse", "neg_mse")

LAMBDA_GRID = tuple(round(0.1 * i, 1) for i in range(1, 11))  # 0.1 .. 1.0
LAMBDA_GRID_EXTENDED = tuple(round(0.1 * i, 1) for i in range(1, 101))  # 0.1 .. 10.0
CONTRASTIVE_LAMS = (0.01, 0.1, 0.5, 1.0)
CONTRASTIVE_TEMPS = (0.5, 1.0, 2.0, 3.0, 5.0)
CONTRASTIVE_LAMS_FINE = tuple(round(0.05 * i, 2) for i in range(0, 21))  # 0 .. 1
CONTRASTIVE_TEMPS_FINE = tuple(round(0.25 * i, 2) for i in range(2, 21))  # 0.5 .. 5


def method_variants(cfg: Any) -> list[str]:
    """Names of the method variants an experiment config reports, in table order.

    ``deb_r`` / ``deb_t`` expand to ``deb_r_tp10``, ``deb_r_tp10_ext`` (the extended lambda
    grid), ...; ``contrastive`` adds ``contrastive_fine`` when the fine grid is on;
    ``contrastive_deb_t`` expands over Tp like Deb-T; ``temperature`` adds ``temperature_fine``
    (the fine grid's temperatures) when the fine grid is on (each family's `Method.row_names`).
    """
    return [name for m in cfg.methods for name in _REGISTRY[m].row_names(cfg)]
