"""The engine's one decoding loop: any number of judges in lock step, a token-choice rule.

Every reply the engine writes (greedy, sampled, contrastive) comes from `decode`: one jitted
``while_loop`` through the judges' KV caches. Step g hands the judges' current next-token
logits to a *choice* (`Greedy`, `Sample`, `Contrastive`), which returns one token per row; the
token is fed through every judge's cache at the next position of its row. A row's tokens after
its first end token are reported as ``pad_id``, and the loop stops as soon as every row has
ended, so short replies cost only the steps they take.

A choice is a frozen dataclass, static under `jax.jit` (its fields are compile-time
settings); what may change between calls without recompiling (the sampling key, contrastive
decoding's lambda, temperatures and plausibility threshold) is the traced ``params`` argument.

`generate_tokens` (one judge) and `contrastive_decode` (a main judge and an assistant) are the
typed calls on `jaxjudge.models.Judge` objects the rest of the engine uses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from jaxjudge.debias.contrastive import contrastive_scores
from jaxjudge.engine.step import Step
from jaxjudge.models.kvcache import KVCache, default_positions
from jaxjudge.models.judge import Judge
from jaxjudge.models.sharding import to_host

__all__ = [
    "Contrastive",
    "DECODE",
    "DecodeState",
    "Greedy",
    "Sample",
    "contrastive_decode",
    "decode",
    "generate_tokens",
    "sample_key",
]


def sample_key(seed_key: jax.Array, step: int | jax.Array, row: int | jax.Array) -> jax.Array:
    """The key that samples row ``row``'s token at generation step ``step`` (both 0-based).

    Keys depend on the row index, not on the batch shape, so a row's sample does not change
    when other rows are added or the batch is padded.
    """
    return jax.random.fold_in(jax.random.fold_in(seed_key, row), step)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """The first judge's most likely token (``params`` unused)."""

    def __call__(self, logits: tuple[jax.Array, ...], step: jax.Array, params: Any) -> jax.Array:
        return jnp.argmax(logits[0], axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Sample:
    """A token drawn from ``softmax(logits / temperature)`` of the first judge, restricted to
    its ``top_k`` largest when set; ``params`` is the PRNG key, and row b at step g draws with
    ``sample_key(params, g, b)``."""

    temperature: float
    top_k: int | None = None

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"Sample needs a positive temperature (use Greedy for 0), got {self.temperature}")

    def __call__(self, logits: tuple[jax.Array, ...], step: jax.Array, params: jax.Array) -> jax.Array:
        scaled_bv = logits[0] / self.temperature
        if self.top_k is not None:
            kth_b1 = jax.lax.top_k(scaled_bv, self.top_k)[0][:, -1:]
            scaled_bv = jnp.where(scaled_bv < kth_b1, -jnp.inf, scaled_bv)
        keys_b = jax.vmap(lambda r: sample_key(params, step, r))(jnp.arange(scaled_bv.shape[0]))
        return jax.vmap(jax.random.categorical)(keys_b, scaled_bv).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Contrastive:
    """The argmax of `jaxjudge.debias.contrastive_scores` of judge 0 (main) against judge 1
    (assistant) over their first ``vocab`` logits; ``params`` is ``(lam, t_main, t_asst,
    alpha)``. The main judge's most likely token is always plausible, so ``lam = 0`` decodes
    its greedy reply."""

    vocab: int

    def __call__(self, logits: tuple[jax.Array, ...], step: jax.Array, params: Any) -> jax.Array:
        lam, t_main, t_asst, alpha = params
        scores_bv = contrastive_scores(logits[0][:, :self.vocab], logits[1][:, :self.vocab], lam, t_main, t_asst,
                                       alpha)
        return jnp.argmax(scores_bv, axis=-1).astype(jnp.int32)


