"""Sentence-pair sets: STS-B (similarity 0-5) and SemRel2024 English (relatedness 0-1).

Each pair becomes one `Example` with fields ``sentence1`` and ``sentence2``.

Grouping. Pairs have no source document, but sentences recur: in the STS-B test split 1,379
pairs form 1,179 groups once pairs sharing a sentence are joined, and in the SemRel training
split 5,500 pairs form 4,065. A cross-validation fold that puts one pair of such a group in
training and another in test leaks the shared sentence, so the default ``group_by="sentence"``
joins pairs that share a sentence (transitively, within the loaded split) and names the group
by its first pair's id. ``group_by="pair"`` makes every pair its own group.

SemRel range mapping. SemRel relatedness is in [0, 1] but a judge is asked for a score on a
prompt's range [lo, hi] (e.g. 1-5). Human scores are compared with the judge on the judge's
scale through the linear map ``lo + s * (hi - lo)`` (`to_prompt_range`), and judge outputs go
back to [0, 1] with ``(x - lo) / (hi - lo)`` (`from_prompt_range`). Rank correlations are
unchanged by the map; Pearson is unchanged too (it is affine); error metrics (MSE) depend on
which side is mapped, so report them on the prompt's scale. STS-B's 0-5 is mapped the same way
when the prompt range is not 0-5.
"""

from __future__ import annotations

import os
from typing import Literal

import numpy as np

from jaxjudge.data.example import DataError, Example, RowReader, connected_groups, iter_jsonl
from jaxjudge.data.hub import hub_path, iter_hub_rows
from jaxjudge.store.location import location

__all__ = [
    "STSB_RANGE",
    "SEMREL_RANGE",
    "load_stsb",
    "load_semrel",
    "to_prompt_range",
    "from_prompt_range",
]

STSB_RANGE = (0.0, 5.0)
SEMREL_RANGE = (0.0, 1.0)

GroupBy = Literal["sentence", "pair"]


def to_prompt_range(scores, lo: float, hi: float, *, src: tuple[float, float] = SEMREL_RANGE) -> np.ndarray:
    """Map human scores from ``src`` (default SemRel's [0, 1]) linearly onto ``[lo, hi]``.

    Args:
      scores: array-like of human scores in ``src``, any shape.
      lo, hi: the prompt's score range (``ScoreScale.lo``, ``ScoreScale.hi``).
      src: the human scale, ``(0, 1)`` for SemRel, ``(0, 5)`` for STS-B.

    Returns:
      float64 array, same shape: ``lo + (s - src_lo) / (src_hi - src_lo) * (hi - lo)``.
    """
    s_lo, s_hi = src
    if not hi > lo or not s_hi > s_lo:
        raise ValueError(f"need lo < hi and src[0] < src[1], got lo={lo}, hi={hi}, src={src}")
    s = np.asarray(scores, dtype=np.float64)
    return lo + (s - s_lo) / (s_hi - s_lo) * (hi - lo)


def from_prompt_range(values, lo: float, hi: float, *, dst: tuple[float, float] = SEMREL_RANGE) -> np.ndarray:
    """Inverse of `to_prompt_range`: map judge scores on ``[lo, hi]`` back to ``dst``."""
    d_lo, d_hi = dst
    if not hi > lo or not d_hi > d_lo:
        raise ValueError(f"need lo < hi and dst[0] < dst[1], got lo={lo}, hi={hi}, dst={dst}")
    x = np.asarray(values, dtype=np.float64)
    return d_lo + (x - lo) / (hi - lo) * (d_hi - d_lo)


def _finish(ids: list[str], pairs: list[tuple[str, str]], scores: list[dict[str, float]], group_by: GroupBy) -> list[Example]:
    if group_by == "sentence":
        groups = connected_groups(ids, pairs)
    elif group_by == "pair":
        groups = list(ids)
    else:
        raise ValueError(f"group_by must be 'sentence' or 'pair', got {group_by!r}")
    return [
        Example(id=i, group=g, fields={"sentence1": s1, "sentence2": s2}, scores=sc)
        for i, g, (s1, s2), sc in zip(ids, groups, pairs, scores, strict=True)
    ]


_STSB_SPLITS = ("train", "dev", "test")


