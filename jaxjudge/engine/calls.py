"""Typed calls of the engine's jitted primitives on a `jaxjudge.models.Judge`.

Each function takes host arrays (or token lists), places them on the judge's mesh (rows over
``data``, one prefix replicated) and runs one primitive of `jaxjudge.engine.primitives`:

- the engine's calls: `prefill_prefixes` (shared prefixes into a cache, one per group of rows), `read_rows`
  (batched continuations read at chosen positions, reduced on the device), `prefix_nll` and
  `token_nll` (negative log-likelihoods);
- the simple path, for notebooks and checks, on raw strings (no chat template):
  `next_token_logits`, `generate_ids`, `generate_text`, `text_nll`.

Decoding is `jaxjudge.engine.decode`; the network itself, its KV cache and placement are the
judge's (``judge.extend``, ``judge.new_cache``, ``judge.put_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxjudge.engine import decode as _decode
from jaxjudge.engine import primitives as _prim
from jaxjudge.engine.primitives import PrefixNLL, RowReads, TokenNLL, bucket_length, slot_bucket
from jaxjudge.models import sharding
from jaxjudge.models.judge import Judge
from jaxjudge.models.kvcache import KVCache, pad_batch

__all__ = [
    "generate_ids",
    "generate_text",
    "next_token_logits",
    "extend_placed",
    "prefill_placed",
    "prefill_prefixes",
    "prefix_nll",
    "read_placed",
    "read_rows",
    "text_nll",
    "token_nll",
    "token_nll_placed",
]


def _right_padded(judge: Judge, prefixes: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows right-padded to the longest one's `bucket_length`: ``(tokens [P, T], mask [P, T])``."""
    tokens = np.full((len(prefixes), bucket_length(max(len(ids) for ids in prefixes))), judge.pad_id, np.int32)
    mask = np.zeros(tokens.shape, bool)
    for p, ids in enumerate(prefixes):
        tokens[p, :len(ids)] = ids
        mask[p, :len(ids)] = True
    return tokens, mask


def prefill_prefixes(judge: Judge, prefixes: Sequence[Sequence[int]]) -> KVCache:
    """The KV cache of P shared prefixes (one per group of rows), for `read_rows`.

    The tokens are right-padded to the longest prefix's `bucket_length` (the prefill's compute)
    inside a cache of `slot_bucket` slots (what later calls attend to), so few shapes compile.
    The P prefixes are split over the judge's ``data`` axis when it divides P (each data shard
    prefills and keeps only its own groups' prefixes). With fewer prefixes than data shards
    their tokens are split over ``data`` instead, so each prefix is computed once on the slice
    and its cache, gathered, is on every shard (`Judge.put_prefixes`). The result is the
    ``prefix`` of `read_rows` and ``judge.extend``: row b of a B-row call continues prefix
    b // (B / P).
    """
    tokens, mask = _right_padded(judge, prefixes)
    p = tokens.shape[0]
    return prefill_placed(judge, judge.put_prefixes(tokens), judge.put_prefixes(mask),
                          judge.put_rows(np.zeros((p, 1), np.int32)))


def prefill_placed(judge: Judge, tokens_pt: Any, mask_pt: Any, read_p1: Any) -> KVCache:
    """`prefill_prefixes` of right-padded prefix arrays already placed on the judge's mesh."""
    p, t = tokens_pt.shape
    cache = sharding.new_cache(judge.config, p, slot_bucket(t), judge.dtype, judge.mesh)
    _, cache = _prim.PREFILL(judge.graphdef, judge.state, tokens_pt, mask_pt, read_p1, None, cache, None)
    return cache


