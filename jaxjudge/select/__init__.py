"""Hyper-parameter selection: grouped dev/test splits and a grid search in one compiled call.

`nested_bootstrap` redoes the dev-side choice inside every resample of a grouped bootstrap, so
that an interval also carries the selection's variability.

`rectify_adjust` and `contrastive_adjust` live in `jaxjudge.debias.adjust`; they are exported
here too because they are what `grid_search` is usually called with.
"""

from jaxjudge.debias.adjust import contrastive_adjust, rectify_adjust
from jaxjudge.select.grid import (
    MINIMISED_METRICS,
    GridSearchResult,
    evaluate_point,
    grid_search,
    lambda_grid,
    lambda_temperature_grid,
    product_grid,
)
from jaxjudge.select.nested import NestedReplicates, nested_bootstrap, nested_weights
from jaxjudge.select.splits import Splits, fixed_split, group_kfold, kfold_splits

__all__ = [
    "MINIMISED_METRICS",
    "GridSearchResult",
    "NestedReplicates",
    "Splits",
    "contrastive_adjust",
    "evaluate_point",
    "fixed_split",
    "grid_search",
    "group_kfold",
    "kfold_splits",
    "lambda_grid",
    "lambda_temperature_grid",
    "nested_bootstrap",
    "nested_weights",
    "product_grid",
    "rectify_adjust",
]