@struct.dataclass
class DecodeState:
    """The carry of `decode`'s loop and, after it, its result.

    Attributes:
        step: g, the index of the token chosen next (int32 scalar).
        logits: each judge's next-token logits ``[B, V_j]`` float32.
        caches: each judge's per-row KV cache.
        done_b: rows that have emitted an end token ``[B]`` bool.
        lengths_b: tokens per row up to and including its first end token ``[B]`` int32.
        tokens_bg: the chosen tokens ``[B, G]`` int32 (``pad_id`` after a row has ended).
    """

    step: jax.Array
    logits: tuple[jax.Array, ...]
    caches: tuple[KVCache, ...]
    done_b: jax.Array
    lengths_b: jax.Array
    tokens_bg: jax.Array


def decode(
    graphdefs: tuple[nnx.GraphDef, ...],
    states: tuple[nnx.State, ...],
    logits: tuple[jax.Array, ...],
    caches: tuple[KVCache, ...],
    prefixes: tuple[KVCache | None, ...],
    params: Any,
    *,
    choice: Any,
    max_new_tokens: int,
    eos_ids: tuple[int, ...] = (),
    pad_id: int = 0,
) -> DecodeState:
    """Decodes ``max_new_tokens`` tokens per row with one or more judges in lock step.

    Args:
        graphdefs, states: ``nnx.split`` of each judge's decoder (static graphdefs).
        logits: each judge's logits after its rows' prompts ``[B, V_j]``.
        caches: each judge's prompt cache (DONATED), with at least ``max_new_tokens - 1``
            free slots.
        prefixes: each judge's batch-1 prefix its cache continues, or None.
        params: the choice's traced parameters (see each choice).
        choice: the token-choice rule, ``choice(logits, step, params) -> [B] int32`` (static).
        max_new_tokens: G (static).
        eos_ids: tokens that end a row (static).
        pad_id: token reported after a row has ended (static).

    Returns:
        The final `DecodeState`: ``tokens_bg`` ``[B, G]``, ``lengths_b`` ``[B]``, ``caches``.
    """
    models = [nnx.merge(g, s) for g, s in zip(graphdefs, states)]
    b = logits[0].shape[0]
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)

    def pick(st: DecodeState) -> tuple[jax.Array, DecodeState]:
        tok_b = choice(st.logits, st.step, params)
        out_b = jnp.where(st.done_b, pad_id, tok_b)
        tokens_bg = jax.lax.dynamic_update_slice(st.tokens_bg, out_b[:, None], (0, st.step))
        return tok_b, st.replace(lengths_b=st.lengths_b + (~st.done_b).astype(jnp.int32),
                                 done_b=st.done_b | jnp.isin(tok_b, eos), tokens_bg=tokens_bg)

    def feed(model, tok_b, cache, prefix):
        mask_b1 = jnp.ones((b, 1), bool)
        pos_b1 = default_positions(mask_b1, cache, prefix)
        logits_b1v, cache = model(tok_b[:, None], pos_b1, mask_b1, jnp.zeros((b, 1), jnp.int32), cache, prefix)
        return logits_b1v[:, 0].astype(jnp.float32), cache

    def body(st: DecodeState) -> DecodeState:
        tok_b, st = pick(st)
        fed = [feed(m, tok_b, c, p) for m, c, p in zip(models, st.caches, prefixes)]
        return st.replace(step=st.step + 1, logits=tuple(f[0] for f in fed), caches=tuple(f[1] for f in fed))

    def more(st: DecodeState) -> jax.Array:
        return (st.step < max_new_tokens - 1) & ~jnp.all(st.done_b)

    start = DecodeState(
        step=jnp.asarray(0, jnp.int32), logits=tuple(x.astype(jnp.float32) for x in logits), caches=tuple(caches),
        done_b=jnp.zeros((b,), bool), lengths_b=jnp.zeros((b,), jnp.int32),
        tokens_bg=jnp.full((b, max_new_tokens), pad_id, jnp.int32))
    st = jax.lax.while_loop(more, body, start)
    # The last token needs no forward pass (nothing reads its logits); an early stop leaves
    # every row ended, and this pick writes only padding.
    _, st = pick(st)
    return st


