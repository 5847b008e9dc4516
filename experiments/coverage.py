"""Coverage of the report's 95% intervals on synthetic judges of known correlation.

For each design (a fixed dev/test split with G reported groups, or grouped 5-fold CV over G
groups; 16 items per group, as SummEval's summaries per document) and each interval method,
draws synthetic data sets with a known population Spearman correlation
(`jaxjudge.metrics.synthetic`), computes the report's intervals for Spearman and for a paired
difference of two judges, and prints how often they hold the truth.

    python experiments/coverage.py                      # the table of results/README.md
    python experiments/coverage.py --sims 200 --groups 10 20 --methods expanded percentile

With ``--nested`` it measures, for a tuned judge (``judge_0 + lam * judge_1``, lambda chosen on
each fold's dev side; `jaxjudge.report.coverage.nested_coverage`), the report's conditional
interval (lambda held as chosen) against the population Spearman of the chosen lambda, and the
nested interval (lambda chosen again in every resample) against the procedure's expected
population Spearman over dev draws:

    python experiments/coverage.py --nested             # the nested table of results/README.md

With ``--spread`` it measures the intervals of the spread over score ranges
(`jaxjudge.report.spread_coverage`): the heterogeneity (standard deviation of the
ranges' true values, median-unbiased estimate, profile-likelihood interval) against the
percentile interval of max - min, with the noise of a committed run (its vanilla judge's bootstrap covariance across the
four ranges, recomputed from its committed stores):

    python experiments/coverage.py --spread             # experiments/score_range_bias.py:stsb, expected@1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jaxjudge.report.coverage import interval_coverage, nested_coverage  # noqa: E402
from jaxjudge.report.spread_coverage import spread_coverage, spread_diff_coverage  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=400, help="replicates per design (default 400)")
    ap.add_argument("--groups", type=int, nargs="+", default=None,
                    help="groups per design (default 3 10 20 50 100; with --nested 20 40)")
    ap.add_argument("--designs", nargs="+", default=["fixed", "kfold"], choices=["fixed", "kfold"])
    ap.add_argument("--methods", nargs="+", default=None, choices=["expanded", "percentile", "bca"],
                    help="intervals (default expanded percentile; with --nested expanded, the report's default)")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--nested", action="store_true", help="the tuned judge: conditional vs nested intervals")
    ap.add_argument("--spread", nargs="?", const="experiments/score_range_bias.py:stsb", default=None, metavar="CONFIG",
                    help="the spread over ranges, with the noise of CONFIG's committed stores "
                         "(default experiments/score_range_bias.py:stsb)")
    ap.add_argument("--reading", default="expected@1", help="with --spread: the reading whose noise is used")
    ap.add_argument("--taus", type=float, nargs="+", default=[0.0, 0.01, 0.02, 0.05, 0.2],
                    help="with --spread: true heterogeneities (default 0 0.01 0.02 0.05 0.2)")
    args = ap.parse_args(argv)
    if args.spread:
        _spread(args)
        return
    if args.nested:
        _nested(args)
        return
    args.groups = args.groups or [3, 10, 20, 50, 100]
    args.methods = args.methods or ["expanded", "percentile"]
    print("| design | groups | interval | Spearman covers | difference covers | mean width | replicates |")
    print("|---|---|---|---|---|---|---|")
    for design in args.designs:
        for g in args.groups:
            if design == "kfold" and g < 5:
                continue
            for method in args.methods:
                t0 = time.perf_counter()
                c = interval_coverage(design, g, args.sims, n_boot=args.n_boot, ci_method=method, seed=args.seed)
                print(f"| {design} | {g} | {method} | {c.spearman:.3f} | {c.difference:.3f} | {c.width:.3f} | "
                      f"{c.n} ({time.perf_counter() - t0:.0f} s) |", flush=True)


def _nested(args) -> None:
    groups = args.groups or [20, 40]
    methods = args.methods or ["expanded"]
    if "bca" in methods:
        raise SystemExit("--nested: the nested interval has no jackknife for BCa; use expanded or percentile")
    notes = []
    print("| design | groups | dev groups a fold | interval | covers E[theta(chosen)] | covers theta(chosen) | "
          "difference covers its target | mean width | resamples choosing anew | replicates |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for design in args.designs:
        for g in groups:
            if design == "kfold" and g < 5:
                continue
            for method in methods:
                t0 = time.perf_counter()
                c = nested_coverage(design, g, args.sims, n_boot=args.n_boot, ci_method=method, seed=args.seed)
                secs = time.perf_counter() - t0
                dev = g if design == "fixed" else g // 5
                head = f"| {design} | {g} | {dev} | {method}"
                print(f"{head}, conditional | {c.conditional_of_expected:.3f} | **{c.conditional:.3f}** | "
                      f"{c.conditional_difference:.3f} | {c.width_conditional:.3f} | | {c.n} |")
                print(f"{head}, nested | **{c.nested:.3f}** | {c.nested_of_chosen:.3f} | {c.nested_difference:.3f} | "
                      f"{c.width_nested:.3f} | {c.changed:.2f} | {c.n} ({secs:.0f} s) |", flush=True)
                notes.append(f"{design}, {g} groups: E[theta(chosen)] = {c.expected:.4f} "
                             f"(Monte Carlo se {c.expected_se:.4f})")
    print()
    print("\n".join(notes))


def committed_noise(spec: str, method: str = "vanilla", reading: str = "expected@1"):
    """The scales, Spearman estimates and bootstrap covariance across ranges of ``method`` read
    as ``reading`` in the first (judge, task, aspect) of a committed run, recomputed from its
    stores (no model)."""
    import jaxjudge.report.pipeline as pipeline  # noqa: PLC0415
    from jaxjudge.experiment import load_config  # noqa: PLC0415

    cfg = load_config(spec)
    seen = []
    original = pipeline.range_statistics

    def capture(reps, options, pairs=()):
        seen.append(list(reps))
        return original(reps, options, pairs)

    pipeline.range_statistics = capture
    try:
        os.chdir(REPO)
        pipeline.report_from_store(cfg.store_root, cfg)
    finally:
        pipeline.range_statistics = original
    first = seen[0]
    head = first[0][0]
    cells = [(labels["scale"], rep) for labels, rep in first
             if all(labels[k] == head[k] for k in ("judge", "task", "aspect"))]
    est, reps = [], []
    for _, rep in cells:
        row = next(r for r in rep.rows if r["method"] == method and r["score"] == reading)
        est.append(row["metrics"][cfg.select_metric]["estimate"])
        reps.append(np.asarray(rep.replicates[(method, reading)], np.float64))
    reps = np.stack(reps)
    reps = reps[:, np.all(np.isfinite(reps), axis=0)]
    label = f"{head['judge']}, {head['task']} {head['aspect']}, {method} {reading}"
    return [s for s, _ in cells], np.asarray(est), np.cov(reps), label


def _spread(args) -> None:
    scales, est, cov, label = committed_noise(args.spread, reading=args.reading)
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    print(f"noise: {args.spread} ({label}), ranges {', '.join(scales)}: bootstrap sd "
          f"{', '.join(f'{x:.4f}' for x in sd)}; correlations between ranges "
          f"{np.min(corr[np.triu_indices(len(sd), 1)]):.2f}-{np.max(corr[np.triu_indices(len(sd), 1)]):.2f}")
    print()
    print("| true deviations | true heterogeneity | true max - min | heterogeneity interval covers | "
          "max - min percentile covers | estimate inside (heterogeneity, max - min) | replicates |")
    print("|---|---|---|---|---|---|---|")
    for name, direction in (("linear", (-3.0, -1.0, 1.0, 3.0)), ("one range off", (-3.0, 1.0, 1.0, 1.0))):
        t0 = time.perf_counter()
        rows = spread_coverage(cov, tuple(args.taus), args.sims, direction=direction, n_boot=args.n_boot,
                               seed=args.seed)
        for c in rows:
            print(f"| {name} | {c.tau:.3f} | {c.max_min:.3f} | **{c.heterogeneity:.3f}** | {c.max_min_percentile:.3f} | "
                  f"{c.estimate_inside:.3f}, {c.max_min_inside:.3f} | {c.n} |", flush=True)
        print(f"({name}: {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    print()
    print("The difference of two heterogeneities (a method's minus its comparator's, the same noise on "
          "both sides, correlated 0.6 between them, linear deviations): how often the report's "
          "percentile interval of spread_diff holds the true difference.")
    print()
    print("| method's heterogeneity | comparator's | difference | interval covers | replicates |")
    print("|---|---|---|---|---|")
    pairs = ((0.0, 0.0), (0.02, 0.02), (0.01, 0.05), (0.05, 0.1), (0.02, 0.2), (0.2, 0.2))
    for tm, tb, c in spread_diff_coverage(cov, pairs, args.sims, n_boot=args.n_boot, seed=args.seed):
        print(f"| {tm:.3f} | {tb:.3f} | {tm - tb:+.3f} | **{c:.3f}** | {args.sims} |", flush=True)


if __name__ == "__main__":
    main()
