"""An independent numpy check of the paired-difference coverage of `experiments/coverage.py`.

The same synthetic design (`jaxjudge.metrics.synthetic.clustered_judges`: 16 items per group,
two judges of population Pearson 0.5 and 0.3 with the human score), but the interval is
rebuilt here from scratch: whole groups are resampled literally (no weights), Spearman comes
from scipy's ranks, and the expanded percentile levels from scipy's t and normal quantiles. A
grouped jackknife t-interval is printed beside it for comparison. Only the report's data
generator is shared with the library.

    python experiments/coverage_reference.py --groups 20 --sims 600 --seed 101
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.stats as st

from jaxjudge.metrics.synthetic import clustered_judges


def _spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise Spearman of `[R, n]` arrays (midranks)."""
    rx, ry = st.rankdata(x, axis=-1), st.rankdata(y, axis=-1)
    rx, ry = rx - rx.mean(-1, keepdims=True), ry - ry.mean(-1, keepdims=True)
    return (rx * ry).sum(-1) / np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--sims", type=int, default=600)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=101)
    args = ap.parse_args(argv)
    g, rng = args.groups, np.random.default_rng(args.seed)
    t = st.t.ppf(0.975, g - 1)
    level = st.norm.cdf(-np.sqrt(g / (g - 1)) * t)  # Hesterberg's expanded percentile level
    leave_one_out = np.asarray([[j for j in range(g) if j != i] for i in range(g)])
    hits = {"expanded percentile": 0, "percentile": 0, "jackknife t": 0}
    t0 = time.perf_counter()
    for _ in range(args.sims):
        d = clustered_judges(rng, g, 16, (0.6, 0.3), (0.4, 0.3))
        truth = d.spearman[0] - d.spearman[1]
        h, a, b = (v.reshape(g, 16) for v in (d.human, d.judges[0], d.judges[1]))

        def diff(idx: np.ndarray) -> np.ndarray:  # idx [R, G'] groups drawn
            take = lambda v: v[idx].reshape(len(idx), -1)  # noqa: E731
            return _spearman(take(a), take(h)) - _spearman(take(b), take(h))

        est = diff(np.arange(g)[None])[0]
        reps = diff(rng.integers(0, g, (args.n_boot, g)))
        lo, hi = np.quantile(reps, [level, 1 - level])
        hits["expanded percentile"] += lo <= truth <= hi
        lo, hi = np.quantile(reps, [0.025, 0.975])
        hits["percentile"] += lo <= truth <= hi
        jack = diff(leave_one_out)
        se = np.sqrt((g - 1) / g * ((jack - jack.mean()) ** 2).sum())
        hits["jackknife t"] += abs(est - truth) <= t * se
    print(f"groups {g}, {args.sims} replicates, seed {args.seed} ({time.perf_counter() - t0:.0f} s): "
          + ", ".join(f"{k} {v / args.sims:.3f}" for k, v in hits.items()))


if __name__ == "__main__":
    main()
