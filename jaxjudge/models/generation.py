"""Autoregressive generation through the KV cache, greedy or sampled, as one jitted loop."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx, struct

from jaxjudge.models.kvcache import KVCache, default_positions

__all__ = ["DecodeState", "sample_key", "generate"]


def sample_key(seed_key: jax.Array, step: int | jax.Array, row: int | jax.Array) -> jax.Array:
    """The key that samples row ``row``'s token at generation step ``step`` (both 0-based).

    Keys depend on the row index, not on the batch shape, so a row's sample does not change
    when other rows are added or the batch is padded.
    """
    return jax.random.fold_in(jax.random.fold_in(seed_key, row), step)


def _sample(logits_bv: jax.Array, key: jax.Array, step: jax.Array, temperature: float,
            top_k: int | None) -> jax.Array:
    """Greedy (temperature 0) or temperature/top-k sampling of one token per row [B]."""
    if temperature == 0.0:
        return jnp.argmax(logits_bv, axis=-1).astype(jnp.int32)
    scaled_bv = logits_bv / temperature
    if top_k is not None:
        kth_b1 = jax.lax.top_k(scaled_bv, top_k)[0][:, -1:]
        scaled_bv = jnp.where(scaled_bv < kth_b1, -jnp.inf, scaled_bv)
    rows_b = jnp.arange(logits_bv.shape[0])
    keys_b = jax.vmap(lambda r: sample_key(key, step, r))(rows_b)
    return jax.vmap(jax.random.categorical)(keys_b, scaled_bv).astype(jnp.int32)


@struct.dataclass
class DecodeState:
    """The carry of `generate`'s decoding loop.

    Attributes:
        step: g, the index of the token sampled next (int32 scalar).
        logits_bv: next-token logits [B, V] float32.
        cache: the KV cache the next token is written into.
        done_b: rows that have emitted an end token [B] bool.
        lengths_b: tokens counted per row, up to and including its first end token [B] int32.
        tokens_bg: tokens so far [B, G] int32 (``pad_id`` after a row has ended).
    """

    step: jax.Array
    logits_bv: jax.Array
    cache: KVCache
    done_b: jax.Array
    lengths_b: jax.Array
    tokens_bg: jax.Array


@functools.partial(
    jax.jit,
    static_argnames=("graphdef", "max_new_tokens", "temperature", "top_k", "eos_ids", "pad_id"),
    donate_argnames=("cache",),
)
def generate(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    logits_bv: jax.Array,
    cache: KVCache,
    key: jax.Array,
    prefix: KVCache | None = None,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    eos_ids: tuple[int, ...] = (),
    pad_id: int = 0,
) -> tuple[jax.Array, jax.Array, KVCache]:
    """Generates with the KV cache, starting from the logits of each row's last real token.

    Step g samples token g from the current logits (greedy when ``temperature == 0``; else from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest, row b with key
    ``sample_key(key, g, b)``), then feeds it through the cache at the next position of its row.
    After a row emits a token in ``eos_ids`` its later tokens are reported as ``pad_id``; the
    loop stops as soon as every row has ended (a ``while_loop``, so short replies cost only the
    steps they take).

    Args:
        graphdef, state: ``nnx.split(decoder)``.
        logits_bv: next-token logits after the prompt [B, V] (e.g. from :func:`forward`).
        cache: the prompt's cache (DONATED), with at least ``max_new_tokens - 1`` free slots.
        key: a PRNG key (ignored when greedy).
        prefix: optional batch-1 prefix the prompt cache was extended from.
        max_new_tokens: G, number of tokens to generate (static).
        temperature: 0 for greedy (static).
        top_k: optional top-k restriction when sampling (static).
        eos_ids: tokens that end a row (static).
        pad_id: token reported after a row has ended (static).

    Returns:
        (tokens [B, G] int32, lengths [B] int32 counting tokens up to and including the first
        EOS, the final cache).
    """
    model = nnx.merge(graphdef, state)
    b = logits_bv.shape[0]
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

    def step(logits_bv, done_b, lengths_b, g):
        tok_b = _sample(logits_bv, key, g, temperature, top_k)
        out_b = jnp.where(done_b, pad_id, tok_b)
        lengths_b = lengths_b + (~done_b).astype(jnp.int32)
        done_b = done_b | jnp.isin(tok_b, eos)
        return tok_b, out_b, done_b, lengths_b

    def body(st: DecodeState) -> DecodeState:
        g = st.step
        tok_b, out_b, done_b, lengths_b = step(st.logits_bv, st.done_b, st.lengths_b, g)
        tokens_bg = jax.lax.dynamic_update_slice(st.tokens_bg, out_b[:, None], (0, g))
        mask_b1 = jnp.ones((b, 1), bool)
        pos_b1 = default_positions(mask_b1, st.cache, prefix)
        logits_b1v, cache = model(tok_b[:, None], pos_b1, mask_b1, jnp.zeros((b, 1), jnp.int32),
                                  st.cache, prefix)
        return DecodeState(g + 1, logits_b1v[:, 0].astype(jnp.float32), cache, done_b, lengths_b, tokens_bg)

    def more(st: DecodeState) -> jax.Array:
        return (st.step < max_new_tokens - 1) & ~jnp.all(st.done_b)

    start = DecodeState(jnp.asarray(0, jnp.int32), logits_bv.astype(jnp.float32), cache, jnp.zeros((b,), bool),
                        jnp.zeros((b,), jnp.int32), jnp.full((b, max_new_tokens), pad_id, jnp.int32))
    st = jax.lax.while_loop(more, body, start)
    # The last token needs no forward pass (nothing reads its logits); an early stop leaves
    # every row ended, and the step below then writes only padding.
    _, out_b, _, lengths_b = step(st.logits_bv, st.done_b, st.lengths_b, st.step)
    out_bg = jax.lax.dynamic_update_slice(st.tokens_bg, out_b[:, None].astype(jnp.int32), (0, st.step))
    return out_bg, lengths_b, st.cache
