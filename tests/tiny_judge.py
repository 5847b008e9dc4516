"""A tiny random-weight judge with SmolLM2's real tokenizer and chat template, for the tests in
which the model's numbers are not what is checked (the CLI, the demo's plumbing, mesh
equivalence, the multi-process runs, the notebooks).

`write_gguf` writes it as a GGUF file laid out as llama.cpp lays out a Llama checkpoint (the
SmolLM2 file's tokenizer and chat-template fields copied, its weights replaced by a small
seeded random network); `write_hf_folder` writes the same network as a Hugging Face folder
(config.json, model.safetensors, tokenizer.json, tokenizer_config.json). Both are a pure
function of the seed, so a file written in one process hashes as the one written in another.

The weights are random but not flat: every token's embedding carries a constant component that
the final norm scales up, and the output rows of the digit tokens and of ``<|im_end|>`` point
along it, so the judge answers with a digit (then stops) most of the time, with
input-dependent probabilities. Its scores mean nothing; they exercise every path a real
judge's would (valid and invalid replies, ties that are not exact, intervals that exist).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

# Small widths in Llama's layout, with grouped-query attention (2 query heads a KV head) and head
# counts that a model axis of 2, 3 or 6 divides, as the mesh tests need.
SHAPE = dict(layers=2, hidden=48, heads=12, kv_heads=6, head_dim=8, ffn=96)
NAME = "tiny-smollm2-tokenizer"


def _source() -> Path:
    from jaxjudge.models.gguf import default_model_path

    return default_model_path()


def _tokenizer_fields() -> dict:
    """The SmolLM2 file's tokenizer and chat-template fields, as (value, type, sub_type)."""
    from jaxjudge.models.gguf_file import GGUFFile

    head = GGUFFile(_source())
    return {key: (value, *head.kinds[key]) for key, value in head.metadata.items() if key.startswith("tokenizer.")}


def hf_state(vocab: list[str], seed: int = 0) -> dict[str, np.ndarray]:
    """The network in Hugging Face's tensor names and layout (float32)."""
    s = SHAPE
    rng = np.random.default_rng(seed)
    d, hd, v = s["hidden"], s["head_dim"], len(vocab)

    def w(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or shape[-1] ** -0.5)).astype(np.float32)

    emb = w(v, d, scale=0.5)
    emb[:, 0] += 6.0  # the constant direction every position carries
    head = w(v, d, scale=0.3)
    favoured = [i for i, t in enumerate(vocab) if t in set("123456789") or t == "<|im_end|>"]
    head[favoured, 0] += 2.5 + 0.5 * rng.random(len(favoured)).astype(np.float32)
    state = {"model.embed_tokens.weight": emb, "lm_head.weight": head,
             "model.norm.weight": np.ones(d, np.float32)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        state.update({
            p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            p + "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            p + "self_attn.q_proj.weight": w(s["heads"] * hd, d),
            p + "self_attn.k_proj.weight": w(s["kv_heads"] * hd, d),
            p + "self_attn.v_proj.weight": w(s["kv_heads"] * hd, d),
            p + "self_attn.o_proj.weight": w(d, s["heads"] * hd, scale=0.5 * d ** -0.5),
            p + "mlp.gate_proj.weight": w(s["ffn"], d),
            p + "mlp.up_proj.weight": w(s["ffn"], d),
            p + "mlp.down_proj.weight": w(d, s["ffn"], scale=0.5 * s["ffn"] ** -0.5),
        })
    return state


def hf_config(vocab_size: int, bos: int, eos: int) -> dict:
    s = SHAPE
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab_size,
        "hidden_size": s["hidden"], "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
        "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": False, "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "float32",
    }


def write_gguf(path: str | Path, seed: int = 0) -> Path:
    """Writes the tiny judge as a GGUF file at ``path`` (float32 tensors); returns the path."""
    import gguf

    path = Path(path)
    fields = _tokenizer_fields()
    vocab = list(fields["tokenizer.ggml.tokens"][0])
    s = SHAPE
    w = gguf.GGUFWriter(str(path) + ".tmp", arch="llama")
    w.add_name(NAME)
    w.add_block_count(s["layers"])
    w.add_context_length(8192)
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(vocab))
    for key, (value, kind, sub) in fields.items():
        w.add_key_value(key, value, kind, sub_type=sub)
    from jaxjudge.models import gguf as jg
    from tests.models.test_gguf import _permute  # HF's q/k rows -> llama.cpp's, as its converter does

    # The library's own name tables, read backwards (GGUF name -> Hugging Face name there).
    names = {hf: g for g, hf in jg._GLOBAL_TENSORS.items()}
    leaves = {hf: g for g, hf in jg._BLOCK_TENSORS.items()}
    for name, arr in hf_state(vocab, seed).items():
        if name in names:
            out = names[name]
        else:
            layer, leaf = name.split(".")[2], ".".join(name.split(".")[3:])
            out = f"blk.{layer}.{leaves[leaf]}"
            if leaf == "self_attn.q_proj.weight":
                arr = _permute(arr, s["heads"])
            elif leaf == "self_attn.k_proj.weight":
                arr = _permute(arr, s["kv_heads"])
        w.add_tensor(out, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    Path(str(path) + ".tmp").replace(path)
    return path


def write_hf_folder(folder: str | Path, gguf_file: str | Path, seed: int = 0) -> Path:
    """Writes the network of ``gguf_file`` (written by `write_gguf` with the same seed) as a
    Hugging Face folder; returns the folder."""
    import gguf
    from safetensors.numpy import save_file

    from jaxjudge.models.gguf import load_gguf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fields = _tokenizer_fields()
    vocab = list(fields["tokenizer.ggml.tokens"][0])
    bos, eos = int(fields["tokenizer.ggml.bos_token_id"][0]), int(fields["tokenizer.ggml.eos_token_id"][0])
    (folder / "config.json").write_text(json.dumps(hf_config(len(vocab), bos, eos), indent=1))
    save_file(hf_state(vocab, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    # The tokenizer as the library builds it from the GGUF fields (SmolLM2's ids and merges).
    ck = load_gguf(gguf_file)
    ck.tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": ck.chat_template, "bos_token": vocab[bos], "eos_token": vocab[eos],
        "unk_token": vocab[int(fields["tokenizer.ggml.unknown_token_id"][0])],
        "pad_token": vocab[int(fields["tokenizer.ggml.padding_token_id"][0])],
        "add_bos_token": False, "model_max_length": 8192,
    }, indent=1))
    return folder


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def spec(path: str | Path, name: str = "tiny"):
    """A config's `ModelSpec` for the judge written at ``path`` (its sha256 recorded)."""
    from jaxjudge.experiment import ModelSpec

    return ModelSpec(name, str(path), sha256(path))
