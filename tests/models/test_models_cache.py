"""KV cache, shared prefixes, generation and sequence NLL against full forward passes.

The reference for every cached computation is the cache-less forward over the whole
sequence (itself held to torch by test_models_parity.py); models are random tiny decoders.
"""

import jax
import numpy as np
import pytest
from flax import nnx

from jaxjudge.engine import calls
from jaxjudge.engine.decode import generate_tokens, sample_key
from jaxjudge.models import config as C
from jaxjudge.models import decoder as D
from jaxjudge.models.judge import Judge

ATOL = 1e-4

# The cache code is shared by all families; these two cover its per-family branches: q/k/v
# biases and a sliding window (layer 1 only) that crosses the prefix/continuation boundary;
# Gemma's 1 + w norms, scaled embeddings and tied head.
CONFIGS = {
    "qwen2_window": C.Qwen2Config.tiny(sliding_window=4, sliding_layers=(False, True)),
    "gemma": C.GemmaConfig.tiny(),
}


def make_judge(cfg, dtype="float32", seed=0) -> Judge:
    model = D.Decoder(cfg, rngs=nnx.Rngs(seed), dtype=dtype, param_dtype=dtype)
    # Non-trivial norm scales, so a norm applied at the wrong place shows.
    rng = np.random.default_rng(seed)
    for _, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if var.get_metadata().get("out_sharding") == ("norm",):
            var[...] = var[...] + (0.3 * rng.standard_normal(var.shape)).astype(var.dtype)
    # A unit-variance embedding makes a tied head all but certain of repeating the input
    # token; shrink it so sampling has several plausible tokens.
    emb = model.embed_tokens.embedding
    emb[...] = (emb[...] * 0.3).astype(emb.dtype)
    return Judge(cfg, model, None)


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def judge(request):
    return make_judge(CONFIGS[request.param])


REF_LEN = 16


def full_logits(judge: Judge, seq) -> np.ndarray:
    """Logits at every position of one sequence [T, V], by the cache-less forward.

    Right-padded to a fixed length so the reference compiles once (padding after the real
    tokens cannot influence them under causal attention).
    """
    assert len(seq) <= REF_LEN
    tokens, mask = D.pad_batch([list(seq)], side="right", length=REF_LEN)
    read = np.arange(REF_LEN)[None]
    return np.asarray(judge.forward(tokens, mask, read))[0, : len(seq)]


def test_prefix_continuations_match_full_forward(judge):
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, 37, 7).tolist()
    conts = [rng.integers(0, 37, n).tolist() for n in (3, 6, 1, 4)]
    _, pre = judge.prefill(np.asarray([prefix]))
    tokens, mask = D.pad_batch(conts, length=6)
    read = np.tile(np.arange(6), (4, 1))
    logits, none = judge.extend(tokens, mask, read_idx_br=read, prefix=pre)
    assert none is None and logits.shape == (4, 6, 37)
    logits = np.asarray(logits)
    for b, cont in enumerate(conts):
        ref = full_logits(judge, prefix + cont)
        real = np.flatnonzero(mask[b])
        np.testing.assert_allclose(logits[b, real], ref[len(prefix):], atol=ATOL, rtol=0)
    # The prefix is read-only: a second call with it gives the same answer.
    again, _ = judge.extend(tokens, mask, read_idx_br=read, prefix=pre)
    np.testing.assert_array_equal(np.asarray(again), logits)


