"""What a method family is made of: its needs, its variants, the cell context they read.

The families themselves live in the sibling modules of this package, one topic each; the
package's ``__init__`` collects them into `METHODS`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.jobs import ContentFreeJob, ExtractionJob, RandomTJob, ScoreJob
from jaxjudge.report.cell_inputs import CellArrays, MethodOptions, RandomPrior

__all__ = [
    "ASSISTANT_SCORES",
    "CONTENT_FREE",
    "CONTROL_SCORES",
    "JUDGE_SCORES",
    "RANDOM_T",
    "CellContext",
    "Kind",
    "Method",
    "MethodKind",
    "Need",
    "Role",
    "Variant",
    "check_needs",
    "per_tp_rows",
    "random_prior_into",
]

Kind = tuple[str, "float | None"]
"""A reading: ``("expected@0.2", 0.2)`` or ``("greedy", None)`` (see `score_kinds`)."""


@dataclass(frozen=True)
class Need:
    """One extraction job a method reads in every cell, and where its arrays go.

    Attributes:
      kind: the job kind (`jaxjudge.jobs`).
      into: the kind's `read` output -> `CellArrays` fields (a dict value is merged into the
        field's dict, so R and T priors share ``random``).
      has: whether a cell's arrays hold what this need fills.
      assistant: the job of the judge's assistant (``pairs``) instead of the judge's own.
      control: the job of the judge's other-family assistant (``control_pairs``) instead.
      required: whether a cell without it cannot run the method (`check_needs`); an optional
        need is extracted and read when it can be, and the method does without it otherwise.
    """

    kind: type[ExtractionJob]
    into: Callable[[dict[str, Any]], dict[str, Any]]
    has: Callable[[CellArrays], bool]
    assistant: bool = False
    required: bool = True
    control: bool = False

    def job(self, cfg: Any, judge: str, task: str, aspect: str, scale: str) -> ExtractionJob | None:
        """The need's job in one cell; None when it names an assistant the judge does not have,
        or a job the config cannot run (`ExtractionJob.applies`)."""
        if self.control:
            model = cfg.control_of(judge)
        else:
            model = cfg.assistant_of(judge) if self.assistant else judge
        if model is None:
            return None
        if self.kind.per_task:
            job = self.kind(model, task, aspect, scale, cfg.task(task).template(aspect))
        else:
            job = self.kind(model, None, None, scale)
        return job if job.applies(cfg) else None

    def describe(self) -> str:
        whose = "the other-family assistant's " if self.control else "the assistant's " if self.assistant else ""
        return whose + f"{self.kind.what} ({self.kind.role} store)"


def random_prior_into(variant: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda r: {"random": {variant: RandomPrior(r["logprobs"], r["nll"])}}


JUDGE_SCORES = Need(ScoreJob, into=lambda r: r, has=lambda a: a.logprobs is not None)
"""The judge's own score arrays: every cell reads them."""
ASSISTANT_SCORES = Need(ScoreJob, into=lambda r: {"assistant": r["logprobs"]}, has=lambda a: a.assistant is not None,
                        assistant=True)
"""The assistant's score arrays (``pairs``): contrastive decoding's and the linear mix's."""
CONTROL_SCORES = Need(ScoreJob, into=lambda r: {"control": r["logprobs"]}, has=lambda a: a.control is not None,
                      control=True)
"""The other-family assistant's score arrays (``control_pairs``): ``contrastive_other``'s."""
CONTENT_FREE = Need(ContentFreeJob, into=lambda r: {"content_free": r["logprobs"]},
                    has=lambda a: a.content_free is not None)
"""The judge's log-probabilities on content-free inputs (contextual calibration's prior)."""
RANDOM_T = Need(RandomTJob, into=random_prior_into("T"), has=lambda a: "T" in a.random)
"""The judge's random-number arrays with the task instruction (Deb-T's prior)."""


@dataclass
class CellContext:
    """What a method's variants read of a cell.

    Attributes:
      arrays: the cell's arrays.
      options: the methods' options.
      human: `[N]` human scores on the prompt's range.
      dev, test: `[F, N]` bool fold masks.
      aux: the report's figure extras; Deb-R / Deb-T record their priors in ``aux["priors"]``.
    """

    arrays: CellArrays
    options: MethodOptions
    human: np.ndarray
    dev: np.ndarray
    test: np.ndarray
    aux: dict[str, Any]

    def __post_init__(self) -> None:
        self.logits = jnp.asarray(self.arrays.logprobs)  # [N, K]
        self.values = self.arrays.scale.values  # [K]
        self.f, self.n, self.k = self.dev.shape[0], self.arrays.n, self.arrays.scale.size

    @staticmethod
    def tau(kind: Kind) -> float:
        """The reading's temperature (1 for the greedy reading)."""
        return 1.0 if kind[1] is None else float(kind[1])

    def tempered(self, kind: Kind) -> jax.Array:
        """`[N, K]` the judge's log-probabilities at the reading's temperature."""
        return jax.nn.log_softmax(self.logits / self.tau(kind), -1)  # [N, K]

    def vanilla(self, kind: Kind) -> jax.Array:
        """`[F, N, K]` the vanilla judge read this way: every other method's baseline."""
        return jnp.broadcast_to(self.tempered(kind), (self.f, self.n, self.k))


