"""A user's table (JSON Lines, CSV, Parquet) through a field map: the same examples from each
format, and every bad row refused in one line naming the file, the row and the field."""

from __future__ import annotations

import csv
import json

import pytest

from jaxjudge.data import DataError
from jaxjudge.data.table import FieldMap, read_file_task, read_rows, table_columns

ROWS = [
    {"key": "a1", "question": "Why is the sky blue?", "answer": "Rayleigh scattering.", "rating": 9, "topic": "sky",
     "part": "dev"},
    {"key": "a2", "question": "Why is the sky blue?", "answer": "Paint.", "rating": 0, "topic": "sky", "part": "test"},
    {"key": "b1", "question": "What is 2 + 2?", "answer": "4", "rating": 10, "topic": "maths", "part": "test"},
]
FM = FieldMap(text=("question", "answer"), human={"correct": "rating"}, human_range=(0.0, 10.0), id="key",
              group="topic", split="part")


def _write(path, rows, kind):
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif kind == "csv":
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_each_format_gives_the_same_examples(tmp_path, kind):
    path = _write(tmp_path / f"d.{kind}", ROWS, kind)
    examples, labels = read_file_task(FM, path)
    assert [e.id for e in examples] == ["a1", "a2", "b1"]
    assert [e.group for e in examples] == ["sky", "sky", "maths"]
    assert [dict(e.fields) for e in examples] == [{"question": r["question"], "answer": r["answer"]} for r in ROWS]
    assert [e.scores["correct"] for e in examples] == [9.0, 0.0, 10.0]
    assert labels == ["dev", "test", "test"]
    assert table_columns(path) == list(ROWS[0])


def test_defaults_row_number_ids_and_one_group_per_item(tmp_path):
    path = _write(tmp_path / "d.csv", ROWS, "csv")
    fm = FieldMap(text=("Question",), human={"correct": "rating"}, human_range=(0.0, 10.0))
    examples, labels = read_file_task(fm, path)
    assert [e.id for e in examples] == ["1", "2", "3"] and [e.group for e in examples] == ["1", "2", "3"]
    assert labels == ["all"] * 3
    assert dict(examples[0].fields) == {"question": ROWS[0]["question"]}  # placeholders match any case


def test_csv_line_numbers_count_the_header_and_quoted_line_breaks(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('question,rating\n"two\nlines",3\nok,x\n')
    assert [n for n, _ in read_rows(path)] == [2, 4]
    with pytest.raises(DataError) as e:
        read_file_task(FieldMap(("question",), {"a": "rating"}, (0.0, 5.0)), path)
    assert str(e.value) == f"{path}, line 4, field 'rating': non-numeric score 'x'"


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"rating": 11}, "rating", "score 11 outside [0, 10]"),
    ({"rating": "high"}, "rating", "non-numeric score 'high'"),
    ({"topic": ""}, "topic", "empty text"),
    ({"part": "train"}, "part", "split 'train': must be one of ['dev', 'test']"),
    ({"key": "a1"}, "key", "id 'a1' repeats line 1"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, change, field, message):
    rows = [dict(r) for r in ROWS]
    rows[1].update(change)
    path = _write(tmp_path / "d.jsonl", rows, "jsonl")
    with pytest.raises(DataError) as e:
        read_file_task(FM, path)
    assert str(e.value) == f"{path}, line 2, field '{field}': {message}"
    assert "\n" not in str(e.value)


def test_missing_column_and_missing_file(tmp_path):
    path = _write(tmp_path / "d.parquet", [{k: v for k, v in r.items() if k != "topic"} for r in ROWS], "parquet")
    with pytest.raises(DataError, match=r"d\.parquet, line 1, field 'topic': missing field"):
        read_file_task(FM, path)
    with pytest.raises(FileNotFoundError, match="nothere.csv"):
        read_file_task(FM, tmp_path / "nothere.csv")
    with pytest.raises(DataError, match="unknown table format"):
        read_file_task(FM, _write(tmp_path / "d.txt", ROWS, "jsonl"))