def test_several_prefixes_in_one_call_match_full_forward(judge):
    """A cache of two prefixes of different lengths (right-padded in one prefill), each continued
    by two rows of one call, then greedy decoding from there: every row as its own full forward."""
    rng = np.random.default_rng(4)
    prefixes = [rng.integers(0, 37, n).tolist() for n in (7, 4)]
    conts = [rng.integers(0, 37, n).tolist() for n in (3, 5, 2, 4)]  # rows 0-1: prefix 0; 2-3: prefix 1
    pt, pm = D.pad_batch(prefixes, side="right", length=8)
    _, pre = judge.prefill(pt, pm)
    tokens, mask = D.pad_batch(conts, length=5)
    read = np.tile(np.arange(5), (4, 1))
    logits, cache = judge.extend(tokens, mask, read_idx_br=read, prefix=pre, max_length=5 + 3)
    for b, cont in enumerate(conts):
        seq = prefixes[b // 2] + cont
        real = np.flatnonzero(mask[b])
        np.testing.assert_allclose(np.asarray(logits)[b, real], full_logits(judge, seq)[-len(cont):], atol=ATOL,
                                   rtol=0)
    out, _ = generate_tokens(judge, logits[:, -1], cache, max_new_tokens=3, prefix=pre, stop_at_eos=False)
    for b, cont in enumerate(conts):
        seq = prefixes[b // 2] + cont
        for tok in np.asarray(out)[b]:
            assert int(tok) == int(np.argmax(full_logits(judge, seq)[len(seq) - 1]))
            seq = seq + [int(tok)]
    with pytest.raises(ValueError, match="cannot continue 2 prefixes"):
        judge.extend(tokens[:3], mask[:3], prefix=pre)


def test_chained_cache_matches_full_forward(judge):
    """Prefix -> per-row cache (right-padded) -> second extension -> logits everywhere."""
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, 37, 5).tolist()
    first = [rng.integers(0, 37, n).tolist() for n in (2, 4)]
    second = [rng.integers(0, 37, n).tolist() for n in (3, 1)]
    _, pre = judge.prefill(np.asarray([prefix]))
    t1, m1 = D.pad_batch(first, side="right", length=4)
    _, cache = judge.extend(t1, m1, prefix=pre, max_length=4 + 3)
    t2, m2 = D.pad_batch(second, side="left", length=3)
    logits, cache = judge.extend(t2, m2, read_idx_br=np.tile(np.arange(3), (2, 1)), prefix=pre,
                                 cache=cache)
    assert int(cache.length) == 7
    for b in range(2):
        ref = full_logits(judge, prefix + first[b] + second[b])
        real = np.flatnonzero(m2[b])
        np.testing.assert_allclose(np.asarray(logits)[b, real], ref[-len(second[b]):], atol=ATOL,
                                   rtol=0)
    with pytest.raises(ValueError, match="cache overflow"):
        judge.extend(t2, m2, prefix=pre, cache=cache)


def test_prefill_batch_cache_matches_forward(judge):
    rng = np.random.default_rng(2)
    seqs = [rng.integers(0, 37, n).tolist() for n in (5, 8, 3)]
    tokens, mask = D.pad_batch(seqs)
    logits, cache = judge.prefill(tokens, mask, max_length=12)
    assert cache.k.shape == (2, 3, 12, 2, 10) and int(cache.length) == 8
    np.testing.assert_array_equal(np.asarray(cache.valid[:, :8]), mask)
    for b, seq in enumerate(seqs):
        np.testing.assert_allclose(np.asarray(logits)[b, 0], full_logits(judge, seq)[-1],
                                   atol=ATOL, rtol=0)


def reference_generation(judge, prompt, steps, temperature=0.0, seed=0, top_k=None, row=0):
    """Step-by-step full forwards (no cache), sampling with the generator's key schedule."""
    seq, out = list(prompt), []
    key = jax.random.key(seed)
    for g in range(steps):
        logits = full_logits(judge, seq)[-1]
        if temperature == 0.0:
            tok = int(np.argmax(logits))
        else:
            scaled = logits / temperature
            if top_k is not None:
                scaled = np.where(scaled < np.sort(scaled)[-top_k], -np.inf, scaled)
            tok = int(jax.random.categorical(sample_key(key, g, row), scaled))
        out.append(tok)
        seq.append(tok)
    return out


@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (1.3, None), (0.8, 5)])
def test_generation_matches_step_by_step_full_forwards(judge, temperature, top_k):
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 37, n).tolist() for n in (4, 7, 2)]
    ours = calls.generate_ids(judge, prompts, max_new_tokens=6, temperature=temperature, seed=11, top_k=top_k,
                          stop_at_eos=False)
    for row, (prompt, got) in enumerate(zip(prompts, ours)):
        assert got == reference_generation(judge, prompt, 6, temperature, 11, top_k, row)
    if temperature:
        other = calls.generate_ids(judge, prompts, max_new_tokens=6, temperature=temperature, seed=12,
                               top_k=top_k, stop_at_eos=False)
        assert other != ours  # the seed matters (18 draws from >= 5 tokens)


def test_generation_from_prefix_matches_full_forwards(judge):
    rng = np.random.default_rng(4)
    prefix = rng.integers(0, 37, 6).tolist()
    conts = [rng.integers(0, 37, n).tolist() for n in (1, 3)]
    _, pre = judge.prefill(np.asarray([prefix]))
    tokens, mask = D.pad_batch(conts)
    logits, cache = judge.extend(tokens, mask, prefix=pre, max_length=3 + 4)
    out, lengths = generate_tokens(judge, logits[:, 0], cache, max_new_tokens=5, prefix=pre,
                                         stop_at_eos=False)
    assert out.shape == (2, 5) and lengths.tolist() == [5, 5]
    for b, cont in enumerate(conts):
        assert out[b].tolist() == reference_generation(judge, prefix + cont, 5)


def test_generation_stops_at_eos():
    base = make_judge(C.LlamaConfig.tiny())
    prompt = [3, 1, 4, 1, 5]
    free = reference_generation(base, prompt, 6)
    eos = free[2]
    first = free.index(eos)
    judge = make_judge(C.LlamaConfig.tiny(eos_token_ids=(eos,), pad_token_id=36))
    got = calls.generate_ids(judge, [prompt], max_new_tokens=6)[0]
    assert got == free[: first + 1]
    tokens, lengths = generate_tokens(judge, 
        *_prompt_logits_and_cache(judge, prompt, 6), max_new_tokens=6)
    assert lengths[0] == first + 1
    assert tokens[0, : first + 1].tolist() == free[: first + 1]
    assert (tokens[0, first + 1:] == 36).all()


