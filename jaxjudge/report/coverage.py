"""How often the report's intervals cover the truth, on synthetic judges of known correlation.

Each replicate draws a clustered data set (`jaxjudge.metrics.synthetic.clustered_judges`) with
two judges, splits it as the report would (a fixed dev/test split of whole groups, or grouped
k-fold with dev:test = 1:(k-1)), and computes the report's intervals with the same function
`evaluate_cell` uses (`jaxjudge.report.cell_stats.test_side_intervals`): Spearman of judge A, and
the paired difference Spearman(A) - Spearman(B). An interval covers when it holds the
population value. ``python experiments/coverage.py`` prints a table of coverage over designs.

`nested_coverage` does the same for a tuned judge, ``judge_0 + lam * judge_1`` over a grid of
lambda chosen on each fold's dev side, and compares the report's conditional interval (lambda
held as chosen) with the nested one (`jaxjudge.select.nested_bootstrap`: chosen again in
every resample); ``python experiments/coverage.py --nested`` prints that table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.stats as st

from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.metrics.synthetic import SyntheticJudges, clustered_judges, combined_pearson, spearman_of_normal
from jaxjudge.report.cell_inputs import MethodOptions
from jaxjudge.report.cell_stats import test_side_intervals
from jaxjudge.select import Splits, fixed_split, kfold_splits, nested_bootstrap

__all__ = ["TUNED_LAMS", "Coverage", "NestedCoverage", "expected_selected", "interval_coverage", "nested_coverage"]


@dataclass(frozen=True)
class Coverage:
    """Result of `interval_coverage`.

    Attributes:
      spearman, difference: share of replicates whose interval held the truth.
      n: replicates with an interval (others withheld it: too many undefined resamples).
      width: mean width of the Spearman interval.
    """

    spearman: float
    difference: float
    n: int
    width: float


def interval_coverage(
    design: str,
    n_groups: int,
    n_sims: int,
    *,
    per_group: int = 16,
    n_boot: int = 1000,
    ci_method: str = "expanded",
    seed: int = 0,
    rho_between: tuple[float, float] = (0.6, 0.3),
    rho_within: tuple[float, float] = (0.4, 0.3),
    n_folds: int = 5,
) -> Coverage:
    """Coverage of the report's 95% intervals over ``n_sims`` synthetic data sets.

    Args:
      design: ``"fixed"`` (``n_groups`` dev groups and ``n_groups`` reported test groups) or
        ``"kfold"`` (``n_groups`` groups, grouped ``n_folds``-fold, dev one fold).
      n_groups: groups reported (fixed) or in all (k-fold).
      n_sims: replicates.
      per_group: items per group (SummEval: 16 summaries per document).
      n_boot, ci_method: of the report's bootstrap.
      seed: of the data draws.
      rho_between, rho_within: the two judges' correlations (see `clustered_judges`).
      n_folds: of ``"kfold"``.

    Returns:
      `Coverage`.
    """
    if design not in ("fixed", "kfold"):
        raise ValueError(f"design must be 'fixed' or 'kfold', got {design!r}")
    opts = MethodOptions(metrics=("spearman",), n_boot=n_boot, min_ci_groups=2, ci_method=ci_method,
                         select_metric="spearman")
    rng = np.random.default_rng(seed)
    hits = np.zeros(2)
    widths, n = [], 0
    for i in range(n_sims):
        total = 2 * n_groups if design == "fixed" else n_groups
        d = clustered_judges(rng, total, per_group, rho_between, rho_within)
        splits = _split(design, d.groups, n_groups, n_folds, seed + i)
        mets, deltas = test_side_intervals(d.judges[0], d.human, d.groups, splits,
                                           _seeded(opts, seed + i), base=d.judges[1])
        a, b = mets["spearman"], deltas["spearman"]
        if a["low"] is None or b["low"] is None:
            continue
        n += 1
        hits[0] += a["low"] <= d.spearman[0] <= a["high"]
        hits[1] += b["low"] <= d.spearman[0] - d.spearman[1] <= b["high"]
        widths.append(a["high"] - a["low"])
    share = hits / max(n, 1)
    return Coverage(spearman=float(share[0]), difference=float(share[1]), n=n,
                    width=float(np.mean(widths)) if widths else float("nan"))


def _seeded(opts: MethodOptions, seed: int) -> MethodOptions:
    return replace(opts, seed=seed)


def _split(design: str, groups: np.ndarray, n_groups: int, n_folds: int, seed: int) -> Splits:
    """The design's split: ``"fixed"``: groups 0..n_groups-1 dev, the rest test; ``"kfold"``:
    grouped ``n_folds``-fold, dev one fold."""
    if design == "fixed":
        return fixed_split(groups, list(range(n_groups)))
    return kfold_splits(groups, n_folds, seed)


TUNED_LAMS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
"""The tuned judge's grid: the weight of judge 1 in ``judge_0 + lam * judge_1``. With the
default correlations the population Spearman is 0.482 at lambda = 0, peaks at 0.53 near 0.5
and falls to 0.38 at lambda = 4."""


@dataclass(frozen=True)
class NestedCoverage:
    """Result of `nested_coverage`; every share is over the replicates with both intervals.

    Attributes:
      nested: share of nested intervals holding the expected Spearman of the procedure
        (``expected``).
      nested_difference: the same for the paired difference from judge 0 (lambda = 0, the
        vanilla judge): ``expected`` minus judge 0's Spearman.
      conditional: share of the report's conditional intervals (lambda held as chosen) holding
        the population Spearman of the lambdas chosen (mean over folds), their own target.
      conditional_difference: the same for the paired difference from judge 0.
      conditional_of_expected: share of conditional intervals holding ``expected``.
      nested_of_chosen: share of nested intervals holding the chosen lambdas' Spearman.
      width_nested, width_conditional: mean widths of the two Spearman intervals.
      expected: the estimand of the nested interval, E[Spearman(lambda chosen)].
      expected_se: its Monte Carlo standard error.
      changed: mean share of resamples in which a fold chose another lambda than on the data.
      n: replicates with both intervals.
    """

    nested: float
    nested_difference: float
    conditional: float
    conditional_difference: float
    conditional_of_expected: float
    nested_of_chosen: float
    width_nested: float
    width_conditional: float
    expected: float
    expected_se: float
    changed: float
    n: int


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman (midranks) along the last axis of `x` `[..., n]` against `y` `[..., n]`."""
    rx, ry = st.rankdata(x, axis=-1), st.rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    return (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))