DECODE = Step.jit("decode", decode, static=("graphdefs", "choice", "max_new_tokens", "eos_ids", "pad_id"),
                  donate=("caches",))


def _check_room(cache: KVCache, max_new_tokens: int) -> None:
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    free = cache.max_length - int(cache.length)
    if free < max_new_tokens - 1:
        raise ValueError(f"cache has {free} free slots; generating {max_new_tokens} tokens "
                         f"needs {max_new_tokens - 1}")


def _eos(judge: Judge) -> tuple[int, ...]:
    return tuple(int(e) for e in judge.config.eos_token_ids)


def generate_tokens(
    judge: Judge,
    logits_bv: jax.Array,
    cache: KVCache,
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    top_k: int | None = None,
    prefix: KVCache | None = None,
    stop_at_eos: bool = True,
    host: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Decodes from a prompt's cache (from ``judge.extend`` or ``judge.prefill``).

    Args:
        judge: the judge.
        logits_bv: logits after each row's last prompt token ``[B, V]``.
        cache: the prompt cache with ``max_new_tokens - 1`` free slots (DONATED).
        max_new_tokens: G.
        temperature: 0 for greedy (`Greedy`), else `Sample` at this temperature.
        seed: sampling seed (row b, step g uses ``sample_key(key(seed), g, b)``).
        top_k: optional top-k restriction when sampling.
        prefix: the prefix the cache continues, if any.
        stop_at_eos: report tokens after the first EOS as padding.
        host: return numpy arrays (gathered from other processes' devices under a mesh over
            several processes); False: the device arrays, for a caller that reads its own rows.

    Returns:
        (tokens ``[B, G]`` int32 numpy, lengths ``[B]``: tokens up to and including EOS).
    """
    if temperature < 0:
        raise ValueError("temperature must be >= 0")
    _check_room(cache, max_new_tokens)
    choice = Greedy() if temperature == 0 else Sample(float(temperature), top_k)
    out = DECODE((judge.graphdef,), (judge.state,), (jnp.asarray(logits_bv),), (cache,), (prefix,),
                 jax.random.key(seed), choice=choice, max_new_tokens=max_new_tokens,
                 eos_ids=_eos(judge) if stop_at_eos else (), pad_id=judge.pad_id)
    if not host:
        return out.tokens_bg, out.lengths_b
    return to_host(out.tokens_bg), to_host(out.lengths_b)


def contrastive_decode(
    main: Judge,
    assistant: Judge,
    logits_main: jax.Array,
    logits_asst: jax.Array,
    cache_main: KVCache,
    cache_asst: KVCache,
    prefix_main: KVCache | None,
    prefix_asst: KVCache | None,
    *,
    lam: float,
    t_main: float,
    t_asst: float,
    alpha: float,
    vocab: int,
    max_new_tokens: int,
    host: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy contrastive decoding of ``main`` against ``assistant`` (`Contrastive`) from both
    judges' prompt caches (DONATED, each with at least ``max_new_tokens - 1`` free slots, as
    `jaxjudge.engine.contrastive_generate` allocates them; not checked here, since reading a
    cache's fill level would wait for the prefill on the hot path); a row ends at the main
    judge's EOS. ``host`` as in `generate_tokens`.

    Returns:
        (tokens ``[B, G]`` int32, lengths ``[B]`` int32 up to and including the first EOS).
    """
    params = tuple(np.float32(x) for x in (lam, t_main, t_asst, alpha))
    out = DECODE((main.graphdef, assistant.graphdef), (main.state, assistant.state), (logits_main, logits_asst),
                 (cache_main, cache_asst), (prefix_main, prefix_asst), params, choice=Contrastive(int(vocab)),
                 max_new_tokens=max_new_tokens, eos_ids=_eos(main), pad_id=main.pad_id)
    if not host:
        return out.tokens_bg, out.lengths_b
    return to_host(out.tokens_bg), to_host(out.lengths_b)

