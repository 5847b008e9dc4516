"""Gemma 3 vision-language checkpoints load their language model, the vision tower skipped.

A tiny random ``Gemma3ForConditionalGeneration`` (transformers' torch class, a SigLIP tower of one
layer) is saved with ``save_pretrained``; jaxjudge reads the folder and its logits on text-only
tokens equal the torch model's within 1e-4, under both namings of the decoder's tensors that
transformers has written. The text config's absent fields take transformers' own defaults.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

from jaxjudge.models import config as C  # noqa: E402
from jaxjudge.models import vision_language as VL  # noqa: E402

from test_models_parity import ATOL, SIZES, VOCAB, load_judge, torch_logits, write_tokenizer  # noqa: E402

TEXT = dict(SIZES, query_pre_attn_scalar=13, sliding_window=4, tie_word_embeddings=True,
            layer_types=["sliding_attention", "full_attention"])
VISION = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
              image_size=28, patch_size=14)


def _vl_model(folder: Path, tie: bool = True):
    # transformers ties the head by the top level's tie_word_embeddings, not the text config's.
    cfg = tf.Gemma3Config(text_config=TEXT, vision_config=VISION, mm_tokens_per_image=4, tie_word_embeddings=tie,
                          image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = "eager"
    cfg.vision_config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = tf.Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(folder)
    write_tokenizer(folder)
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gemma3_vl")
    return folder, _vl_model(folder)


TOKENS = np.array([[1, 5, 9, 13, 4, 7, 22, 30, 11, 6, 17, 25],
                   [1, 8, 8, 3, 19, 31, 2, 14, 5, 10, 12, 20]], np.int32)


def _check_logits(folder: Path, model) -> None:
    judge = load_judge(folder)
    assert judge.config.model_type == "gemma3_text"
    read = np.tile(np.arange(TOKENS.shape[1]), (TOKENS.shape[0], 1))
    ours = np.asarray(judge.forward(TOKENS, np.ones_like(TOKENS, bool), read))
    ref = torch_logits(model, TOKENS)
    assert ours.shape == ref.shape == TOKENS.shape + (VOCAB,)
    assert np.abs(ref).max() > 0.5  # the comparison is not between near-zero logits
    np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def test_language_model_logits_match_torch(saved):
    folder, model = saved
    names = set(load_file(str(folder / "model.safetensors")))
    assert any("vision_tower" in n for n in names) and any("multi_modal_projector" in n for n in names)
    _check_logits(folder, model)


def test_untied_head_is_read_from_the_language_model(tmp_path):
    model = _vl_model(tmp_path, tie=False)
    assert "language_model.lm_head.weight" in load_file(str(tmp_path / "model.safetensors"))
    _check_logits(tmp_path, model)


@pytest.mark.parametrize("naming", ["released", "later"])
def test_both_namings_of_the_decoder_tensors(saved, tmp_path, naming):
    folder, model = saved
    tensors = load_file(str(folder / "model.safetensors"))

    def rename(name: str) -> str:
        for old in ("language_model.model.", "model.language_model."):
            if name.startswith(old):
                rest = name[len(old):]
                return ("language_model.model." if naming == "released" else "model.language_model.") + rest
        for old in ("vision_tower.", "model.vision_tower."):
            if name.startswith(old):
                return ("vision_tower." if naming == "released" else "model.vision_tower.") + name[len(old):]
        for old in ("multi_modal_projector.", "model.multi_modal_projector."):
            if name.startswith(old):
                return (("multi_modal_projector." if naming == "released" else "model.multi_modal_projector.")
                        + name[len(old):])
        return name

    renamed = {rename(k): v for k, v in tensors.items()}
    prefix = "language_model.model." if naming == "released" else "model.language_model."
    assert any(k.startswith(prefix) for k in renamed)
    save_file(renamed, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    _check_logits(tmp_path, model)


def test_a_tensor_outside_decoder_and_tower_is_refused_by_name(saved, tmp_path):
    folder, _ = saved
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["audio_tower.conv.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(ValueError, match="audio_tower.conv.weight"):
        load_judge(tmp_path)


def _transformers_default(cfg, key):
    """transformers' Gemma3TextConfig default of one field (the rotary ones live in
    rope_parameters in transformers 5)."""
    rope = getattr(cfg, "rope_parameters", None) or {}
    if key == "rope_theta" and "full_attention" in rope:
        return rope["full_attention"]["rope_theta"]
    if key == "rope_local_base_freq" and "sliding_attention" in rope:
        return rope["sliding_attention"]["rope_theta"]
    if key == "sliding_window_pattern":
        for name in ("sliding_window_pattern", "_sliding_window_pattern"):
            if getattr(cfg, name, None) is not None:
                return getattr(cfg, name)
        types = cfg.layer_types
        return types.index("full_attention") + 1
    return getattr(cfg, key)


@pytest.mark.parametrize("key", sorted(VL.GEMMA3_TEXT_DEFAULTS))
def test_text_defaults_are_transformers(key):
    ref = _transformers_default(tf.Gemma3TextConfig(), key)
    ours = VL.GEMMA3_TEXT_DEFAULTS[key]
    if isinstance(ours, float):
        assert ref == pytest.approx(ours)
    else:
        assert ref == ours


# The shape of the Hub's google/gemma-3-4b-it config.json: the text config names only what
# differs from transformers' defaults.
HUB_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02,
    "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_a_hub_shaped_config_reads_as_its_decoder():
    cfg = C.config_from_hf(HUB_4B)
    ref = tf.Gemma3Config(**{k: v for k, v in HUB_4B.items() if k not in ("architectures", "model_type")})
    text = ref.text_config
    assert cfg.model_type == "gemma3_text"
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (2560, 10240, 34)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (
        text.num_attention_heads, text.num_key_value_heads, text.head_dim)
    assert cfg.vocab_size == text.vocab_size and cfg.sliding_window == 1024
    assert cfg.eos_token_ids == (1, 106)
    assert [cfg.layer_window(i) is not None for i in range(34)] == [
        t == "sliding_attention" for t in text.layer_types]
    assert cfg.num_params() > 3.8e9  # 3.88 B in the decoder (the 4B's rest is its vision tower)


@pytest.mark.parametrize("change, needle", [
    ({"text_config": None}, "text_config"),
    ({"text_config": {"model_type": "llama"}}, "'llama'"),
    ({"audio_config": {}}, "audio_config"),
])
def test_vision_language_config_refusals_name_the_field(change, needle):
    hf = {**HUB_4B, **change}
    with pytest.raises(C.UnsupportedConfigError, match=needle):
        C.config_from_hf(hf)


def test_vision_language_config_file_round_trip(saved):
    folder, model = saved
    hf = json.loads((folder / "config.json").read_text())
    assert VL.is_vision_language(hf)
    cfg = C.config_from_hf(hf)
    assert cfg.vocab_size == VOCAB and cfg.num_hidden_layers == model.config.text_config.num_hidden_layers


def test_converted_cache_round_trip(saved, tmp_path, capsys):
    from jaxjudge import models  # noqa: PLC0415

    folder, model = saved
    read = np.tile(np.arange(TOKENS.shape[1]), (TOKENS.shape[0], 1))
    mask = np.ones_like(TOKENS, bool)
    first = models.load(folder, cache_dir=tmp_path, verbose=True)
    assert "converted" in capsys.readouterr().out
    second = models.load(folder, cache_dir=tmp_path, verbose=True)
    assert "restored from cache" in capsys.readouterr().out
    assert second.config == first.config and second.config.model_type == "gemma3_text"
    np.testing.assert_array_equal(np.asarray(second.forward(TOKENS, mask, read)),
                                  np.asarray(first.forward(TOKENS, mask, read)))
    np.testing.assert_allclose(np.asarray(second.forward(TOKENS, mask, read)), torch_logits(model, TOKENS),
                               atol=ATOL, rtol=0)
