"""Generated scores (greedy decoding, parse the first number) and prompt log-likelihoods.

`generate_scores` is the baseline the papers compare the probability readout with: the judge
writes its answer, and the first number in it is the score; replies without a usable number
are parse failures, counted (as the contrastive-decoding paper reports them). It reuses the
engine's prefix groups, buckets and the decoder's KV cache: a shared prefix is prefilled once,
each batch of suffixes fills a per-row cache, and greedy decoding continues from it.

`sequence_nll` is the mean per-token negative log-likelihood of texts (log-perplexity), used
to rank the random-number paraphrases by how natural the judge finds them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxjudge.engine.extract import Placement, check_prompts, _positive_int, prefill_prefix
from jaxjudge.engine.plan import ENGINE_CALL_COST, plan_batches, plan_chunks, shared_prefix_length, tokenise
from jaxjudge.engine.progress import Progress
from jaxjudge.models import decoder as _dec
from jaxjudge.prompts import RenderedPrompt, ScoreScale, as_tokenizer

__all__ = ["parse_score", "parse_replies", "generate_scores", "sequence_nll"]

_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)")


def parse_score(text: str, scale: ScoreScale | None = None) -> float:
    """The first number written in ``text``, or NaN when there is none (a parse failure).

    Args:
        text: the judge's reply.
        scale: when given, a number outside ``[scale.lo, scale.hi]`` is a failure too.

    Returns:
        The score as a float, or NaN.
    """
    m = _NUMBER_RE.search(text)
    if m is None:
        return math.nan
    value = float(m.group(0))
    if scale is not None and not (scale.lo <= value <= scale.hi):
        return math.nan
    return value


def generate_scores(
    judge: Any,
    prompts: Sequence[RenderedPrompt],
    scale: ScoreScale,
    max_new_tokens: int = 24,
    *,
    batch_size: int = 16,
    progress: bool = True,
    overflow: str = "truncate",
    prefix_cache: bool = True,
    context_length: int | None = None,
    max_batch_tokens: int = 8192,
    min_prefix_tokens: int = 32,
) -> tuple[list[str], np.ndarray, int]:
    """Greedy replies to the prompts and the scores parsed from them.

    Args:
        judge: a `jaxjudge.models.Judge` (with a mesh set by ``judge.shard``, batches are split
            over its ``data`` axis).
        prompts: ``[N]`` rendered prompts.
        scale: the score scale; a number outside it counts as a parse failure.
        max_new_tokens: tokens generated per prompt (decoding stops early at EOS per row).
        batch_size: prompts per call.
        progress: show a progress bar.
        overflow: context policy, as in `jaxjudge.engine.extract` (room is kept for
            ``max_new_tokens``).
        prefix_cache: prefill each shared prefix once.
        context_length: default the model's ``max_position_embeddings``.
        max_batch_tokens: cap on rows x padded length per call.
        min_prefix_tokens: shorter shared prefixes are not prefilled separately.

    Returns:
        ``(texts [N], parsed [N] float64 with NaN for parse failures, n_failures)``.
    """
    prompts = check_prompts(prompts)
    if not isinstance(scale, ScoreScale):
        raise TypeError(f"scale must be a ScoreScale, got {type(scale).__name__}")
    max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)
    batch_size = _positive_int("batch_size", batch_size)
    ctx = judge.config.max_position_embeddings if context_length is None else _positive_int(
        "context_length", context_length)
    if ctx <= max_new_tokens:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before {max_new_tokens} new tokens")
    tk = tokenise(judge.tokenizer, prompts, limit=ctx - max_new_tokens, overflow=overflow)
    place = Placement(judge.mesh)
    eos = tuple(int(e) for e in judge.config.eos_token_ids)
    replies: dict[int, list[int]] = {}

    def run(idx: list[int], tails: dict[int, list[int]], prefix: _dec.KVCache | None, bar: Progress) -> None:
        order = sorted(idx, key=lambda i: -len(tails[i]))
        for plan in plan_batches([len(tails[i]) for i in order], max_rows=batch_size, max_tokens=max_batch_tokens,
                                  call_cost=ENGINE_CALL_COST):
            batch, t = order[plan.start:plan.stop], plan.length
            b = place.round_rows(plan.rows)
            rows = [tails[j] for j in batch]
            rows += [rows[-1]] * (b - len(rows))
            tokens, mask = _dec.pad_batch(rows, side="left", length=t, pad_id=judge.pad_id)
            cache = place.empty_cache(judge, b, t + max_new_tokens)
            read = np.full((b, 1), t - 1, np.int32)
            logits, cache = _dec.forward(judge.graphdef, judge.state, place.rows(tokens), place.rows(mask),
                                         place.rows(read), None, cache, prefix)
            out, lengths, _ = _dec.generate(judge.graphdef, judge.state, logits[:, 0], cache, jax.random.key(0),
                                            prefix, max_new_tokens=max_new_tokens, temperature=0.0, top_k=None,
                                            eos_ids=eos, pad_id=judge.pad_id)
            out, lengths = np.asarray(out), np.asarray(lengths)
            for r, j in enumerate(batch):
                replies[j] = out[r, : lengths[r]].tolist()
            bar.update(len(batch), sum(len(tk.ids[j]) for j in batch))

    (chunk,) = plan_chunks(tk.group_of, len(prompts))
    with Progress(len(prompts), enabled=progress, desc="generate") as bar:
        flat: list[int] = []
        for piece in chunk.pieces:
            seqs = [tk.ids[i] for i in piece]
            p = shared_prefix_length(seqs) if len(piece) > 1 else 0
            if not prefix_cache or p < min_prefix_tokens:
                flat.extend(int(i) for i in piece)
                continue
            prefix = prefill_prefix(judge, seqs[0][:p], place)
            run([int(i) for i in piece], {int(i): tk.ids[i][p:] for i in piece}, prefix, bar)
        if flat:
            run(flat, {i: tk.ids[i] for i in flat}, None, bar)

    return parse_replies(judge, [replies[i] for i in range(len(prompts))], scale)


def parse_replies(judge: Any, replies: Sequence[Sequence[int]], scale: ScoreScale) -> tuple[list[str], np.ndarray, int]:
    """Reply token ids -> ``(texts, parsed scores with NaN for failures, n_failures)``.

    The second half of `generate_scores`, for replies decoded elsewhere (e.g.
    `jaxjudge.engine.extract` with ``generate_tokens``).
    """
    texts = [judge.decode([int(x) for x in r]) for r in replies]
    parsed = np.asarray([parse_score(t, scale) for t in texts], np.float64)
    return texts, parsed, int(np.isnan(parsed).sum())


def sequence_nll(
    judge: Any,
    texts: Sequence[str | RenderedPrompt],
    *,
    batch_size: int = 16,
    add_special_tokens: bool = True,
    max_batch_tokens: int = 8192,
    progress: bool = False,
) -> np.ndarray:
    """Mean per-token negative log-likelihood (nats) of each text: its log-perplexity.

    Every token after the first is predicted from the ones before it (a BOS, when the
    tokenizer adds one, is context only).

    Args:
        judge: a `jaxjudge.models.Judge`.
        texts: ``[N]`` strings, or rendered prompts (their full text, with their own
            special-token setting).
        batch_size: texts per call.
        add_special_tokens: for plain strings, let the tokenizer add its special tokens.
        max_batch_tokens: cap on rows x padded length per call.
        progress: show a progress bar.

    Returns:
        ``[N]`` float32.

    Raises:
        ValueError: an empty list, a text with fewer than two tokens (nothing to predict), or
            one longer than the model's context (the message names its index).
    """
    if isinstance(texts, (str, RenderedPrompt)):
        raise TypeError("texts must be a sequence of strings, not a single text")
    texts = list(texts)
    if not texts:
        raise ValueError("texts is empty")
    batch_size = _positive_int("batch_size", batch_size)
    tok = as_tokenizer(judge.tokenizer)
    ids = []
    for i, t in enumerate(texts):
        if isinstance(t, RenderedPrompt):
            ids.append(list(tok.encode(t.text, add_special_tokens=t.add_special_tokens).ids))
        elif isinstance(t, str):
            ids.append(list(tok.encode(t, add_special_tokens=add_special_tokens).ids))
        else:
            raise TypeError(f"texts[{i}] is a {type(t).__name__}, not a str or RenderedPrompt")
        if len(ids[-1]) < 2:
            raise ValueError(f"texts[{i}] has {len(ids[-1])} token(s); a log-likelihood needs at least 2")
        if len(ids[-1]) > judge.config.max_position_embeddings:
            raise ValueError(f"texts[{i}] has {len(ids[-1])} tokens, more than the model's context "
                             f"({judge.config.max_position_embeddings})")
    place = Placement(judge.mesh)
    out = np.zeros(len(texts), np.float32)
    order = sorted(range(len(texts)), key=lambda i: -len(ids[i]))
    with Progress(len(texts), enabled=progress, desc="nll") as bar:
        for plan in plan_batches([len(ids[i]) for i in order], max_rows=batch_size, max_tokens=max_batch_tokens,
                                  call_cost=ENGINE_CALL_COST):
            batch, t = order[plan.start:plan.stop], plan.length
            rows = [ids[j] for j in batch]
            rows += [rows[-1]] * (place.round_rows(plan.rows) - len(rows))
            tokens, mask = _dec.pad_batch(rows, side="left", length=t, pad_id=judge.pad_id)
            sums, counts = _dec.sequence_nll(judge.graphdef, judge.state, place.rows(tokens), place.rows(mask))
            sums, counts = np.asarray(sums, np.float64), np.asarray(counts)
            out[batch] = (sums[: len(batch)] / counts[: len(batch)]).astype(np.float32)
            bar.update(len(batch), sum(len(ids[j]) for j in batch))
    return out