def _prompt_logits_and_cache(judge, prompt, new):
    logits, cache = judge.prefill(np.asarray([prompt]), max_length=len(prompt) + new)
    return logits[:, 0], cache


def test_sequence_nll_matches_forward_log_softmax(judge):
    rng = np.random.default_rng(5)
    seqs = [rng.integers(0, 37, n).tolist() for n in (9, 2, 5)]
    sums, counts = calls.text_nll(judge, seqs, chunk=3)
    for seq, s, c in zip(seqs, sums, counts):
        logits = full_logits(judge, seq).astype(np.float64)
        logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        ref = sum(logz[t] - logits[t, seq[t + 1]] for t in range(len(seq) - 1))
        assert c == len(seq) - 1
        assert s == pytest.approx(ref, abs=1e-4)
    # Padding side and chunking do not matter.
    tokens, mask = D.pad_batch(seqs, side="right")
    out = calls.token_nll(judge, tokens, mask, chunk=4)
    np.testing.assert_allclose(np.asarray(out.sums_b), sums, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(out.counts_b), counts)


def test_bfloat16_prefix_matches_bfloat16_forward():
    judge = make_judge(CONFIGS["gemma"], dtype="bfloat16")
    rng = np.random.default_rng(6)
    prefix, cont = rng.integers(0, 37, 6).tolist(), rng.integers(0, 37, 4).tolist()
    _, pre = judge.prefill(np.asarray([prefix]))
    assert pre.k.dtype == jax.numpy.bfloat16
    logits, _ = judge.extend(np.asarray([cont]), read_idx_br=np.arange(4)[None], prefix=pre)
    ref = full_logits(judge, prefix + cont)[6:]
    # Same bf16 arithmetic, different summation order of the attention: bf16 rounding.
    np.testing.assert_allclose(np.asarray(logits)[0], ref, atol=0.05 * np.abs(ref).max())
    assert (np.asarray(logits)[0].argmax(-1) == ref.argmax(-1)).all()


def test_a_fresh_cache_is_written_not_read(judge):
    """A cache from init_cache is known to be empty: a forward writes into it without attending
    to its slots (fewer flops), with the logits and cache of attending to its invalid slots."""
    import dataclasses  # noqa: PLC0415

    rng = np.random.default_rng(8)
    tokens, mask = D.pad_batch([rng.integers(0, 37, n).tolist() for n in (7, 4)], side="right", length=8)
    read = np.tile(np.arange(8), (2, 1))
    cfg = judge.config
    fresh = D.init_cache(cfg, 2, 32)
    assert fresh.empty
    args = (judge.graphdef, judge.state, tokens, mask, read, None)
    flops = {}
    for empty in (True, False):
        cache = dataclasses.replace(D.init_cache(cfg, 2, 32), empty=empty)
        compiled = D.forward.lower(*args, cache, None).compile()
        cost = compiled.cost_analysis()
        flops[empty] = (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]
    assert flops[True] < flops[False]  # no scores against the 32 empty slots
    a_logits, a_cache = D.forward(*args, fresh, None)
    b_logits, b_cache = D.forward(*args, dataclasses.replace(D.init_cache(cfg, 2, 32), empty=False), None)
    assert not a_cache.empty and not b_cache.empty  # written: read by the next call
    np.testing.assert_allclose(np.asarray(a_logits)[mask], np.asarray(b_logits)[mask], atol=1e-6, rtol=0)
    for x, y in zip(jax.tree.leaves(a_cache), jax.tree.leaves(b_cache)):
        np.testing.assert_allclose(np.asarray(x)[..., :8, :, :] if x.ndim == 5 else np.asarray(x),
                                   np.asarray(y)[..., :8, :, :] if y.ndim == 5 else np.asarray(y), atol=1e-6)


def test_argument_errors():
    judge = make_judge(CONFIGS["qwen2_window"])
    _, two_rows = judge.prefill(np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match="P must divide B"):
        judge.extend(np.zeros((3, 2), np.int32), prefix=two_rows)
    with pytest.raises(ValueError, match="read_idx"):
        judge.extend(np.zeros((1, 2), np.int32), read_idx_br=np.array([[2]]))
    with pytest.raises(ValueError, match="all False"):
        judge.extend(np.zeros((1, 2), np.int32), np.zeros((1, 2), bool))
    with pytest.raises(ValueError, match="free slots"):
        generate_tokens(judge, *_prompt_logits_and_cache(judge, [1, 2], 1), max_new_tokens=4)
    with pytest.raises(ValueError, match="side"):
        D.pad_batch([[1]], side="middle")
    with pytest.raises(ValueError, match="dtype"):
        D.Decoder(CONFIGS["gemma"], rngs=nnx.Rngs(0), dtype="float16")