@dataclass(frozen=True)
class Variant:
    """One row name of a method family; see the module docstring."""

    name: str
    fixed: Callable[[Kind], jax.Array] | None = None
    data: Callable[[Kind], Any] | None = None
    grid: dict[str, Any] | None = None
    hparams: list[dict[str, Any]] | None = None
    baseline: str | None = None  # the row name of its matched baseline (None: vanilla alone)


class MethodKind(str, enum.Enum):
    """How a family is evaluated: adjusted log-probabilities with nothing to choose (``FIXED``),
    a grid chosen on dev (``TUNED``), or parsed generations (``PARSED``)."""

    FIXED = "fixed"
    TUNED = "tuned"
    PARSED = "parsed"


class Role(enum.Enum):
    """What a family is to the report's comparisons, besides a method of its own.

    A family with a role other than ``METHOD`` has one row, named as the family (checked by
    the registry's tests), so `role_of` reads the role from a row name alone.
    """

    METHOD = enum.auto()
    REFERENCE = enum.auto()  # the vanilla judge: every other row's ``delta`` is from it
    CALIBRATION = enum.auto()  # a calibration baseline: the best one on dev is a comparator
    GENERATION = enum.auto()  # the judge's parsed greedy reply (``relative.vs_generate``)


@dataclass(frozen=True)
class Method:
    """One method family of the config's ``methods``.

    Attributes:
      name: the config name.
      kind: a `MethodKind` (given as its value, ``"fixed"``, ``"tuned"`` or ``"parsed"``).
      needs: the extraction jobs (beyond the judge's scores) the cell must have read.
      variants: `CellContext` -> the family's variants, in report order.
      adjust: the tuned family's ``adjust_fn(params, data)`` for `grid_search`.
      params: the tuned family's hyper-parameter names, as reported in ``hparams``.
      rows: config -> the family's row (variant) names, in report order (default: its name);
        read from the config alone, before any array exists.
      parsed: a ``"parsed"`` family's `[N]` parsed scores of a cell (NaN = parse failure).
      role: what the family is to the report's comparisons (`Role`).
      order: where the family runs among the others (`METHODS` is sorted by it; rows are
        then sorted into the configured order).
      options: the family's own options, a frozen dataclass whose fields have defaults (their
        annotations and ``metadata`` bounds check the config's ``method_options[name]``); its
        variants read them with ``cx.options.family(name, options)``. None: no options.
    """

    name: str
    kind: MethodKind
    needs: tuple[Need, ...] = ()
    variants: Callable[[CellContext], Iterator[Variant]] | None = None
    adjust: Callable | None = None
    params: Callable[[MethodOptions], tuple[str, ...]] | None = None
    rows: Callable[[Any], list[str]] | None = None
    parsed: Callable[[CellArrays], np.ndarray] | None = None
    role: Role = Role.METHOD
    order: float = 0.0
    options: type | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", MethodKind(self.kind))  # a misspelt kind fails here

    def row_names(self, cfg: Any) -> list[str]:
        """The family's row names under a config (``deb_t`` -> ``deb_t_tp10``, ...)."""
        return [self.name] if self.rows is None else self.rows(cfg)

    @property
    def needs_assistant(self) -> bool:
        """Whether the family reads, or runs, the judge's assistant in ``pairs``."""
        return any(n.assistant or n.kind.uses_assistant for n in self.needs)

    @property
    def needs_control(self) -> bool:
        """Whether the family reads the judge's other-family assistant in ``control_pairs``."""
        return any(n.control for n in self.needs)


def check_needs(method: Method, arrays: CellArrays, labels: Any) -> None:
    """Raise ValueError naming the first need of ``method`` the cell's arrays lack."""
    for need in method.needs:
        if need.required and not need.has(arrays):
            raise ValueError(f"method {method.name!r} needs {need.describe()} for {labels}")


def per_tp_rows(family: str, extended: bool) -> Callable[[Any], list[str]]:
    """Rows of a random-number family: one per Tp (``deb_t_tp10``), and with the extended lambda
    grid on, ``deb_t_tp10_ext`` after each."""
    def rows(cfg: Any) -> list[str]:
        ext = extended and cfg.lambdas_extended is not None
        return [name for tp in cfg.deb_tp for name in (f"{family}_tp{tp}",) + ((f"{family}_tp{tp}_ext",) if ext else ())]
    return rows
