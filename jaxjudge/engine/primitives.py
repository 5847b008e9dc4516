"""Jitted primitives the engine composes, and the one length-bucket policy.

Everything here takes ``nnx.split`` halves of a `jaxjudge.models.decoder.Decoder` and
device arrays, and returns a `flax.struct.dataclass` (a pytree with named fields), never a
positional tuple whose meaning depends on the arguments. `jaxjudge.engine.calls` wraps these
functions in typed calls on a `jaxjudge.models.Judge` that place the arrays on its mesh
(`calls.read_rows`, `calls.prefill_prefixes`, `calls.prefix_nll`, `calls.token_nll`); decoding is
`jaxjudge.engine.decode`. The rest of the engine calls only those.

Length buckets
--------------
Every jitted call has a static shape, so lengths are padded to a few bucket sizes and each
bucket compiles once (per batch size), never once per batch. `bucket_length` rounds up to a
multiple of 32 up to 256 tokens and, above that, to ``steps_per_octave`` steps per doubling
(default 4: 320, 384, 448, 512, 640, 768, ...), so padding wastes at most 32 tokens on short
sequences and at most 25 % on long ones, while an 8k context needs 28 buckets.
`slot_bucket` is the coarser rounding (powers of two, at least 256) used for the key/value
slots of a shared prefix: attending to a few empty slots is nearly free, and it keeps the
number of (prefix, suffix) shape pairs that compile small.
"""

from __future__ import annotations


import flax
import jax
import jax.numpy as jnp
from flax import nnx

from jaxjudge.engine.decode import DECODE, Greedy
from jaxjudge.engine.step import Step
from jaxjudge.models import decoder as _dec
from jaxjudge.models.kvcache import KVCache

__all__ = [
    "PREFILL",
    "PREFIX_NLL",
    "READ_ROWS",
    "READ_ROWS_AND_GENERATE",
    "STEPS",
    "TOKEN_NLL",
    "PrefixNLL",
    "RowReads",
    "TokenNLL",
    "bucket_length",
    "next_token_nll",
    "next_token_targets",
    "prefix_nll",
    "read_rows",
    "read_rows_and_generate",
    "slot_bucket",
    "token_nll",
]


