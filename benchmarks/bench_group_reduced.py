"""A SummEval cell's bootstrap: the group-reduced statistic vs the metrics on each resample's weights.

Workload (synthetic judge, fixed seed), shaped like ``random_number_debias/summeval``: 1,600
rows in 100 documents of 16, 5 folds grouped by document (each fold's metric on the other four
folds' 1,280 rows), 12 methods, metrics Pearson, Spearman, Kendall, MSE and validity, each
pooled and per document (``_doc``), and the paired Spearman delta from the first method.

- reduced: `jaxjudge.metrics.fold_stat.methods_prepare` once, then
  `jaxjudge.metrics.fold_stat.methods_stat` per resample (what the report runs: per-document
  values, Kendall's pair sums, Spearman's ranks and the pooled Pearson's and MSE's sums
  reduced to documents before resampling);
- per resample: every metric recomputed from the rows under each resample's weights with the
  public metrics (`jaxjudge.metrics.pearson`, ``spearman``, ``kendall``, ``mse``, ``grouped``),
  vmapped over the methods and the resamples: the statistic before the reduction.

Both run the same resamples (``N_BOOT`` of them, fewer than a report's 1,000: the per-resample
Kendall is O(N^2) a resample) and are checked equal first; each is timed after a warm-up call
(compile time excluded), best of ``REPEATS``, alternately so a busy machine slows both.

Run: ``python benchmarks/bench_group_reduced.py`` (prints times and the ratio; asserts nothing
about time).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.metrics.fold_stat import fold_arrays, methods_prepare, methods_stat

N, DOCS, FOLDS, METHODS = 1600, 100, 5, 12
N_BOOT, REPEATS = 100, 2
NAMES = ("pearson", "spearman", "kendall", "mse", "validity",
         "pearson_doc", "spearman_doc", "kendall_doc", "mse_doc", "delta_spearman")


def _workload():
    rng = np.random.default_rng(0)
    human = np.round(rng.uniform(1, 5, N) * 3) / 3  # three annotators' mean: ties
    groups = np.arange(N) * DOCS // N
    test = (groups[:, None] % FOLDS) != np.arange(FOLDS)[None]  # [N, F]: the other folds
    preds = human[None, :, None] + rng.normal(0, 1.5, (METHODS, N, FOLDS))  # [M, N, F]
    ok = np.ones(N, np.float32)
    ok[rng.choice(N, 20, replace=False)] = 0  # parse failures
    layout = fold_arrays(preds, preds[0], human, human - 1, np.zeros((N, FOLDS, 5)), test.astype(np.float32),
                         ok, ok, groups)
    return layout, M.encode_groups(groups)


def _per_resample_stat(num_groups: int):
    """The statistic from the rows and each resample's row weights, public metrics only."""

    def one(pred_f, base_f, human_f, pad, ok_f, valid_f, codes_f, index, w):
        out = []
        for pred, base, human, real, ok, valid, codes, idx in zip(pred_f, base_f, human_f, pad, ok_f, valid_f,
                                                                  codes_f, index):
            rows = w[idx] * real
            ww = rows * ok
            vals = [M.pearson(pred, human, weights=ww), M.spearman(pred, human, weights=ww),
                    M.kendall(pred, human, weights=ww), M.mse(pred, human, weights=ww),
                    jnp.sum(rows * valid) / jnp.sum(rows)]
            vals += [M.grouped(m, pred, human, codes, num_groups=num_groups, weights=ww)
                     for m in ("pearson", "spearman", "kendall", "mse")]
            vals.append(M.spearman(pred, human, weights=ww) - M.spearman(base, human, weights=ww))
            out.append(jnp.stack(vals))
        return jnp.mean(jnp.stack(out), axis=0)

    def stat(a, w):  # a: `FoldArrays`
        return jax.vmap(lambda p: one(p, a.base, a.human, a.pad, a.ok, a.valid, a.codes, a.index, w))(a.pred)

    return stat


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    layout, codes = _workload()
    g = codes.num_groups
    prep, reduced_stat = methods_prepare(NAMES, g, False), methods_stat(NAMES, g, False)
    plain_stat = _per_resample_stat(g)

    def reduced():
        consts = (layout, prep(layout))
        return np.asarray(M.bootstrap_distribution(reduced_stat, (), codes.codes, n_boot=N_BOOT, consts=consts)[1])

    def per_resample():
        return np.asarray(M.bootstrap_distribution(plain_stat, (), codes.codes, n_boot=N_BOOT, consts=(layout,))[1])

    a, b = reduced(), per_resample()  # warm-up (compiles) and a check that both agree
    assert a.shape == b.shape == (N_BOOT, METHODS, len(NAMES))
    np.testing.assert_allclose(a, b, atol=2e-5)
    t_red = t_plain = float("inf")
    for _ in range(REPEATS):
        t_red = min(t_red, _timed(reduced))
        t_plain = min(t_plain, _timed(per_resample))
    print(f"summeval cell: {METHODS} methods x {N_BOOT} resamples x {FOLDS} folds: group-reduced {t_red:.2f} s, "
          f"per resample {t_plain:.2f} s, ratio {t_plain / t_red:.1f}x")


if __name__ == "__main__":
    main()