def read_rows(judge: Judge, tokens_bt: np.ndarray, mask_bt: np.ndarray, read_br: np.ndarray,
              pick_read_bm: np.ndarray, pick_token_bm: np.ndarray, *, answer_read: int, topk: int,
              prefix: KVCache | None = None, nll_use_bt: np.ndarray | None = None,
              generate_tokens: int = 0) -> RowReads:
    """Batched continuations read at chosen positions, reduced on the device (see
    `jaxjudge.engine.primitives.read_rows` for the arguments, as numpy arrays here).

    ``tokens_bt`` is left-padded with B from ``judge.round_rows``; ``prefix`` comes from
    `prefill_prefixes` (P prefixes: row b continues prefix b // (B / P)); ``generate_tokens`` G > 0 also decodes a greedy reply of G tokens from
    the same prefill (the answer read must be each row's last token).
    """
    put = judge.put_rows
    return read_placed(judge, put(tokens_bt), put(mask_bt), put(np.asarray(read_br, np.int32)), put(pick_read_bm),
                       put(pick_token_bm), answer_read=answer_read, topk=topk, prefix=prefix,
                       nll_use_bt=None if nll_use_bt is None else put(nll_use_bt), generate_tokens=generate_tokens)


def extend_placed(judge: Judge, tokens_bt: Any, mask_bt: Any, read_br: Any, *, prefix: KVCache | None,
                  max_length: int) -> tuple[Any, KVCache]:
    """``judge.extend`` of left-padded rows already placed on the judge's mesh, into a fresh
    cache of ``max_length`` slots: ``(logits [B, R, V], cache)``."""
    cache = judge.new_cache(tokens_bt.shape[0], max_length)
    return _prim.PREFILL(judge.graphdef, judge.state, tokens_bt, mask_bt, read_br, None, cache, prefix)


def read_placed(judge: Judge, tokens_bt: Any, mask_bt: Any, read_br: Any, pick_read_bm: Any, pick_token_bm: Any, *,
                answer_read: int, topk: int, prefix: KVCache | None = None, nll_use_bt: Any = None,
                generate_tokens: int = 0) -> RowReads:
    """`read_rows` of arrays already placed on the judge's mesh (rows over ``data``): for a
    caller that built them from its own rows only (`jaxjudge.models.sharding.DataBlocks`)."""
    args = (tokens_bt, mask_bt, read_br, pick_read_bm, pick_token_bm)
    if generate_tokens:
        cache = judge.new_cache(tokens_bt.shape[0], tokens_bt.shape[1] + generate_tokens)
        return _prim.READ_ROWS_AND_GENERATE(
            judge.graphdef, judge.state, *args, cache, prefix, answer_read=answer_read, topk=topk,
            max_new_tokens=generate_tokens, eos_ids=tuple(int(e) for e in judge.config.eos_token_ids),
            pad_id=judge.pad_id)
    return _prim.READ_ROWS(judge.graphdef, judge.state, *args, prefix, nll_use_bt, answer_read=answer_read, topk=topk)


def prefix_nll(judge: Judge, ids: Sequence[int]) -> PrefixNLL:
    """Each token's NLL in a shared prefix, and the next token's log-probabilities."""
    return _prim.PREFIX_NLL(judge.graphdef, judge.state, *judge.put_replicated(_right_padded(judge, [ids])))


def token_nll(judge: Judge, tokens_bt: np.ndarray, mask_bt: np.ndarray, count_bt: np.ndarray | None = None, *,
              chunk: int = 128) -> TokenNLL:
    """Summed NLL of each row's tokens after its first (or of the slots ``count_bt`` marks:
    slot j predicts the token at j + 1), and how many tokens were summed."""
    put = judge.put_rows
    return token_nll_placed(judge, put(tokens_bt), put(mask_bt), None if count_bt is None else put(count_bt),
                            chunk=chunk)


def token_nll_placed(judge: Judge, tokens_bt: Any, mask_bt: Any, count_bt: Any = None, *, chunk: int = 128) -> TokenNLL:
    """`token_nll` of arrays already placed on the judge's mesh (rows over ``data``)."""
    return _prim.TOKEN_NLL(judge.graphdef, judge.state, tokens_bt, mask_bt, count_bt, chunk=chunk)


