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

Why not `jaxjudge.engine.extract`: its candidates are the labels of a numeric `ScoreScale`, so
arbitrary answer labels such as "A"/"B" cannot be passed through it. `choice_logprobs` uses the
engine's public building blocks instead (`tokenise`, `prefill_prefix`, `score_rows`), i.e. the
same prefix KV cache, left-padded length buckets and on-device log-softmax, with one read per
prompt at the answer position.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.diagnostics._stats import t_quantile
from jaxjudge.diagnostics.length import LengthBias, length_bias
from jaxjudge.diagnostics.paired import clustered_mean_se
from jaxjudge.diagnostics.pairwise import (
    SUMMARY_PAIRWISE,
    Pairs,
    PairwiseTemplate,
    PositionBias,
    pairs_from_examples,
    position_bias,
)
from jaxjudge.diagnostics.rates import clustered_wilson_interval

__all__ = [
    "ChoiceScores",
    "PositionBiasRun",
    "answer_token_ids",
    "choice_logprobs",
    "pair_length_bias",
    "pairwise_chat_prompts",
    "position_bias_table",
    "run_position_bias",
    "rescore_position_bias_run",
    "write_position_bias",
]


# ------------------------------------------------------------------------------ prompts


def pairwise_chat_prompts(pairs: Pairs, documents: Sequence[str], summaries: Sequence[str], aspect: str,
                          chat: Any, *, template: PairwiseTemplate = SUMMARY_PAIRWISE,
                          ) -> tuple[list[Any], list[Any]]:
    """Both orders of every pair as chat-rendered `RenderedPrompt`s, split for prefix caching.

    The chat's system message is replaced by ``template.system``. Example ids are
    ``"<k>:<first_id>|<second_id>:forward"`` / ``":swapped"`` (k the pair's index), groups the
    pair's document.

    Args:
      pairs: from `pairs_from_examples` / `build_pairs`.
      documents: source document of each item (indexed like the items of `pairs`).
      summaries: text of each item, same indexing.
      aspect: aspect name for the template.
      chat: a `jaxjudge.prompts.ChatFormat` (e.g. `jaxjudge.experiment.jobs.chat_format(judge)`).
      template: the pairwise prompt.

    Returns:
      (forward [P], swapped [P]) lists of `RenderedPrompt`; the text of each is the chat for
      ``template.format_user`` of that order.
    """
    from jaxjudge.prompts import RenderedPrompt  # noqa: PLC0415

    chat = dataclasses.replace(chat, system=template.system)
    forward, swapped = [], []
    for k, (f, s) in enumerate(zip(pairs.first.tolist(), pairs.second.tolist(), strict=True)):
        if documents[f] != documents[s]:
            raise ValueError(f"pair {k} (items {f}, {s}) mixes two different documents; check the indexing")
        base = f"{k}:{pairs.first_id[k]}|{pairs.second_id[k]}"
        for out, (a, b), order in ((forward, (f, s), "forward"), (swapped, (s, f), "swapped")):
            head, tail = template.format_user_parts(document=documents[f], summary_a=summaries[a],
                                                    summary_b=summaries[b], aspect=aspect)
            chat_head, chat_tail = chat.render(head, tail)
            out.append(RenderedPrompt(chat_head, chat_tail, f"{base}:{order}", str(pairs.group[k]),
                                      chat.separator, False))
    return forward, swapped


def _ending(text: str) -> str:
    """The last line of a prompt: all a tokenizer's merges can reach of it from an appended answer."""
    cut = text.rfind("\n")
    return text if cut < 0 else text[cut + 1:]


