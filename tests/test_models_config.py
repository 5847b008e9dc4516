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


@pytest.mark.parametrize("hf", [LLAMA_31_8B, QWEN25_14B], ids=["llama31_8b", "qwen25_14b"])
def test_full_size_shapes_without_allocation(hf):
    cfg = C.config_from_hf(hf)
    model = convert.abstract_model(cfg, "bfloat16")
    graphdef, state = nnx.split(model)
    leaves = jax.tree.leaves(state)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    assert sum(int(np.prod(x.shape)) for x in leaves) == cfg.num_params()
    last = model.layers[cfg.num_hidden_layers - 1]
    d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    assert last.self_attn.q_proj.kernel.shape == (d, n, h)
    assert last.self_attn.k_proj.kernel.shape == (d, k, h)
    assert last.self_attn.o_proj.kernel.shape == (n, h, d)
    assert last.mlp.down_proj.kernel.shape == (cfg.intermediate_size, d)
    assert model.lm_head.kernel.shape == (d, cfg.vocab_size)
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
                         (tf.MistralConfig, C.MistralConfig), (tf.GemmaConfig, C.GemmaConfig)]:
        d = hf_cls(**sizes).to_dict()
        cfg = C.config_from_hf(d)
        assert type(cfg) is ours
        for k, v in sizes.items():
            assert getattr(cfg, k) == v, (ours, k)
    g = C.config_from_hf(tf.GemmaConfig(**sizes).to_dict())
    assert g.tie_word_embeddings and g.hidden_act == "gelu_tanh"
    m = C.config_from_hf(tf.MistralConfig(**sizes).to_dict())
    assert m.sliding_window == 4096


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
        ({"model_type": "gemma2"}, "soft-capping"),
        ({"model_type": "gemma3_text"}, "gemma3_text"),
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
