"""Running the position-bias protocol on a judge: prompts, answer-token log-probs, report files.

`pairwise.py` holds the protocol as pure functions on arrays; this module feeds it from a
model. The steps of `run_position_bias`:

1. pairs of same-document items whose human scores differ by at least `min_gap`
   (`pairs_from_examples`, seeded);
2. both orders of every pair rendered with the judge's chat template
   (`pairwise_chat_prompts`); the user message is cut before the first summary, so the chat
   prefix (system turn, instructions, article) is the same for every prompt of one document,
   in both orders;
3. the log-probabilities of the answer tokens ("A", "B") as the first token of the
   assistant reply, normalised over the full vocabulary (`choice_logprobs`);
4. `position_bias` with document-clustered standard errors, plus intervals for every rate
   (`position_bias_table`: clustered Wilson intervals, inside [0, 1]) and an optional length
   check (`pair_length_bias`).

The answer read is `jaxjudge.engine.extract` with the label set as candidates
(``extract(judge, prompts, ("A", "B"))``): the engine's prefix KV cache, length buckets and
on-device log-softmax, one read per prompt at the answer position. `write_position_bias` and
`rescore_position_bias_run` (the report files) are in `jaxjudge.diagnostics.position_files`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxjudge.diagnostics._stats import t_quantile
from jaxjudge.diagnostics.length import LengthBias, length_bias
from jaxjudge.diagnostics.paired import clustered_mean_se
from jaxjudge.diagnostics.pairwise import Pairs, PositionBias, pairs_from_examples, position_bias
from jaxjudge.diagnostics.position_prompts import (
    SUMMARY_PAIRWISE,
    PairwiseTemplate,
    answer_token_ids,
    pairwise_chat_prompts,
)
from jaxjudge.diagnostics.rates import clustered_wilson_interval
from jaxjudge.engine import extract
from jaxjudge.engine.tokens import check_prompts
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import ChatFormat, RenderedPrompt, as_tokenizer, chat_format

__all__ = [
    "ChoiceScores",
    "PositionBiasRun",
    "choice_logprobs",
    "pair_length_bias",
    "position_bias_table",
    "run_position_bias",
]


# ------------------------------------------------------------------------------ scoring


@dataclass(frozen=True)
class ChoiceScores:
    """The judge's next-token log-probabilities of C answer tokens, per prompt.

    Attributes:
      example_ids: [N] prompt ids.
      choices: [C] answer strings.
      choice_ids: [C] int32 their token ids.
      logprobs: [N, C] float32, log p(choice | prompt), normalised over the full vocabulary.
      greedy_ids: [N] int32, the most likely next token.
      n_prompt_tokens: [N] int32 prompt lengths (after any truncation).
      truncated: [N] bool, whether the shared prefix (the article) was cut to fit.
      seconds: wall time of the forward passes, compilation included.
    """

    example_ids: list[str]
    choices: tuple[str, ...]
    choice_ids: np.ndarray
    logprobs: np.ndarray
    greedy_ids: np.ndarray
    n_prompt_tokens: np.ndarray
    truncated: np.ndarray
    seconds: float

    @property
    def valid(self) -> np.ndarray:
        """[N] bool, whether the greedy token is one of the choices."""
        return np.isin(self.greedy_ids, self.choice_ids)

    def take(self, index: Sequence[int] | np.ndarray) -> ChoiceScores:
        """The rows `index`, in that order."""
        index = np.asarray(index, np.int64)
        return dataclasses.replace(
            self, example_ids=[self.example_ids[i] for i in index], logprobs=self.logprobs[index],
            greedy_ids=self.greedy_ids[index], n_prompt_tokens=self.n_prompt_tokens[index],
            truncated=self.truncated[index])


def choice_logprobs(
    judge: Judge,
    prompts: Sequence[RenderedPrompt],
    choices: Sequence[str] = ("A", "B"),
    *,
    batch_size: int = 8,
    max_batch_tokens: int = 4096,
    prefix_cache: bool = True,
    min_prefix_tokens: int = 32,
    overflow: str = "raise",
    context_length: int | None = None,
    progress: bool = False,
) -> ChoiceScores:
    """Log-probabilities of single-token answers (e.g. "A"/"B") after each rendered prompt.

    `jaxjudge.engine.extract` with the choices as its label set: prompts with the same prefix
    text run after one prefill of their common tokens, their suffixes left-padded to a length
    bucket, the answer position read and normalised over the full vocabulary on the device.

    Args:
      judge: a `jaxjudge.models.Judge`.
      prompts: [N] `RenderedPrompt`s with unique example ids.
      choices: the answer strings; each must be one token after every prompt.
      batch_size: most prompts per forward call.
      max_batch_tokens: cap on rows x padded length per call.
      prefix_cache: reuse a shared prefix's KV cache (False: every prompt in full).
      min_prefix_tokens: shorter shared prefixes are run in full instead.
      overflow: ``"raise"`` or ``"truncate"`` for prompts longer than the context (see
        `jaxjudge.engine.tokenise`).
      context_length: the context to fit (default the model's).
      progress: show the engine's progress bar.

    Returns:
      `ChoiceScores` in the order of `prompts`.

    Raises:
      ValueError / TypeError: empty prompts, duplicate ids, bad parameters.
      CandidateTokenizationError: a choice is not one token after some prompt.
      ContextOverflowError: a prompt too long under ``overflow="raise"``.
    """
    prompts = check_prompts(prompts)
    choice_ids = answer_token_ids(judge.tokenizer, prompts, choices)
    start_time = time.perf_counter()
    ext = extract(judge, prompts, tuple(choices), batch_size=batch_size, max_batch_tokens=max_batch_tokens,
                  prefix_cache=prefix_cache, min_prefix_tokens=min_prefix_tokens, overflow=overflow,
                  context_length=context_length, progress=progress, topk=1)
    return ChoiceScores(
        example_ids=list(ext.example_ids), choices=tuple(choices), choice_ids=choice_ids, logprobs=ext.cand_logprobs,
        greedy_ids=ext.greedy_ids, n_prompt_tokens=ext.n_prompt_tokens, truncated=np.asarray(ext.truncated, bool),
        seconds=time.perf_counter() - start_time)


# ------------------------------------------------------------------------------ statistics


TABLE_INTERVALS = ("wilson", "t")
"""Interval kinds of `position_bias_table`; "wilson" is the default."""


def _interval(values: np.ndarray, groups: Sequence, alpha: float, kind: str) -> dict[str, float]:
    """Mean, document-clustered SE and interval of per-pair values in [0, 1]."""
    if kind == "wilson":
        r = clustered_wilson_interval(values, groups, alpha)
        return {"estimate": r.estimate, "se": r.se, "low": r.low, "high": r.high}
    mean, se = clustered_mean_se(values, groups)
    df = len(set(groups)) - 1
    half = t_quantile(1.0 - alpha / 2.0, df) * se
    return {"estimate": mean, "se": se, "low": mean - half, "high": mean + half}


def position_bias_table(bias: PositionBias, human_pref, groups: Sequence, *, alpha: float = 0.05,
                        interval: str = "wilson") -> dict[str, dict[str, float]]:
    """Every rate of `position_bias` as a mean of per-pair values, with a clustered interval.

    Per-pair values: consistency (1 if both orders give the same non-tied verdict), first-slot
    share (share of the pair's two judgements choosing slot A, ties 1/2), and agreement credit
    with the human preference (1 right, 0 wrong, 1/2 tie) for the combined verdict, each single
    order and the order-averaged soft verdict. Their means equal the fields of `bias`.

    Args:
      bias: from `position_bias`.
      human_pref: [P] +1 / -1 human preferences (as given to `position_bias`).
      groups: [P] source-document ids (at least two distinct).
      alpha: 1 - confidence level of the intervals.
      interval: "wilson" (default): Wilson score intervals at the effective sample size implied
        by the document-clustered SE, with the t quantile of documents - 1 degrees of freedom
        (`jaxjudge.diagnostics.clustered_wilson_interval`); always inside [0, 1]. "t": the
        earlier mean +- t * se, kept only to reproduce tables written with it; it leaves
        [0, 1] near the ends (e.g. a consistency of 2 / 240 got [-0.003, 0.020]).

    Returns:
      {name: {"estimate", "se", "low", "high"}} for consistency, first_slot_rate, accuracy,
      accuracy_forward, accuracy_swapped, accuracy_soft; "se" is the clustered standard error.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if interval not in TABLE_INTERVALS:
        raise ValueError(f"interval must be one of {TABLE_INTERVALS}, got {interval!r}")
    h = np.asarray(human_pref, np.int64)
    groups = list(groups)
    vf, vs = bias.verdict_forward, bias.verdict_swapped

    def credit(v: np.ndarray) -> np.ndarray:
        return np.where(v == 0, 0.5, (v == h).astype(np.float64))

    # Slot A chosen: forward item verdict +1, swapped item verdict -1 (ties 1/2).
    first_slot = ((vf + 1) / 2.0 + (1 - vs) / 2.0) / 2.0
    soft = np.sign(bias.prob_first - 0.5).astype(np.int64)
    per_pair = {
        "consistency": ((vf != 0) & (vf == vs)).astype(np.float64),
        "first_slot_rate": first_slot,
        "accuracy": credit(bias.combined),
        "accuracy_forward": credit(vf),
        "accuracy_swapped": credit(vs),
        "accuracy_soft": credit(soft),
    }
    return {name: _interval(v, groups, alpha, interval) for name, v in per_pair.items()}


def pair_length_bias(pairs: Pairs, lengths, prob_first) -> tuple[LengthBias, dict[str, float | int]]:
    """Does the judge's pairwise preference follow the length difference of the two summaries?

    `length_bias` on pairs: the "length" of a pair is len(first) - len(second) in tokens, the
    judge's score the order-averaged probability that `first` wins (`PositionBias.prob_first`),
    and the human score the human preference (+1 / -1). Also the share of decisive judge
    verdicts that favour the longer summary beside the humans' share (pairs of equal length
    left out).

    Args:
      pairs: the pairs.
      lengths: [N] token length of every item (indexed like the items of `pairs`).
      prob_first: [P] judge's probability that `first` wins.

    Returns:
      (LengthBias, {"judge_prefers_longer", "human_prefers_longer", "n_unequal_length"}).
    """
    lengths = np.asarray(lengths, np.float64)
    diff = lengths[pairs.first] - lengths[pairs.second]  # [P]
    pf = np.asarray(prob_first, np.float64)
    lb = length_bias(diff, pf, pairs.human_pref)
    unequal = diff != 0
    longer_first = diff > 0
    judge_decisive = unequal & (pf != 0.5)
    judge_longer = (pf > 0.5) == longer_first
    human_longer = (pairs.human_pref > 0) == longer_first
    extra = {
        "judge_prefers_longer": float(judge_longer[judge_decisive].mean()) if judge_decisive.any() else None,
        "human_prefers_longer": float(human_longer[unequal].mean()) if unequal.any() else None,
        "n_unequal_length": int(unequal.sum()),
    }
    return lb, extra


# ------------------------------------------------------------------------------ the run


@dataclass(frozen=True)
class PositionBiasRun:
    """Everything one position-bias run produced.

    Attributes:
      aspect: the human score the pairs were built from.
      pairs: the P pairs.
      forward, swapped: `ChoiceScores` of the two orders (rows aligned with `pairs`).
      bias: `position_bias` of the two orders against the human preferences.
      table: `position_bias_table` (estimates with clustered intervals).
      length: (`LengthBias`, shares preferring the longer summary), or None if not computed.
      settings: the arguments of the run (for the metadata).
      token_text: {token id: its text} for the greedy tokens seen (for reports).
    """

    aspect: str
    pairs: Pairs
    forward: ChoiceScores
    swapped: ChoiceScores
    bias: PositionBias
    table: dict[str, dict[str, float]]
    length: tuple[LengthBias, dict[str, Any]] | None
    settings: dict[str, Any]
    token_text: dict[int, str] = dataclasses.field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.forward.seconds

    def summary(self) -> dict[str, Any]:
        """The run's figures as JSON-able data (what `write_position_bias` stores)."""
        fwd, swp = self.forward, self.swapped
        n_tokens = np.concatenate([fwd.n_prompt_tokens, swp.n_prompt_tokens])
        out: dict[str, Any] = {
            "aspect": self.aspect,
            "n_pairs": len(self.pairs),
            "n_documents": len(set(self.pairs.group.tolist())),
            "position_bias": _jsonable(self.bias.summary()),
            "intervals": self.table,
            "validity_rate": float(np.concatenate([fwd.valid, swp.valid]).mean()),
            "prompt_tokens": {"mean": float(n_tokens.mean()), "min": int(n_tokens.min()), "max": int(n_tokens.max())},
            "n_truncated": int(np.concatenate([fwd.truncated, swp.truncated]).sum()),
            "human_gap": {"mean": float(self.pairs.gap.mean()), "min": float(self.pairs.gap.min()),
                          "max": float(self.pairs.gap.max())},
            "human_prefers_first": float((self.pairs.human_pref > 0).mean()),
            "greedy_tokens": self.greedy_tokens(),
            "seconds_scoring": self.seconds,
        }
        if self.length is not None:
            lb, extra = self.length
            out["length_bias"] = {**_jsonable(dataclasses.asdict(lb)), **extra}
        return out

    def greedy_tokens(self, top: int = 5) -> list[list[Any]]:
        """The most frequent greedy next tokens over both orders: [[token id, token text, count], ...]."""
        ids, counts = np.unique(np.concatenate([self.forward.greedy_ids, self.swapped.greedy_ids]), return_counts=True)
        order = np.argsort(-counts, kind="stable")[:top]
        return [[int(ids[i]), self.token_text.get(int(ids[i])), int(counts[i])] for i in order]

    def pair_rows(self) -> list[dict[str, Any]]:
        """One record per pair: ids, human preference, both orders' log-probs and verdicts."""
        p, b = self.pairs, self.bias
        rows = []
        for k in range(len(p)):
            rows.append({
                "pair": k, "document": str(p.group[k]), "first_id": str(p.first_id[k]),
                "second_id": str(p.second_id[k]), "human_pref": int(p.human_pref[k]), "gap": float(p.gap[k]),
                "logp_forward_A": float(self.forward.logprobs[k, 0]),
                "logp_forward_B": float(self.forward.logprobs[k, 1]),
                "logp_swapped_A": float(self.swapped.logprobs[k, 0]),
                "logp_swapped_B": float(self.swapped.logprobs[k, 1]),
                "verdict_forward": int(b.verdict_forward[k]), "verdict_swapped": int(b.verdict_swapped[k]),
                "combined": int(b.combined[k]), "prob_first": float(b.prob_first[k]),
            })
        return rows


def _jsonable(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, (np.floating, float)):
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"{k} is {v}; refusing to write a non-finite figure")
        elif isinstance(v, np.integer):
            v = int(v)
        out[k] = v
    return out


def run_position_bias(
    judge: Judge,
    examples: Sequence[Any],
    *,
    aspect: str = "coherence",
    n_pairs: int | None = 200,
    seed: int = 0,
    min_gap: float = 1.0,
    template: PairwiseTemplate = SUMMARY_PAIRWISE,
    chat: ChatFormat | None = None,
    margin: float = 0.0,
    alpha: float = 0.05,
    with_length: bool = True,
    **score_kwargs: Any,
) -> PositionBiasRun:
    """Position bias of a judge on same-document summary pairs, judged in both orders.

    Args:
      judge: a `jaxjudge.models.Judge` with a chat template.
      examples: `Example`s with fields ``document`` and ``summary`` and human ``scores``
        (e.g. `jaxjudge.data.load_summeval`); group = document.
      aspect: which human score defines the preference (and the template's criterion).
      n_pairs: pairs drawn (seeded) from all qualifying ones; None for all.
      seed: seed of `pairs_from_examples` (slot assignment and subsampling).
      min_gap: smallest human score difference of a pair.
      template: the pairwise prompt.
      chat: the `ChatFormat` (default `jaxjudge.prompts.chat_format(judge)`).
      margin: tie margin of `position_bias`.
      alpha: 1 - confidence level of the intervals.
      with_length: also run `pair_length_bias` (lengths in the judge's tokens).
      **score_kwargs: passed to `choice_logprobs` (batch_size, prefix_cache, progress, ...).

    Returns:
      `PositionBiasRun`.
    """
    exs = list(examples)
    for i, ex in enumerate(exs):
        missing = [f for f in ("document", "summary") if f not in ex.fields]
        if missing:
            raise ValueError(f"example {i} ({ex.id!r}) lacks field(s) {missing}; need 'document' and 'summary'")
    if chat is None:
        chat = chat_format(judge)
    pairs = pairs_from_examples(exs, aspect, min_gap=min_gap, n_pairs=n_pairs, seed=seed)
    if len(pairs) == 0:
        raise ValueError(f"no pair of same-document items has a {aspect} gap >= {min_gap}")
    documents = [ex.fields["document"] for ex in exs]
    summaries = [ex.fields["summary"] for ex in exs]
    fwd_prompts, swp_prompts = pairwise_chat_prompts(pairs, documents, summaries, aspect, chat, template=template)
    # One call: both orders of a document share the prefix cache.
    scores = choice_logprobs(judge, fwd_prompts + swp_prompts, template.choices, **score_kwargs)
    p = len(pairs)
    forward, swapped = scores.take(np.arange(p)), scores.take(np.arange(p, 2 * p))
    groups = pairs.group.tolist()
    bias = position_bias(forward.logprobs, swapped.logprobs, pairs.human_pref, groups=groups, margin=margin)
    table = position_bias_table(bias, pairs.human_pref, groups, alpha=alpha)
    length = None
    if with_length:
        used = sorted(set(pairs.first.tolist()) | set(pairs.second.tolist()))
        lengths = np.zeros(len(exs), np.int64)
        enc = as_tokenizer(judge.tokenizer).encode_batch([summaries[i] for i in used], add_special_tokens=False)
        lengths[used] = [len(e.ids) for e in enc]
        length = pair_length_bias(pairs, lengths, bias.prob_first)
    settings = {"aspect": aspect, "n_pairs": n_pairs, "seed": seed, "min_gap": min_gap, "template": template.name,
                "choices": list(template.choices), "answer_token_ids": scores.choice_ids.tolist(), "margin": margin,
                "alpha": alpha, **{k: v for k, v in score_kwargs.items()
                                    if k != "progress" and isinstance(v, (int, float, str, bool))}}
    token_text = {int(t): judge.tokenizer.decode([int(t)], skip_special_tokens=False)
                  for t in np.unique(scores.greedy_ids)}
    return PositionBiasRun(aspect=aspect, pairs=pairs, forward=forward, swapped=swapped, bias=bias, table=table,
                           length=length, settings=settings, token_text=token_text)
