"""Reading a Hugging Face model folder (or Hub repo id) without torch.

:func:`load_hf` returns the same tuple as the GGUF reader, ``(hf_config, tensors, tokenizer,
chat_template)``, so both sources go through :func:`jaxjudge.models.config.config_from_hf` and
:func:`jaxjudge.models.convert.build_model` alike:

- ``hf_config``: the ``config.json`` dict;
- ``tensors``: Hugging Face name -> ``np.ndarray`` (safetensors' numpy loader; bfloat16 arrives
  as ``ml_dtypes.bfloat16``), from ``model.safetensors`` or the shards listed in
  ``model.safetensors.index.json``;
- ``tokenizer``: ``tokenizers.Tokenizer`` from ``tokenizer.json``;
- ``chat_template``: the Jinja template from ``chat_template.jinja``, ``chat_template.json`` or
  ``tokenizer_config.json`` (None when the model has none).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from jaxjudge.models import slices as _slices
from jaxjudge.models import vision_language as _vl

__all__ = [
    "decoder_tensors",
    "is_repo_id",
    "is_source_file",
    "load_hf",
    "read_config",
    "read_safetensors",
    "read_tokenizer",
    "resolve_source",
    "source_sha256",
    "special_tokens",
]

_HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer.model"]


def is_source_file(name: str) -> bool:
    """Whether a folder's file ``name`` is part of the model (config, tokenizer, safetensors):
    the files a source's hash covers and a Hub snapshot fetches."""
    return name.endswith((".json", ".safetensors", ".jinja")) or name == "tokenizer.model"


def is_repo_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub repo id, ``owner/name`` or ``owner/name@revision`` (a
    path that does not exist may too: the caller looks for the path first)."""
    repo = text.partition("@")[0]
    return repo.count("/") == 1 and not repo.startswith((".", "/", "~")) and all(repo.split("/"))


def resolve_source(source: str | os.PathLike, revision: str | None = None, *, weights: bool = True) -> Path:
    """A local folder for ``source``: the path itself, or a Hub snapshot for a repo id.

    A string that is not an existing path but looks like ``owner/name`` is fetched with
    ``huggingface_hub.snapshot_download`` (only configs, safetensors and tokenizer files; no
    safetensors unless ``weights``) into the Hub cache, at ``revision`` (a branch, tag or
    commit; default the one an ``owner/name@revision`` id names, else the main branch). Offline
    (``HF_HUB_OFFLINE=1``, or the Hub unreachable) the snapshot already in the Hub cache is used,
    found through ``refs/main`` (or the commit's own snapshot folder).

    Raises:
        FileNotFoundError: the path does not exist and cannot be fetched.
    """
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{path} is a file; a Hugging Face source must be a folder")
        return path
    text = str(source)
    if is_repo_id(text):
        repo, _, named = text.partition("@")
        try:
            # Heavy to import (its HTTP stack) and needed only to fetch a Hub repo id.
            from huggingface_hub import snapshot_download

            patterns = _HUB_PATTERNS if weights else [x for x in _HUB_PATTERNS if x != "*.safetensors"]
            return Path(snapshot_download(repo, revision=revision or named or None, allow_patterns=patterns))
        except Exception as e:  # offline, unknown repo, gated repo, ...
            raise FileNotFoundError(f"could not fetch Hugging Face repo {text!r}: {e}") from e
    raise FileNotFoundError(f"model folder {path} does not exist")


def read_config(folder: Path) -> dict[str, Any]:
    """The parsed ``config.json`` of ``folder``."""
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None


def read_safetensors(folder: Path) -> dict[str, np.ndarray]:
    """All tensors of ``folder``'s single or sharded safetensors checkpoint.

    Raises:
        FileNotFoundError: no checkpoint, or a shard named by the index is missing.
        ValueError: a file is truncated or corrupted (named), or a key appears twice.
    """
    # One reader of the file layout and its checks (`jaxjudge.models.slices`), every tensor read whole.
    return {key: tensor.read() for key, tensor in _slices.lazy_safetensors(folder).items()}


def decoder_tensors(hf_config: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The decoder's tensors of a checkpoint: all of them, except for a Gemma 3 vision-language
    checkpoint, whose language model's are renamed as a text-only checkpoint names them and whose
    vision tower and projector are skipped (`jaxjudge.models.vision_language.text_tensors`)."""
    return _vl.text_tensors(tensors) if _vl.is_vision_language(hf_config) else tensors


def _template_from_value(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default") or next(iter(named.values()), None)
    raise ValueError(f"unrecognised chat_template value of type {type(value).__name__}")


def read_tokenizer(folder: Path):
    """(``tokenizers.Tokenizer``, chat template or None, tokenizer_config dict) of ``folder``."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (a fast tokenizer file is required)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:
        raise ValueError(f"cannot read tokenizer file {path}: {e}") from e
    tok_cfg: dict[str, Any] = {}
    cfg_path = folder / "tokenizer_config.json"
    if cfg_path.is_file():
        tok_cfg = json.loads(cfg_path.read_text())
    template = None
    if (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text()
    elif (folder / "chat_template.json").is_file():
        template = _template_from_value(
            json.loads((folder / "chat_template.json").read_text()).get("chat_template"))
    else:
        template = _template_from_value(tok_cfg.get("chat_template"))
    return tokenizer, template, tok_cfg


def special_tokens(tok_cfg: dict[str, Any]) -> dict[str, str]:
    """``bos_token``/``eos_token``/... strings from a tokenizer_config (str or AddedToken dict)."""
    out = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = tok_cfg.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def load_hf(source: str | os.PathLike):
    """Reads a Hugging Face model folder (or Hub repo id).

    Args:
        source: a folder with ``config.json``, safetensors and ``tokenizer.json``, or a Hub repo
            id (fetched when not a local path).

    Returns:
        ``(hf_config dict, tensors dict[str, np.ndarray], tokenizers.Tokenizer, chat_template or
        None)``; ``hf_config`` gains no keys. The tokenizer_config's special-token strings are
        available from :func:`read_tokenizer`.
    """
    folder = resolve_source(source)
    hf_config = read_config(folder)
    tensors = decoder_tensors(hf_config, read_safetensors(folder))
    tokenizer, template, _ = read_tokenizer(folder)
    return hf_config, tensors, tokenizer, template


def source_sha256(source: str | os.PathLike, chunk: int = 1 << 20,
                  file_hash: Callable[[Path], str] | None = None) -> str:
    """Content hash of a model source: a file's sha256, or for a folder the sha256 over
    (relative name, file sha256) of its config, tokenizer and safetensors files, sorted.

    ``file_hash``: how one file is hashed (default: read it whole; `jaxjudge.models.weights_cache`
    passes its memoised hash, so that a folder's shards are read once per version)."""
    path = Path(source)

    def read_hash(p: Path) -> str:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
        return h.hexdigest()

    one = file_hash or read_hash
    if path.is_file():
        return one(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} does not exist")
    names = sorted(p for p in path.iterdir() if p.is_file() and is_source_file(p.name))
    outer = hashlib.sha256()
    for p in names:
        outer.update(p.name.encode() + b"\0" + one(p).encode() + b"\n")
    return outer.hexdigest()
