"""The decoder's construction options change the compiled program, never the numbers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxjudge.models.config import LlamaConfig
from jaxjudge.models.convert import abstract_model
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.layers import MLP


def _logits(**options):
    cfg = LlamaConfig.tiny(vocab_size=64, num_hidden_layers=3)
    model = Decoder(cfg, rngs=nnx.Rngs(0), **options)
    b, t = 2, 80  # 160 rows: over the fused path's 64-row threshold
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 64, (b, t)), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    mask = jnp.ones((b, t), bool)
    read = jnp.asarray([[t - 1, t // 2]] * b, jnp.int32)
    return np.asarray(model(tokens, positions, mask, read)[0]), model


def test_unrolled_scan_and_unfused_mlp_give_the_same_logits():
    base, model = _logits()
    assert model.scan_unroll == 1
    assert all(m.fused_gate_up_min_rows == 64 for _, m in nnx.iter_modules(model) if isinstance(m, MLP))
    unrolled, model = _logits(scan_unroll=3, fused_gate_up_min_rows=None)
    assert model.scan_unroll == 3
    assert all(m.fused_gate_up_min_rows is None for _, m in nnx.iter_modules(model) if isinstance(m, MLP))
    np.testing.assert_allclose(unrolled, base, rtol=1e-5, atol=1e-5)


def test_attention_in_query_chunks_gives_the_same_logits():
    """80 tokens in query chunks of 16 (5 chunks) against one piece; the default chunk (128) does
    not cut a call this short."""
    base, model = _logits(attention_query_chunk=None)
    assert model.layers.self_attn.query_chunk is None
    chunked, model = _logits(attention_query_chunk=16)
    assert model.layers.self_attn.query_chunk == 16
    np.testing.assert_allclose(chunked, base, rtol=1e-5, atol=1e-5)


def test_options_reach_an_abstract_model_and_bad_unroll_is_refused():
    cfg = LlamaConfig.tiny(vocab_size=64, num_hidden_layers=2)
    model = abstract_model(cfg, "bfloat16", scan_unroll=2, fused_gate_up_min_rows=None, attention_query_chunk=None)
    assert model.scan_unroll == 2 and model.layers.mlp.fused_gate_up_min_rows is None
    assert model.layers.self_attn.query_chunk is None
    for bad in (True, 0, 1.5):
        with pytest.raises(ValueError, match="scan_unroll must be a positive int"):
            Decoder(cfg, rngs=nnx.Rngs(0), scan_unroll=bad)


def _jaxpr(model, t=80):
    tokens = jnp.zeros((2, t), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(t), (2, t))
    read = jnp.asarray([[t - 1, t // 2]] * 2, jnp.int32)
    return str(jax.make_jaxpr(lambda tok: model(tok, positions, jnp.ones((2, t), bool), read)[0])(tokens))


def test_the_target_is_read_at_construction_and_decides_the_program():
    """A decoder built for a TPU on this CPU traces the TPU's program (no CPU tuning), the same
    program as a CPU decoder with both tunings off; the default target is the backend's."""
    cfg = LlamaConfig.tiny(vocab_size=64, num_hidden_layers=2)
    build = functools.partial(Decoder, cfg, rngs=nnx.Rngs(0))
    cpu, tpu, gpu = build(), build(target="tpu"), build(target="gpu", attention_query_chunk=16)
    assert (cpu.target, tpu.target, gpu.target) == (jax.default_backend(), "tpu", "gpu") == ("cpu", "tpu", "gpu")
    for model in (tpu, gpu):
        assert model.layers.mlp.fused_gate_up_min_rows is None and model.layers.self_attn.query_chunk is None
    plain = build(fused_gate_up_min_rows=None, attention_query_chunk=None)
    chunked = build(attention_query_chunk=16)
    assert _jaxpr(tpu) == _jaxpr(plain) == _jaxpr(gpu) != _jaxpr(cpu) != _jaxpr(chunked)
    assert abstract_model(cfg, "float32", target="tpu").layers.self_attn.query_chunk is None
    with pytest.raises(ValueError, match=r"target must be one of \('cpu', 'gpu', 'tpu'\), got 'cuda'"):
        build(target="cuda")