def bucket_length(n: int, *, minimum: int = 32, steps_per_octave: int = 4) -> int:
    """Padded length for ``n`` tokens (see the module docstring).

    Args:
        n: number of real tokens (>= 1).
        minimum: the smallest bucket and the step below 256 tokens.
        steps_per_octave: buckets per doubling above ``8 * minimum``.

    Returns:
        The bucket, ``>= n``.
    """
    if n <= minimum:
        return minimum
    if n <= 8 * minimum:
        return -(-n // minimum) * minimum
    octave = 1 << ((n - 1).bit_length() - 1)  # largest power of two below n
    step = max(minimum, octave // steps_per_octave)
    return -(-n // step) * step


def slot_bucket(n: int, minimum: int = 256) -> int:
    """Key/value slots reserved for a shared prefix of ``n`` tokens: a power of two >= minimum."""
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


# ------------------------------------------------------------------------------ reads


@flax.struct.dataclass
class RowReads:
    """What one batch of rows gives back from the device.

    Attributes:
        picked_bm: ``[B, M]`` float32, the picked log-probabilities (full-vocabulary softmax).
        log_normaliser_b: ``[B]`` float32, logsumexp of the logits at the answer read.
        greedy_b: ``[B]`` int32, argmax at the answer read.
        topk_logprobs_bk: ``[B, k]`` float32 log-probabilities of the top-k tokens there.
        topk_ids_bk: ``[B, k]`` int32 their ids.
        nll_b: ``[B]`` float32 summed NLL of the requested slots, or None when not asked.
        generated_bg: ``[B, G]`` int32 greedy reply, or None when not asked.
        lengths_b: ``[B]`` int32 reply lengths (up to and including EOS), or None.
    """

    picked_bm: jax.Array
    log_normaliser_b: jax.Array
    greedy_b: jax.Array
    topk_logprobs_bk: jax.Array
    topk_ids_bk: jax.Array
    nll_b: jax.Array | None = None
    generated_bg: jax.Array | None = None
    lengths_b: jax.Array | None = None


def _reduce_reads(logits_brv: jax.Array, pick_read_bm: jax.Array, pick_token_bm: jax.Array, answer_read: int,
                  topk: int) -> RowReads:
    """Logits at the read positions -> the per-row statistics."""
    logz_br = jax.nn.logsumexp(logits_brv, axis=-1)
    rows_b1 = jnp.arange(logits_brv.shape[0])[:, None]
    picked_bm = logits_brv[rows_b1, pick_read_bm, pick_token_bm] - logz_br[rows_b1, pick_read_bm]
    answer_bv = logits_brv[:, answer_read]
    logz_b = logz_br[:, answer_read]
    top_bk, top_ids_bk = jax.lax.top_k(answer_bv, topk)
    greedy_b = jnp.argmax(answer_bv, axis=-1).astype(jnp.int32)
    return RowReads(picked_bm, logz_b, greedy_b, top_bk - logz_b[:, None], top_ids_bk.astype(jnp.int32))


def read_rows(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    prefix: KVCache | None = None,
    nll_use_bt: jax.Array | None = None,
    *,
    answer_read: int,
    topk: int,
) -> RowReads:
    """One batch of rows: forward to the read positions, reduce to the per-row statistics.

    Args:
        graphdef, state: ``nnx.split`` of the decoder.
        tokens_bt: [B, T] int32 token ids (left-padded).
        mask_bt: [B, T] bool, True on real tokens.
        read_br: [B, R] int32 indices into T whose next-token distributions are needed.
        pick_read_bm: [B, M] int32, which read each picked log-probability comes from.
        pick_token_bm: [B, M] int32, the token it is the log-probability of.
        prefix: optional KV cache of P shared prefixes (row b continues prefix b // (B / P)).
        nll_use_bt: optional [B, T] bool: the slots whose next token's negative log-likelihood
            is summed per row (slot j predicts token j + 1); None skips it.
        answer_read: the read (in [0, R)) at the answer position (static).
        topk: k (static).

    Returns:
        `RowReads` (``nll_b`` set when ``nll_use_bt`` is given).
    """
    model = nnx.merge(graphdef, state)
    positions_bt = _dec.default_positions(mask_bt, None, prefix)
    if nll_use_bt is None:
        logits_brv, _ = model(tokens_bt, positions_bt, mask_bt, read_br, None, prefix)
        return _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk)
    h_btd, _ = model.trunk(tokens_bt, positions_bt, mask_bt, None, prefix)
    logits_brv = model.head(jnp.take_along_axis(h_btd, read_br.astype(jnp.int32)[..., None], axis=1))
    target_bt, _ = next_token_targets(tokens_bt, mask_bt)
    nll_b = next_token_nll(model, h_btd, target_bt, nll_use_bt.astype(bool))
    return _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk).replace(nll_b=nll_b)


def read_rows_and_generate(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    cache: KVCache,
    prefix: KVCache | None = None,
    *,
    answer_read: int,
    topk: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    pad_id: int,
) -> RowReads:
    """`read_rows` (same reads and picks) plus the greedy reply, from one prefill.

    The prefill fills ``cache`` (empty, ``T + max_new_tokens`` slots); the logits at the answer
    read give the statistics and the first generated token, and greedy decoding continues from
    the cache (`jaxjudge.engine.decode.decode`). The answer read must be each row's last token.

    Returns:
        `RowReads` with ``generated_bg`` and ``lengths_b`` set.
    """
    model = nnx.merge(graphdef, state)
    positions_bt = _dec.default_positions(mask_bt, cache, prefix)
    logits_brv, cache = model(tokens_bt, positions_bt, mask_bt, read_br, cache, prefix)
    out = _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk)
    reply = DECODE.fn((graphdef,), (state,), (logits_brv[:, answer_read],), (cache,), (prefix,), None,
                      choice=Greedy(), max_new_tokens=max_new_tokens, eos_ids=eos_ids, pad_id=pad_id)
    return out.replace(generated_bg=reply.tokens_bg, lengths_b=reply.lengths_b)


# ------------------------------------------------------------------------------ NLL


def next_token_targets(tokens_bt: jax.Array, mask_bt: jax.Array) -> tuple[jax.Array, jax.Array]:
    """What each slot predicts: ``(target [B, T], use [B, T])``.

    Slot j predicts the next real token after it; with padding only on the sides and contiguous
    real tokens, that is slot j + 1 whenever both are real (``use``).
    """
    mask_bt = mask_bt.astype(bool)
    target_bt = jnp.concatenate([tokens_bt[:, 1:], jnp.zeros_like(tokens_bt[:, :1])], axis=1)
    use_bt = mask_bt & jnp.concatenate([mask_bt[:, 1:], jnp.zeros_like(mask_bt[:, :1])], axis=1)
    return target_bt, use_bt


