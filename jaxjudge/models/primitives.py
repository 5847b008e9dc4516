"""Jitted primitives the engine composes, and the one length-bucket policy.

Everything here takes ``nnx.split`` halves of a `jaxjudge.models.decoder.Decoder` and
device arrays, and returns a `flax.struct.dataclass` (a pytree with named fields), never a
positional tuple whose meaning depends on the arguments. `jaxjudge.models.Judge` wraps these
functions in typed methods that place the arrays (`Judge.read_rows`, `Judge.prefill_prefix`,
`Judge.prefix_nll`, `Judge.token_nll`, `Judge.contrastive_decode`); the engine calls only
those methods.

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

import functools

import flax
import jax
import jax.numpy as jnp
from flax import nnx

from jaxjudge.models import decoder as _dec

__all__ = [
    "ContrastiveState",
    "PrefixNLL",
    "RowReads",
    "TokenNLL",
    "bucket_length",
    "contrastive_decode",
    "contrastive_token_scores",
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


@functools.partial(jax.jit, static_argnames=("graphdef", "answer_read", "topk"))
def read_rows(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    prefix: _dec.KVCache | None = None,
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
        prefix: optional batch-1 KV cache of the shared prefix.
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
    target_bt, _ = _dec.next_token_targets(tokens_bt, mask_bt)
    nll_b = _dec.next_token_nll(model, h_btd, target_bt, nll_use_bt.astype(bool))
    return _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk).replace(nll_b=nll_b)


@functools.partial(jax.jit, static_argnames=("graphdef", "answer_read", "topk", "max_new_tokens", "eos_ids",
                                             "pad_id"))
def read_rows_and_generate(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    cache: _dec.KVCache,
    prefix: _dec.KVCache | None = None,
    *,
    answer_read: int,
    topk: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    pad_id: int,
) -> RowReads:
    """`read_rows` (same reads and picks) plus the greedy reply, from one prefill.

    The prefill fills ``cache`` (empty, ``T + max_new_tokens`` slots); the logits at the answer
    read give the statistics and the first generated token, and decoding continues from the
    cache (`jaxjudge.models.decoder.generate`). The answer read must be each row's last token.

    Returns:
        `RowReads` with ``generated_bg`` and ``lengths_b`` set.
    """
    model = nnx.merge(graphdef, state)
    positions_bt = _dec.default_positions(mask_bt, cache, prefix)
    logits_brv, cache = model(tokens_bt, positions_bt, mask_bt, read_br, cache, prefix)
    out = _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk)
    gen_bg, lengths_b, _ = _dec.generate(graphdef, state, logits_brv[:, answer_read], cache, jax.random.key(0), prefix,
                                         max_new_tokens=max_new_tokens, temperature=0.0, top_k=None,
                                         eos_ids=eos_ids, pad_id=pad_id)
    return out.replace(generated_bg=gen_bg, lengths_b=lengths_b)


# ------------------------------------------------------------------------------ NLL


@flax.struct.dataclass
class PrefixNLL:
    """Per-token NLL of a right-padded batch-1 prefix.

    Attributes:
        nll_t: ``[T]`` float32; slot j holds the NLL of token j + 1 (0 past the prefix).
        next_logprobs_v: ``[V]`` float32 log-probabilities of the token after the prefix.
    """

    nll_t: jax.Array
    next_logprobs_v: jax.Array


@functools.partial(jax.jit, static_argnames=("graphdef",))
def prefix_nll(graphdef: nnx.GraphDef, state: nnx.State, tokens_bt: jax.Array, mask_bt: jax.Array) -> PrefixNLL:
    """`PrefixNLL` of a right-padded batch-1 prefix ``[1, T]``."""
    model = nnx.merge(graphdef, state)
    mask_bt = mask_bt.astype(bool)
    h_btd, _ = model.trunk(tokens_bt, _dec.default_positions(mask_bt), mask_bt)
    target_bt, use_bt = _dec.next_token_targets(tokens_bt, mask_bt)
    last = jnp.sum(mask_bt[0]) - 1
    logits_v = model.head(h_btd[:, last][:, None])[0, 0]
    return PrefixNLL(_dec.next_token_nll(model, h_btd, target_bt, use_bt, per_slot=True)[0],
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


@functools.partial(jax.jit, static_argnames=("graphdef", "chunk"))
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
    target_bt, use_bt = _dec.next_token_targets(tokens_bt, mask_bt)
    if count_bt is not None:
        use_bt = use_bt & count_bt.astype(bool)
    return TokenNLL(_dec.next_token_nll(model, h_btd, target_bt, use_bt, chunk=chunk),
                    jnp.sum(use_bt, axis=1).astype(jnp.int32))


# ------------------------------------------------------------------------------ contrastive decoding


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


@flax.struct.dataclass
class ContrastiveState:
    """The loop carry of `contrastive_decode` (and, after the loop, its result).

    Attributes:
        step: generation step g (scalar int32).
        main_logits_bv, asst_logits_bv: each model's logits for the next token.
        main_cache, asst_cache: each model's per-row KV cache.
        done_b: rows that have emitted an EOS.
        lengths_b: tokens up to and including the first EOS.
        tokens_bg: the decoded tokens so far (``pad_id`` after a row's end).
    """

    step: jax.Array
    main_logits_bv: jax.Array
    asst_logits_bv: jax.Array
    main_cache: _dec.KVCache
    asst_cache: _dec.KVCache
    done_b: jax.Array
    lengths_b: jax.Array
    tokens_bg: jax.Array


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
) -> ContrastiveState:
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
        The final `ContrastiveState`: ``tokens_bg`` [B, G] int32 and ``lengths_b`` [B] int32.
    """
    main = nnx.merge(graph_main, state_main)
    asst = nnx.merge(graph_asst, state_asst)
    b = logits_main.shape[0]
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

    def pick(s: ContrastiveState) -> tuple[jax.Array, ContrastiveState]:
        scores_bv = contrastive_token_scores(s.main_logits_bv[:, :vocab], s.asst_logits_bv[:, :vocab], lam, t_main,
                                             t_asst, alpha)
        tok_b = jnp.argmax(scores_bv, axis=-1).astype(jnp.int32)
        out_b = jnp.where(s.done_b, pad_id, tok_b)
        tokens_bg = jax.lax.dynamic_update_slice(s.tokens_bg, out_b[:, None], (0, s.step))
        return tok_b, s.replace(lengths_b=s.lengths_b + (~s.done_b).astype(jnp.int32),
                                done_b=s.done_b | jnp.isin(tok_b, eos), tokens_bg=tokens_bg)

    def feed(model, tok_b, cache, prefix):
        mask_b1 = jnp.ones((b, 1), bool)
        pos_b1 = _dec.default_positions(mask_b1, cache, prefix)
        logits_b1v, cache = model(tok_b[:, None], pos_b1, mask_b1, jnp.zeros((b, 1), jnp.int32), cache, prefix)
        return logits_b1v[:, 0].astype(jnp.float32), cache

    def body(s: ContrastiveState) -> ContrastiveState:
        tok_b, s = pick(s)
        lm_bv, cm = feed(main, tok_b, s.main_cache, prefix_main)
        la_bv, ca = feed(asst, tok_b, s.asst_cache, prefix_asst)
        return s.replace(step=s.step + 1, main_logits_bv=lm_bv, asst_logits_bv=la_bv, main_cache=cm, asst_cache=ca)

    def more(s: ContrastiveState) -> jax.Array:
        return (s.step < max_new_tokens - 1) & ~jnp.all(s.done_b)

    state = ContrastiveState(
        step=jnp.asarray(0, jnp.int32), main_logits_bv=logits_main.astype(jnp.float32),
        asst_logits_bv=logits_asst.astype(jnp.float32), main_cache=cache_main, asst_cache=cache_asst,
        done_b=jnp.zeros((b,), bool), lengths_b=jnp.zeros((b,), jnp.int32),
        tokens_bg=jnp.full((b, max_new_tokens), pad_id, jnp.int32))
    state = jax.lax.while_loop(more, body, state)
    # The last token needs no forward pass; after an early stop it is padding only.
    _, state = pick(state)
    return state