def load_stsb(
    data_dir: str | os.PathLike | None = None,
    split: Literal["train", "dev", "test"] = "test",
    *,
    group_by: GroupBy = "sentence",
    source: Literal["local", "hub"] = "local",
) -> list[Example]:
    """Load an STS-B split: sentence pairs with a 0-5 similarity score (``scores["similarity"]``).

    Args:
      data_dir: folder with ``stsb_{train,dev,test}.jsonl`` (required for local files).
      split: ``"train"`` (5,749), ``"dev"`` (1,500) or ``"test"`` (1,379, labels included).
      group_by: ``"sentence"`` (pairs sharing a sentence form a group) or ``"pair"``.
      source: local files, or ``"hub"`` (``mteb/stsbenchmark-sts`` through `datasets`).

    Returns:
      Examples with id ``"<split>/<filename>/<year>/<sid>"`` in file order.

    Raises:
      DataError: a malformed row (names file, line and field).
    """
    if split not in _STSB_SPLITS:
        raise ValueError(f"STS-B split must be one of {_STSB_SPLITS}, got {split!r}")
    if source == "local":
        if data_dir is None:
            raise ValueError("load_stsb: data_dir is required for source='local'")
        path = location(data_dir, "data_dir") / f"stsb_{split}.jsonl"
        rows = ((path, n, row) for n, row in iter_jsonl(path))
        file_key = "filename"
    elif source == "hub":
        # The hub copy names the validation split "validation" and the file column "dataset".
        hub_split = "validation" if split == "dev" else split
        path = hub_path("mteb/stsbenchmark-sts", hub_split)
        rows = ((path, n, row) for n, row in iter_hub_rows("mteb/stsbenchmark-sts", hub_split))
        file_key = "dataset"
    else:
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    ids, pairs, scores = [], [], []
    seen: set[str] = set()
    for p, n, row in rows:
        r = RowReader(p, n, row)
        ex_id = f"{split}/{r.text(file_key)}/{r.text('year')}/{r.text('sid')}"
        if ex_id in seen:
            raise r.error("sid", f"duplicate pair id {ex_id!r}")
        seen.add(ex_id)
        ids.append(ex_id)
        pairs.append((r.text("sentence1"), r.text("sentence2")))
        scores.append({"similarity": r.score("score", *STSB_RANGE)})
    if not ids:
        raise DataError(path, None, None, f"STS-B split {split!r} has no rows")
    return _finish(ids, pairs, scores, group_by)


def load_semrel(
    data_dir: str | os.PathLike | None = None,
    split: Literal["train", "dev"] = "dev",
    *,
    group_by: GroupBy = "sentence",
    source: Literal["local", "hub"] = "local",
) -> list[Example]:
    """Load SemRel2024 English (Track A): pairs with a 0-1 relatedness (``scores["relatedness"]``).

    Args:
      data_dir: folder with ``semrel_eng_{train,dev}.jsonl`` (required for local files).
      split: ``"train"`` (5,500) or ``"dev"`` (250); the test split is not distributed here.
      group_by: ``"sentence"`` (pairs sharing a sentence form a group) or ``"pair"``.
      source: local files, or ``"hub"`` (``SemRel/SemRel2024``, config ``eng``, through
        `datasets`; it has no pair ids, so ids are ``"ENG-<split>-<row:04d>"`` by position).

    Returns:
      Examples with id = ``pair_id`` in file order. See the module docstring for how the
      [0, 1] scores map onto a prompt's range.

    Raises:
      DataError: a malformed row (names file, line and field).
    """
    if split not in ("train", "dev", "test"):
        raise ValueError(f"SemRel split must be 'train', 'dev' (or 'test' on the hub), got {split!r}")
    ids, pairs, scores = [], [], []
    seen: set[str] = set()
    if source == "local":
        if data_dir is None:
            raise ValueError("load_semrel: data_dir is required for source='local'")
        path = location(data_dir, "data_dir") / f"semrel_eng_{split}.jsonl"
        for n, row in iter_jsonl(path):
            r = RowReader(path, n, row)
            ex_id = r.text("pair_id")
            if ex_id in seen:
                raise r.error("pair_id", f"duplicate pair_id {ex_id!r}")
            seen.add(ex_id)
            ids.append(ex_id)
            pairs.append((r.text("sentence1"), r.text("sentence2")))
            scores.append({"relatedness": r.score("score", *SEMREL_RANGE)})
    elif source == "hub":
        path = hub_path("SemRel/SemRel2024", split, "eng")
        for n, row in iter_hub_rows("SemRel/SemRel2024", split, "eng"):
            r = RowReader(path, n, row)
            ids.append(f"ENG-{split}-{n - 1:04d}")
            pairs.append((r.text("sentence1"), r.text("sentence2")))
            scores.append({"relatedness": r.score("label", *SEMREL_RANGE)})
    else:
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    if not ids:
        raise DataError(path, None, None, f"SemRel split {split!r} has no rows")
    return _finish(ids, pairs, scores, group_by)
