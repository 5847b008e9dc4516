"""Family configs: reading config.json dicts, the field allowlist, refusals, full-size shapes."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxjudge.models import config as C
from jaxjudge.models import convert, decoder

# Published sizes (the models' config.json on the Hugging Face Hub).
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3",
    "use_cache": True,
    "vocab_size": 128256,
}

QWEN25_14B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "initializer_range": 0.02,
    "intermediate_size": 13824,
    "max_position_embeddings": 131072,
    "max_window_layers": 48,
    "model_type": "qwen2",
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 152064,
}


# The text decoder of google/gemma-3-27b-it (its config.json's text_config, with the fields
# that config leaves to Gemma3TextConfig's defaults written out).
GEMMA3_27B = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "attention_bias": False,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
    "head_dim": 128,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 62,
    "num_key_value_heads": 16,
    "query_pre_attn_scalar": 168,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "rope_theta": 1000000.0,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "vocab_size": 262208,
    "torch_dtype": "bfloat16",
}

QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "initializer_range": 0.02,
    "intermediate_size": 25600,
    "max_position_embeddings": 40960,
    "max_window_layers": 64,
    "model_type": "qwen3",
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# microsoft/Phi-3.5-mini-instruct: long-context rotary scaling ("longrope"), refused by name.
PHI35_MINI = {
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48},
    "sliding_window": 262144,
    "vocab_size": 32064,
    "hidden_act": "silu",
    "embd_pdrop": 0.0,
    "resid_pdrop": 0.0,
    "tie_word_embeddings": False,
}


def test_llama31_8b_fields():
    cfg = C.config_from_hf(LLAMA_31_8B)
    assert isinstance(cfg, C.LlamaConfig)
    assert (cfg.head_dim, cfg.num_groups, cfg.eos_token_ids) == (128, 4, (128001, 128008, 128009))
    assert cfg.rope_scaling == C.Llama3RopeScaling(8.0, 1.0, 4.0, 8192)
    assert not cfg.tie_word_embeddings and not cfg.attention_bias
    # Published parameter count: 8.03 B.
    assert abs(cfg.num_params() - 8.03e9) / 8.03e9 < 0.005


def test_qwen25_14b_fields():
    cfg = C.config_from_hf(QWEN25_14B)
    assert isinstance(cfg, C.Qwen2Config)
    assert cfg.attention_bias and not cfg.attention_out_bias
    assert cfg.sliding_window is None  # use_sliding_window is false
    assert cfg.rope_theta == 1e6 and cfg.head_dim == 128
    # Published parameter count: 14.7 B.
    assert abs(cfg.num_params() - 14.77e9) / 14.77e9 < 0.01


def test_gemma3_27b_fields():
    cfg = C.config_from_hf(GEMMA3_27B)
    assert isinstance(cfg, C.Gemma3TextConfig)
    assert cfg.qk_norm and cfg.sandwich_norms and cfg.tie_word_embeddings
    assert cfg.query_pre_attn_scalar == 168 and cfg.final_logit_softcapping is None
    # Five local layers (window 1024, base 10k, unscaled) then a global one (1M, linear x8).
    assert [cfg.layer_window(i) for i in range(7)] == [1024] * 5 + [None, 1024]
    assert cfg.layer_rope(0) == (10000.0, None)
    assert cfg.layer_rope(5) == (1e6, C.LinearRopeScaling(8.0))
    np.testing.assert_allclose(C.rope_inverse_frequencies(cfg, 5),
                               C.rope_inverse_frequencies(dataclasses.replace(
                                   cfg, rope_scaling=None), 5) / 8, rtol=1e-6)


def test_qwen3_32b_fields_and_phi35_refusal():
    cfg = C.config_from_hf(QWEN3_32B)
    assert isinstance(cfg, C.Qwen3Config)
    assert cfg.qk_norm and not cfg.attention_bias and cfg.sliding_window is None
    assert cfg.head_dim == 128 and cfg.num_attention_heads * cfg.head_dim == 8192 != cfg.hidden_size
    # Published parameter count: 32.8 B.
    assert abs(cfg.num_params() - 32.8e9) / 32.8e9 < 0.005
    with pytest.raises(C.UnsupportedConfigError, match="'longrope'"):
        C.config_from_hf(PHI35_MINI)
    # The 4k-context release has no scaling and loads.
    phi3 = C.config_from_hf({k: v for k, v in PHI35_MINI.items() if k != "rope_scaling"})
    assert isinstance(phi3, C.Phi3Config) and phi3.head_dim == 96


@pytest.mark.parametrize("hf", [LLAMA_31_8B, QWEN25_14B, GEMMA3_27B, QWEN3_32B],
                         ids=["llama31_8b", "qwen25_14b", "gemma3_27b", "qwen3_32b"])
def test_full_size_shapes_without_allocation(hf):
    cfg = C.config_from_hf(hf)
    model = convert.abstract_model(cfg, "bfloat16")
    graphdef, state = nnx.split(model)
    leaves = jax.tree.leaves(state)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    count = sum(int(np.prod(x.shape)) for x in leaves)
    assert count == cfg.num_params()
    nbytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in leaves)
    assert nbytes == 2 * count and all(x.dtype == jnp.bfloat16 for x in leaves)
    print(f"\n{cfg.model_type}: {count / 1e9:.2f} B parameters, {nbytes / 2**30:.1f} GiB in bfloat16")
    last = model.layers  # every layer's parameters stacked on a leading [L] axis
    d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    L = cfg.num_hidden_layers
    assert last.self_attn.q_proj.kernel.shape == (L, d, n, h)
    assert last.self_attn.k_proj.kernel.shape == (L, d, k, h)
    assert last.self_attn.o_proj.kernel.shape == (L, n, h, d)
    assert last.mlp.down_proj.kernel.shape == (L, cfg.intermediate_size, d)
    if cfg.tie_word_embeddings:
        assert model.lm_head is None
    else:
        assert model.lm_head.kernel.shape == (d, cfg.vocab_size)
    assert (last.self_attn.q_norm is not None) == cfg.qk_norm
    assert (last.self_attn.q_proj.bias is not None) == cfg.attention_bias
    # The fast path traces at full size too: logits only at the R read positions.
    tokens = jax.ShapeDtypeStruct((2, 64), jnp.int32)
    mask = jax.ShapeDtypeStruct((2, 64), jnp.bool_)
    read = jax.ShapeDtypeStruct((2, 3), jnp.int32)
    cache = jax.eval_shape(lambda: decoder.init_cache(cfg, 2, 80, jnp.bfloat16))
    logits, new_cache = jax.eval_shape(
        lambda s, t, m, r, c: decoder.forward(graphdef, s, t, m, r, None, c), state, tokens, mask,
        read, cache)
    assert logits.shape == (2, 3, cfg.vocab_size) and logits.dtype == jnp.float32
    assert new_cache.k.shape == (cfg.num_hidden_layers, 2, 80, k, h)


def test_transformers_written_configs_round_trip():
    import transformers as tf

    sizes = dict(vocab_size=37, hidden_size=18, intermediate_size=13, num_hidden_layers=2,
                 num_attention_heads=6, num_key_value_heads=2, head_dim=10)
    for hf_cls, ours in [(tf.LlamaConfig, C.LlamaConfig), (tf.Qwen2Config, C.Qwen2Config),
                         (tf.MistralConfig, C.MistralConfig), (tf.GemmaConfig, C.GemmaConfig),
                         (tf.Qwen3Config, C.Qwen3Config), (tf.Phi3Config, C.Phi3Config),
                         (tf.Gemma2Config, C.Gemma2Config),
                         (tf.Gemma3TextConfig, C.Gemma3TextConfig)]:
        d = hf_cls(**sizes).to_dict()
        cfg = C.config_from_hf(d)
        assert type(cfg) is ours
        for k, v in sizes.items():
            assert getattr(cfg, k) == v, (ours, k)
    g = C.config_from_hf(tf.GemmaConfig(**sizes).to_dict())
    assert g.tie_word_embeddings and g.hidden_act == "gelu_tanh"
    m = C.config_from_hf(tf.MistralConfig(**sizes).to_dict())
    assert m.sliding_window == 4096
    # Transformers' defaults: Gemma 2 alternates local/global from layer 0 and caps at 50 / 30;
    # Gemma 3 has one global layer in six (none among two) and two rotary bases.
    g2 = C.config_from_hf(tf.Gemma2Config(**sizes).to_dict())
    assert (g2.sliding_layers, g2.attn_logit_softcapping, g2.final_logit_softcapping) == (
        (True, False), 50.0, 30.0)
    g3 = C.config_from_hf(tf.Gemma3TextConfig(**sizes).to_dict())
    assert g3.sliding_layers == (True, True) and g3.final_logit_softcapping is None
    assert (g3.rope_theta, g3.sliding_rope_theta, g3.query_pre_attn_scalar) == (1e6, 1e4, 256)
    # Unknown fields are refused by name in the new families as well.
    for hf_cls in (tf.Qwen3Config, tf.Phi3Config, tf.Gemma2Config, tf.Gemma3TextConfig):
        with pytest.raises(C.UnsupportedConfigError, match="new_switch"):
            C.config_from_hf(dict(hf_cls(**sizes).to_dict(), new_switch=1.5))


def test_unknown_field_raises_naming_it():
    hf = dict(LLAMA_31_8B, some_new_switch=True)
    with pytest.raises(C.UnsupportedConfigError, match="some_new_switch"):
        C.config_from_hf(hf)
    # Empty values of unknown fields say nothing and are accepted.
    C.config_from_hf(dict(LLAMA_31_8B, some_new_switch=None))
    # Benign fields are accepted with any value.
    C.config_from_hf(dict(LLAMA_31_8B, torch_dtype="float16", use_cache=False, pad_token_id=7))


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "linear"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"model_type": "gpt2"}, "gpt2"),
        ({"model_type": "gemma3"}, "text_config"),
        ({"architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
        ({"pretraining_tp": 1, "partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"hidden_size": None}, "hidden_size"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ],
)
def test_refusals_name_the_field(change, needle):
    hf = dict(LLAMA_31_8B, **change)
    with pytest.raises(C.UnsupportedConfigError, match=needle):
        C.config_from_hf(hf)


def test_unknown_architecture_without_model_type():
    hf = {k: v for k, v in LLAMA_31_8B.items() if k != "model_type"}
    assert isinstance(C.config_from_hf(hf), C.LlamaConfig)
    hf["architectures"] = ["FalconForCausalLM"]
    with pytest.raises(C.UnsupportedConfigError, match="FalconForCausalLM"):
        C.config_from_hf(hf)


def test_qwen2_sliding_layers_follow_max_window_layers():
    hf = dict(QWEN25_14B, use_sliding_window=True, sliding_window=4096, max_window_layers=40)
    cfg = C.config_from_hf(hf)
    assert cfg.sliding_window == 4096
    assert [cfg.layer_window(i) for i in (0, 39, 40, 47)] == [None, None, 4096, 4096]


def test_transformers_5_rope_parameters_layout():
    hf = {k: v for k, v in LLAMA_31_8B.items() if k not in ("rope_theta", "rope_scaling")}
    hf["rope_parameters"] = dict(LLAMA_31_8B["rope_scaling"], rope_theta=500000.0)
    assert C.config_from_hf(hf) == C.config_from_hf(LLAMA_31_8B)


def test_llama3_inverse_frequencies_match_transformers():
    import transformers as tf
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ours = C.config_from_hf(LLAMA_31_8B)
    ref_cfg = tf.LlamaConfig(**{k: v for k, v in LLAMA_31_8B.items()
                                if k not in ("architectures", "transformers_version")})
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](ref_cfg, "cpu")
    np.testing.assert_allclose(C.rope_inverse_frequencies(ours), ref.numpy(), rtol=1e-6)
    # Scaling changes the long wavelengths and keeps the short ones.
    plain = C.rope_inverse_frequencies(dataclasses.replace(ours, rope_scaling=None))
    assert plain[0] == C.rope_inverse_frequencies(ours)[0]
    assert plain[-1] == pytest.approx(8 * C.rope_inverse_frequencies(ours)[-1], rel=1e-6)


def test_tiny_sizes_are_distinct_and_valid():
    for cls in C.CONFIG_CLASSES.values():
        cfg = cls.tiny()
        sizes = [cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size,
                 cfg.num_attention_heads * cfg.head_dim, cfg.head_dim, cfg.num_attention_heads]
        assert len(set(sizes)) == len(sizes)
        assert cfg.num_groups > 1
    with pytest.raises(ValueError, match="num_key_value_heads"):
        C.LlamaConfig.tiny(num_key_value_heads=4)
