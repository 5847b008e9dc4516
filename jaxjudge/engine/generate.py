"""Generated scores: greedy (or contrastive) decoding, then the first number parsed.

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

Both walk the prompts with the engine's one loop (`jaxjudge.engine.runner`); the jitted
decoding is the engine's one decoding loop (`jaxjudge.engine.decode`: `generate_tokens`,
`contrastive_decode`). Under a mesh over several processes both feed per host
(`jaxjudge.engine.feed.generate_fed`): each process tokenises and places only its own rows.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxjudge.engine import calls
from jaxjudge.engine.decode import contrastive_decode, generate_tokens
from jaxjudge.engine.feed import feed_plan, generate_fed
from jaxjudge.engine.options import EngineOptions
from jaxjudge.engine.plan import plan_chunks
from jaxjudge.engine.runner import Progress, batches, pad_rows, prefix_groups
from jaxjudge.engine.tokens import Tokenised, check_prompts, positive_int, tokenise
from jaxjudge.models.decoder import pad_batch
from jaxjudge.models.judge import Judge
from jaxjudge.multihost import any_process, spans_processes
from jaxjudge.prompts import RenderedPrompt, ScoreScale, as_tokenizer

__all__ = [
    "contrastive_generate",
    "contrastive_generate_scores",
    "generate_scores",
    "parse_replies",
    "parse_score",
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


def _groups(tk: Tokenised, prefix_cache: bool, min_prefix_tokens: int):
    """The prompts' prefix groups, in the work order of one chunk of every prompt."""
    (chunk,) = plan_chunks(tk.group_of, len(tk.prompts))
    return prefix_groups(tk.ids, chunk.pieces, prefix_cache=prefix_cache, min_prefix_tokens=min_prefix_tokens)


def generate_scores(
    judge: Judge,
    prompts: Sequence[RenderedPrompt],
    scale: ScoreScale,
    max_new_tokens: int = 24,
    options: EngineOptions | None = None,
    *,
    progress: bool = True,
    **engine: Any,
) -> tuple[list[str], np.ndarray, int]:
    """Greedy replies to the prompts and the scores parsed from them.

    Args:
        judge: a `jaxjudge.models.Judge` (with a mesh set by ``judge.shard``, batches are split
            over its ``data`` axis).
        prompts: ``[N]`` rendered prompts.
        scale: the score scale; a number outside it counts as a parse failure.
        max_new_tokens: tokens generated per prompt (decoding stops early at EOS per row).
        options: the engine's options (`EngineOptions`; ``**engine`` keywords override it):
            batch size (prompts per call), overflow policy (room is kept for
            ``max_new_tokens``), prefix cache, context length, batch token cap and shortest
            prefix prefilled apart. ``chunk_size``, ``topk`` and ``mesh`` are `extract`'s only
            (the judge's own mesh splits the batches).
        progress: show a progress bar.

    Returns:
        ``(texts [N], parsed [N] float64 with NaN for parse failures, n_failures)``.
    """
    prompts = check_prompts(prompts)
    if not isinstance(scale, ScoreScale):
        raise TypeError(f"scale must be a ScoreScale, got {type(scale).__name__}")
    max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
    o = EngineOptions.of(options, **engine)
    ctx = judge.config.max_position_embeddings if o.context_length is None else o.context_length
    if ctx <= max_new_tokens:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before {max_new_tokens} new tokens")
    if spans_processes(judge.mesh):
        # One SPMD program over several processes: each tokenises and feeds only its own rows.
        tk, plan = feed_plan(judge.tokenizer, prompts, judge.mesh, chunk_size=len(prompts),
                             limit=ctx - max_new_tokens, overflow=o.overflow, prefix_cache=o.prefix_cache,
                             min_prefix_tokens=o.min_prefix_tokens, whole=False)
        with Progress(len(prompts), enabled=progress, desc="generate") as bar:
            fed = generate_fed((judge,), tk, plan, max_new_tokens=max_new_tokens, batch_size=o.batch_size,
                               max_batch_tokens=o.max_batch_tokens, progress=bar)
        return parse_replies(judge, fed, scale)
    tk = tokenise(judge.tokenizer, prompts, limit=ctx - max_new_tokens, overflow=o.overflow)
    replies: dict[int, list[int]] = {}
    with Progress(len(prompts), enabled=progress, desc="generate") as bar:
        for call in batches(_groups(tk, o.prefix_cache, o.min_prefix_tokens), functools.partial(calls.prefill_prefixes, judge),
                            batch_size=o.batch_size, max_batch_tokens=o.max_batch_tokens):
            tokens, mask = pad_batch(pad_rows(call.tails, judge.round_rows(call.batch.rows)), side="left",
                                     length=call.batch.length, pad_id=judge.pad_id)
            room = call.batch.length + max_new_tokens
            logits, cache = judge.extend(tokens, mask, prefix=call.prefix, max_length=room)
            out, lengths = generate_tokens(judge, logits[:, 0], cache, max_new_tokens=max_new_tokens,
                                                 prefix=call.prefix)
            for r, j in enumerate(call.members):
                replies[j] = out[r, : lengths[r]].tolist()
            bar.update(len(call.members), sum(len(tk.ids[j]) for j in call.members))
    return parse_replies(judge, [replies[i] for i in range(len(prompts))], scale)


