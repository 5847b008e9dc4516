"""Next-token negative log-likelihood under the decoder, with the head run in chunks (the jitted
sequence NLL built on it is `jaxjudge.models.primitives.token_nll`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

if TYPE_CHECKING:  # annotations only; the decoder module imports this one
    from jaxjudge.models.decoder import Decoder

__all__ = ["next_token_targets", "next_token_nll"]


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
