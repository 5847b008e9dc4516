"""Coverage of the report's 95% intervals on synthetic judges of known correlation.

For each design (a fixed dev/test split with G reported groups, or grouped 5-fold CV over G
groups; 16 items per group, as SummEval's summaries per document) and each interval method,
draws synthetic data sets with a known population Spearman correlation
(`jaxjudge.metrics.synthetic`), computes the report's intervals for Spearman and for a paired
difference of two judges, and prints how often they hold the truth.

    python experiments/coverage.py                      # the table of results/README.md
    python experiments/coverage.py --sims 200 --groups 10 20 --methods expanded percentile
"""

from __future__ import annotations

import argparse
import time

from jaxjudge.report.coverage import interval_coverage


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=400, help="replicates per design (default 400)")
    ap.add_argument("--groups", type=int, nargs="+", default=[3, 10, 20, 50, 100])
    ap.add_argument("--designs", nargs="+", default=["fixed", "kfold"], choices=["fixed", "kfold"])
    ap.add_argument("--methods", nargs="+", default=["expanded", "percentile"],
                    choices=["expanded", "percentile", "bca"])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
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


if __name__ == "__main__":
    main()
