"""The report's vocabulary: method families, metrics, and the hyper-parameter grids searched.

Experiment configs choose among these names (`jaxjudge.experiment.ExperimentConfig` checks its
fields against them); `jaxjudge.report.methods` implements them.
"""

from __future__ import annotations

from typing import Any

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

# Method families. Each expands into named variants (see `method_variants`).
METHODS = (
    "vanilla",  # the judge's candidate distribution as is
    "generate",  # greedy generation parsed into a number (parse failures counted)
    "deb_r",  # random-number prior (raw random-number prompts), rectified with lambda
    "deb_t",  # random-number prior measured in the task's framing, rectified with lambda
    "contextual",  # contextual calibration (content-free inputs), lambda = 1
    "batch",  # batch calibration (prior = mean prediction over the test inputs), lambda = 1
    "distribution",  # distribution calibration (Beta fitted to dev human scores), lambda = 1
    "temperature",  # contrastive decoding's matched baseline: lambda = 0, its main-model temperature chosen on dev
    "contrastive",  # main judge minus assistant, lambda x temperature chosen on dev
    "contrastive_deb_t",  # contrastive decoding, then the Deb-T correction: both chosen on dev
    "contrastive_generate",  # greedy contrastive generation over the full vocabulary, parsed (fixed lambda, t, alpha)
)
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
    (the fine grid's temperatures) when the fine grid is on.
    """
    out: list[str] = []
    for m in cfg.methods:
        if m in ("deb_r", "deb_t"):
            for tp in cfg.deb_tp:
                out.append(f"{m}_tp{tp}")
                if cfg.lambdas_extended is not None:
                    out.append(f"{m}_tp{tp}_ext")
        elif m in ("contrastive", "temperature"):
            out.append(m)
            if cfg.contrastive_fine:
                out.append(f"{m}_fine")
        elif m == "contrastive_deb_t":
            out += [f"contrastive_deb_t_tp{tp}" for tp in cfg.deb_tp]
        else:
            out.append(m)
    return out
