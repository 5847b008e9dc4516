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
"""

from __future__ import annotations

import argparse
import time

from jaxjudge.report.coverage import interval_coverage, nested_coverage


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
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    main()
