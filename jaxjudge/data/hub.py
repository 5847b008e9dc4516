"""Optional access to the Hugging Face hub through `datasets` (not a hard dependency).

Offline machines and CI use the local JSON Lines copies; this module only matters when a user
asks a loader for ``source="hub"``. Rows fetched from the hub go through the same validation
as file rows, with a ``hf://datasets/<name>[<config>]:<split>`` pseudo-path and the 1-based row
number in error messages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["iter_hub_rows", "hub_path"]


def hub_path(name: str, split: str, config: str | None = None) -> str:
    """The pseudo-path used in error messages for rows of a hub data set."""
    cfg = f"[{config}]" if config else ""
    return f"hf://datasets/{name}{cfg}:{split}"


def iter_hub_rows(name: str, split: str, config: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row_number, row)`` from a hub data set (1-based row numbers).

    Raises:
      ImportError: `datasets` is not installed (it is optional: ``pip install datasets``).
    """
    try:
        import datasets  # noqa: PLC0415  (optional dependency, imported on use)
    except ImportError as e:
        raise ImportError(
            f"loading {name!r} from the hub needs the optional package `datasets` "
            "(pip install datasets); or pass local files instead"
        ) from e
    ds = datasets.load_dataset(name, config, split=split) if config else datasets.load_dataset(name, split=split)
    for i, row in enumerate(ds, start=1):
        yield i, dict(row)
