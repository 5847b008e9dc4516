"""Generated scores (greedy decoding, parse the first number) and prompt log-likelihoods.

`generate_scores` is the baseline the papers compare the probability readout with: the judge
writes its answer, and the first number in it is the score; replies without a usable number
are parse failures, counted (as the contrastive-decoding paper reports them). It reuses the
engine's prefix groups, buckets and the decoder's KV cache: a shared prefix is prefilled once,
each batch of suffixes fills a per-row cache, and greedy decoding continues from it.

`contrastive_generate_scores` is greedy contrastive decoding (Li et al. 2023, "Contrastive
Decoding") over the full vocabulary: two judges sharing a tokenizer, a main (expert) model and
a smaller assistant (amateur) of the same family, each step decoding the token that maximises

    log_softmax(main / t_main) - lam * log_softmax(assistant / t_asst)

(the temperature normalisation of the score-candidate path, `jaxjudge.debias.contrastive`)
among the plausible tokens, those whose main-model probability is at least ``alpha`` times the
most likely token's (the adaptive plausibility constraint; ``alpha = 0`` turns it off). Each
judge keeps its own prefix and per-row KV caches, as in `generate_scores`; the reply is parsed
like the vanilla generation's. With ``lam = 0`` it is the main judge's greedy generation.

`sequence_nll` is the mean per-token negative log-likelihood of texts (log-perplexity), used
to rank the random-number paraphrases by how natural the judge finds them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxjudge.engine.extract import Placement, check_prompts, _positive_int, prefill_prefix
from jaxjudge.engine.plan import (
    ENGINE_CALL_COST,
    Tokenised,
    nll_token_span,
    plan_batches,
    plan_chunks,
    shared_prefix_length,
    tokenise,
)
from jaxjudge.engine.progress import Progress
from jaxjudge.models import decoder as _dec
from jaxjudge.prompts import RenderedPrompt, ScoreScale, as_tokenizer

__all__ = [
    "parse_score",
    "parse_replies",
    "generate_scores",
    "contrastive_token_scores",
    "contrastive_decode",
    "contrastive_generate",
    "contrastive_generate_scores",
    "sequence_nll",
]

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


def _prefix_pieces(tk: Tokenised, prefix_cache: bool,
                   min_prefix_tokens: int) -> Iterator[tuple[list[int], dict[int, list[int]], list[int] | None]]:
    """The prompts in the calls' groups: ``(members, tails, prefix ids or None)`` per group.

    Each prefix group whose shared token prefix is worth a prefill (``prefix_cache`` on, at
    least ``min_prefix_tokens``) comes with that prefix and its members' tails after it; the
    remaining prompts come last, whole, with no prefix.
    """
    (chunk,) = plan_chunks(tk.group_of, len(tk.prompts))
    flat: list[int] = []
    for piece in chunk.pieces:
        seqs = [tk.ids[i] for i in piece]
        p = shared_prefix_length(seqs) if len(piece) > 1 else 0
        if not prefix_cache or p < min_prefix_tokens:
            flat.extend(int(i) for i in piece)
            continue
        yield [int(i) for i in piece], {int(i): tk.ids[i][p:] for i in piece}, list(seqs[0][:p])
    if flat:
        yield flat, {i: tk.ids[i] for i in flat}, None


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

    with Progress(len(prompts), enabled=progress, desc="generate") as bar:
        for members, tails, pre in _prefix_pieces(tk, prefix_cache, min_prefix_tokens):
            run(members, tails, None if pre is None else prefill_prefix(judge, pre, place), bar)

    return parse_replies(judge, [replies[i] for i in range(len(prompts))], scale)


def parse_replies(judge: Any, replies: Sequence[Sequence[int]], scale: ScoreScale) -> tuple[list[str], np.ndarray, int]:
    """Reply token ids -> ``(texts, parsed scores with NaN for failures, n_failures)``.

    The second half of `generate_scores`, for replies decoded elsewhere (e.g.
    `jaxjudge.engine.extract` with ``generate_tokens``).
    """
    texts = [judge.decode([int(x) for x in r]) for r in replies]
    parsed = np.asarray([parse_score(t, scale) for t in texts], np.float64)
    return texts, parsed, int(np.isnan(parsed).sum())


def contrastive_token_scores(
    main_logits: jax.Array,
    asst_logits: jax.Array,
    lam: float | jax.Array,
    t_main: float | jax.Array = 1.0,
    t_asst: float | jax.Array = 1.0,
    alpha: float | jax.Array = 0.1,
) -> jax.Array:
    """One step's contrastive scores over the vocabulary, implausible tokens at ``-inf``.

    ``log_softmax(main / t_main) - lam * log_softmax(asst / t_asst)`` where the main model's
    (tempered) probability is at least ``alpha`` times its largest, ``-inf`` elsewhere: the
    score `jaxjudge.debias.contrastive` renormalises over the candidates, here over every
    token. The most likely main-model token is always plausible, so ``lam = 0`` decodes the
    main model's greedy token. Traceable; the arguments may be traced.

    Args:
        main_logits: ``[..., V]`` main (expert) model logits.
        asst_logits: ``[..., V]`` assistant (amateur) model logits, same vocabulary.
        lam: weight of the assistant (0: the main model alone).
        t_main, t_asst: positive temperatures dividing each model's logits.
        alpha: plausibility threshold in [0, 1] (0: no constraint).

    Returns:
        ``[..., V]`` float32 scores; their argmax is the decoded token.
    """
    main = jax.nn.log_softmax(main_logits.astype(jnp.float32) / t_main, axis=-1)
    asst = jax.nn.log_softmax(asst_logits.astype(jnp.float32) / t_asst, axis=-1)
    keep = main >= jnp.log(alpha) + jnp.max(main, axis=-1, keepdims=True)
    return jnp.where(keep, main - lam * asst, -jnp.inf)


@functools.partial(
    jax.jit,
    static_argnames=("graph_main", "graph_asst", "vocab", "max_new_tokens", "eos_ids", "pad_id"),
    donate_argnames=("cache_main", "cache_asst"),
)
def contrastive_decode(
    graph_main: nnx.GraphDef,
    state_main: nnx.State,
    graph_asst: nnx.GraphDef,
    state_asst: nnx.State,
    logits_main: jax.Array,
    logits_asst: jax.Array,
    cache_main: _dec.KVCache,
    cache_asst: _dec.KVCache,
    prefix_main: _dec.KVCache | None = None,
    prefix_asst: _dec.KVCache | None = None,
    lam: float | jax.Array = 0.5,
    t_main: float | jax.Array = 1.0,
    t_asst: float | jax.Array = 1.0,
    alpha: float | jax.Array = 0.1,
    *,
    vocab: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...] = (),
    pad_id: int = 0,
) -> tuple[jax.Array, jax.Array, _dec.KVCache, _dec.KVCache]:
    """Greedy contrastive decoding of two models through their KV caches (one compiled loop).

    The two-model counterpart of `jaxjudge.models.decoder.generate` with ``temperature=0``:
    step g takes the argmax of `contrastive_token_scores` of the two models' current logits,
    then feeds that token through both caches at the next position of its row; a row's tokens
    after its first EOS are reported as ``pad_id``, and the loop stops when every row ended.

    Args:
        graph_main, state_main, graph_asst, state_asst: ``nnx.split`` of the two decoders.
        logits_main, logits_asst: ``[B, V_m]``, ``[B, V_a]`` logits after each row's prompt.
        cache_main, cache_asst: each model's prompt cache (DONATED), with at least
            ``max_new_tokens - 1`` free slots.
        prefix_main, prefix_asst: optional batch-1 prefixes the caches continue.
        lam, t_main, t_asst, alpha: as in `contrastive_token_scores` (traced).
        vocab: V, the shared vocabulary: the first V logits of each model are compared
            (static).
        max_new_tokens: G (static).
        eos_ids: tokens that end a row (static).
        pad_id: token reported after a row has ended (static).

    Returns:
        ``(tokens [B, G] int32, lengths [B] int32, final main cache, final assistant cache)``,
        lengths counting tokens up to and including the first EOS.
    """
    main = nnx.merge(graph_main, state_main)
    asst = nnx.merge(graph_asst, state_asst)
    b = logits_main.shape[0]
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

    def step(lm_bv, la_bv, done_b, lengths_b):
        scores_bv = contrastive_token_scores(lm_bv[:, :vocab], la_bv[:, :vocab], lam, t_main, t_asst, alpha)
        tok_b = jnp.argmax(scores_bv, axis=-1).astype(jnp.int32)
        out_b = jnp.where(done_b, pad_id, tok_b)
        lengths_b = lengths_b + (~done_b).astype(jnp.int32)
        done_b = done_b | jnp.isin(tok_b, eos)
        return tok_b, out_b, done_b, lengths_b

    def feed(model, tok_b, cache, prefix):
        mask_b1 = jnp.ones((b, 1), bool)
        pos_b1 = _dec.default_positions(mask_b1, cache, prefix)
        logits_b1v, cache = model(tok_b[:, None], pos_b1, mask_b1, jnp.zeros((b, 1), jnp.int32), cache, prefix)
        return logits_b1v[:, 0].astype(jnp.float32), cache

    def body(carry):
        g, lm_bv, la_bv, cm, ca, done_b, lengths_b, out_bg = carry
        tok_b, out_b, done_b, lengths_b = step(lm_bv, la_bv, done_b, lengths_b)
        out_bg = jax.lax.dynamic_update_slice(out_bg, out_b[:, None], (0, g))
        lm_bv, cm = feed(main, tok_b, cm, prefix_main)
        la_bv, ca = feed(asst, tok_b, ca, prefix_asst)
        return g + 1, lm_bv, la_bv, cm, ca, done_b, lengths_b, out_bg

    def more(carry):
        g, done_b = carry[0], carry[5]
        return (g < max_new_tokens - 1) & ~jnp.all(done_b)

    out_bg = jnp.full((b, max_new_tokens), pad_id, jnp.int32)
    carry = (jnp.asarray(0, jnp.int32), logits_main.astype(jnp.float32), logits_asst.astype(jnp.float32),
             cache_main, cache_asst, jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32), out_bg)
    g, lm_bv, la_bv, cache_main, cache_asst, done_b, lengths_b, out_bg = jax.lax.while_loop(more, body, carry)
    # The last token needs no forward pass; after an early stop it is padding only.
    _, out_b, done_b, lengths_b = step(lm_bv, la_bv, done_b, lengths_b)
    out_bg = jax.lax.dynamic_update_slice(out_bg, out_b[:, None].astype(jnp.int32), (0, g))
    return out_bg, lengths_b, cache_main, cache_asst


def _shared_vocabulary(main: Any, assistant: Any, tk: Tokenised) -> int:
    """The vocabulary the two judges share (checked on the prompts' tokens); raises if none."""
    tok_m, tok_a = as_tokenizer(main.tokenizer), as_tokenizer(assistant.tokenizer)
    if tok_m.get_vocab(with_added_tokens=True) != tok_a.get_vocab(with_added_tokens=True):
        raise ValueError("contrastive generation needs two judges sharing a tokenizer; the main judge's and the "
                         "assistant's vocabularies differ")
    for p, ids in zip(tk.prompts, tk.ids):
        if list(tok_a.encode(p.text, add_special_tokens=p.add_special_tokens).ids) != list(ids):
            raise ValueError(f"prompt {p.example_id!r} tokenises differently under the assistant's tokenizer; "
                             "contrastive generation needs two judges sharing a tokenizer")
    vocab = min(main.config.vocab_size, assistant.config.vocab_size)
    if tok_m.get_vocab_size(with_added_tokens=True) > vocab:
        raise ValueError(f"the tokenizer has {tok_m.get_vocab_size(with_added_tokens=True)} tokens, more than a "
                         f"judge's output layer ({vocab})")
    return vocab


def contrastive_generate(
    main: Any,
    assistant: Any,
    prompts: Sequence[RenderedPrompt],
    max_new_tokens: int = 24,
    *,
    lam: float = 0.5,
    t_main: float = 1.0,
    t_asst: float = 1.0,
    alpha: float = 0.1,
    batch_size: int = 16,
    progress: bool = True,
    overflow: str = "truncate",
    prefix_cache: bool = True,
    context_length: int | None = None,
    max_batch_tokens: int = 8192,
    min_prefix_tokens: int = 32,
) -> list[list[int]]:
    """Greedy contrastive replies: main judge minus ``lam`` times the assistant, every step.

    The prompts are batched as in `generate_scores`: each shared prefix is prefilled once per
    judge, each batch of suffixes fills one per-row cache per judge, and `contrastive_decode`
    continues both caches token by token (one forward step of each model per token).

    Args:
        main: the main (expert) `jaxjudge.models.Judge`.
        assistant: the assistant (amateur) judge, sharing the main judge's tokenizer (checked
            on every prompt; the first V logits are compared, V the smaller output layer).
            With a mesh, both judges must be on the same one.
        prompts: ``[N]`` rendered prompts.
        max_new_tokens: tokens generated per prompt (a row stops at the main judge's EOS).
        lam: weight of the assistant's log-probabilities (>= 0; 0 gives the main judge's
            greedy generation).
        t_main, t_asst: positive temperatures dividing each judge's logits (as in
            `jaxjudge.debias.contrastive`).
        alpha: plausibility threshold in [0, 1]: tokens whose main-model probability is below
            ``alpha`` times the largest are never decoded (0.1 as in Li et al. 2023; 0: off).
        batch_size, progress, overflow, prefix_cache, context_length, max_batch_tokens,
            min_prefix_tokens: as in `generate_scores` (the context defaults to the smaller
            of the two judges').

    Returns:
        ``[N]`` lists of reply token ids (up to and including the first EOS).

    Raises:
        ValueError: bad parameters, or judges that do not share a tokenizer.
    """
    prompts = check_prompts(prompts)
    max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)
    batch_size = _positive_int("batch_size", batch_size)

    def real(name, v, ok, what):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                math.isfinite(v) and ok(v)):
            raise ValueError(f"{name} must be {what}, got {v!r}")

    real("lam", lam, lambda v: v >= 0, "a number >= 0")
    real("t_main", t_main, lambda v: v > 0, "a positive number")
    real("t_asst", t_asst, lambda v: v > 0, "a positive number")
    real("alpha", alpha, lambda v: 0 <= v <= 1, "in [0, 1]")
    if main.mesh is not assistant.mesh:
        raise ValueError("the main judge and the assistant must be placed on the same mesh (or neither on one)")
    ctx = (min(main.config.max_position_embeddings, assistant.config.max_position_embeddings)
           if context_length is None else _positive_int("context_length", context_length))
    if ctx <= max_new_tokens:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before {max_new_tokens} new tokens")
    tk = tokenise(main.tokenizer, prompts, limit=ctx - max_new_tokens, overflow=overflow)
    vocab = _shared_vocabulary(main, assistant, tk)
    place = Placement(main.mesh)
    eos = tuple(int(e) for e in main.config.eos_token_ids)
    params = tuple(jnp.asarray(x, jnp.float32) for x in (lam, t_main, t_asst, alpha))
    replies: dict[int, list[int]] = {}

    def prefill(judge, tokens, mask, b, t, prefix):
        cache = place.empty_cache(judge, b, t + max_new_tokens)
        read = np.full((b, 1), t - 1, np.int32)
        logits, cache = _dec.forward(judge.graphdef, judge.state, place.rows(tokens), place.rows(mask),
                                     place.rows(read), None, cache, prefix)
        return logits[:, 0], cache

    def run(idx, tails, prefixes, bar):
        order = sorted(idx, key=lambda i: -len(tails[i]))
        for plan in plan_batches([len(tails[i]) for i in order], max_rows=batch_size, max_tokens=max_batch_tokens,
                                  call_cost=ENGINE_CALL_COST):
            batch, t = order[plan.start:plan.stop], plan.length
            b = place.round_rows(plan.rows)
            rows = [tails[j] for j in batch]
            rows += [rows[-1]] * (b - len(rows))
            tokens, mask = _dec.pad_batch(rows, side="left", length=t, pad_id=main.pad_id)
            lm, cm = prefill(main, tokens, mask, b, t, prefixes[0])
            la, ca = prefill(assistant, tokens, mask, b, t, prefixes[1])
            out, lengths, _, _ = contrastive_decode(main.graphdef, main.state, assistant.graphdef, assistant.state,
                                                    lm, la, cm, ca, prefixes[0], prefixes[1], *params, vocab=vocab,
                                                    max_new_tokens=max_new_tokens, eos_ids=eos, pad_id=main.pad_id)
            out, lengths = np.asarray(out), np.asarray(lengths)
            for r, j in enumerate(batch):
                replies[j] = out[r, : lengths[r]].tolist()
            bar.update(len(batch), sum(len(tk.ids[j]) for j in batch))

    with Progress(len(prompts), enabled=progress, desc="contrastive generate") as bar:
        for members, tails, pre in _prefix_pieces(tk, prefix_cache, min_prefix_tokens):
            prefixes = (None, None) if pre is None else (prefill_prefix(main, pre, place),
                                                         prefill_prefix(assistant, pre, place))
            run(members, tails, prefixes, bar)
    return [replies[i] for i in range(len(prompts))]