def parse_replies(judge: Judge, replies: Sequence[Sequence[int]],
                  scale: ScoreScale) -> tuple[list[str], np.ndarray, int]:
    """Reply token ids -> ``(texts, parsed scores with NaN for failures, n_failures)``.

    The second half of `generate_scores`, for replies decoded elsewhere (e.g.
    `jaxjudge.engine.extract` with ``generate_tokens``).
    """
    texts = [judge.decode([int(x) for x in r]) for r in replies]
    parsed = np.asarray([parse_score(t, scale) for t in texts], np.float64)
    return texts, parsed, int(np.isnan(parsed).sum())


def _shared_vocabulary(main: Judge, assistant: Judge, tk: Tokenised, rows: Sequence[int] | None = None) -> int:
    """The vocabulary the two judges share (checked on the prompts' tokens: ``rows`` only, this
    process's, under a mesh over several processes, with every process stopping if one finds a
    difference); raises if none."""
    tok_m, tok_a = as_tokenizer(main.tokenizer), as_tokenizer(assistant.tokenizer)
    if tok_m.get_vocab(with_added_tokens=True) != tok_a.get_vocab(with_added_tokens=True):
        raise ValueError("contrastive generation needs two judges sharing a tokenizer; the main judge's and the "
                         "assistant's vocabularies differ")
    differs = next((tk.prompts[i].example_id for i in (range(len(tk.prompts)) if rows is None else rows)
                    if list(tok_a.encode(tk.prompts[i].text, add_special_tokens=tk.prompts[i].add_special_tokens).ids)
                    != list(tk.ids[i])), None)
    if rows is not None and any_process(differs is not None) and differs is None:
        raise ValueError("a prompt of another process of this job tokenises differently under the assistant's "
                         "tokenizer (its error names it); nothing was run")
    if differs is not None:
        raise ValueError(f"prompt {differs!r} tokenises differently under the assistant's tokenizer; "
                         "contrastive generation needs two judges sharing a tokenizer")
    vocab = min(main.config.vocab_size, assistant.config.vocab_size)
    if tok_m.get_vocab_size(with_added_tokens=True) > vocab:
        raise ValueError(f"the tokenizer has {tok_m.get_vocab_size(with_added_tokens=True)} tokens, more than a "
                         f"judge's output layer ({vocab})")
    return vocab


