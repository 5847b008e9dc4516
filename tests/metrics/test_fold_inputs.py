"""`over_folds`: a function of one fold applied to every fold of pytrees that lead with the fold
axis, against a Python loop over the folds in numpy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxjudge.metrics.fold_inputs import over_folds


def _one(x, pair):
    a, b = pair
    return {"sum": jnp.sum(x * a[:, None], axis=0), "max": jnp.max(b), "none": None}


@pytest.mark.parametrize("folds", [1, 3])
def test_over_folds_equals_a_loop_over_the_folds(folds):
    rng = np.random.default_rng(folds)
    x = rng.normal(size=(folds, 5, 2)).astype(np.float32)
    a = rng.normal(size=(folds, 5)).astype(np.float32)
    b = rng.integers(0, 9, size=(folds, 4)).astype(np.int32)
    got = jax.jit(lambda x, a, b: over_folds(_one, x, (a, b)))(x, a, b)
    want_sum = np.stack([(x[f] * a[f][:, None]).sum(0) for f in range(folds)])
    want_max = np.array([b[f].max() for f in range(folds)])
    np.testing.assert_allclose(np.asarray(got["sum"]), want_sum, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(got["max"]), want_max)
    assert got["sum"].shape == (folds, 2) and got["none"] is None


def test_over_folds_refuses_leaves_without_a_common_fold_axis():
    with pytest.raises(ValueError, match="fold axis"):
        over_folds(_one, np.zeros((3, 5, 2), np.float32), (np.zeros((2, 5), np.float32), np.zeros((3, 4))))
