"""HelpSteer2 (Wang et al., 2024; ``nvidia/HelpSteer2``, CC-BY-4.0).

Published schema: ``train.jsonl.gz`` (20,324 rows) and ``validation.jsonl.gz`` (1,038 rows),
one JSON object per line with ``prompt`` (str; earlier turns of a multi-turn conversation are
inlined with ``<extra_id_1>User``/``<extra_id_1>Assistant`` markers), ``response`` (str) and
five integer ratings 0-4: ``helpfulness``, ``correctness``, ``coherence``, ``complexity``,
``verbosity``. Several responses (usually two) are rated for each prompt.

Each row becomes one `Example`: id ``"helpsteer2/<split>/<row:05d>"`` (0-based row), group =
a hash of the prompt text (so the responses to one prompt share a group, a prompt prefix and
a fold), fields ``prompt`` and ``response``, and the five scores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from jaxjudge.data.example import DataError, Example, RowReader, iter_jsonl, text_hash
from jaxjudge.data.hub import hub_path, iter_hub_rows

__all__ = ["HELPSTEER2_ASPECTS", "load_helpsteer2"]

HELPSTEER2_ASPECTS = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
_HUB_NAME = "nvidia/HelpSteer2"


def _iter_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq  # noqa: PLC0415  (optional dependency)
    except ImportError as e:
        raise ImportError(f"reading {path} needs the optional package `pyarrow`; or use the .jsonl.gz files") from e
    for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield i, row


def _resolve(path: Path, split: str) -> Path:
    if path.is_dir():
        for name in (f"{split}.jsonl.gz", f"{split}.jsonl", f"{split}.parquet"):
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(f"no {split}.jsonl.gz, {split}.jsonl or {split}.parquet in {path}")
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    return path


def _split_name(path: Path) -> str:
    name = path.name
    for ext in (".jsonl.gz", ".jsonl", ".parquet", ".json.gz", ".json"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return path.stem


def load_helpsteer2(
    path: str | os.PathLike | None = None,
    split: str | None = None,
    *,
    source: Literal["local", "hub"] = "local",
) -> list[Example]:
    """Load HelpSteer2 rows as `Example` records.

    Args:
      path: a ``.jsonl``/``.jsonl.gz``/``.parquet`` file, or a folder holding
        ``<split>.jsonl.gz`` (the published layout). Required for local files.
      split: ``"train"`` or ``"validation"``; for a file path it defaults to the file name
        (``validation.jsonl.gz`` -> ``validation``), for a folder or the hub to
        ``"validation"``.
      source: local files, or ``"hub"`` (``nvidia/HelpSteer2`` through `datasets`).

    Returns:
      Examples with fields ``prompt``, ``response`` and integer-valued scores for
      `HELPSTEER2_ASPECTS`, in file order.

    Raises:
      DataError: a malformed row (names file, line and field; scores must be integers 0-4).
    """
    if source == "local":
        if path is None:
            raise ValueError("load_helpsteer2: path is required for source='local'")
        path = Path(path)
        if path.is_dir():
            split = split or "validation"
        file = _resolve(path, split or "")
        split = split or _split_name(file)
        rows = _iter_parquet(file) if file.suffix == ".parquet" else iter_jsonl(file)
        where: str | Path = file
    elif source == "hub":
        split = split or "validation"
        rows = iter_hub_rows(_HUB_NAME, split)
        where = hub_path(_HUB_NAME, split)
    else:
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    examples = []
    for index, (n, row) in enumerate(rows):
        r = RowReader(where, n, row)
        prompt, response = r.text("prompt"), r.text("response")
        scores = {a: r.score(a, 0.0, 4.0, integer=True) for a in HELPSTEER2_ASPECTS}
        examples.append(
            Example(
                id=f"helpsteer2/{split}/{index:05d}",
                group=text_hash(prompt),
                fields={"prompt": prompt, "response": response},
                scores=scores,
            )
        )
    if not examples:
        raise DataError(where, None, None, f"HelpSteer2 split {split!r} has no rows")
    return examples
