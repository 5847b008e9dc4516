"""Per-item scores: one row per item, judge, task, aspect, range, reading and method.

`report_from_arrays` keeps, for every cell, the predictions its metrics were computed from
(`jaxjudge.report.cell.evaluate_cell`'s ``predictions``, nothing recomputed); `cell_items`
turns them into columns and `write_items` writes them beside ``results.json`` as
``items.parquet`` and ``items.csv``. Columns (`COLUMNS`):

    model              the judge (the config's model name)
    task, aspect       the task and the aspect judged
    range              the prompt's score range, e.g. ``1-5``
    reading            how the score is read: ``expected@0.2``, ``greedy``, ``generate``
    method             the method variant, as in results.csv (``vanilla``, ``deb_t_tp10``, ...)
    item_id            the example's id in the task's data (join key)
    group              its group (source document): what the bootstrap resamples
    split              ``test``: the item is on the reported side (k-fold: every item);
                       ``dev``: only used to choose hyper-parameters (a fixed split's dev side)
    fold               k-fold: the item's own fold (the one whose dev side it is); else empty
    human              the human score on the task's own range
    score              the method's score on the prompt's range (empty: a parse failure)
    score_human_scale  ``score`` mapped linearly from the prompt's range onto the human range,
                       so that items compare across ranges

What ``score`` is: with a fixed split (one fold) the prediction the metrics were computed
from, with the hyper-parameters chosen on the dev side; the metrics are those of the ``test``
rows. With k-fold (dev = one fold, test = the others) an item is on the test side of every
fold but its own, each with the hyper-parameters chosen on that fold's dev side; ``score`` is
the mean of those held-out predictions (`cross_fitted`; for a method without
hyper-parameters they are all the same prediction). The reported k-fold metric is the mean
over folds f of the metric over the rows whose ``fold`` is not f, computed with fold f's
predictions: for methods without hyper-parameters, with ``score`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.data import from_prompt_range
from jaxjudge.select import Splits

__all__ = ["COLUMNS", "cell_items", "cross_fitted", "write_items"]

COLUMNS = ("model", "task", "aspect", "range", "reading", "method", "item_id", "group", "split", "fold", "human",
           "score", "score_human_scale")
_NUMBERS = ("human", "score", "score_human_scale")


def cross_fitted(pred_fn: np.ndarray, test_fn: np.ndarray) -> np.ndarray:
    """`[N]` each item's mean prediction over the folds that test it (its dev-only prediction
    where no fold tests it).

    Args:
      pred_fn: `[F, N]` predictions of each fold (NaN: undefined).
      test_fn: `[F, N]` bool, the test side of each fold.

    Returns:
      float64 `[N]`.
    """
    p = np.asarray(pred_fn, np.float64)
    test = np.asarray(test_fn, bool)
    n_test = test.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        held_out = np.sum(np.where(test, p, 0.0), 0) / n_test
    return np.where(n_test > 0, held_out, p.mean(0))


def cell_items(predictions: Mapping[tuple[str, str], np.ndarray], order: Sequence[tuple[str, str]], arrays: Any,
               splits: Splits, labels: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """One cell's per-item columns (see the module docstring).

    Args:
      predictions: ``(method, reading) -> [F, N]`` as `evaluate_cell` fills them.
      order: the ``(method, reading)`` pairs to write, in the order of the cell's rows.
      arrays: the cell's `jaxjudge.report.cell_inputs.CellArrays`.
      splits: the cell's dev/test masks.
      labels: ``judge``, ``task``, ``aspect`` and ``scale`` of the cell.

    Returns:
      column name -> `[M * N]` array, M the number of pairs in ``order``.
    """
    n, scale = arrays.n, arrays.scale
    test, dev = np.asarray(splits.test, bool), np.asarray(splits.dev, bool)
    ids = np.arange(n).astype(str) if arrays.example_ids is None else np.asarray(arrays.example_ids).astype(str)
    split = np.where(test.any(0), "test", np.where(dev.any(0), "dev", "unused"))
    fold = np.full(n, -1, np.int64) if splits.fold_ids is None else np.asarray(splits.fold_ids, np.int64)
    score = np.concatenate([cross_fitted(predictions[key], test) for key in order]) if order else np.zeros(0)
    m = len(order)
    return {
        "model": np.full(m * n, labels["judge"], object), "task": np.full(m * n, labels["task"], object),
        "aspect": np.full(m * n, labels["aspect"], object), "range": np.full(m * n, labels["scale"], object),
        "reading": np.repeat(np.array([r for _, r in order], object), n),
        "method": np.repeat(np.array([meth for meth, _ in order], object), n),
        "item_id": np.tile(ids.astype(object), m), "group": np.tile(np.asarray(arrays.groups).astype(str), m),
        "split": np.tile(split.astype(object), m), "fold": np.tile(fold, m),
        "human": np.tile(np.asarray(arrays.human, np.float64), m), "score": score,
        "score_human_scale": from_prompt_range(score, scale.lo, scale.hi, dst=tuple(arrays.human_range)),
    }


def write_items(cells: Sequence[Mapping[str, np.ndarray]], folder: str | os.PathLike) -> dict[str, Path]:
    """Write ``items.parquet`` and ``items.csv`` into ``folder`` (a local folder).

    Args:
      cells: `cell_items` of every cell.
      folder: the run folder.

    Returns:
      ``{"items": parquet path, "items_csv": csv path}``.
    """
    import pyarrow as pa  # noqa: PLC0415  (only a run folder's writer needs it)
    import pyarrow.csv as pa_csv  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    arrays = {}
    for c in COLUMNS:
        v = np.concatenate([cell[c] for cell in cells])
        if c == "fold":
            arrays[c] = pa.array(v, pa.int64(), mask=v < 0)  # empty outside k-fold
        elif c in _NUMBERS:
            arrays[c] = pa.array(v, pa.float64(), mask=~np.isfinite(v))  # empty: a parse failure
        else:
            arrays[c] = pa.array(v.astype(str).tolist(), pa.string())
    table = pa.table(arrays)
    folder = Path(folder)
    paths = {"items": folder / "items.parquet", "items_csv": folder / "items.csv"}
    pq.write_table(table, paths["items"])
    pa_csv.write_csv(table, paths["items_csv"])
    return paths
