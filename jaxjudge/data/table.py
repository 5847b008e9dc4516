"""A user's data set as a table file: JSON Lines, CSV or Parquet, local or ``gs://``.

`read_rows(path)` yields ``(row_number, row)`` for each row of a file chosen by its suffix
(``.jsonl``/``.json``/``.ndjson``, ``.csv``/``.tsv``, ``.parquet``; ``.gz`` ok for the text
formats). Row numbers are the file's 1-based line for JSON Lines and CSV (the header is line 1,
so the first data row of a CSV is line 2) and the 1-based row for Parquet, so an error points at
the place to open.

`read_file_task(fields, path)` turns the rows into `Example` records through a `FieldMap`: the
text fields a template uses, the human score field per aspect and its range, and the optional
id, group and split columns. Every row is checked before any forward pass; the first bad one
raises `DataError` naming the file, row and field, in one line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jaxjudge.data.example import DataError, Example, RowReader, _open_text, iter_jsonl
from jaxjudge.store.location import location

__all__ = ["FILE_SPLITS", "FieldMap", "TABLE_SUFFIXES", "read_file_task", "read_rows", "table_columns"]

TABLE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv", ".tsv", ".parquet")

FILE_SPLITS = ("dev", "test")
"""The values a split column may hold: the rows hyper-parameters are chosen on, and the rows
reported."""


def _kind(path: Any) -> str:
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix in TABLE_SUFFIXES:
        if name.endswith(suffix):
            return suffix.lstrip(".")
    raise DataError(path, None, None, f"unknown table format; name the file with one of {', '.join(TABLE_SUFFIXES)}")


def _csv_rows(path: Any, delimiter: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with _open_text(path) as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise DataError(path, None, None, "no header row (the file is empty)")
        start, rows = reader.line_num + 1, 0
        for row in reader:
            if None in row:  # more cells than the header names
                raise DataError(path, start, None, f"{len(reader.fieldnames) + len(row[None])} cells, the header "
                                                   f"names {len(reader.fieldnames)}")
            rows += 1
            yield start, row
            start = reader.line_num + 1
        if not rows:
            raise DataError(path, None, None, "no rows below the header")


def _parquet_rows(path: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    # pyarrow is imported here, not at module level: it costs ~0.3 s to import and only Parquet
    # files need it.
    import pyarrow.parquet as pq

    with path.open("rb") as f:
        table = pq.read_table(io.BytesIO(f.read()))
    if table.num_rows == 0:
        raise DataError(path, None, None, "no rows")
    for i, row in enumerate(table.to_pylist(), start=1):
        yield i, row


def read_rows(path: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row_number, row)`` for each row of a JSON Lines, CSV or Parquet file (local or ``gs://``).

    Raises:
      FileNotFoundError: the file does not exist (the message names it).
      DataError: an unknown suffix, a malformed row, or a file without rows.
    """
    path = location(path, "data file").expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    kind = _kind(path)
    if kind in ("jsonl", "json", "ndjson"):
        return iter_jsonl(path)
    if kind in ("csv", "tsv"):
        return _csv_rows(path, "\t" if kind == "tsv" else ",")
    return _parquet_rows(path)


def table_columns(path: Any) -> list[str]:
    """The column names of a table file: its header (CSV), schema (Parquet) or first row (JSON Lines)."""
    for _, row in read_rows(path):
        return list(row)
    return []


@dataclass(frozen=True)
class FieldMap:
    """How a table's columns become `Example` records.

    Attributes:
      text: the text columns the templates use.
      human: aspect -> the column holding its human score.
      human_range: ``(lo, hi)`` every human score must lie in.
      id: the column of unique item ids; None: the row number.
      group: the column of group ids (items resampled and split together); None: each item its
        own group.
      split: the column of data splits (each value one of `FILE_SPLITS`); None: no split column.
    """

    text: tuple[str, ...]
    human: Mapping[str, str]
    human_range: tuple[float, float]
    id: str | None = None
    group: str | None = None
    split: str | None = None


def _cell_text(r: RowReader, name: str) -> str:
    """A text cell; numbers (Parquet, JSON) are written as text, an empty cell is an error."""
    value = r.row.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = f"{value:g}" if isinstance(value, float) else str(value)
        r = RowReader(r.path, r.line, {name: value})
    return r.text(name)


def _text_columns(path: Any, line: int, row: Mapping[str, Any], fm: FieldMap) -> dict[str, str]:
    """Text field -> its column: the same name, else the one equal but for case (a template's
    ``{{Question}}`` fills from a ``question`` column). Raises naming a missing column."""
    lowered = {str(k).lower(): k for k in row}
    out = {}
    for name in fm.text:
        column = name if name in row else lowered.get(name.lower())
        if column is None:
            raise DataError(path, line, name, f"missing field (the file has {list(row)})")
        out[name] = column
    for name in [*fm.human.values(), *(c for c in (fm.id, fm.group, fm.split) if c is not None)]:
        if name not in row:
            raise DataError(path, line, name, f"missing field (the file has {list(row)})")
    return out


def read_file_task(fm: FieldMap, path: Any) -> tuple[list[Example], list[str]]:
    """Read and check every row of a user's table.

    Returns:
      ``(examples, split_labels)``: one `Example` per row in file order (fields: the text
      columns; scores: aspect -> human score), and each row's split value (``"all"`` without a
      split column).

    Raises:
      FileNotFoundError, DataError: naming the file, the row and the field.
    """
    lo, hi = fm.human_range
    examples, labels, seen = [], [], {}
    where = location(path, "data file").expanduser()
    for n, row in read_rows(path):
        r = RowReader(where, n, row)
        columns = _text_columns(where, n, row, fm)
        ident = _cell_text(r, fm.id) if fm.id else str(len(examples) + 1)
        if ident in seen:
            raise r.error(fm.id, f"id {ident!r} repeats line {seen[ident]}")
        seen[ident] = n
        group = _cell_text(r, fm.group) if fm.group else ident
        fields = {column: _cell_text(r, column) for column in columns.values()}
        scores = {aspect: r.score(col, lo, hi) for aspect, col in fm.human.items()}
        if fm.split:
            label = _cell_text(r, fm.split).strip()
            if label not in FILE_SPLITS:
                raise r.error(fm.split, f"split {label!r}: must be one of {list(FILE_SPLITS)}")
            labels.append(label)
        else:
            labels.append("all")
        examples.append(Example(ident, group, fields, scores))
    return examples, labels
