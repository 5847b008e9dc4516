"""Negative log-likelihood of token sequences under the decoder, with the head run in chunks."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
from flax import nnx

from jaxjudge.models.kvcache import default_positions

if TYPE_CHECKING:  # annotations only; the decoder module imports this one
    from jaxjudge.models.decoder import Decoder

__all__ = ["sequence_nll", "next_token_targets", "next_token_nll"]


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk"))
def sequence_nll(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    count_bt: jax.Array | None = None,
    *,
    chunk: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """Summed negative log-likelihood of each sequence's tokens after its first real token.

    The output head runs over ``chunk`` positions at a time, so at most a [B, chunk, V] block
    of logits exists at once.

    Args:
        graphdef, state: ``nnx.split(decoder)``.
        tokens_bt: token ids [B, T] (any padding side).
        mask_bt: True for real tokens [B, T].
        count_bt: optional [B, T] bool, the slots whose next token counts (slot j predicts the
            token at j + 1); None counts every token after the first.
        chunk: positions per head evaluation (static).

    Returns:
        (summed NLL in nats [B] float32, number of predicted tokens [B] int32). The mean NLL
        (log-perplexity) is their ratio.
    """
    model = nnx.merge(graphdef, state)
    mask_bt = mask_bt.astype(bool)
    positions_bt = default_positions(mask_bt)
    h_btd, _ = model.trunk(tokens_bt, positions_bt, mask_bt)
    target_bt, use_bt = next_token_targets(tokens_bt, mask_bt)
    if count_bt is not None:
        use_bt = use_bt & count_bt.astype(bool)
    return next_token_nll(model, h_btd, target_bt, use_bt, chunk=chunk), jnp.sum(use_bt, axis=1).astype(jnp.int32)


def next_token_targets(tokens_bt: jax.Array, mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
    """What each slot predicts: ``(target [B, T], use [B, T])``.

    Slot j predicts the next real token after it; with padding only on the sides and contiguous
    real tokens, that is slot j + 1 whenever both are real (``use``).
    """
    mask_bt = mask_bt.astype(bool)
    target_bt = jnp.concatenate([tokens_bt[:, 1:], jnp.zeros_like(tokens_bt[:, :1])], axis=1)
    use_bt = mask_bt & jnp.concatenate([mask_bt[:, 1:], jnp.zeros_like(mask_bt[:, :1])], axis=1)
    return target_bt, use_bt


def next_token_nll(model: "Decoder", h_btd: jax.Array, target_bt: jax.Array, use_bt: jax.Array, *,
                   chunk: int = 128, per_slot: bool = False) -> jax.Array:
    """Summed ``-log p(target | slot)`` over the slots where ``use_bt`` is True [B] float32.

    The output head runs over ``chunk`` slots at a time, so at most a [B, chunk, V] block of
    logits exists at once (traceable; call it inside a jitted function).

    Args:
        model: the decoder (for its head).
        h_btd: final-normed hidden states [B, T, D].
        target_bt: the token each slot predicts [B, T] int.
        use_bt: which slots count [B, T] bool.
        chunk: slots per head evaluation.
        per_slot: return each slot's NLL [B, T] (0 where ``use_bt`` is False) instead of the
            sum, so that a caller can add up any span of it.
    """
    b, t, d = h_btd.shape
    chunk = min(chunk, t)  # a short call is one chunk of its own length, not padded up to `chunk`
    n_chunks = -(-t // chunk)
    pad = n_chunks * chunk - t
    h_cbkd = jnp.pad(h_btd, ((0, 0), (0, pad), (0, 0))).reshape(b, n_chunks, chunk, d).swapaxes(0, 1)
    tgt_cbk = jnp.pad(target_bt, ((0, 0), (0, pad))).reshape(b, n_chunks, chunk).swapaxes(0, 1)
    use_cbk = jnp.pad(use_bt, ((0, 0), (0, pad))).reshape(b, n_chunks, chunk).swapaxes(0, 1)

    def chunk_nll(args):
        h_bkd, tgt_bk, use_bk = args
        logits_bkv = model.head(h_bkd)
        logz_bk = jax.nn.logsumexp(logits_bkv, axis=-1)
        picked_bk = jnp.take_along_axis(logits_bkv, tgt_bk[..., None], axis=-1)[..., 0]
        nll_bk = jnp.where(use_bk, logz_bk - picked_bk, 0.0)
        return nll_bk if per_slot else jnp.sum(nll_bk, axis=1)

    out = jax.lax.map(chunk_nll, (h_cbkd, tgt_cbk, use_cbk))  # [C, B, chunk] or [C, B]
    if per_slot:
        return out.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
    return jnp.sum(out, axis=0)
