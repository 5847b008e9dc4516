"""The registry of the two papers' methods: each declared once, with what it adjusts and needs.

A method family (a name of the config's ``methods``) is a `Method`: the extraction jobs it reads
(``needs``: `Need`s of `jaxjudge.jobs` kinds, of the judge or of its assistant; the
extraction plan is their union, and the report reads the stores through the same job objects),
how it is evaluated (``kind``) and its variants. A variant is one row name of the
report (``deb_t_tp10_ext``) with either

* ``fixed``: the adjusted log-probabilities `[F, N, K]` of every fold at a reading, no choice
  to make (vanilla, contextual, batch and distribution calibration), or
* ``data`` and ``grid``: the arrays handed to the family's ``adjust`` function at a reading and
  the hyper-parameter grid `jaxjudge.select.grid_search` chooses from on each fold's dev side
  (Deb-R, Deb-T, contrastive decoding, contrastive + Deb-T, and the linear mix that controls for
  contrastive decoding).

A tuned variant whose grid holds a knob the vanilla judge could also use (contrastive
decoding's main-model temperature) names its *matched baseline* (``baseline``): the row that
tunes that knob the same way on the same dev data with the method's own effect switched off
(``temperature``: contrastive decoding at lambda = 0). `evaluate_cell` reports the variant's
paired difference from it beside the one from vanilla.

``kind="parsed"`` families (``generate``, ``contrastive_generate``) score parsed greedy
generations and have no variants. `jaxjudge.report.cell.evaluate_cell` walks `METHODS` in
order.

Each module of this package (``base`` aside) declares its families in a ``FAMILIES`` tuple;
`METHODS` collects every module's, sorted by `Method.order`. A new method is a new module
here (plus its tests): nothing else names it.

Temperature convention: a reading at temperature T tempers every input distribution first
(the judge's candidate distribution, and the content-free, batch, dev-marginal, random-number
and assistant distributions a method derives its prior from), then applies the adjustment,
and reads the result with no second temperature. So distribution calibration is
`p_T(y) q(y) / pbar_T(y)` (q enters once), contextual and batch calibration divide by their
prior measured at T, and Deb-R / Deb-T's lambda multiplies `B = log U - log P_random,T` in
log-probability units at every T (the paper's 0.1-1.0 grid). The greedy reading is at T = 1.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from jaxjudge.report.methods.base import (
    JUDGE_SCORES,
    CellContext,
    Kind,
    Method,
    MethodKind,
    Need,
    Role,
    Variant,
    check_needs,
)

__all__ = [
    "GENERATION",
    "JUDGE_SCORES",
    "METHODS",
    "PARSED",
    "REFERENCE",
    "CellContext",
    "Kind",
    "Method",
    "MethodKind",
    "Need",
    "Role",
    "Variant",
    "cell_needs",
    "check_needs",
    "role_of",
]


def _collect() -> dict[str, Method]:
    """Every family of this package's modules, sorted by `Method.order`; a name declared twice
    is refused with both modules named."""
    found: list[tuple[Method, str]] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [(m, info.name) for m in getattr(module, "FAMILIES", ())]
    seen: dict[str, str] = {}
    for m, where in found:
        if m.name in seen:
            raise ValueError(f"method {m.name!r} is declared by both {seen[m.name]!r} and {where!r}")
        seen[m.name] = where
    return {m.name: m for m, _ in sorted(found, key=lambda x: (x[0].order, x[0].name))}


METHODS: dict[str, Method] = _collect()
"""Every method family, in the order `evaluate_cell` runs them (rows are then sorted into the
configured order)."""


def cell_needs(methods: Any) -> list[Need]:
    """What a cell reads for these method names: the judge's scores, then every configured
    method's needs in `METHODS` order, each once."""
    chosen = set(methods)
    out = [JUDGE_SCORES]
    for m in METHODS.values():
        out += [n for n in m.needs if m.name in chosen and n not in out]
    return out


def _only(role: Role) -> str:
    (name,) = [m.name for m in METHODS.values() if m.role is role]
    return name


REFERENCE: str = _only(Role.REFERENCE)
"""The row name of the reference judge (vanilla) every method's ``delta`` is taken from."""
GENERATION: str = _only(Role.GENERATION)
"""The row name of the judge's own parsed greedy generation."""
PARSED: frozenset[str] = frozenset(m.name for m in METHODS.values() if m.parsed is not None)
"""The row names of the parsed-generation families (one row per cell, read ``generate``)."""


def role_of(row: str) -> Role:
    """The `Role` of a report row name (``Role.METHOD`` for every tuned variant)."""
    method = METHODS.get(row)
    return Role.METHOD if method is None else method.role
