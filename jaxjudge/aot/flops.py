"""Analytic useful work of the scoring and decode steps: what a perfect program computes.

Useful flops count each multiply-add of the real tokens as 2 flops: the projections and MLP of
every real token, attention scores and weighted values over the (query, key) pairs a query may
see (causal attention counted once: a prefix of P tokens has P (P + 1) / 2 pairs per head, not
P^2; a sliding window of W keeps at most W keys per query), and the output head at the read
positions only. Padding, masked pairs and recomputation are not useful work.
"""

from __future__ import annotations

from jaxjudge.models.decoder_config import DecoderConfig

__all__ = ["matmul_flops_per_token", "attention_pairs", "score_flops", "decode_flops"]


def matmul_flops_per_token(cfg: DecoderConfig) -> int:
    """2 x the multiply-adds of one token through every layer's projections and MLP."""
    d, f, n, k, h = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads,
                     cfg.num_key_value_heads, cfg.head_dim)
    per_layer = d * (n + 2 * k) * h + n * h * d + 3 * d * f
    return 2 * per_layer * cfg.num_hidden_layers


def attention_pairs(queries: int, keys_before: int, window: int | None) -> int:
    """(query, key) pairs of ``queries`` consecutive tokens after ``keys_before`` visible ones,
    each query seeing itself, its predecessors among the queries and the keys before (at most
    ``window`` keys in all when windowed)."""
    total = 0
    if window is None:
        return queries * keys_before + queries * (queries + 1) // 2
    for i in range(queries):
        total += min(window, keys_before + i + 1)
    return total


def _attention_flops(cfg: DecoderConfig, queries: int, keys_before: int) -> int:
    n, h = cfg.num_attention_heads, cfg.head_dim
    pairs = sum(attention_pairs(queries, keys_before, cfg.layer_window(i)) for i in range(cfg.num_hidden_layers))
    return 2 * 2 * n * h * pairs  # q.k and p.v


def score_flops(cfg: DecoderConfig, prefix: int, tails: int, tail_len: int, reads: int = 1) -> int:
    """Useful flops of one scoring step: a shared prefix of ``prefix`` tokens, then ``tails``
    continuations of ``tail_len`` tokens each attending to it, logits at ``reads`` positions a row."""
    tokens = prefix + tails * tail_len
    flops = matmul_flops_per_token(cfg) * tokens
    flops += _attention_flops(cfg, prefix, 0) + tails * _attention_flops(cfg, tail_len, prefix)
    return flops + 2 * cfg.hidden_size * cfg.vocab_size * tails * reads


def decode_flops(cfg: DecoderConfig, rows: int, context: int) -> int:
    """Useful flops of one decode step: ``rows`` new tokens, each after ``context`` tokens."""
    return rows * (matmul_flops_per_token(cfg) + _attention_flops(cfg, 1, context)
                   + 2 * cfg.hidden_size * cfg.vocab_size)
