"""Metrics: agreement with human scores, score-distribution divergence, validity, intervals.

Conventions shared by every metric here:

* `x` are predictions (e.g. the judge's expected score), `y` human scores, both `[N]`.
* `mask` is a bool `[N]` (None = all rows); unselected rows are ignored entirely (ranks,
  means and pairs see only the selected rows), and may hold NaN.
* `weights` is a float `[N]` >= 0 (None = ones); integer weights are exactly equivalent to
  repeating rows, which is how the grouped bootstrap evaluates a resample without building it.
* Everything is float32, pure and jittable, and vmappable over `x`, `y`, `mask`, `weights`
  (e.g. a hyper-parameter grid times cross-validation folds).
* Undefined values are NaN inside the jitted cores: a correlation on fewer than 2 rows or on a
  constant `x` or `y` (as scipy). Eager calls instead validate their inputs first and raise
  ValueError naming the problem (shape mismatch, NaN in selected rows, an empty mask, an
  unknown metric, human scores outside the scale) or warn (constant input). Under `jit` or
  `vmap` only the static shape checks run.

Metrics:

* `pearson`, `spearman` (average ranks for ties; one sort, O(N log N)), `kendall` (tau-b, as
  scipy's `kendalltau(variant='b')`; O(N^2) time, O(128 N) memory), `mse`, `neg_mse`.
  `METRICS` / `get_metric(name)` look them up by name.
* `grouped(metric, x, y, groups, ...)` (`jaxjudge.metrics.grouped`): summary-level variant,
  the mean over groups (e.g. SummEval source documents) of the within-group metric, skipping
  groups where it is undefined; `per_group` returns the per-group values, `grouped_metric`
  binds the groups into a plain `(x, y, mask)` metric, `encode_groups` turns arbitrary ids into
  codes 0..G-1.
* `sdd(probs, human, lo)`: Score Distribution Divergence, the mean KL(Q || P) between the human
  score spread over its two neighbouring integer scores and the judge's score distribution;
  `sdd_from_logprobs` reads the same from log-probabilities (exact far below float32's
  smallest probability).
* `validity_rate(valid)`: fraction of valid judge outputs.
* `bootstrap_ci`, `metric_ci`, `paired_difference_ci`: percentile intervals from a bootstrap
  that resamples whole groups, paired across methods.
* `ppi_mean`, `ppi_difference` (`jaxjudge.metrics.inference`), `ppi_ranking`,
  `effective_labels` (`jaxjudge.metrics.ranking`): prediction-powered estimates of mean human
  scores from judge scores on all items and human scores on a few, classical, PPI and
  power-tuned PPI++, optionally cluster-robust; `system_kendall_ci`
  (`jaxjudge.metrics.system_level`): system-level Kendall tau with a document bootstrap.
"""

from jaxjudge.metrics.bootstrap import (
    Interval,
    bca_quantiles,
    bootstrap_ci,
    bootstrap_distribution,
    expanded_levels,
    jackknife_distribution,
    metric_ci,
    paired_difference_ci,
    resample_weights,
)
from jaxjudge.metrics.correlation import (
    HIGHER_IS_BETTER,
    METRICS,
    MetricFn,
    get_metric,
    kendall,
    mse,
    neg_mse,
    pearson,
    spearman,
)
from jaxjudge.metrics.distribution import SDD_EPS, score_targets, sdd, sdd_from_logprobs, validity_rate
from jaxjudge.metrics.summary_level import grouped, grouped_metric, per_group
from jaxjudge.metrics.groups import GroupCodes, encode_groups
from jaxjudge.metrics.multiplicity import bootstrap_p_value, holm
from jaxjudge.metrics import inference, ranking, system_level
from jaxjudge.metrics.inference import *  # noqa: F403  (its __all__: prediction-powered inference)
from jaxjudge.metrics.ranking import *  # noqa: F403  (its __all__: ranking systems by PPI)
from jaxjudge.metrics.system_level import *  # noqa: F403  (its __all__: system-level agreement)

__all__ = [
    "bootstrap_p_value",
    "holm",
    "HIGHER_IS_BETTER",
    "METRICS",
    "SDD_EPS",
    "GroupCodes",
    "Interval",
    "MetricFn",
    "bca_quantiles",
    "bootstrap_ci",
    "bootstrap_distribution",
    "expanded_levels",
    "jackknife_distribution",
    "encode_groups",
    "get_metric",
    "grouped",
    "grouped_metric",
    "kendall",
    "metric_ci",
    "mse",
    "neg_mse",
    "paired_difference_ci",
    "pearson",
    "per_group",
    "resample_weights",
    "score_targets",
    "sdd",
    "sdd_from_logprobs",
    "spearman",
    "validity_rate",
    *inference.__all__,
    *ranking.__all__,
    *system_level.__all__,
]
