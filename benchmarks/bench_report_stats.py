"""A report cell's bootstrap intervals: every method in one batched call vs one call per method.

Workload (synthetic judge, fixed seed), both shaped like committed runs:

- ``stsb``: 1,379 test rows, one fixed split, 12 methods read one way, metrics Pearson,
  Spearman, MSE, SDD and validity with 1,000 grouped-bootstrap resamples and the paired
  Spearman delta from vanilla; Kendall as a point estimate only.
- ``summeval``: 1,600 rows in 100 documents, 5 folds grouped by document, 12 methods, the
  same metrics plus the per-document (``_doc``) means and Kendall, all with intervals.

- batched: `jaxjudge.report.cell_stats.score_stats_batch` (all methods on the same resamples,
  each fold's test rows only);
- per method: `jaxjudge.report.cell_stats.score_stats`, once per method (what the report did
  before the batched call), the same statistic and resamples.

Each is timed after a warm-up call (compile time excluded), best of ``REPEATS``; the two are
measured alternately in one run so a busy machine slows both. The printed numbers of the two
paths are checked equal first.

Run: ``python benchmarks/bench_report_stats.py`` (prints times and ratios; asserts nothing
about time).
"""

from __future__ import annotations

import time

import numpy as np

from jaxjudge.report.cell_inputs import MethodOptions
from jaxjudge.report.cell_stats import score_stats, score_stats_batch, stats_context

N_METHODS, K = 12, 5
REPEATS = 2


def _cell(n: int, n_docs: int, folds: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    human = rng.uniform(0.0, 4.0, n)
    groups = np.arange(n) * n_docs // n
    if folds == 1:
        test = np.ones((1, n), bool)
    else:
        test = (groups[None] % folds) == np.arange(folds)[:, None]
    logits = -((np.arange(K)[None, None] - human[None, :, None] - rng.normal(0, 1, (N_METHODS, n, 1))) ** 2)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = (np.exp(logp) * np.arange(K)).sum(-1)  # [M, N]
    f = test.shape[0]
    preds = np.repeat(expected[:, None], f, axis=1)  # [M, F, N]
    probs = np.repeat(logp[:, None], f, axis=1)  # [M, F, N, K]
    ctx = stats_context(human, groups, test, K, 0.0, np.ones(n))
    return preds, probs, ctx


def _options(per_group: bool, ci_metrics) -> MethodOptions:
    return MethodOptions(
        methods=("vanilla",), metrics=("pearson", "spearman", "kendall", "mse", "sdd", "validity"),
        ci_metrics=ci_metrics, per_group=per_group, n_boot=1000, alpha=0.05, seed=0,
    )


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    shapes = {
        "stsb": (_cell(1379, 1379, 1), _options(False, ("pearson", "spearman", "mse", "sdd", "validity"))),
        "summeval": (_cell(1600, 100, 5), _options(True, None)),
    }
    for name, ((preds, probs, ctx), opts) in shapes.items():
        ok = np.ones(preds.shape[-1], np.float32)
        deltas = [i > 0 for i in range(N_METHODS)]
        base = preds[0]

        def batched():
            return score_stats_batch(preds, base, probs, ok, ctx, opts, deltas)

        def per_method():
            return [score_stats(preds[i], base if deltas[i] else None, probs[i], ok, ctx, opts)
                    for i in range(N_METHODS)]

        a, b = batched(), per_method()  # warm-up (compiles) and a check that both agree
        for (ma, da), (mb, db) in zip(a, b):
            for key in ma:
                for field in ("estimate", "low", "high"):
                    x, y = ma[key][field], mb[key][field]
                    assert (x is None and y is None) or abs(x - y) < 1e-5, (name, key, field, x, y)
            assert da.keys() == db.keys()
        t_batched = t_per = float("inf")
        for _ in range(REPEATS):  # alternate, so a busy machine slows both alike
            t_batched = min(t_batched, _timed(batched))
            t_per = min(t_per, _timed(per_method))
        print(f"{name}: {N_METHODS} methods x 1,000 resamples: batched {t_batched:.2f} s, "
              f"per method {t_per:.2f} s, ratio {t_per / t_batched:.2f}x")


if __name__ == "__main__":
    main()
