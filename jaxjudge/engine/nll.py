"""Prompt log-likelihood: the mean per-token negative log-likelihood of texts (log-perplexity).

Used to rank the random-number paraphrases by how natural the judge finds them. The texts are
walked with the engine's one loop (`jaxjudge.engine.runner`, one group without a prefix) and
summed on the device by `jaxjudge.engine.calls.token_nll`; `jaxjudge.engine.extract` with
``prompt_nll=True`` gives the same means from its own forward passes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from jaxjudge.engine import calls
from jaxjudge.engine.feed import Lockstep, feed_plan
from jaxjudge.engine.runner import Group, Progress, batches, left_slots, pad_rows
from jaxjudge.engine.tokens import nll_token_span, positive_int
from jaxjudge.models.decoder import pad_batch
from jaxjudge.models.judge import Judge
from jaxjudge.models.sharding import to_host
from jaxjudge.multihost import spans_processes
from jaxjudge.prompts import RenderedPrompt, as_tokenizer

__all__ = ["sequence_nll"]


def sequence_nll(
    judge: Judge,
    texts: Sequence[str | RenderedPrompt],
    *,
    batch_size: int = 16,
    add_special_tokens: bool = True,
    max_batch_tokens: int = 8192,
    progress: bool = False,
) -> np.ndarray:
    """Mean per-token negative log-likelihood (nats) of each text: its log-perplexity.

    Every token after the first is predicted from the ones before it (a BOS, when the
    tokenizer adds one, is context only). For a rendered prompt with an ``nll_span`` the mean
    runs over that span's tokens only, each still conditioned on the whole text before it
    (`jaxjudge.engine.plan.nll_token_span`; NaN if no token overlaps it).

    Args:
        judge: a `jaxjudge.models.Judge`.
        texts: ``[N]`` strings, or rendered prompts (their full text, with their own
            special-token setting and NLL span).
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
    batch_size = positive_int("batch_size", batch_size)
    if spans_processes(judge.mesh):
        return _fed(judge, texts, batch_size=batch_size, add_special_tokens=add_special_tokens,
                    max_batch_tokens=max_batch_tokens, progress=progress)
    tok = as_tokenizer(judge.tokenizer)
    ids, spans = [], []
    for i, t in enumerate(texts):
        if isinstance(t, RenderedPrompt):
            ids.append(list(tok.encode(t.text, add_special_tokens=t.add_special_tokens).ids))
            spans.append(nll_token_span(tok, t, ids[-1]))
        elif isinstance(t, str):
            ids.append(list(tok.encode(t, add_special_tokens=add_special_tokens).ids))
            spans.append((1, len(ids[-1])))
        else:
            raise TypeError(f"texts[{i}] is a {type(t).__name__}, not a str or RenderedPrompt")
        if len(ids[-1]) < 2:
            raise ValueError(f"texts[{i}] has {len(ids[-1])} token(s); a log-likelihood needs at least 2")
        if len(ids[-1]) > judge.config.max_position_embeddings:
            raise ValueError(f"texts[{i}] has {len(ids[-1])} tokens, more than the model's context "
                             f"({judge.config.max_position_embeddings})")
    out = np.zeros(len(texts), np.float32)
    group = Group(list(range(len(texts))), dict(enumerate(ids)), [])
    with Progress(len(texts), enabled=progress, desc="nll") as bar:
        for call in batches([group], functools.partial(calls.prefill_prefixes, judge), batch_size=batch_size, max_batch_tokens=max_batch_tokens):
            batch, t = call.members, call.batch.length
            rows = pad_rows(call.tails, judge.round_rows(call.batch.rows))
            tokens, mask = pad_batch(rows, side="left", length=t, pad_id=judge.pad_id)
            count = None
            if any(spans[j] != (1, len(ids[j])) for j in batch):
                # Left padding: token k of a row of n tokens sits at slot t - n + k and is
                # predicted by the slot before it.
                span = np.asarray(pad_rows([list(spans[j]) for j in batch], len(rows))) - 1
                count = left_slots(np.asarray([len(r) for r in rows]), t, span)
            res = calls.token_nll(judge, tokens, mask, count)
            sums, counts = to_host(res.sums_b).astype(np.float64), to_host(res.counts_b)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[batch] = np.where(counts[: len(batch)] > 0, sums[: len(batch)] / counts[: len(batch)],
                                      np.nan).astype(np.float32)
            bar.update(len(batch), sum(len(ids[j]) for j in batch))
    return out


def _fed(judge: Judge, texts: Sequence[str | RenderedPrompt], *, batch_size: int, add_special_tokens: bool,
         max_batch_tokens: int, progress: bool) -> np.ndarray:
    """`sequence_nll` under a mesh over several processes: each process tokenises and places only
    the texts of its own ``data`` blocks (`jaxjudge.engine.feed`), every text whole, and the
    means reach every process in one gather. A text that is too short or too long stops every
    process, the error naming it as ``texts[i]``."""
    prompts = []
    for i, t in enumerate(texts):
        name = f"texts[{i}]"
        if isinstance(t, RenderedPrompt):
            prompts.append(dataclasses.replace(t, example_id=name, group=name))
        elif isinstance(t, str):
            prompts.append(RenderedPrompt("", t, name, name, add_special_tokens=add_special_tokens))
        else:
            raise TypeError(f"texts[{i}] is a {type(t).__name__}, not a str or RenderedPrompt")
    tk, plan = feed_plan(judge.tokenizer, prompts, judge.mesh, chunk_size=len(prompts),
                         limit=judge.config.max_position_embeddings, overflow="raise", prefix_cache=False,
                         min_prefix_tokens=0, whole=True)
    n_tokens = plan.info[:, 0]  # every text's length, on every process
    short = np.flatnonzero(n_tokens < 2)
    if short.size:
        raise ValueError(f"texts[{short[0]}] has {n_tokens[short[0]]} token(s); a log-likelihood needs at least 2")
    lock = Lockstep((judge,), tk, plan, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    blocks, results = lock.blocks, {}
    spans = {i: nll_token_span(judge.tokenizer, tk.prompts[i], tk.ids[i]) for i in plan.fed_here().tolist()}
    with Progress(len(prompts), enabled=progress, desc="nll") as bar:
        for step, rows, length, _ in lock.steps(0, bar):
            tokens, mask, count = {}, {}, {}
            for b in blocks.mine:
                tails = lock.tails(step, b, rows)
                tokens[b], mask[b] = pad_batch(tails, side="left", length=length, pad_id=judge.pad_id)
                # Left padding: token k of a row of n tokens sits at slot t - n + k and is
                # predicted by the slot before it; a padding row counts nothing.
                span = np.zeros((rows, 2), np.int64)
                for r, j in enumerate(step[b][1] if step[b] else []):
                    span[r] = np.asarray(spans[j]) - 1
                count[b] = left_slots(np.asarray([len(r) for r in tails]), length, span)
            res = calls.token_nll_placed(judge, *(blocks.place(x, rows) for x in (tokens, mask, count)))
            for b in blocks.mine:
                if step[b]:
                    sums, counts = blocks.read(res.sums_b, b), blocks.read(res.counts_b, b)
                    for r, i in enumerate(step[b][1]):
                        results[i] = {"sum": sums[r], "count": counts[r]}
    got = lock.gather(np.arange(len(prompts)), results, [("sum", np.float32, ()), ("count", np.int32, ())])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(got["count"] > 0, got["sum"].astype(np.float64) / got["count"], np.nan).astype(np.float32)