def contrastive_generate(
    main: Judge,
    assistant: Judge,
    prompts: Sequence[RenderedPrompt],
    max_new_tokens: int = 24,
    *,
    lam: float = 0.5,
    t_main: float = 1.0,
    t_asst: float = 1.0,
    alpha: float = 0.1,
    options: EngineOptions | None = None,
    progress: bool = True,
    **engine: Any,
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
        options, progress, **engine: as in `generate_scores` (the context defaults to the
            smaller of the two judges').

    Returns:
        ``[N]`` lists of reply token ids (up to and including the first EOS).

    Raises:
        ValueError: bad parameters, or judges that do not share a tokenizer.
    """
    prompts = check_prompts(prompts)
    max_new_tokens = positive_int("max_new_tokens", max_new_tokens)
    o = EngineOptions.of(options, **engine)
    _check_contrastive(main, assistant, lam=lam, t_main=t_main, t_asst=t_asst, alpha=alpha)
    ctx = (min(main.config.max_position_embeddings, assistant.config.max_position_embeddings)
           if o.context_length is None else o.context_length)
    if ctx <= max_new_tokens:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before {max_new_tokens} new tokens")
    knobs = {"lam": lam, "t_main": t_main, "t_asst": t_asst, "alpha": alpha, "max_new_tokens": max_new_tokens}
    run = _contrastive_fed if spans_processes(main.mesh) else _contrastive_here
    return run(main, assistant, prompts, o, ctx, knobs, progress)


def _check_contrastive(main: Judge, assistant: Judge, **knobs: Any) -> None:
    """Refuses weights and temperatures out of range, and judges on different meshes."""
    wants = {"lam": (lambda v: v >= 0, "a number >= 0"), "t_main": (lambda v: v > 0, "a positive number"),
             "t_asst": (lambda v: v > 0, "a positive number"), "alpha": (lambda v: 0 <= v <= 1, "in [0, 1]")}
    for name, (ok, what) in wants.items():
        v = knobs[name]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not (
                math.isfinite(v) and ok(v)):
            raise ValueError(f"{name} must be {what}, got {v!r}")
    if main.mesh is not assistant.mesh:
        raise ValueError("the main judge and the assistant must be placed on the same mesh (or neither on one)")


def _contrastive_fed(main: Judge, assistant: Judge, prompts: list[RenderedPrompt], o: EngineOptions, ctx: int,
                     knobs: dict[str, Any], progress: bool) -> list[list[int]]:
    """One SPMD program over several processes: each tokenises and feeds only its own rows."""
    max_new_tokens = knobs["max_new_tokens"]
    tk, plan = feed_plan(main.tokenizer, prompts, main.mesh, chunk_size=len(prompts), limit=ctx - max_new_tokens,
                         overflow=o.overflow, prefix_cache=o.prefix_cache, min_prefix_tokens=o.min_prefix_tokens,
                         whole=False)
    vocab = _shared_vocabulary(main, assistant, tk, rows=plan.fed_here().tolist())

    def decode(extended, prefixes):
        (lm, cm), (la, ca) = extended
        return contrastive_decode(main, assistant, lm[:, 0], la[:, 0], cm, ca, *prefixes, vocab=vocab, host=False,
                                  **knobs)

    with Progress(len(prompts), enabled=progress, desc="contrastive generate") as bar:
        return generate_fed((main, assistant), tk, plan, max_new_tokens=max_new_tokens, batch_size=o.batch_size,
                            max_batch_tokens=o.max_batch_tokens, progress=bar, decode=decode)


def _contrastive_here(main: Judge, assistant: Judge, prompts: list[RenderedPrompt], o: EngineOptions, ctx: int,
                      knobs: dict[str, Any], progress: bool) -> list[list[int]]:
    """This process's devices: every prompt batched, prefilled and decoded here."""
    max_new_tokens = knobs["max_new_tokens"]
    tk = tokenise(main.tokenizer, prompts, limit=ctx - max_new_tokens, overflow=o.overflow)
    vocab = _shared_vocabulary(main, assistant, tk)
    replies: dict[int, list[int]] = {}

    def prefill(prefixes: list[list[int]]):
        return calls.prefill_prefixes(main, prefixes), calls.prefill_prefixes(assistant, prefixes)

    with Progress(len(prompts), enabled=progress, desc="contrastive generate") as bar:
        for call in batches(_groups(tk, o.prefix_cache, o.min_prefix_tokens), prefill, batch_size=o.batch_size,
                            max_batch_tokens=o.max_batch_tokens):
            pm, pa = call.prefix if call.prefix is not None else (None, None)
            tokens, mask = pad_batch(pad_rows(call.tails, main.round_rows(call.batch.rows)), side="left",
                                     length=call.batch.length, pad_id=main.pad_id)
            room = call.batch.length + max_new_tokens
            lm, cm = main.extend(tokens, mask, prefix=pm, max_length=room)
            la, ca = assistant.extend(tokens, mask, prefix=pa, max_length=room)
            out, lengths = contrastive_decode(main, assistant, lm[:, 0], la[:, 0], cm, ca, pm, pa, vocab=vocab, **knobs)
            for r, j in enumerate(call.members):
                replies[j] = out[r, : lengths[r]].tolist()
            bar.update(len(call.members), sum(len(tk.ids[j]) for j in call.members))
    return [replies[i] for i in range(len(prompts))]


def contrastive_generate_scores(
    main: Judge,
    assistant: Judge,
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