def next_token_nll(model: _dec.Decoder, h_btd: jax.Array, target_bt: jax.Array, use_bt: jax.Array, *,
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


@flax.struct.dataclass
class PrefixNLL:
    """Per-token NLL of a right-padded batch-1 prefix.

    Attributes:
        nll_t: ``[T]`` float32; slot j holds the NLL of token j + 1 (0 past the prefix).
        next_logprobs_v: ``[V]`` float32 log-probabilities of the token after the prefix.
    """

    nll_t: jax.Array
    next_logprobs_v: jax.Array


def prefix_nll(graphdef: nnx.GraphDef, state: nnx.State, tokens_bt: jax.Array, mask_bt: jax.Array) -> PrefixNLL:
    """`PrefixNLL` of a right-padded batch-1 prefix ``[1, T]``."""
    model = nnx.merge(graphdef, state)
    mask_bt = mask_bt.astype(bool)
    h_btd, _ = model.trunk(tokens_bt, _dec.default_positions(mask_bt), mask_bt)
    target_bt, use_bt = next_token_targets(tokens_bt, mask_bt)
    last = jnp.sum(mask_bt[0]) - 1
    logits_v = model.head(h_btd[:, last][:, None])[0, 0]
    return PrefixNLL(next_token_nll(model, h_btd, target_bt, use_bt, per_slot=True)[0],
                     jax.nn.log_softmax(logits_v))


@flax.struct.dataclass
class TokenNLL:
    """Summed token NLL of each row and the number of tokens summed.

    Attributes:
        sums_b: ``[B]`` float32 summed NLL in nats.
        counts_b: ``[B]`` int32 tokens predicted; the mean NLL is ``sums_b / counts_b``.
    """

    sums_b: jax.Array
    counts_b: jax.Array


def token_nll(graphdef: nnx.GraphDef, state: nnx.State, tokens_bt: jax.Array, mask_bt: jax.Array,
              count_bt: jax.Array | None = None, *, chunk: int = 128) -> TokenNLL:
    """Summed NLL of each row's tokens after its first real token.

    Args:
        graphdef, state: ``nnx.split(decoder)``.
        tokens_bt: token ids [B, T] (any padding side).
        mask_bt: True for real tokens [B, T].
        count_bt: optional [B, T] bool, the slots whose next token counts (slot j predicts the
            token at j + 1); None counts every token after the first.
        chunk: positions per head evaluation (static): at most a [B, chunk, V] block of
            logits exists at once.
    """
    model = nnx.merge(graphdef, state)
    mask_bt = mask_bt.astype(bool)
    h_btd, _ = model.trunk(tokens_bt, _dec.default_positions(mask_bt), mask_bt)
    target_bt, use_bt = next_token_targets(tokens_bt, mask_bt)
    if count_bt is not None:
        use_bt = use_bt & count_bt.astype(bool)
    return TokenNLL(next_token_nll(model, h_btd, target_bt, use_bt, chunk=chunk),
                    jnp.sum(use_bt, axis=1).astype(jnp.int32))


# ------------------------------------------------------------------------------ the named steps

# The engine's device work goes through these objects only (`jaxjudge.engine.step`); `jaxjudge
# aot` lowers the same objects. Each is jitted here, from the static argument names it states.
# The prefill is the decoder's own jitted forward into a fresh cache (donated), as
# `jaxjudge.engine.calls.prefill_prefixes` calls it.
PREFILL = Step("prefill", _dec.forward, static=("graphdef",), donate=("cache",))
READ_ROWS = Step.jit("read_rows", read_rows, static=("graphdef", "answer_read", "topk"))
READ_ROWS_AND_GENERATE = Step.jit("read_rows_and_generate", read_rows_and_generate,
                                  static=("graphdef", "answer_read", "topk", "max_new_tokens", "eos_ids", "pad_id"))
PREFIX_NLL = Step.jit("prefix_nll", prefix_nll, static=("graphdef",))
TOKEN_NLL = Step.jit("token_nll", token_nll, static=("graphdef", "chunk"))
STEPS: dict[str, Step] = {s.name: s for s in (PREFILL, READ_ROWS, READ_ROWS_AND_GENERATE, PREFIX_NLL, TOKEN_NLL)}