def expected_selected(
    dev_groups: int,
    n_draws: int,
    *,
    lams: tuple[float, ...] = TUNED_LAMS,
    per_group: int = 16,
    rho_between: tuple[float, float] = (0.6, 0.3),
    rho_within: tuple[float, float] = (0.4, 0.3),
    seed: int = 0,
    chunk: int = 1000,
) -> tuple[float, float]:
    """E[Spearman(lambda chosen on a dev set of ``dev_groups`` groups)], by Monte Carlo.

    Each draw is a fresh dev set of the synthetic design; lambda is chosen where its pooled
    sample Spearman is largest (the first on ties, as `jaxjudge.select.grid_search`), and the
    population Spearman of the chosen lambda is known exactly (`combined_pearson`). Computed
    with scipy's ranks, independently of the library's metrics.

    Args:
      dev_groups: groups of one dev set.
      n_draws: dev sets drawn.
      lams, per_group, rho_between, rho_within: the design (see `nested_coverage`).
      seed: of the draws.
      chunk: dev sets drawn at once.

    Returns:
      ``(mean, Monte Carlo standard error)``.
    """
    truth = np.asarray([spearman_of_normal(r) for r in combined_pearson(lams, rho_between, rho_within)])
    lam = np.asarray(lams, np.float64)
    rng = np.random.default_rng(seed)
    chosen = []
    for lo in range(0, n_draws, chunk):
        r = min(chunk, n_draws - lo)
        # One data set of r * dev_groups independent groups, cut into r dev sets.
        d = clustered_judges(rng, r * dev_groups, per_group, rho_between, rho_within)
        a, b, h = (v.reshape(r, 1, -1) for v in (d.judges[0], d.judges[1], d.human))
        dev = _spearman_rows(a + lam[None, :, None] * b, h)  # [r, G]
        chosen.append(truth[np.argmax(dev, axis=1)])
    values = np.concatenate(chosen)
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


