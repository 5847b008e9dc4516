"""`Results`: the rows and figure extras of one report, JSON-able end to end."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jaxjudge.store.location import location

__all__ = ["Results", "FORMAT"]

FORMAT = "jaxjudge-results/1"


@dataclass
class Results:
    """Everything a report computed.

    Attributes:
      experiment: the experiment's name.
      rows: one dict per (judge, task, aspect, scale, method, score reading); see
        `jaxjudge.report.cell.evaluate_cell` for the fields. Every value is JSON-native
        (undefined numbers are None), so rows survive a JSON round trip unchanged.
      aux: one dict per cell with the extras the figures draw (score distributions, the
        random-number priors, metric over each tuned grid).
      notes: documented cuts and caveats (subsets, skipped methods), printed with the tables.
      ranges: statistics over score ranges with intervals (`jaxjudge.report.ranges`).
      endpoints: the primary endpoint and the count of Holm-adjusted secondary comparisons
        (`jaxjudge.report.ranges.endpoints`); empty for results that predate them.
      registration: whether the config's analysis plan was registered before extraction
        (`jaxjudge.store.registration.registration_status`); empty where not known.
      invariance: range invariance measured on items (`jaxjudge.report.invariance`); empty for
        results that predate it.
      items: per-item scores of every cell (`jaxjudge.report.items.cell_items`), written to
        ``items.parquet`` by `jaxjudge.report.write_run`; not part of the JSON (empty after
        `from_dict`).
    """

    experiment: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    aux: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranges: list[dict[str, Any]] = field(default_factory=list)
    endpoints: dict[str, Any] = field(default_factory=dict)
    registration: dict[str, Any] = field(default_factory=dict)
    invariance: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "experiment": self.experiment, "rows": self.rows, "aux": self.aux, "notes": self.notes,
                "ranges": self.ranges, "endpoints": self.endpoints,
                **({"registration": self.registration} if self.registration else {}),
                **({"invariance": self.invariance} if self.invariance else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Results:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a results file: format {d.get('format')!r}, expected {FORMAT!r}")
        return cls(experiment=d["experiment"], rows=list(d["rows"]), aux=list(d["aux"]), notes=list(d.get("notes", [])),
                   ranges=list(d.get("ranges", [])), endpoints=dict(d.get("endpoints", {})),
                   registration=dict(d.get("registration", {})), invariance=list(d.get("invariance", [])))

    def save_json(self, path: str | os.PathLike) -> Path:
        path = location(path, "results file")
        path.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load_json(cls, path: str | os.PathLike) -> Results:
        return cls.from_dict(json.loads(location(path, "results file").read_text(encoding="utf-8")))

    def select(self, **where: Any) -> list[dict[str, Any]]:
        """Rows whose fields equal every given value, e.g. ``select(method="vanilla", scale="1-5")``."""
        return [r for r in self.rows if all(r.get(k) == v for k, v in where.items())]