# ------------------------------------------------------------------------------ simple path


def _encode_batch(judge: Judge, prompts: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    out = []
    for i, p in enumerate(prompts):
        ids = judge.encode(p) if isinstance(p, str) else [int(x) for x in p]
        if not ids:
            raise ValueError(f"prompt {i} encodes to no tokens")
        out.append(ids)
    return out


def next_token_logits(judge: Judge, prompts: Sequence[str] | Sequence[Sequence[int]], *,
                      batch_size: int = 8) -> np.ndarray:
    """Next-token logits after each raw prompt (no chat template applied).

    Prompts are tokenised, left-padded to a length bucket and run ``batch_size`` at a time.

    Args:
        judge: the judge.
        prompts: B strings (or token-id lists).
        batch_size: rows per forward call.

    Returns:
        logits ``[B, V]`` float32 numpy.
    """
    seqs = _encode_batch(judge, prompts)
    out = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start:start + batch_size]
        rows = len(chunk)
        # Pad the row count too, so the last partial chunk reuses the compiled shape.
        chunk = chunk + [chunk[-1]] * (min(batch_size, len(seqs)) - rows)
        tokens, mask = pad_batch(chunk, length=bucket_length(max(map(len, chunk))), pad_id=judge.pad_id)
        read = np.full((len(chunk), 1), tokens.shape[1] - 1, np.int32)
        out.append(np.asarray(judge.forward(tokens, mask, read))[:rows, 0])
    return np.concatenate(out, axis=0)


def generate_ids(
    judge: Judge,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int | None = None,
    stop_at_eos: bool = True,
) -> list[list[int]]:
    """Generates after each raw prompt with the KV cache (`jaxjudge.engine.decode`).

    Returns:
        B lists of generated token ids (up to and including the first EOS).
    """
    seqs = _encode_batch(judge, prompts)
    tokens, mask = pad_batch(seqs, length=bucket_length(max(map(len, seqs))), pad_id=judge.pad_id)
    t = tokens.shape[1]
    logits, cache = judge.prefill(tokens, mask, max_length=t + max_new_tokens)
    out, lengths = _decode.generate_tokens(judge, logits[:, 0], cache, max_new_tokens=max_new_tokens,
                                   temperature=temperature, seed=seed, top_k=top_k, stop_at_eos=stop_at_eos)
    return [row[:n].tolist() for row, n in zip(out, lengths)]


def generate_text(judge: Judge, prompts: Sequence[str], **kwargs: Any) -> list[str]:
    """`generate_ids`, decoded to strings (special tokens dropped)."""
    return [judge.decode(ids) for ids in generate_ids(judge, prompts, **kwargs)]


def text_nll(judge: Judge, texts: Sequence[str] | Sequence[Sequence[int]], *, chunk: int = 128,
             batch_size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Summed token negative log-likelihood of each text (for prompt perplexity).

    Every token after the first is scored given the ones before it (the BOS, when the
    tokenizer adds one, is context only). `jaxjudge.engine.sequence_nll` is the batched,
    bucketed mean of the same sums.

    Returns:
        (summed NLL in nats ``[B]`` float64, number of scored tokens ``[B]`` int); the
        perplexity is ``exp(sum / count)``.
    """
    seqs = _encode_batch(judge, texts)
    outs = []
    for start in range(0, len(seqs), batch_size):
        chunk_seqs = seqs[start:start + batch_size]
        tokens, mask = pad_batch(chunk_seqs, length=bucket_length(max(map(len, chunk_seqs))), pad_id=judge.pad_id)
        outs.append(token_nll(judge, tokens, mask, chunk=chunk))
    return (np.concatenate([np.asarray(o.sums_b, np.float64) for o in outs]),
            np.concatenate([np.asarray(o.counts_b) for o in outs]))
