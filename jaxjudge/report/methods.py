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
  (Deb-R, Deb-T, contrastive decoding, contrastive + Deb-T).

A tuned variant whose grid holds a knob the vanilla judge could also use (contrastive
decoding's main-model temperature) names its *matched baseline* (``baseline``): the row that
tunes that knob the same way on the same dev data with the method's own effect switched off
(``temperature``: contrastive decoding at lambda = 0). `evaluate_cell` reports the variant's
paired difference from it beside the one from vanilla.

``kind="parsed"`` families (``generate``, ``contrastive_generate``) score parsed greedy
generations and have no variants. `jaxjudge.report.cell.evaluate_cell` walks `METHODS` in
order.

Temperature convention: a reading at temperature T tempers every input distribution first
(the judge's candidate distribution, and the content-free, batch, dev-marginal, random-number
and assistant distributions a method derives its prior from), then applies the adjustment,
and reads the result with no second temperature. So distribution calibration is
`p_T(y) q(y) / pbar_T(y)` (q enters once), contextual and batch calibration divide by their
prior measured at T, and Deb-R / Deb-T's lambda multiplies `B = log U - log P_random,T` in
log-probability units at every T (the paper's 0.1-1.0 grid). The greedy reading is at T = 1.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.debias import (
    batch_calibration,
    combined_adjust,
    contextual_calibration,
    contrastive_adjust,
    distribution_correction,
    human_prior,
    latent_prior,
    prior_correction,
    rectify,
    rectify_adjust,
)
from jaxjudge.jobs import (
    ContentFreeJob,
    ContrastiveGenerateJob,
    ExtractionJob,
    GenerateJob,
    RandomRJob,
    RandomTJob,
    ScoreJob,
)
from jaxjudge.report.cell_inputs import CellArrays, MethodOptions, RandomPrior
from jaxjudge.select import lambda_grid, lambda_temperature_grid, product_grid

__all__ = [
    "GENERATION",
    "JUDGE_SCORES",
    "METHODS",
    "PARSED",
    "REFERENCE",
    "CellContext",
    "Kind",
    "Method",
    "Need",
    "Role",
    "Variant",
    "cell_needs",
    "check_needs",
    "role_of",
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
      required: whether a cell without it cannot run the method (`check_needs`); an optional
        need is extracted and read when it can be, and the method does without it otherwise.
    """

    kind: type[ExtractionJob]
    into: Callable[[dict[str, Any]], dict[str, Any]]
    has: Callable[[CellArrays], bool]
    assistant: bool = False
    required: bool = True

    def job(self, cfg: Any, judge: str, task: str, aspect: str, scale: str) -> ExtractionJob | None:
        """The need's job in one cell; None when it names an assistant the judge does not have,
        or a job the config cannot run (`ExtractionJob.applies`)."""
        model = cfg.assistant_of(judge) if self.assistant else judge
        if model is None:
            return None
        job = self.kind(model, *((task, aspect) if self.kind.per_task else (None, None)), scale)
        return job if job.applies(cfg) else None

    def describe(self) -> str:
        return ("the assistant's " if self.assistant else "") + f"{self.kind.what} ({self.kind.role} store)"


def _prior(variant: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda r: {"random": {variant: RandomPrior(r["logprobs"], r["nll"])}}


JUDGE_SCORES = Need(ScoreJob, into=lambda r: r, has=lambda a: a.logprobs is not None)
"""The judge's own score arrays: every cell reads them."""
_ASSISTANT_SCORES = Need(ScoreJob, into=lambda r: {"assistant": r["logprobs"]}, has=lambda a: a.assistant is not None,
                         assistant=True)
_RANDOM_T = Need(RandomTJob, into=_prior("T"), has=lambda a: "T" in a.random)
_ASSISTANT_RANDOM_T = Need(RandomTJob, into=lambda r: {"assistant_random": {"T": RandomPrior(r["logprobs"], r["nll"])}},
                           has=lambda a: "T" in (a.assistant_random or {}), assistant=True, required=False)


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
      kind: ``"fixed"``, ``"tuned"`` or ``"parsed"``.
      needs: the extraction jobs (beyond the judge's scores) the cell must have read.
      variants: `CellContext` -> the family's variants, in report order.
      adjust: the tuned family's ``adjust_fn(params, data)`` for `grid_search`.
      params: the tuned family's hyper-parameter names, as reported in ``hparams``.
      rows: config -> the family's row (variant) names, in report order (default: its name);
        read from the config alone, before any array exists.
      parsed: a ``"parsed"`` family's `[N]` parsed scores of a cell (NaN = parse failure).
      role: what the family is to the report's comparisons (`Role`).
    """

    name: str
    kind: str
    needs: tuple[Need, ...] = ()
    variants: Callable[[CellContext], Iterator[Variant]] | None = None
    adjust: Callable | None = None
    params: Callable[[MethodOptions], tuple[str, ...]] | None = None
    rows: Callable[[Any], list[str]] | None = None
    parsed: Callable[[CellArrays], np.ndarray] | None = None
    role: Role = Role.METHOD

    def row_names(self, cfg: Any) -> list[str]:
        """The family's row names under a config (``deb_t`` -> ``deb_t_tp10``, ...)."""
        return [self.name] if self.rows is None else self.rows(cfg)

    @property
    def needs_assistant(self) -> bool:
        """Whether the family reads, or runs, the judge's assistant in ``pairs``."""
        return any(n.assistant or n.kind.uses_assistant for n in self.needs)


def check_needs(method: Method, arrays: CellArrays, labels: Any) -> None:
    """Raise ValueError naming the first need of ``method`` the cell's arrays lack."""
    for need in method.needs:
        if need.required and not need.has(arrays):
            raise ValueError(f"method {method.name!r} needs {need.describe()} for {labels}")


def cell_needs(methods: Any) -> list[Need]:
    """What a cell reads for these method names: the judge's scores, then every configured
    method's needs in `METHODS` order, each once."""
    chosen = set(methods)
    out = [JUDGE_SCORES]
    for m in METHODS.values():
        out += [n for n in m.needs if m.name in chosen and n not in out]
    return out


# -- fixed methods ---------------------------------------------------------------------------------


def _vanilla(cx: CellContext) -> Iterator[Variant]:
    yield Variant("vanilla", fixed=cx.vanilla)


def _contextual(cx: CellContext) -> Iterator[Variant]:
    def fixed(kt: Kind) -> jax.Array:
        cf = jnp.asarray(cx.arrays.content_free) / cx.tau(kt)  # the content-free prior at T
        return jnp.broadcast_to(contextual_calibration(cx.tempered(kt), cf), (cx.f, cx.n, cx.k))

    yield Variant("contextual", fixed=fixed)


def _batch(cx: CellContext) -> Iterator[Variant]:
    def fixed(kt: Kind) -> jax.Array:
        return jnp.stack([batch_calibration(cx.tempered(kt), jnp.asarray(cx.test[i])) for i in range(cx.f)])

    yield Variant("batch", fixed=fixed)


def _distribution(cx: CellContext) -> Iterator[Variant]:
    # p_T(y) * q(y) / pbar_T(y): q (Beta fit on dev labels only) enters once, the judge's
    # marginal pbar is measured on dev at the reading's temperature.
    qs = [human_prior(jnp.asarray(cx.human, jnp.float32), cx.values, jnp.asarray(cx.dev[i])) for i in range(cx.f)]

    def fixed(kt: Kind) -> jax.Array:
        lt = cx.tempered(kt)
        return jnp.stack([rectify(lt, distribution_correction(lt, qs[i], jnp.asarray(cx.dev[i])), 1.0) for i in range(cx.f)])

    yield Variant("distribution", fixed=fixed, hparams=[{"q": [round(float(x), 6) for x in np.asarray(q)]} for q in qs])


# -- tuned methods ---------------------------------------------------------------------------------


def _deb(variant: str) -> Callable[[CellContext], Iterator[Variant]]:
    """Deb-R (``variant="R"``) or Deb-T (``"T"``): one family per random-number prompt set."""
    family = f"deb_{variant.lower()}"

    def variants(cx: CellContext) -> Iterator[Variant]:
        rp, opts = cx.arrays.random[variant], cx.options
        for tp in opts.deb_tp:
            top = jnp.asarray(rp.top(tp))  # [Tp, K]
            cx.aux["priors"].setdefault(variant, {})[f"tp{tp}"] = np.asarray(latent_prior(top)).tolist()  # at T = 1

            def data(kt: Kind, top=top) -> dict[str, jax.Array]:
                # l = the judge's log-probabilities at T; B from P_random measured at T;
                # lambda multiplies B in log-probability units, whatever T is.
                return {"logits": cx.tempered(kt), "correction": prior_correction(latent_prior(top / cx.tau(kt)))}

            grids = [("", opts.lambdas)]
            if opts.lambdas_extended is not None:
                grids.append(("_ext", opts.lambdas_extended))
            for suffix, lams in grids:
                yield Variant(f"{family}_tp{tp}{suffix}", data=data, grid=lambda_grid(lams))

    return variants


def _contrastive_data(cx: CellContext) -> Callable[[Kind], dict[str, jax.Array]]:
    asst = jnp.asarray(cx.arrays.assistant)

    def data(kt: Kind) -> dict[str, jax.Array]:
        # Both models tempered at the reading's T; the grid's own temperature then
        # normalises one model against the other.
        return {"main": cx.logits / cx.tau(kt), "asst": asst / cx.tau(kt)}

    return data


def _contrastive(cx: CellContext) -> Iterator[Variant]:
    opts, data = cx.options, _contrastive_data(cx)
    grid_sets = [("contrastive", opts.contrastive_lams, opts.contrastive_temps, "temperature")]
    if opts.contrastive_fine:
        grid_sets.append(("contrastive_fine", opts.contrastive_lams_fine, opts.contrastive_temps_fine,
                          "temperature_fine"))
    for name, lams, temps, baseline in grid_sets:
        yield Variant(name, data=data, grid=lambda_temperature_grid(lams, temps, name=opts.contrastive_temperature),
                      baseline=baseline)


def _temperature(cx: CellContext) -> Iterator[Variant]:
    """Contrastive decoding's matched baseline: lambda = 0 over the same main-model temperatures.

    The main judge alone (the assistant's place is held by zeros, which lambda = 0 ignores),
    read through the same `contrastive_adjust` and chosen by the same selection code, so that
    contrastive decoding's difference from it is the assistant's effect alone. Where the grid's
    temperature divides the assistant (``t_asst``), the vanilla judge has no such knob and the
    grid is t_main = 1: the vanilla judge itself.
    """
    opts = cx.options

    def data(kt: Kind) -> dict[str, jax.Array]:
        main = cx.logits / cx.tau(kt)
        return {"main": main, "asst": jnp.zeros_like(main)}

    grid_sets = [("temperature", opts.contrastive_temps)]
    if opts.contrastive_fine:
        grid_sets.append(("temperature_fine", opts.contrastive_temps_fine))
    for name, temps in grid_sets:
        temps = temps if opts.contrastive_temperature == "t_main" else (1.0,)
        yield Variant(name, data=data, grid=lambda_temperature_grid((0.0,), temps, name="t_main"))


def _contrastive_deb_t(cx: CellContext) -> Iterator[Variant]:
    opts, cdata_at = cx.options, _contrastive_data(cx)
    rp = cx.arrays.random["T"]
    arp = cx.arrays.assistant_random.get("T")
    for tp in opts.deb_tp:
        # Perplexity is ranked under the main judge: the combination has no sequence NLL.
        idx = rp.top_indices(tp)
        if arp is not None and arp.logprobs.shape != rp.logprobs.shape:
            raise ValueError(
                f"assistant random_t arrays {arp.logprobs.shape} do not match the judge's {rp.logprobs.shape}"
            )
        grid = product_grid(lam=opts.contrastive_lams, **{opts.contrastive_temperature: opts.contrastive_temps},
                            lam_d=opts.lambdas)

        def data(kt: Kind, idx=idx) -> dict[str, jax.Array]:
            cdata = dict(cdata_at(kt), rand_main=jnp.asarray(rp.logprobs[idx]) / cx.tau(kt))
            if arp is not None:
                cdata["rand_asst"] = jnp.asarray(arp.logprobs[idx]) / cx.tau(kt)
            return cdata

        yield Variant(f"contrastive_deb_t_tp{tp}", data=data, grid=grid, baseline="temperature")


def _per_tp(family: str, extended: bool) -> Callable[[Any], list[str]]:
    """Rows of a random-number family: one per Tp (``deb_t_tp10``), and with the extended lambda
    grid on, ``deb_t_tp10_ext`` after each."""
    def rows(cfg: Any) -> list[str]:
        ext = extended and cfg.lambdas_extended is not None
        return [name for tp in cfg.deb_tp for name in (f"{family}_tp{tp}",) + ((f"{family}_tp{tp}_ext",) if ext else ())]
    return rows


def _with_fine(family: str) -> Callable[[Any], list[str]]:
    """Rows of a contrastive-grid family: its own, and ``<family>_fine`` when the fine grid is on."""
    return lambda cfg: [family] + ([f"{family}_fine"] if cfg.contrastive_fine else [])


def _lam_and_temperature(opts: MethodOptions) -> tuple[str, ...]:
    return ("lam", opts.contrastive_temperature)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("vanilla", "fixed", variants=_vanilla, role=Role.REFERENCE),
        # Parsed generations: the judge's greedy reply, and the contrastive (main - lambda *
        # assistant) greedy reply; validity is the parse rate.
        Method("generate", "parsed", parsed=lambda a: a.generated, role=Role.GENERATION, needs=(
            Need(GenerateJob, into=lambda r: {"generated": r["parsed"]}, has=lambda a: a.generated is not None),)),
        Method("contrastive_generate", "parsed", parsed=lambda a: a.contrastive_generated, needs=(
            Need(ContrastiveGenerateJob, into=lambda r: {"contrastive_generated": r["parsed"]},
                 has=lambda a: a.contrastive_generated is not None),)),
        Method("contextual", "fixed", variants=_contextual, role=Role.CALIBRATION, needs=(
            Need(ContentFreeJob, into=lambda r: {"content_free": r["logprobs"]},
                 has=lambda a: a.content_free is not None),)),
        Method("batch", "fixed", variants=_batch, role=Role.CALIBRATION),
        Method("distribution", "fixed", variants=_distribution, role=Role.CALIBRATION),
        Method("deb_r", "tuned", needs=(Need(RandomRJob, into=_prior("R"), has=lambda a: "R" in a.random),),
               variants=_deb("R"), rows=_per_tp("deb_r", extended=True), adjust=rectify_adjust,
               params=lambda opts: ("lam",)),
        Method("deb_t", "tuned", needs=(_RANDOM_T,), variants=_deb("T"), rows=_per_tp("deb_t", extended=True),
               adjust=rectify_adjust, params=lambda opts: ("lam",)),
        Method("temperature", "tuned", variants=_temperature, rows=_with_fine("temperature"),
               adjust=contrastive_adjust, params=lambda opts: ("t_main",)),
        Method("contrastive", "tuned", needs=(_ASSISTANT_SCORES,), variants=_contrastive,
               rows=_with_fine("contrastive"), adjust=contrastive_adjust, params=_lam_and_temperature),
        Method("contrastive_deb_t", "tuned", needs=(_ASSISTANT_SCORES, _RANDOM_T, _ASSISTANT_RANDOM_T),
               variants=_contrastive_deb_t, rows=_per_tp("contrastive_deb_t", extended=False),
               adjust=combined_adjust, params=lambda opts: (*_lam_and_temperature(opts), "lam_d")),
    )
}
"""Every method family, in the order `evaluate_cell` runs them (rows are then sorted into the
configured order)."""


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
