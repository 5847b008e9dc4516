"""The KV cache of the decoder and the host-side helpers that shape a batch for it.

The cache is preallocated: ``k``/``v`` ``[L, B, S, K, H]``, plus per-slot ``positions [B, S]``,
``valid [B, S]`` and a shared fill level ``length``. A call with a cache writes its T new tokens
at slots ``[length, length + T)`` of every row and attends over all valid slots before them
(causality is by slot; a slot of a padding token is invalid). A *prefix* is a cache that is
only read: one per group of rows (see :mod:`jaxjudge.models.decoder`).
"""

from __future__ import annotations

from typing import Any, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.models.decoder_config import DecoderConfig

__all__ = ["KVCache", "init_cache", "default_positions", "pad_batch"]


@flax.struct.dataclass
class KVCache:
    """Preallocated keys and values of every layer, functional (updates return a new cache).

    Attributes:
        k: keys after rotary embedding [L, B, S, K, H].
        v: values [L, B, S, K, H].
        positions: rotary position of each slot [B, S] int32.
        valid: whether a slot holds a real (non-padding) token [B, S] bool.
        length: number of slots written so far, shared by all rows [] int32.
        empty: known to hold nothing (static): a cache fresh from :func:`init_cache`, which a
            forward writes into without attending to its slots (a prefill computes no scores
            against empty slots, and takes the attention kernel that serves a causal block).
            Any cache a forward returns has ``empty=False``.
    """

    k: jax.Array
    v: jax.Array
    positions: jax.Array
    valid: jax.Array
    length: jax.Array
    empty: bool = flax.struct.field(pytree_node=False, default=False)

    @property
    def batch_size(self) -> int:
        return self.k.shape[1]

    @property
    def max_length(self) -> int:
        return self.k.shape[2]


def init_cache(cfg: DecoderConfig, batch: int, max_length: int, dtype: Any = jnp.float32) -> KVCache:
    """An empty cache for ``batch`` rows of up to ``max_length`` slots.

    Args:
        cfg: the model config.
        batch: B.
        max_length: S, slots per row (prompt + continuation + generated tokens).
        dtype: storage dtype of keys and values (the compute dtype of the model).

    Returns:
        A KVCache with ``length == 0``, no valid slot and ``empty=True``.
    """
    shape = (cfg.num_hidden_layers, batch, max_length, cfg.num_key_value_heads, cfg.head_dim)
    return KVCache(
        k=jnp.zeros(shape, dtype),
        v=jnp.zeros(shape, dtype),
        positions=jnp.zeros((batch, max_length), jnp.int32),
        valid=jnp.zeros((batch, max_length), bool),
        length=jnp.zeros((), jnp.int32),
        empty=True,
    )


def default_positions(mask_bt: jax.Array, cache: KVCache | None = None,
                      prefix: KVCache | None = None) -> jax.Array:
    """Rotary positions that count the real tokens before each slot.

    A row's first real token gets position ``(#valid prefix slots) + (#valid cache slots)``;
    padding does not advance the count, so left- and right-padded rows get the positions an
    unpadded sequence would.

    Args:
        mask_bt: True for real tokens [B, T].
        cache: optional batch-B cache whose valid slots precede the tokens.
        prefix: optional cache of P prefixes, row b continuing prefix b // (B / P), whose
            valid slots precede the tokens.

    Returns:
        positions [B, T] int32 (padding slots get the position of the next real token).
    """
    mask_bt = mask_bt.astype(jnp.int32)
    start_b = jnp.zeros(mask_bt.shape[:1], jnp.int32)
    if prefix is not None:
        per_prefix = jnp.sum(prefix.valid, axis=1).astype(jnp.int32)
        start_b += jnp.repeat(per_prefix, mask_bt.shape[0] // prefix.valid.shape[0])
    if cache is not None:
        start_b += jnp.sum(cache.valid, axis=1).astype(jnp.int32)
    return start_b[:, None] + jnp.cumsum(mask_bt, axis=1) - mask_bt



def pad_batch(
    sequences: Sequence[Sequence[int]],
    *,
    side: str = "left",
    length: int | None = None,
    pad_id: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Pads token sequences into one batch.

    Args:
        sequences: B token-id lists (each non-empty).
        side: ``"left"`` (default: the last real token of every row at index T - 1) or
            ``"right"``.
        length: T, at least the longest sequence (default: the longest).
        pad_id: id written into padding slots (never attended to).

    Returns:
        (tokens [B, T] int32, mask [B, T] bool).
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    if not sequences:
        raise ValueError("pad_batch needs at least one sequence")
    longest = max(len(s) for s in sequences)
    for i, s in enumerate(sequences):
        if len(s) == 0:
            raise ValueError(f"sequence {i} is empty")
    t = longest if length is None else length
    if t < longest:
        raise ValueError(f"length={t} is shorter than the longest sequence ({longest})")
    tokens = np.full((len(sequences), t), pad_id, np.int32)
    mask = np.zeros((len(sequences), t), bool)
    for i, s in enumerate(sequences):
        if side == "left":
            tokens[i, t - len(s):] = s
            mask[i, t - len(s):] = True
        else:
            tokens[i, : len(s)] = s
            mask[i, : len(s)] = True
    return tokens, mask
