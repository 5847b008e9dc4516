"""SummEval (Fabbri et al., 2021): 100 CNN/DailyMail articles x 16 system summaries.

Files (see the shared data README): ``summeval_docs.jsonl`` (doc_id, article, reference, ...),
``summeval_summaries.jsonl`` (doc_id, model_id, summary, summary_truecased and the four expert
mean scores, 1-5 in steps of 1/3) and ``dev_doc_ids.txt`` (10 documents used for grid search;
the other 90 are the test split).

Each summary becomes one `Example`:

- ``id``: ``"<doc_id>/<model_id>"``; ``group``: ``doc_id`` (the 16 summaries of an article
  share the prompt prefix and stay in one cross-validation fold);
- ``fields``: ``document`` (the article as released, untokenised), ``summary`` (truecased by
  default, or the lower-cased tokenised release with ``truecased=False``) and ``reference``
  (the CNN/DailyMail highlights) when the docs file has it;
- ``scores``: ``coherence``, ``consistency``, ``fluency``, ``relevance``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

from jaxjudge.data.example import DataError, Example, RowReader, iter_jsonl
from jaxjudge.data.hub import hub_path, iter_hub_rows

__all__ = [
    "SUMMEVAL_ASPECTS",
    "SUMMEVAL_DEV_DOC_IDS",
    "SUMMEVAL_SUBSET_DOC_IDS",
    "load_summeval",
    "load_summeval_subset",
    "summeval_dev_doc_ids",
    "summeval_subset_dir",
    "select_summeval_subset",
    "rotated_models",
    "summeval_wide_dir",
    "write_summeval_subset",
]

SUMMEVAL_ASPECTS = ("coherence", "consistency", "fluency", "relevance")

# The 10-document development split of the contrastive-decoding paper (dev_doc_ids.txt in the
# shared data). Kept here too so the split works for hub-loaded data and the embedded subset.
SUMMEVAL_DEV_DOC_IDS = (
    "dm-test-03e271b4305517e02c9ead82d57327d32b99102e",
    "dm-test-26e4e19d945cedcb489f28808c730658139c9415",
    "dm-test-4a593dc4c7e0b4d09bfdc66bb315c47b54eb15df",
    "dm-test-5be0a9584b051175d9f4842a143b76385335d96a",
    "dm-test-6372eff07fd3d6f578f90d6115e01747edccc095",
    "dm-test-801763443e6c73e3857039f2223798b2b58bef19",
    "dm-test-d680ebcdcd59fd5ee9b602a06bcd5230c212835b",
    "dm-test-dea0ed2e587495e516ac85056e21a2076a9a993c",
    "dm-test-e428e25bbf8e06643154ce31b7c6fab64c81e857",
    "dm-test-f26d8400ae49b90d109c165d0f44b8f6ca253c08",
)

# The documents of the embedded subset: the 4 shortest articles (by characters, ties by
# doc_id), so the default demo fits a small model's context and runs quickly on a CPU. They
# are produced by `select_summeval_subset` and a test checks that the rule still gives these.
SUMMEVAL_SUBSET_DOC_IDS = (
    "cnn-test-bcdb32ae644040a721da880fff9c1d502048cd8b",
    "dm-test-130ff8f2dfb6ab67861d5924b0ff5acd63c7d8ce",
    "dm-test-46609841ffd23e9c22d1507edf7b176ecc4d834f",
    "dm-test-f5fead94ee884800e84a212cc0edc78b11c4ba9f",
)

_DOCS = "summeval_docs.jsonl"
_SUMMARIES = "summeval_summaries.jsonl"
_DEV_IDS = "dev_doc_ids.txt"
_HUB_NAME = "mteb/summeval"

Split = Literal["all", "dev", "test"]


def summeval_dev_doc_ids(data_dir: str | os.PathLike | None = None) -> list[str]:
    """The 10 development document ids: read from ``data_dir/dev_doc_ids.txt`` if given.

    Args:
      data_dir: folder with ``dev_doc_ids.txt``; None returns the ids built into the package.

    Returns:
      Sorted doc ids.
    """
    if data_dir is None:
        return list(SUMMEVAL_DEV_DOC_IDS)
    path = Path(data_dir) / _DEV_IDS
    ids = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not ids:
        raise ValueError(f"{path}: no document ids")
    return sorted(ids)


def _select_split(examples: list[Example], split: Split, dev_ids: Sequence[str]) -> list[Example]:
    if split == "all":
        return examples
    dev = set(dev_ids)
    present = {ex.group for ex in examples}
    if split == "dev":
        missing = sorted(dev - present)
        if missing:
            raise ValueError(f"SummEval dev split: doc ids not in the data: {missing}")
        return [ex for ex in examples if ex.group in dev]
    if split == "test":
        return [ex for ex in examples if ex.group not in dev]
    raise ValueError(f"split must be 'all', 'dev' or 'test', got {split!r}")


def _read_docs(path: Path) -> dict[str, dict[str, str]]:
    docs: dict[str, dict[str, str]] = {}
    for lineno, row in iter_jsonl(path):
        r = RowReader(path, lineno, row)
        doc_id = r.text("doc_id")
        if doc_id in docs:
            raise r.error("doc_id", f"duplicate doc_id {doc_id!r}")
        entry = {"document": r.text("article")}
        reference = r.optional_text("reference")
        if reference:
            entry["reference"] = reference
        docs[doc_id] = entry
    return docs


def _summary_example(
    r: RowReader, docs: dict[str, dict[str, str]], docs_path: str | Path, truecased: bool, model_id: str | None = None
) -> Example:
    doc_id = r.text("doc_id")
    if doc_id not in docs:
        raise r.error("doc_id", f"unknown doc_id {doc_id!r} (not in {docs_path})")
    model_id = model_id if model_id is not None else r.text("model_id")
    summary = r.text("summary_truecased" if truecased else "summary")
    scores = {aspect: r.score(aspect, 1.0, 5.0) for aspect in SUMMEVAL_ASPECTS}
    return Example(id=f"{doc_id}/{model_id}", group=doc_id, fields={**docs[doc_id], "summary": summary}, scores=scores)


def _load_local(data_dir: Path, truecased: bool) -> list[Example]:
    docs_path, summaries_path = data_dir / _DOCS, data_dir / _SUMMARIES
    docs = _read_docs(docs_path)
    examples: list[Example] = []
    seen: set[str] = set()
    for lineno, row in iter_jsonl(summaries_path):
        r = RowReader(summaries_path, lineno, row)
        ex = _summary_example(r, docs, docs_path, truecased)
        if ex.id in seen:
            raise r.error("model_id", f"duplicate summary {ex.id!r}")
        seen.add(ex.id)
        examples.append(ex)
    return examples


def _load_hub(truecased: bool) -> list[Example]:
    # mteb/summeval: one row per article with 16 machine summaries and per-summary score lists
    # (mean of the 3 experts). It has no system names and no truecased text, so summaries are
    # numbered by position ("<doc_id>/S00"..), which differs from the local model_id ids.
    if truecased:
        raise ValueError("the hub copy of SummEval has no truecased summaries; pass truecased=False")
    path = hub_path(_HUB_NAME, "test")
    examples: list[Example] = []
    for rownum, row in iter_hub_rows(_HUB_NAME, "test"):
        r = RowReader(path, rownum, row)
        doc_id, article = r.text("id"), r.text("text")
        summaries = row.get("machine_summaries")
        if not isinstance(summaries, list) or not summaries:
            raise r.error("machine_summaries", "missing field")
        for aspect in SUMMEVAL_ASPECTS:
            if not isinstance(row.get(aspect), list) or len(row[aspect]) != len(summaries):
                raise r.error(aspect, f"expected a list of {len(summaries)} scores")
        docs = {doc_id: {"document": article}}
        for k, summary in enumerate(summaries):
            flat = {"doc_id": doc_id, "summary": summary, **{a: row[a][k] for a in SUMMEVAL_ASPECTS}}
            examples.append(_summary_example(RowReader(path, rownum, flat), docs, path, False, f"S{k:02d}"))
    return examples


def load_summeval(
    data_dir: str | os.PathLike | None = None,
    *,
    split: Split = "all",
    truecased: bool = True,
    source: Literal["local", "hub"] = "local",
) -> list[Example]:
    """Load SummEval summaries as `Example` records, in file order (grouped by article).

    Args:
      data_dir: folder holding ``summeval_docs.jsonl`` and ``summeval_summaries.jsonl``
        (e.g. ``../shared/data/summeval``); required for ``source="local"``.
      split: ``"all"`` (1,600 summaries), ``"dev"`` (the 10 documents of
        `summeval_dev_doc_ids`) or ``"test"`` (the other 90).
      truecased: use ``summary_truecased`` (default) instead of the lower-cased, tokenised
        ``summary`` release.
      source: ``"local"`` files, or ``"hub"`` (``mteb/summeval`` through `datasets`, which
        only has the tokenised summaries).

    Returns:
      Examples with fields ``document``, ``summary`` (and ``reference`` when present) and
      scores for `SUMMEVAL_ASPECTS`.

    Raises:
      DataError: a malformed row (names file, line and field).
    """
    if source == "local":
        if data_dir is None:
            raise ValueError("load_summeval: data_dir is required for source='local'")
        data_dir = Path(data_dir)
        examples = _load_local(data_dir, truecased)
        dev_ids = summeval_dev_doc_ids(data_dir) if (data_dir / _DEV_IDS).is_file() else list(SUMMEVAL_DEV_DOC_IDS)
    elif source == "hub":
        examples = _load_hub(truecased)
        dev_ids = list(SUMMEVAL_DEV_DOC_IDS)
    else:
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    selected = _select_split(examples, split, dev_ids)
    if not selected:
        where = Path(data_dir) / _SUMMARIES if source == "local" else hub_path(_HUB_NAME, "test")
        raise DataError(where, None, None, f"split {split!r} holds no summary ({len(examples)} in the file, "
                                           f"dev documents {sorted(dev_ids)[:3]}...)")
    return selected


def summeval_subset_dir() -> Path:
    """Folder of the SummEval subset shipped inside the package (see its README)."""
    return Path(str(resources.files("jaxjudge") / "resources" / "summeval_subset"))


def load_summeval_subset(*, truecased: bool = True) -> list[Example]:
    """The embedded SummEval subset: 4 articles x 16 summaries (64 examples), no download.

    The documents are `SUMMEVAL_SUBSET_DOC_IDS` (the 4 shortest articles); provenance and
    licences are in the subset's README.
    """
    return load_summeval(summeval_subset_dir(), truecased=truecased)


WIDE_DOCS, WIDE_PER_DOC = 16, 4
"""The wide embedded subset (the demo's): the 16 shortest articles, 4 summaries of each."""


def summeval_wide_dir() -> Path:
    """Folder of the wide SummEval subset shipped inside the package (16 articles x 4 summaries,
    see its README): enough documents for grouped intervals, at the cost of the 4 x 16 one."""
    return Path(str(resources.files("jaxjudge") / "resources" / "summeval_wide"))


def rotated_models(models: list[str], doc_index: int, per_doc: int) -> list[str]:
    """The wide subset's summary rule: of a document's systems in sorted order, the document
    at position i (its subset's doc ids sorted) keeps the ``per_doc`` starting at
    ``(i * per_doc) mod len(models)``, wrapping around, so every system is kept about equally
    often and no summary is chosen by its scores."""
    ordered = sorted(models)
    start = (doc_index * per_doc) % len(ordered)
    return [ordered[(start + j) % len(ordered)] for j in range(min(per_doc, len(ordered)))]


def select_summeval_subset(data_dir: str | os.PathLike, n_docs: int = 4) -> list[str]:
    """The subset rule: the ``n_docs`` shortest articles by character count, ties by doc_id."""
    docs = _read_docs(Path(data_dir) / _DOCS)
    ranked = sorted(docs, key=lambda d: (len(docs[d]["document"]), d))
    return sorted(ranked[:n_docs])


def write_summeval_subset(data_dir: str | os.PathLike, dest_dir: str | os.PathLike, n_docs: int = 4,
                          per_doc: int | None = None) -> list[str]:
    """Write the embedded-subset files from the full SummEval files (how the package copies were
    made: ``n_docs=4`` the default subset, ``n_docs=16, per_doc=4`` the wide one).

    Only the fields the loader reads are kept (doc_id, article, reference; doc_id, model_id,
    summary, summary_truecased and the four scores), rows in the source order.

    Args:
      per_doc: keep only this many summaries per document (`rotated_models`); None: all.

    Returns:
      The selected doc ids.
    """
    data_dir, dest_dir = Path(data_dir), Path(dest_dir)
    doc_ids = select_summeval_subset(data_dir, n_docs)
    keep = set(doc_ids)
    models: dict[str, list[str]] = {}
    if per_doc is not None:
        for _, row in iter_jsonl(data_dir / _SUMMARIES):
            if row.get("doc_id") in keep:
                models.setdefault(row["doc_id"], []).append(row["model_id"])
        kept = {(d, m) for i, d in enumerate(doc_ids) for m in rotated_models(models.get(d, []), i, per_doc)}
    dest_dir.mkdir(parents=True, exist_ok=True)
    doc_fields = ("doc_id", "article", "reference")
    summary_fields = ("doc_id", "model_id", "summary", "summary_truecased", *SUMMEVAL_ASPECTS)
    for name, fields in ((_DOCS, doc_fields), (_SUMMARIES, summary_fields)):
        lines = []
        for lineno, row in iter_jsonl(data_dir / name):
            if row.get("doc_id") in keep and (per_doc is None or name == _DOCS
                                              or (row["doc_id"], row.get("model_id")) in kept):
                missing = [f for f in fields if f not in row]
                if missing:
                    raise DataError(data_dir / name, lineno, missing[0], "missing field")
                lines.append(json.dumps({f: row[f] for f in fields}, ensure_ascii=False))
        (dest_dir / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return doc_ids