def contrastive_generate_scores(
    main: Any,
    assistant: Any,
    prompts: Sequence[RenderedPrompt],
    scale: ScoreScale,
    max_new_tokens: int = 24,
    **kwargs: Any,
) -> tuple[list[str], np.ndarray, int]:
    """`contrastive_generate`'s replies parsed into scores, as `generate_scores` parses its own.

    Args:
        main, assistant, prompts, max_new_tokens: as in `contrastive_generate`.
        scale: the score scale; a number outside it counts as a parse failure.
        **kwargs: the keyword arguments of `contrastive_generate` (``lam``, ``t_main``,
            ``t_asst``, ``alpha``, batching and context options).

    Returns:
        ``(texts [N], parsed [N] float64 with NaN for parse failures, n_failures)``.
    """
    if not isinstance(scale, ScoreScale):
        raise TypeError(f"scale must be a ScoreScale, got {type(scale).__name__}")
    return parse_replies(main, contrastive_generate(main, assistant, prompts, max_new_tokens, **kwargs), scale)


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
    batch_size = _positive_int("batch_size", batch_size)
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
            count = None
            if any(spans[j] != (1, len(ids[j])) for j in batch):
                # Left padding: token k of a row of n tokens sits at slot t - n + k and is
                # predicted by the slot before it.
                a, b = np.asarray([spans[j] for j in batch] + [spans[batch[-1]]] * (len(rows) - len(batch))).T
                off = t - np.asarray([len(r) for r in rows])
                slot = np.arange(t)[None, :]
                count = place.rows((slot >= (off + a - 1)[:, None]) & (slot < (off + b - 1)[:, None]))
            sums, counts = _dec.sequence_nll(judge.graphdef, judge.state, place.rows(tokens), place.rows(mask), count)
            sums, counts = np.asarray(sums, np.float64), np.asarray(counts)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[batch] = np.where(counts[: len(batch)] > 0, sums[: len(batch)] / counts[: len(batch)],
                                      np.nan).astype(np.float32)
            bar.update(len(batch), sum(len(ids[j]) for j in batch))
    return out