def nested_coverage(
    design: str,
    n_groups: int,
    n_sims: int,
    *,
    per_group: int = 16,
    n_boot: int = 1000,
    ci_method: str = "expanded",
    seed: int = 0,
    lams: tuple[float, ...] = TUNED_LAMS,
    rho_between: tuple[float, float] = (0.6, 0.3),
    rho_within: tuple[float, float] = (0.4, 0.3),
    n_folds: int = 5,
    n_draws: int = 20_000,
) -> NestedCoverage:
    """Coverage of the conditional and the nested 95% intervals of a tuned judge.

    The judge is ``judge_0 + lam * judge_1`` of `clustered_judges` (two judges of population
    Pearson 0.5 and 0.3 with the human score), lambda chosen on each fold's dev side by pooled
    Spearman over `TUNED_LAMS`, and reported by its test-side Spearman, mean over folds, as
    the report does for Deb-R's lambda or contrastive decoding's lambda x temperature. Its
    population Spearman at every lambda is known (`combined_pearson`).

    The estimands. What the data determine is a procedure: choose lambda on a dev set of
    this size, report its test metric. Its population metric at the lambda chosen here,
    ``theta(lambda_hat)``, is itself random (a different dev draw picks another lambda). The
    report's conditional interval holds lambda_hat and resamples the test side only, so it is
    calibrated for ``theta(lambda_hat)`` (test independent of dev within a fold) and that is
    the target it is measured against. The nested interval redraws the dev side too: its
    replicates vary as the whole procedure's result does over repetitions of the experiment,
    so it estimates the sampling distribution of the reported number, whose centre is the
    expected population metric of the procedure over dev draws, ``E[theta(lambda_hat)]`` (the
    test-side metric is unbiased for ``theta(lambda_hat)`` given lambda_hat, up to the
    Spearman's small-sample bias). That is its target here; ``theta(lambda_hat)`` would hold it
    to a value its resamples deliberately move away from (both cross-coverages are reported
    too). ``E[theta(lambda_hat)]`` is computed by `expected_selected` over ``n_draws`` dev sets
    of each fold's dev size (k-fold: the mean over folds). Differences are from judge 0
    (lambda = 0, a fixed procedure: the vanilla judge), on the same resamples.

    Args:
      design: ``"fixed"`` (``n_groups`` dev groups and ``n_groups`` reported test groups) or
        ``"kfold"`` (``n_groups`` groups, grouped ``n_folds``-fold, dev one fold).
      n_groups: groups reported (fixed) or in all (k-fold).
      n_sims: replicates.
      per_group: items per group (SummEval: 16 summaries per document).
      n_boot, ci_method: of both bootstraps (``"expanded"`` or ``"percentile"``; the report's
        default is ``"expanded"``, at the levels of the reported groups' number).
      seed: of the data draws and of each replicate's bootstrap.
      lams, rho_between, rho_within: the tuned judge.
      n_folds: of ``"kfold"``.
      n_draws: Monte Carlo draws of the nested interval's estimand.

    Returns:
      `NestedCoverage`.
    """
    if design not in ("fixed", "kfold"):
        raise ValueError(f"design must be 'fixed' or 'kfold', got {design!r}")
    if ci_method not in ("expanded", "percentile"):
        raise ValueError(f"ci_method must be 'expanded' or 'percentile' for nested_coverage, got {ci_method!r}")
    truth = np.asarray([spearman_of_normal(r) for r in combined_pearson(lams, rho_between, rho_within)])
    lam = np.asarray(lams, np.float32)
    opts = MethodOptions(metrics=("spearman",), n_boot=n_boot, min_ci_groups=2, ci_method=ci_method,
                         select_metric="spearman")
    rng = np.random.default_rng(seed)
    rows, expected, expected_se = [], float("nan"), float("nan")
    for i in range(n_sims):
        total = 2 * n_groups if design == "fixed" else n_groups
        d = clustered_judges(rng, total, per_group, rho_between, rho_within)
        splits = _split(design, d.groups, n_groups, n_folds, seed + i)
        if i == 0:  # the estimand depends on the design only (each fold's number of dev groups)
            sizes = [np.unique(d.groups[m]).size for m in splits.dev]
            expected, expected_se = _expected_of_design(sizes, n_draws, lams, per_group, rho_between, rho_within, seed)
        row = _nested_replicate(d, splits, lam, truth, expected, _seeded(opts, seed + i))
        if row is not None:
            rows.append(row)
    return _nested_summary(rows, expected, expected_se)


