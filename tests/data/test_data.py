"""Data loaders: counts and values against the raw files, grouping, malformed rows, hub schemas."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import types
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.data import (
    HELPSTEER2_ASPECTS,
    SUMMEVAL_ASPECTS,
    SUMMEVAL_DEV_DOC_IDS,
    SUMMEVAL_SUBSET_DOC_IDS,
    DataError,
    Example,
    from_prompt_range,
    group_indices,
    load_helpsteer2,
    load_semrel,
    load_stsb,
    load_summeval,
    load_summeval_subset,
    score_array,
    summeval_dev_doc_ids,
    text_hash,
    to_prompt_range,
)
from jaxjudge.data.summeval import (
    select_summeval_subset, summeval_subset_dir, summeval_wide_dir, write_summeval_subset,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
needs_shared = pytest.mark.skipif(not (SHARED / "summeval").is_dir(), reason="../shared/data not present")


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# -- Example ---------------------------------------------------------------------------------------


def test_example_is_read_only_and_validated():
    ex = Example("a", "g", {"summary": "text"}, {"coherence": 3})
    assert ex.scores["coherence"] == 3.0 and isinstance(ex.scores["coherence"], float)
    with pytest.raises(TypeError):
        ex.fields["summary"] = "other"  # type: ignore[index]
    with pytest.raises(AttributeError):
        ex.id = "b"  # type: ignore[misc]
    assert ex == Example("a", "g", {"summary": "text"}, {"coherence": 3.0})
    assert len({ex, Example("a", "g", {"summary": "text"}, {"coherence": 3.0})}) == 1
    with pytest.raises(TypeError, match="id"):
        Example("", "g")
    with pytest.raises(TypeError, match="field 'x'"):
        Example("a", "g", {"x": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="score 'c'"):
        Example("a", "g", {}, {"c": "3"})  # type: ignore[dict-item]


def test_group_indices_and_score_array():
    exs = [Example(f"e{i}", g, {}, {"s": float(i)}) for i, g in enumerate(["b", "a", "b", "c", "a"])]
    np.testing.assert_array_equal(group_indices(exs), [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(score_array(exs, "s"), [0, 1, 2, 3, 4])
    with pytest.raises(KeyError, match="'t'"):
        score_array(exs, "t")


# -- SummEval --------------------------------------------------------------------------------------


@needs_shared
def test_summeval_counts_values_and_groups():
    folder = SHARED / "summeval"
    exs = load_summeval(folder)
    docs = {r["doc_id"]: r for r in read_rows(folder / "summeval_docs.jsonl")}
    raw = read_rows(folder / "summeval_summaries.jsonl")
    assert len(docs) == 100 and len(exs) == 1600
    assert len({e.id for e in exs}) == 1600
    by_group = defaultdict(list)
    for e in exs:
        by_group[e.group].append(e)
    assert len(by_group) == 100 and all(len(v) == 16 for v in by_group.values())
    for e, r in zip(exs, raw, strict=True):
        assert e.id == f"{r['doc_id']}/{r['model_id']}" and e.group == r["doc_id"]
        assert e.fields["summary"] == r["summary_truecased"]
        assert e.fields["document"] == docs[r["doc_id"]]["article"]
        assert e.fields["reference"] == docs[r["doc_id"]]["reference"]
        assert dict(e.scores) == {a: r[a] for a in SUMMEVAL_ASPECTS}
    tokenised = load_summeval(folder, truecased=False)
    assert [e.fields["summary"] for e in tokenised] == [r["summary"] for r in raw]


@needs_shared
def test_summeval_dev_test_split():
    folder = SHARED / "summeval"
    from_file = [line.strip() for line in (folder / "dev_doc_ids.txt").read_text().splitlines() if line.strip()]
    assert summeval_dev_doc_ids(folder) == sorted(from_file) == sorted(SUMMEVAL_DEV_DOC_IDS)
    assert summeval_dev_doc_ids() == list(SUMMEVAL_DEV_DOC_IDS)
    dev = load_summeval(folder, split="dev")
    test = load_summeval(folder, split="test")
    assert len(dev) == 160 and len(test) == 1440
    assert {e.group for e in dev} == set(from_file)
    assert not {e.group for e in dev} & {e.group for e in test}
    with pytest.raises(ValueError, match="split"):
        load_summeval(folder, split="valid")  # type: ignore[arg-type]


def test_summeval_subset_loads_without_shared_data():
    exs = load_summeval_subset()
    assert len(exs) == 64
    assert sorted({e.group for e in exs}) == sorted(SUMMEVAL_SUBSET_DOC_IDS)
    assert all(sum(e.group == g for e in exs) == 16 for g in SUMMEVAL_SUBSET_DOC_IDS)
    size = sum(p.stat().st_size for p in summeval_subset_dir().iterdir())
    assert size < 100_000
    readme = (summeval_subset_dir() / "README.md").read_text()
    assert "MIT" in readme and "CNN/DailyMail" in readme
    for doc_id in SUMMEVAL_SUBSET_DOC_IDS:
        assert doc_id in readme


@needs_shared
def test_summeval_subset_is_reproducible_from_full_data(tmp_path):
    folder = SHARED / "summeval"
    assert select_summeval_subset(folder) == sorted(SUMMEVAL_SUBSET_DOC_IDS)
    # The rule, checked independently: the 4 smallest article lengths.
    docs = read_rows(folder / "summeval_docs.jsonl")
    lengths = sorted(len(d["article"]) for d in docs)
    chosen = {d["doc_id"]: len(d["article"]) for d in docs if d["doc_id"] in SUMMEVAL_SUBSET_DOC_IDS}
    assert sorted(chosen.values()) == lengths[:4]
    write_summeval_subset(folder, tmp_path)
    for name in ("summeval_docs.jsonl", "summeval_summaries.jsonl"):
        assert (tmp_path / name).read_bytes() == (summeval_subset_dir() / name).read_bytes()
    full = {e.id: e for e in load_summeval(folder)}
    for e in load_summeval_subset():
        assert e == full[e.id]


@needs_shared
def test_wide_subset_is_reproducible_from_full_data(tmp_path):
    folder = SHARED / "summeval"
    write_summeval_subset(folder, tmp_path, n_docs=16, per_doc=4)
    for name in ("summeval_docs.jsonl", "summeval_summaries.jsonl"):
        assert (tmp_path / name).read_bytes() == (summeval_wide_dir() / name).read_bytes()
    # The rules, checked independently: the 16 shortest articles; document i of the sorted ids
    # keeps the systems at sorted positions 4i .. 4i + 3 (mod 16).
    docs = read_rows(folder / "summeval_docs.jsonl")
    shortest = sorted(d["doc_id"] for d in sorted(docs, key=lambda d: (len(d["article"]), d["doc_id"]))[:16])
    wide = load_summeval(summeval_wide_dir())
    assert sorted({e.group for e in wide}) == shortest and len(wide) == 64
    systems = sorted({r["model_id"] for r in read_rows(folder / "summeval_summaries.jsonl")})
    assert len(systems) == 16
    for i, doc in enumerate(shortest):
        want = {systems[(4 * i + j) % 16] for j in range(4)}
        assert {e.id.split("/")[-1] for e in wide if e.group == doc} == want
    full = {e.id: e for e in load_summeval(folder)}
    for e in wide:
        assert e == full[e.id]
    assert "MIT" in (summeval_wide_dir() / "README.md").read_text()


# -- STS-B and SemRel ------------------------------------------------------------------------------


def _check_sentence_groups(exs: list[Example]):
    # Independent check of the grouping rule: any two pairs sharing a sentence share a group.
    owner: dict[str, str] = {}
    for e in exs:
        for s in (e.fields["sentence1"].strip(), e.fields["sentence2"].strip()):
            if s in owner:
                assert owner[s] == e.group
            else:
                owner[s] = e.group
    # and a group's name is one of its members.
    ids = {e.id for e in exs}
    assert all(e.group in ids for e in exs)


@needs_shared
@pytest.mark.parametrize("split,count", [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_stsb_counts_and_values(split, count):
    path = SHARED / "stsb" / f"stsb_{split}.jsonl"
    exs = load_stsb(SHARED / "stsb", split)
    raw = read_rows(path)
    assert len(exs) == count == len(raw)
    assert len({e.id for e in exs}) == count
    for e, r in zip(exs, raw, strict=True):
        assert e.id == f"{split}/{r['filename']}/{r['year']}/{r['sid']}"
        assert (e.fields["sentence1"], e.fields["sentence2"]) == (r["sentence1"], r["sentence2"])
        assert e.scores["similarity"] == r["score"]
    _check_sentence_groups(exs)
    pair_groups = load_stsb(SHARED / "stsb", split, group_by="pair")
    assert [e.group for e in pair_groups] == [e.id for e in pair_groups]
    # Shared sentences exist, so sentence grouping merges some pairs.
    assert len({e.group for e in exs}) < count


@needs_shared
@pytest.mark.parametrize("split,count", [("train", 5500), ("dev", 250)])
def test_semrel_counts_and_values(split, count):
    path = SHARED / "semrel2024" / f"semrel_eng_{split}.jsonl"
    exs = load_semrel(SHARED / "semrel2024", split)
    raw = read_rows(path)
    assert len(exs) == count == len(raw)
    for e, r in zip(exs, raw, strict=True):
        assert e.id == r["pair_id"] and e.scores["relatedness"] == r["score"]
    _check_sentence_groups(exs)


def test_semrel_range_mapping_hand_cases():
    np.testing.assert_allclose(to_prompt_range([0.0, 0.64, 1.0], 1, 5), [1.0, 3.56, 5.0])
    np.testing.assert_allclose(to_prompt_range([0.0, 0.5, 1.0], 0, 4), [0.0, 2.0, 4.0])
    np.testing.assert_allclose(from_prompt_range([1.0, 3.56, 5.0], 1, 5), [0.0, 0.64, 1.0])
    # STS-B 0-5 onto 1-10: 2.5 is the midpoint -> 5.5.
    np.testing.assert_allclose(to_prompt_range(2.5, 1, 10, src=(0, 5)), 5.5)
    x = np.random.default_rng(0).uniform(0, 1, 50)
    np.testing.assert_allclose(from_prompt_range(to_prompt_range(x, 3, 7), 3, 7), x)
    with pytest.raises(ValueError, match="lo < hi"):
        to_prompt_range(x, 5, 1)


# -- HelpSteer2 ------------------------------------------------------------------------------------


def test_helpsteer2_fixture_schema(tmp_path):
    path = FIXTURES / "helpsteer2" / "validation.jsonl"
    raw = read_rows(path)
    exs = load_helpsteer2(path)
    assert len(exs) == 6
    for i, (e, r) in enumerate(zip(exs, raw, strict=True)):
        assert e.id == f"helpsteer2/validation/{i:05d}"
        assert e.fields["prompt"] == r["prompt"] and e.fields["response"] == r["response"]
        assert dict(e.scores) == {a: float(r[a]) for a in HELPSTEER2_ASPECTS}
        assert e.group == text_hash(r["prompt"])
    assert len({e.group for e in exs}) == 3
    # The published layout: a folder holding <split>.jsonl.gz.
    with gzip.open(tmp_path / "validation.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(path.read_text(encoding="utf-8"))
    assert load_helpsteer2(tmp_path) == exs
    assert load_helpsteer2(tmp_path / "validation.jsonl.gz") == exs
    with pytest.raises(FileNotFoundError, match="train"):
        load_helpsteer2(tmp_path, "train")


def test_helpsteer2_rejects_fractional_and_out_of_range_scores(tmp_path):
    row = read_rows(FIXTURES / "helpsteer2" / "validation.jsonl")[0]
    for bad, message in ((2.5, "integer"), (5, "outside"), (-1, "outside")):
        p = tmp_path / "bad.jsonl"
        p.write_text(json.dumps({**row, "verbosity": bad}) + "\n")
        with pytest.raises(DataError, match=message) as info:
            load_helpsteer2(p)
        assert info.value.field == "verbosity" and info.value.line == 1


def test_helpsteer2_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = read_rows(FIXTURES / "helpsteer2" / "validation.jsonl")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "validation.parquet")
    assert load_helpsteer2(tmp_path / "validation.parquet") == load_helpsteer2(FIXTURES / "helpsteer2" / "validation.jsonl")


# -- malformed rows --------------------------------------------------------------------------------

GOOD_SUMMARY = {
    "doc_id": "d1", "model_id": "M0", "summary": "a summary .", "summary_truecased": "A summary.",
    "coherence": 3.0, "consistency": 4.0, "fluency": 5.0, "relevance": 2.0,
}
GOOD_STSB = {"genre": "g", "filename": "f", "year": "2012", "sid": "1", "score": 2.5,
             "sentence1": "A cat sits.", "sentence2": "A cat sat.", "split": "test", "attribution": []}
GOOD_SEMREL = {"pair_id": "ENG-dev-0", "sentence1": "x y", "sentence2": "y z", "score": 0.5, "split": "dev"}
GOOD_HELPSTEER = {"prompt": "p", "response": "r", **{a: 2 for a in HELPSTEER2_ASPECTS}}


def _write_summeval(folder: Path, summary_lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summeval_docs.jsonl").write_text(json.dumps({"doc_id": "d1", "article": "An article."}) + "\n")
    (folder / "summeval_summaries.jsonl").write_text("\n".join(summary_lines) + "\n")
    return folder / "summeval_summaries.jsonl"


def _loader_cases():
    """(name, good row, text field, score field, write-and-load function)."""

    def summeval(tmp, lines):
        path = _write_summeval(tmp / "summeval", lines)
        return path, lambda: load_summeval(tmp / "summeval")

    def stsb(tmp, lines):
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / "stsb_test.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path, lambda: load_stsb(tmp, "test")

    def semrel(tmp, lines):
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / "semrel_eng_dev.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path, lambda: load_semrel(tmp, "dev")

    def helpsteer(tmp, lines):
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / "validation.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path, lambda: load_helpsteer2(path)

    return [
        ("summeval", GOOD_SUMMARY, "summary_truecased", "coherence", summeval),
        ("stsb", GOOD_STSB, "sentence2", "score", stsb),
        ("semrel", GOOD_SEMREL, "sentence1", "score", semrel),
        ("helpsteer2", GOOD_HELPSTEER, "response", "helpfulness", helpsteer),
    ]


def _variants(good: dict, text_field: str, score_field: str):
    """(case, bad row (dict, or raw line text), expected field, message fragment)."""
    return [
        ("missing field", {k: v for k, v in good.items() if k != text_field}, text_field, "missing field"),
        ("non-numeric score", {**good, score_field: "high"}, score_field, "non-numeric score"),
        ("null score", {**good, score_field: None}, score_field, "missing field"),
        ("bool score", {**good, score_field: True}, score_field, "non-numeric score"),
        ("empty text", {**good, text_field: "   "}, text_field, "empty text"),
        ("invalid JSON", json.dumps(good)[:-3], None, "invalid JSON"),
        ("not an object", "[1, 2]", None, "JSON object"),
    ]


@pytest.mark.parametrize("loader", _loader_cases(), ids=lambda c: c[0])
def test_malformed_rows_name_file_line_and_field(tmp_path, loader):
    name, good, text_field, score_field, write = loader
    # The field that makes a row's id unique, so good rows never collide.
    unique = {"summeval": "model_id", "stsb": "sid", "semrel": "pair_id", "helpsteer2": None}[name]

    def line(row: dict, k: int) -> str:
        return json.dumps({**row, unique: f"{good[unique]}{k}"} if unique else row)

    for case, bad, field, fragment in _variants(good, text_field, score_field):
        bad_line = line(bad, 9) if isinstance(bad, dict) else bad
        # Lines 1-2 good, line 3 blank (skipped but counted), line 4 bad.
        path, load = write(tmp_path / case.replace(" ", "_"), [line(good, 1), line(good, 2), "", bad_line])
        with pytest.raises(DataError) as info:
            load()
        err = info.value
        assert (err.path, err.line, err.field) == (str(path), 4, field), case
        text = str(err)
        assert str(path) in text and "line 4" in text and fragment in text, case
        if field is not None:
            assert f"'{field}'" in text


def test_summeval_unknown_doc_and_duplicate_summary(tmp_path):
    _write_summeval(tmp_path, [json.dumps({**GOOD_SUMMARY, "doc_id": "nope"})])
    with pytest.raises(DataError, match="unknown doc_id") as info:
        load_summeval(tmp_path)
    assert (info.value.line, info.value.field) == (1, "doc_id")
    _write_summeval(tmp_path, [json.dumps(GOOD_SUMMARY)] * 2)
    with pytest.raises(DataError, match="duplicate") as info:
        load_summeval(tmp_path)
    assert info.value.line == 2
    (tmp_path / "summeval_docs.jsonl").write_text(json.dumps({"doc_id": "d1", "article": ""}) + "\n")
    with pytest.raises(DataError, match="empty text") as info:
        load_summeval(tmp_path)
    assert info.value.path.endswith("summeval_docs.jsonl") and info.value.field == "article"


def test_scores_out_of_range(tmp_path):
    path = _write_summeval(tmp_path, [json.dumps({**GOOD_SUMMARY, "fluency": 0.0})])
    with pytest.raises(DataError, match=r"outside \[1, 5\]") as info:
        load_summeval(tmp_path)
    assert info.value.field == "fluency" and info.value.path == str(path)
    p = tmp_path / "stsb_dev.jsonl"
    p.write_text(json.dumps({**GOOD_STSB, "score": "nan"}) + "\n")
    with pytest.raises(DataError, match="non-finite"):
        load_stsb(tmp_path, "dev")
    # A numeric string (as in CSV-derived copies) is a number.
    p.write_text(json.dumps({**GOOD_STSB, "score": "4.2"}) + "\n")
    assert load_stsb(tmp_path, "dev")[0].scores["similarity"] == 4.2


def test_missing_files_and_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="summeval_docs.jsonl"):
        load_summeval(tmp_path)
    with pytest.raises(ValueError, match="data_dir"):
        load_summeval()
    with pytest.raises(ValueError, match="split"):
        load_stsb(tmp_path, "validation")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group_by"):
        (tmp_path / "stsb_test.jsonl").write_text(json.dumps(GOOD_STSB) + "\n")
        load_stsb(tmp_path, "test", group_by="doc")  # type: ignore[arg-type]


# -- the hub branch, exercised offline with a stand-in `datasets` module --------------------------


@pytest.fixture
def fake_datasets(monkeypatch):
    tables: dict[tuple, list[dict]] = {}
    calls = []

    def load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return tables[(name, config, split)]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return tables, calls


def test_hub_helpsteer2_and_pairs(fake_datasets):
    tables, calls = fake_datasets
    rows = read_rows(FIXTURES / "helpsteer2" / "validation.jsonl")
    tables[("nvidia/HelpSteer2", None, "validation")] = rows
    assert load_helpsteer2(source="hub") == load_helpsteer2(FIXTURES / "helpsteer2" / "validation.jsonl")
    stsb_row = {"split": "test", "genre": "g", "dataset": "MSRvid", "year": "2012test", "sid": "0024",
                "score": 2.5, "sentence1": "A girl is styling her hair.", "sentence2": "A girl is brushing her hair."}
    tables[("mteb/stsbenchmark-sts", None, "validation")] = [stsb_row]
    (ex,) = load_stsb(split="dev", source="hub")
    assert ex.id == "dev/MSRvid/2012test/0024" and ex.scores["similarity"] == 2.5
    tables[("SemRel/SemRel2024", "eng", "dev")] = [{"sentence1": "a b", "sentence2": "b c", "label": 0.25}]
    (ex,) = load_semrel(split="dev", source="hub")
    assert ex.id == "ENG-dev-0000" and ex.scores["relatedness"] == 0.25
    # Hub rows are validated like file rows, with a pseudo-path and the row number.
    tables[("SemRel/SemRel2024", "eng", "train")] = [{"sentence1": "a", "sentence2": "b", "label": 0.5},
                                                     {"sentence1": "a", "sentence2": "", "label": 0.5}]
    with pytest.raises(DataError, match="empty text") as info:
        load_semrel(split="train", source="hub")
    assert info.value.path == "hf://datasets/SemRel/SemRel2024[eng]:train" and info.value.line == 2


def test_hub_summeval(fake_datasets):
    tables, _ = fake_datasets
    row = {"id": "dm-test-x", "text": "Article text.", "machine_summaries": ["s one .", "s two ."],
           "human_summaries": ["h"], "coherence": [1.0, 5.0], "consistency": [2.0, 4.0],
           "fluency": [3.0, 3.0], "relevance": [4.0, 2.0]}
    tables[("mteb/summeval", None, "test")] = [row]
    exs = load_summeval(source="hub", truecased=False)
    assert [e.id for e in exs] == ["dm-test-x/S00", "dm-test-x/S01"]
    assert exs[1].fields["summary"] == "s two ." and dict(exs[1].scores) == {
        "coherence": 5.0, "consistency": 4.0, "fluency": 3.0, "relevance": 2.0}
    with pytest.raises(ValueError, match="truecased"):
        load_summeval(source="hub")
    tables[("mteb/summeval", None, "test")] = [{**row, "fluency": [3.0]}]
    with pytest.raises(DataError, match="fluency"):
        load_summeval(source="hub", truecased=False)


def test_hub_without_datasets_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match="pip install datasets"):
        load_helpsteer2(source="hub")


def test_fixture_copy_is_independent(tmp_path):
    # Loading must not depend on the file name for jsonl: a renamed copy gives the split name.
    shutil.copy(FIXTURES / "helpsteer2" / "validation.jsonl", tmp_path / "train.jsonl")
    assert load_helpsteer2(tmp_path / "train.jsonl")[0].id == "helpsteer2/train/00000"


# -- empty files and empty splits are errors, never empty data sets --------------------------------


@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["zero bytes", "blank lines"])
@pytest.mark.parametrize("loader", _loader_cases(), ids=lambda c: c[0])
def test_empty_data_file_is_an_error_naming_it(tmp_path, loader, content):
    name, good, text_field, score_field, write = loader
    path, load = write(tmp_path / name, ["x"])
    path.write_text(content)
    with pytest.raises(DataError, match="no rows") as info:
        load()
    assert info.value.path == str(path) and str(info.value).startswith(f"{path}: ")


def test_empty_summeval_docs_file_and_empty_split(tmp_path):
    path = _write_summeval(tmp_path / "a", [json.dumps(GOOD_SUMMARY)])
    (path.parent / "summeval_docs.jsonl").write_text("")
    with pytest.raises(DataError, match=r"summeval_docs\.jsonl: no rows"):
        load_summeval(path.parent)
    path = _write_summeval(tmp_path / "b", [json.dumps(GOOD_SUMMARY)])
    (path.parent / "dev_doc_ids.txt").write_text("d1\n")  # every document is a dev document
    assert len(load_summeval(path.parent, split="dev")) == 1
    with pytest.raises(DataError, match=r"summeval_summaries\.jsonl: split 'test' holds no summary"):
        load_summeval(path.parent, split="test")


def test_empty_stsb_test_file_through_the_task_loader(tmp_path):
    from jaxjudge.data import load_task_data
    from jaxjudge.experiment import TaskSpec

    folder = tmp_path / "stsb"
    folder.mkdir()
    row = json.dumps(GOOD_STSB)
    (folder / "stsb_dev.jsonl").write_text(row + "\n")
    (folder / "stsb_test.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match=r"stsb_test\.jsonl: no rows"):
        load_task_data(TaskSpec("stsb", ("similarity",), data=str(folder), split="original"))
