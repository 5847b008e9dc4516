"""Hyper-parameter selection: grouped dev/test splits and a grid search in one compiled call."""

from jaxjudge.select.grid import (
    MINIMISED_METRICS,
    GridSearchResult,
    contrastive_adjust,
    evaluate_point,
    grid_search,
    lambda_grid,
    lambda_temperature_grid,
    product_grid,
    rectify_adjust,
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
