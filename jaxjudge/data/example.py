"""The `Example` record and the validating row readers every loader shares.

Every loader turns one row of a source file into one `Example`. Rows are checked field by
field; a bad row raises `DataError` naming the file, the 1-based line (or row) and the field,
so a researcher can open the file at the right place instead of guessing.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from jaxjudge.store.location import location

__all__ = [
    "DataError",
    "Example",
    "iter_jsonl",
    "RowReader",
    "text_hash",
    "connected_groups",
    "group_indices",
    "score_array",
]


class DataError(ValueError):
    """A malformed row in a data file, or a file (or split) with no rows at all.

    Attributes:
      path: the file (or a `hf://datasets/...` pseudo-path for hub rows).
      line: 1-based line number in the file (row number for hub and parquet sources); None
        when the problem is the whole file (e.g. it is empty).
      field: the offending field, or None when the whole line is bad (invalid JSON).
    """

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path if line is None else f"{self.path}, line {line}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, eq=True)
class Example:
    """One item to be judged.

    Attributes:
      id: unique within a loaded data set (e.g. ``"<doc_id>/<model_id>"`` for SummEval).
      group: the source the item depends on (SummEval: the article; HelpSteer2: the prompt).
        Cross-validation folds are grouped by it, and examples of one group share the prompt
        prefix whose KV cache the engine reuses.
      fields: text fields by name (``document``, ``summary``, ``sentence1``, ...), read-only.
      scores: human score per aspect, read-only.
    """

    id: str
    group: str
    fields: Mapping[str, str] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise TypeError(f"Example.id must be a non-empty str, got {self.id!r}")
        if not isinstance(self.group, str) or not self.group:
            raise TypeError(f"Example {self.id!r}: group must be a non-empty str, got {self.group!r}")
        for name, value in dict(self.fields).items():
            if not isinstance(value, str):
                raise TypeError(f"Example {self.id!r}: field {name!r} must be str, got {type(value).__name__}")
        scores = {}
        for name, value in dict(self.scores).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Example {self.id!r}: score {name!r} must be a number, got {value!r}")
            scores[name] = float(value)
        # Frozen in spirit as well as in name: a shared Example must not be edited in place.
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        object.__setattr__(self, "scores", MappingProxyType(scores))

    def __hash__(self) -> int:
        return hash((self.id, self.group))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Example):
            return NotImplemented
        return (
            self.id == other.id
            and self.group == other.group
            and dict(self.fields) == dict(other.fields)
            and dict(self.scores) == dict(other.scores)
        )


def text_hash(text: str, n: int = 16) -> str:
    """Short, stable content hash of a text (hex sha256 prefix), used as a group id."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _open_text(path: Any):
    if path.suffix == ".gz":
        return gzip.open(path if isinstance(path, Path) else path.open("rb"), "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, row)`` for each non-blank line of a JSON Lines file (``.gz`` ok), a
    local path or a ``gs://bucket/...`` object (`jaxjudge.store.location`).

    Raises:
      FileNotFoundError: the file does not exist.
      LocationError: a URL no installed library serves, or a mistyped one.
      DataError: a line is not valid JSON or not a JSON object, or the file has no row at all
        (empty, or only blank lines): an empty file is never an empty data set.
    """
    path = location(path, "data file")
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    rows = 0
    with _open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            rows += 1
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(path, lineno, None, f"invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise DataError(path, lineno, None, f"expected a JSON object, got {type(row).__name__}")
            yield lineno, row
    if not rows:
        raise DataError(path, None, None, "no rows (the file is empty or holds only blank lines)")


@dataclass(frozen=True)
class RowReader:
    """Typed, validated access to the fields of one row, with errors that say where.

    Attributes:
      path: file (or pseudo-path) the row came from.
      line: 1-based line/row number.
      row: the parsed row.
    """

    path: str | Path
    line: int
    row: Mapping[str, Any]

    def error(self, field: str | None, message: str) -> DataError:
        return DataError(self.path, self.line, field, message)

    def _get(self, name: str) -> Any:
        if name not in self.row or self.row[name] is None:
            raise self.error(name, "missing field")
        return self.row[name]

    def text(self, name: str) -> str:
        """A required, non-empty string field."""
        value = self._get(name)
        if not isinstance(value, str):
            raise self.error(name, f"expected text, got {type(value).__name__}")
        if not value.strip():
            raise self.error(name, "empty text")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.row.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(name, f"expected text, got {type(value).__name__}")
        return value

    def score(self, name: str, lo: float, hi: float, *, integer: bool = False) -> float:
        """A required numeric score in ``[lo, hi]``.

        Numbers and numeric strings are accepted (CSV-derived copies store scores as text);
        booleans, NaN, infinities and other strings are not.
        """
        value = self._get(name)
        if isinstance(value, bool):
            raise self.error(name, f"non-numeric score {value!r}")
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                raise self.error(name, f"non-numeric score {value!r}") from None
        elif isinstance(value, (int, float)):
            number = float(value)
        else:
            raise self.error(name, f"non-numeric score {value!r}")
        if not math.isfinite(number):
            raise self.error(name, f"non-finite score {value!r}")
        if integer and number != round(number):
            raise self.error(name, f"expected an integer score, got {value!r}")
        if not lo <= number <= hi:
            raise self.error(name, f"score {number:g} outside [{lo:g}, {hi:g}]")
        return number


def connected_groups(ids: list[str], texts: Iterable[tuple[str, ...]]) -> list[str]:
    """Group items that share any text, transitively (connected components).

    Used for sentence-pair sets: STS-B and SemRel reuse a sentence in several pairs, and a
    cross-validation split that puts two pairs sharing a sentence on both sides of a fold leaks
    information. Each component is named by the id of its first member, so group ids are
    stable for a given file.

    Args:
      ids: item ids, length N.
      texts: per item, the texts that link it to others (compared after ``strip()``).

    Returns:
      Length-N list of group ids.
    """
    parent = list(range(len(ids)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_seen: dict[str, int] = {}
    for i, item_texts in enumerate(texts):
        for t in item_texts:
            key = t.strip()
            if key in first_seen:
                a, b = find(i), find(first_seen[key])
                # Keep the smaller index as the root so the name is the earliest member.
                parent[max(a, b)] = min(a, b)
            else:
                first_seen[key] = i
    return [ids[find(i)] for i in range(len(ids))]


def group_indices(examples: Iterable[Example]) -> np.ndarray:
    """Integer group label per example, numbered by first appearance.

    Returns:
      int32 array ``[N]``, e.g. the ``groups`` argument of grouped k-fold selection.
    """
    index: dict[str, int] = {}
    return np.asarray([index.setdefault(ex.group, len(index)) for ex in examples], dtype=np.int32)


def score_array(examples: Iterable[Example], aspect: str) -> np.ndarray:
    """Human scores of one aspect as a float64 array ``[N]``; raises naming a missing aspect."""
    out = []
    for ex in examples:
        if aspect not in ex.scores:
            raise KeyError(f"example {ex.id!r} has no score {aspect!r} (has {sorted(ex.scores)})")
        out.append(ex.scores[aspect])
    return np.asarray(out, dtype=np.float64)
