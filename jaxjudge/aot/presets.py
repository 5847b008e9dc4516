"""Full-size judge configs by name, and how `jaxjudge aot` finds a judge's config.

The presets are the ``config.json`` of public checkpoints (the fields the decoder reads), so a
judge can be compiled for a TPU slice without its weights: nothing here downloads a tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["PRESETS", "judge_config"]


def _llama3(hidden: int, mlp: int, layers: int, heads: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "bos_token_id": 128000, "eos_token_id": [128001, 128009], "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": mlp, "max_position_embeddings": 8192,
        "mlp_bias": False, "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "vocab_size": 128256,
    }


PRESETS: dict[str, dict[str, Any]] = {
    # meta-llama/Meta-Llama-3-8B-Instruct and -70B-Instruct
    "llama-3-8b": _llama3(4096, 14336, 32, 32),
    "llama-3-70b": _llama3(8192, 28672, 80, 64),
    # Qwen/Qwen2.5-14B-Instruct
    "qwen2.5-14b": {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643,
        "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 5120, "intermediate_size": 13824,
        "max_position_embeddings": 32768, "max_window_layers": 70, "num_attention_heads": 40,
        "num_hidden_layers": 48, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
        "vocab_size": 152064,
    },
    # the text decoder of google/gemma-3-27b-it (its text_config, defaults written out)
    "gemma-3-27b": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
        "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 128,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 5376, "intermediate_size": 21504,
        "max_position_embeddings": 131072, "num_attention_heads": 32, "num_hidden_layers": 62,
        "num_key_value_heads": 16, "query_pre_attn_scalar": 168, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000.0, "sliding_window": 1024, "sliding_window_pattern": 6,
        "vocab_size": 262208,
    },
    # Qwen/Qwen3-32B
    "qwen3-32b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
        "hidden_size": 5120, "intermediate_size": 25600, "max_position_embeddings": 40960,
        "max_window_layers": 64, "num_attention_heads": 64, "num_hidden_layers": 64,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
        "vocab_size": 151936,
    },
}


def judge_config(judge: str) -> dict[str, Any]:
    """The Hugging Face config of ``judge``: a preset name, a ``config.json`` path (or a folder
    holding one), or a Hub repo id (its ``config.json`` only, fetched with ``huggingface_hub``;
    the local Hub cache when offline).

    Raises:
        ValueError: naming the judge when none of these finds it.
    """
    if judge in PRESETS:
        return dict(PRESETS[judge])
    path = Path(judge)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        with open(path) as f:
            return json.load(f)
    if judge.count("/") == 1 and not path.exists():
        try:
            from huggingface_hub import hf_hub_download  # an optional dependency
        except ImportError:
            raise ValueError(f"judge {judge!r}: not a preset or file, and huggingface_hub is not "
                             f"installed to read it from the Hub") from None
        try:
            with open(hf_hub_download(judge, "config.json")) as f:
                return json.load(f)
        except Exception as e:  # offline, gated or unknown repo: say which
            raise ValueError(f"judge {judge!r}: could not read its config.json from the Hub ({e})") from None
    raise ValueError(f"judge {judge!r} is not a preset ({', '.join(sorted(PRESETS))}), a config.json "
                     f"path or a Hub repo id")