def _expected_of_design(
    dev_sizes: list[int], n_draws: int, lams: tuple[float, ...], per_group: int,
    rho_between: tuple[float, float], rho_within: tuple[float, float], seed: int,
) -> tuple[float, float]:
    """The nested interval's estimand, ``E[theta(lambda_hat)]``, and its Monte Carlo standard
    error: `expected_selected` for each fold's number of dev groups ``dev_sizes`` (each size
    drawn once, with its own seed), the mean over folds, and the root mean square of the folds'
    standard errors."""
    by_size: dict[int, tuple[float, float]] = {}
    for size in set(dev_sizes):
        by_size[size] = expected_selected(size, n_draws, lams=lams, per_group=per_group, rho_between=rho_between,
                                          rho_within=rho_within, seed=seed + 1_000_003 + size)
    expected = float(np.mean([by_size[s][0] for s in dev_sizes]))
    expected_se = float(np.sqrt(np.mean([by_size[s][1] ** 2 for s in dev_sizes])))
    return expected, expected_se


@dataclass(frozen=True)
class _NestedRow:
    """One replicate of `nested_coverage` (`_nested_replicate`).

    Attributes:
      hits: in the order of `NestedCoverage`'s six shares, whether each interval held its target.
      width_nested, width_conditional: the widths of the two Spearman intervals.
      changed: the share of resamples in which a fold chose another lambda.
    """

    hits: list[bool]
    width_nested: float
    width_conditional: float
    changed: float


def _nested_replicate(
    d: SyntheticJudges, splits: Splits, lam: np.ndarray, truth: np.ndarray, expected: float, opts: MethodOptions,
) -> _NestedRow | None:
    """One replicate of `nested_coverage`; None when one of its four intervals is withheld.

    Args:
      d: the replicate's data (`clustered_judges`).
      splits: its dev/test split.
      lam: `[G]` the tuned judge's grid.
      truth: `[G]` its population Spearman at each lambda.
      expected: the nested interval's estimand (`_expected_of_design`).
      opts: the report's options, seeded for this replicate (the nested bootstrap uses the
        same seed and number of resamples).

    Returns:
      `_NestedRow`.
    """
    tuned = d.judges[0][None] + lam[:, None] * d.judges[1][None]  # [G, N]
    res = nested_bootstrap({"tuned": tuned[:, None], "judge_0": d.judges[0]}, d.human, d.groups, splits.dev,
                           splits.test, "spearman", n_boot=opts.n_boot, seed=opts.seed)
    t, v = res["tuned"], res["judge_0"]
    n_report = int(np.unique(d.groups[splits.test.any(0)]).size)
    summary = dict(num_groups=n_report, min_groups=2, method=opts.ci_method)
    nest = interval_summary(t.estimate, t.replicates, opts.alpha, **summary)
    nest_diff = interval_summary(t.estimate - v.estimate, t.replicates - v.replicates, opts.alpha, **summary)
    # The report's interval: the chosen lambdas held fixed, the test side resampled.
    pred_fn = tuned[t.chosen_index]  # [F, N]
    mets, deltas = test_side_intervals(pred_fn, d.human, d.groups, splits, opts, base=d.judges[0])
    cond, cond_diff = mets["spearman"], deltas["spearman"]
    if any(iv["low"] is None for iv in (nest, nest_diff, cond, cond_diff)):
        return None
    chosen = float(np.mean(truth[t.chosen_index]))
    hits = [
        nest["low"] <= expected <= nest["high"],
        nest_diff["low"] <= expected - truth[0] <= nest_diff["high"],
        cond["low"] <= chosen <= cond["high"],
        cond_diff["low"] <= chosen - truth[0] <= cond_diff["high"],
        cond["low"] <= expected <= cond["high"],
        nest["low"] <= chosen <= nest["high"],
    ]
    changed = float(np.mean(t.chosen_replicates != t.chosen_index[None]))
    return _NestedRow(hits=hits, width_nested=nest["high"] - nest["low"], width_conditional=cond["high"] - cond["low"],
                      changed=changed)


def _nested_summary(rows: list[_NestedRow], expected: float, expected_se: float) -> NestedCoverage:
    """`NestedCoverage` from the `_nested_replicate` results of the replicates with every interval."""
    hits = np.zeros(6)
    for row in rows:
        hits += row.hits
    share = hits / max(len(rows), 1)

    def mean(v):
        return float(np.mean(v)) if v else float("nan")

    return NestedCoverage(
        nested=float(share[0]), nested_difference=float(share[1]), conditional=float(share[2]),
        conditional_difference=float(share[3]), conditional_of_expected=float(share[4]),
        nested_of_chosen=float(share[5]), width_nested=mean([r.width_nested for r in rows]),
        width_conditional=mean([r.width_conditional for r in rows]), expected=expected, expected_se=expected_se,
        changed=mean([r.changed for r in rows]), n=len(rows),
    )
