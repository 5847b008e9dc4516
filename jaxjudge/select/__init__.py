"""Hyper-parameter selection: grouped dev/test splits and a grid search in one compiled call.

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
from jaxjudge.select.splits import Splits, fixed_split, group_kfold, kfold_splits

__all__ = [
    "MINIMISED_METRICS",
    "GridSearchResult",
    "Splits",
    "contrastive_adjust",
    "evaluate_point",
    "fixed_split",
    "grid_search",
    "group_kfold",
    "kfold_splits",
    "lambda_grid",
    "lambda_temperature_grid",
    "product_grid",
    "rectify_adjust",
]