def answer_token_ids(tokenizer: Any, prompts: Sequence[Any], choices: Sequence[str]) -> np.ndarray:
    """The one token each answer string is written as right after every prompt.

    The answer is ``prompt.answer_separator + choice`` appended to the prompt text; its tokens
    are those of prompt + answer beyond the tokens of the prompt alone (checked on the last
    line of each distinct prompt ending, which is where merges could happen).

    Args:
      tokenizer: the judge's tokenizer.
      prompts: `RenderedPrompt`s.
      choices: the answer strings, e.g. ``("A", "B")``.

    Returns:
      int32 [C] token ids, in the order of `choices`.

    Raises:
      CandidateTokenizationError: a choice is not exactly one token of its own after some
        prompt (merged into the prompt, or split into several tokens), or tokenises
        differently after two prompts; the message names the choice and the example.
      ValueError: fewer than two choices, or two choices with the same token.
    """
    from jaxjudge.prompts import CandidateTokenizationError, as_tokenizer  # noqa: PLC0415

    if len(choices) < 2:
        raise ValueError(f"choices needs at least two answers, got {list(choices)}")
    tok = as_tokenizer(tokenizer)
    found: np.ndarray | None = None
    first_example = None
    for key in dict.fromkeys((_ending(p.text), p.answer_separator) for p in prompts):
        context, sep = key
        example = next(p.example_id for p in prompts if (_ending(p.text), p.answer_separator) == key)
        ctx = tok.encode(context, add_special_tokens=False)
        ids = []
        for choice in choices:
            full = tok.encode(context + sep + choice, add_special_tokens=False)
            tail = full.ids[len(ctx.ids):]
            if full.ids[:len(ctx.ids)] != ctx.ids or len(tail) != 1:
                raise CandidateTokenizationError(
                    f"example {example!r}: answer {choice!r} (after separator {sep!r}) is not one token of its own "
                    f"after the prompt ({context[-20:]!r} + {sep + choice!r} -> tokens "
                    f"{full.tokens[max(0, len(ctx.ids) - 1):]}); pick single-token answer labels"
                )
            ids.append(tail[0])
        got = np.asarray(ids, np.int32)
        if found is None:
            found, first_example = got, example
        elif not np.array_equal(found, got):
            raise CandidateTokenizationError(
                f"answers {list(choices)} are tokens {got.tolist()} after example {example!r} but "
                f"{found.tolist()} after example {first_example!r}"
            )
    if found is None:
        raise ValueError("prompts is empty")
    if len(set(found.tolist())) != len(found):
        raise ValueError(f"answers {list(choices)} share a token ({found.tolist()})")
    return found


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


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _tail_bucket(n: int) -> int:
    # Suffixes after a cached prefix are short (two summaries and a question, ~150-350
    # tokens): steps of 64 up to 512 waste little compute while keeping the number of compiled
    # (rows, length, prefix slots) shapes small; beyond, the engine's buckets (4 per octave).
    from jaxjudge.engine import bucket_length  # noqa: PLC0415

    return max(64, -(-n // 64) * 64) if n <= 512 else bucket_length(n)


def choice_logprobs(
    judge: Any,
    prompts: Sequence[Any],
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

    Prompts with the same prefix text are run after one batch-1 prefill of their common
    tokens (`jaxjudge.engine.prefill_prefix`); their suffixes, and prompts without a shared
    prefix, are left-padded to a length bucket and scored ``batch_size`` at a time by
    `jaxjudge.engine.score_rows`, which reads only the last position and normalises over the
    full vocabulary on the device.

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
      progress: print one line per finished prefix group.

    Returns:
      `ChoiceScores` in the order of `prompts`.

    Runs on one device (a judge placed on a mesh is refused; the pairwise protocol's few
    hundred prompts do not need more).

    Raises:
      ValueError / TypeError: empty prompts, duplicate ids, bad parameters, a sharded judge.
      CandidateTokenizationError: a choice is not one token after some prompt.
      ContextOverflowError: a prompt too long under ``overflow="raise"``.
    """
    from jaxjudge.engine.extract import Placement, check_prompts, prefill_prefix, score_rows  # noqa: PLC0415
    from jaxjudge.engine.plan import tokenise  # noqa: PLC0415
    from jaxjudge.models.decoder import pad_batch  # noqa: PLC0415
    from jaxjudge.prompts import common_prefix_length  # noqa: PLC0415

    prompts = check_prompts(prompts)
    for name, value in (("batch_size", batch_size), ("max_batch_tokens", max_batch_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if getattr(judge, "mesh", None) is not None:
        raise ValueError("choice_logprobs runs on one device; load the judge without a mesh")
    choice_ids = answer_token_ids(judge.tokenizer, prompts, choices)
    ctx = judge.config.max_position_embeddings if context_length is None else int(context_length)
    tk = tokenise(judge.tokenizer, prompts, limit=ctx - 1, overflow=overflow)
    place = Placement(None)
    n, c = len(prompts), len(choice_ids)
    logprobs = np.zeros((n, c), np.float32)
    greedy = np.zeros(n, np.int32)

    def run(rows: list[int], seqs: list[list[int]], prefix: Any) -> None:
        t = _tail_bucket(max(len(s) for s in seqs))
        per_call = max(1, min(batch_size, max_batch_tokens // t))
        per_call = 1 << (per_call.bit_length() - 1)  # a power of two: few shapes
        for start in range(0, len(rows), per_call):
            idx, batch = rows[start:start + per_call], seqs[start:start + per_call]
            b = min(per_call, _pow2_at_least(len(batch)))
            tokens, mask = pad_batch(batch + [batch[-1]] * (b - len(batch)), side="left", length=t,
                                     pad_id=judge.pad_id)
            read_b1 = np.full((b, 1), t - 1, np.int32)  # left padding: the last token is at t - 1
            picked, _, top1, _, _ = score_rows(
                judge.graphdef, judge.state, place.rows(tokens), place.rows(mask), place.rows(read_b1),
                place.rows(np.zeros((b, c), np.int32)), place.rows(np.tile(choice_ids, (b, 1))),
                prefix, answer_read=0, topk=1)
            logprobs[idx] = np.asarray(picked)[: len(idx)]
            greedy[idx] = np.asarray(top1)[: len(idx)]

    start_time = time.perf_counter()
    flat: list[int] = []
    n_groups = int(tk.group_of.max()) + 1
    for g in range(n_groups):
        members = np.flatnonzero(tk.group_of == g).tolist()
        seqs = [tk.ids[i] for i in members]
        p = min(common_prefix_length(seqs), min(len(s) for s in seqs) - 1) if len(members) > 1 else 0
        if not prefix_cache or p < min_prefix_tokens:
            flat.extend(members)
            continue
        prefix = prefill_prefix(judge, seqs[0][:p], place)
        order = sorted(range(len(members)), key=lambda j: -len(seqs[j]))
        run([members[j] for j in order], [seqs[j][p:] for j in order], prefix)
        del prefix
        if progress:
            print(f"  group {g + 1}/{n_groups}: prefix {p} tokens, {len(members)} prompts, "
                  f"{time.perf_counter() - start_time:.1f} s", flush=True)
    if flat:
        flat.sort(key=lambda i: -len(tk.ids[i]))
        # Full prompts vary in length more than suffixes do: batch runs of similar length.
        while flat:
            t = _tail_bucket(len(tk.ids[flat[0]]))
            run_rows = [i for i in flat if _tail_bucket(len(tk.ids[i])) == t]
            flat = [i for i in flat if _tail_bucket(len(tk.ids[i])) != t]
            run(run_rows, [tk.ids[i] for i in run_rows], None)
    seconds = time.perf_counter() - start_time
    return ChoiceScores(
        example_ids=[p.example_id for p in tk.prompts], choices=tuple(choices), choice_ids=choice_ids,
        logprobs=logprobs, greedy_ids=greedy,
        n_prompt_tokens=np.asarray([len(x) for x in tk.ids], np.int32), truncated=np.asarray(tk.truncated, bool),
        seconds=seconds)


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
    judge: Any,
    examples: Sequence[Any],
    *,
    aspect: str = "coherence",
    n_pairs: int | None = 200,
    seed: int = 0,
    min_gap: float = 1.0,
    template: PairwiseTemplate = SUMMARY_PAIRWISE,
    chat: Any = None,
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
      chat: the `ChatFormat` (default `jaxjudge.experiment.jobs.chat_format(judge)`).
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
        from jaxjudge.experiment.jobs import chat_format  # noqa: PLC0415

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
        from jaxjudge.prompts import as_tokenizer  # noqa: PLC0415

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


# ------------------------------------------------------------------------------ files


_TABLE_ROWS = (
    ("consistency", "Consistency (same verdict in both orders)"),
    ("first_slot_rate", "First-slot rate (judgements choosing A; 0.5 = neutral)"),
    ("accuracy", "Accuracy vs humans, combined verdict (inconsistent = tie = 1/2)"),
    ("accuracy_forward", "Accuracy vs humans, forward order only"),
    ("accuracy_swapped", "Accuracy vs humans, swapped order only"),
    ("accuracy_soft", "Accuracy vs humans, order-averaged probability"),
)


def _markdown(run: PositionBiasRun, summary: Mapping[str, Any], alpha: float) -> str:
    b = run.bias
    level = round(100 * (1 - alpha))
    lines = [
        f"# Position bias: {summary['n_pairs']} SummEval pairs ({run.aspect}), "
        f"{summary['n_documents']} documents",
        "",
        f"| figure | estimate | SE | {level}% interval |",
        "|---|---|---|---|",
    ]
    for name, label in _TABLE_ROWS:
        r = run.table[name]
        lines.append(f"| {label} | {r['estimate']:.3f} | {r['se']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] |")
    lines += [
        "",
        "Standard errors are clustered by source document; intervals are Wilson score intervals "
        "at the effective sample size those standard errors imply, with the t quantile of "
        f"{summary['n_documents'] - 1} degrees of freedom (they stay inside [0, 1]).",
        "",
        "| other figure | value |",
        "|---|---|",
        f"| tie rate of the combined verdict | {b.tie_rate:.3f} |",
        f"| accuracy among decisive combined verdicts | "
        f"{'n/a' if b.accuracy_decisive is None else f'{b.accuracy_decisive:.3f}'} |",
        f"| inconsistent pairs: A won in both orders / B won in both orders | "
        f"{b.n_inconsistent_first} / {b.n_inconsistent_second} |",
        f"| mean probability mass on the two answer tokens | {b.answer_mass:.3f} |",
        f"| greedy token is A or B (validity) | {summary['validity_rate']:.3f} |",
        "| most frequent greedy tokens (count of " + str(2 * summary["n_pairs"]) + ") | "
        + ", ".join(f"{text!r}: {count}" for _, text, count in summary["greedy_tokens"]) + " |",
        f"| prompt tokens (mean, min-max) | {summary['prompt_tokens']['mean']:.0f} "
        f"({summary['prompt_tokens']['min']}-{summary['prompt_tokens']['max']}) |",
        f"| human score gap (mean, min-max) | {summary['human_gap']['mean']:.2f} "
        f"({summary['human_gap']['min']:.2f}-{summary['human_gap']['max']:.2f}) |",
        f"| scoring time ({2 * summary['n_pairs']} prompts, compilation included) | "
        f"{summary['seconds_scoring']:.0f} s |",
    ]
    if "length_bias" in summary:
        lb = summary["length_bias"]

        def fmt(x: Any) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        lines += [
            "",
            "Length (pairs; length = tokens of first minus second, judge score = order-averaged "
            "P(first wins), human = +1/-1):",
            "",
            "| figure | value |",
            "|---|---|",
            f"| Pearson(length difference, judge) | {fmt(lb['pearson_length'])} |",
            f"| Pearson(length difference, human) | {fmt(lb['human_pearson_length'])} |",
            f"| Pearson(judge, human): raw / length-residual | {fmt(lb['raw_pearson'])} / "
            f"{fmt(lb['residual_pearson'])} |",
            f"| judge prefers the longer summary / humans do | {fmt(lb['judge_prefers_longer'])} / "
            f"{fmt(lb['human_prefers_longer'])} |",
        ]
    return "\n".join(lines) + "\n"


def write_position_bias(run: PositionBiasRun, out_dir: str | os.PathLike,
                        metadata: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Writes ``results.json``, ``results.md``, ``pairs.jsonl`` and ``metadata.json``.

    Args:
      run: from `run_position_bias`.
      out_dir: folder (created).
      metadata: provenance (command, model hash, versions, date); the run's settings are
        added under ``"settings"``.

    Returns:
      {"results_json", "results_md", "pairs", "metadata"}: the paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = run.summary()
    paths = {"results_json": out / "results.json", "results_md": out / "results.md",
             "pairs": out / "pairs.jsonl", "metadata": out / "metadata.json"}
    paths["results_json"].write_text(json.dumps(summary, indent=2) + "\n")
    paths["results_md"].write_text(_markdown(run, summary, run.settings.get("alpha", 0.05)))
    paths["pairs"].write_text("".join(json.dumps(r) + "\n" for r in run.pair_rows()))
    meta = {**(metadata or {}), "settings": run.settings}
    paths["metadata"].write_text(json.dumps(meta, indent=2) + "\n")
    return paths


def rescore_position_bias_run(out_dir: str | os.PathLike, changes: Sequence[str] = ()) -> dict[str, Any]:
    """Recompute a written run's verdicts and intervals from its ``pairs.jsonl``, no model.

    The answer log-probabilities of both orders are in ``pairs.jsonl``, so the verdicts,
    consistency, accuracies and their intervals are recomputed with the current code; the
    figures that need the forward pass (greedy tokens, prompt lengths, timing, length bias)
    are kept from the run's ``results.json``. ``results.json`` and ``results.md`` are
    rewritten; ``pairs.jsonl`` and ``metadata.json`` are left as they are.

    Args:
      out_dir: a folder written by `write_position_bias`.
      changes: what changed since the run's previous version, listed at the end of results.md.

    Returns:
      The new summary (the content of ``results.json``).

    Raises:
      ValueError: the recomputed verdicts differ from the ones the run recorded.
    """
    import types  # noqa: PLC0415

    out = Path(out_dir)
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines() if line.strip()]
    settings = json.loads((out / "metadata.json").read_text())["settings"]
    forward = np.asarray([[r["logp_forward_A"], r["logp_forward_B"]] for r in rows])
    swapped = np.asarray([[r["logp_swapped_A"], r["logp_swapped_B"]] for r in rows])
    human = np.asarray([r["human_pref"] for r in rows])
    groups = [r["document"] for r in rows]
    bias = position_bias(forward, swapped, human, groups=groups, margin=settings["margin"])
    summary = json.loads((out / "results.json").read_text())
    recorded = summary.get("position_bias", {})
    changed = [k for k, v in bias.summary().items() if k in recorded and recorded[k] != v]
    if changed:
        raise ValueError(f"{out}: recomputed figures {changed} differ from results.json; the pairs file "
                         "does not belong to this run")
    table = position_bias_table(bias, human, groups, alpha=settings["alpha"])
    summary["intervals"] = table
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    view = types.SimpleNamespace(bias=bias, table=table, aspect=summary["aspect"])
    md = _markdown(view, summary, settings["alpha"])
    if changes:
        md += "\nChanged since the previous version (recomputed from pairs.jsonl, no forward pass):\n\n"
        md += "".join(f"- {c}\n" for c in changes)
    (out / "results.md").write_text(md)
    return summary
