"""Loading a judge from a source: GGUF file, Hugging Face folder or Hub repo id, through the
converted-parameter cache (:func:`load`, re-exported as ``jaxjudge.models.load``)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import ml_dtypes

from jaxjudge.models import cache as _cache
from jaxjudge.models import gguf as _gguf
from jaxjudge.models import hf as _hf
from jaxjudge.models import sharding as _sharding
from jaxjudge.models import slices as _slices
from jaxjudge.models.judge import Judge

__all__ = ["load", "ModelHashMismatch"]


def _is_gguf(path: Path) -> bool:
    if path.suffix.lower() == ".gguf":
        return True
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


class ModelHashMismatch(ValueError):
    """A model source whose content hash is not the one expected (a changed or damaged file)."""

    def __init__(self, path: Any, actual: str, expected: str):
        self.path, self.actual, self.expected = str(path), actual, expected
        super().__init__(f"{path}: sha256 is {actual}, expected {expected} (the file changed or is damaged; "
                         "fetch it again, or update the sha256 the config records)")


def load(
    source: str | os.PathLike[str] | None = None,
    dtype: Any = "float32",
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    *,
    mesh: Any = None,
    verbose: bool = False,
    expected_sha256: str | None = None,
    verify: bool = False,
) -> Judge:
    """Loads a judge model, converting it once and restoring it from the cache afterwards.

    Args:
        source: a ``.gguf`` file, a Hugging Face model folder, or a Hub repo id
            (``"owner/name"``, fetched only when online). None: the embedded default,
            SmolLM2-135M-Instruct (:func:`default_model_path`).
        dtype: parameter and compute dtype, ``"float32"`` or ``"bfloat16"``.
        cache_dir: cache root (default ``$JAXJUDGE_CACHE`` or ``~/.cache/jaxjudge/converted``).
        use_cache: read and write the converted-parameter cache. With False the source is
            converted every time and nothing is written. Under several processes
            (`jax.distributed`) the processes of a ``mesh`` that spans them use one entry
            together: process 0 decides whether it exists, all restore it into their shards,
            or all convert and then write it in one Orbax save (each process its own shards, a
            shared folder); per-process judges (no mesh, or a mesh of this process's devices)
            each convert from the source. The file hashes are memoised either way.
        mesh: optional ``jax.sharding.Mesh`` (``data`` and ``model`` axes); parameters are then
            placed by the project's logical-axis rules, restored directly into their shardings.
        verbose: print where the judge came from and how long it took.
        expected_sha256: the source's content hash as a config records it; a source that
            hashes otherwise raises `ModelHashMismatch` before any weights are read.
        verify: hash the source's bytes now instead of trusting the memoised digest.

    Returns:
        A :class:`~jaxjudge.models.judge.Judge`.

    Raises:
        FileNotFoundError: the source does not exist (and is not a reachable Hub repo).
        ValueError: a file that is not GGUF; any conversion error names the field, tensor or
            file concerned.
    """
    start = time.perf_counter()
    if source is None:
        source = _gguf.default_model_path()
    path = Path(source).expanduser()
    if path.is_file():
        if not _is_gguf(path):
            raise ValueError(
                f"{path} is a file but not a GGUF file; pass a .gguf file or a Hugging Face folder"
            )
        kind = "gguf"
    else:
        # A folder, or a Hub repo id resolved to a downloaded snapshot folder.
        path = _hf.resolve_source(source)
        kind = "hf"
    dname = _cache.dtype_name(dtype)
    root = _cache.cache_root(cache_dir)
    memo = root if use_cache else None
    spmd = _sharding.spans_processes(mesh)
    if use_cache and jax.process_count() > 1:
        # Orbax saves and restores as one job across processes: only the processes of one mesh,
        # and only in a folder they all see. Otherwise each process converts from the source.
        why = ("per-process judges (a mesh over every process's devices shares one entry)" if not spmd else
               None if _cache.shared_by_all(root) else
               f"the cache folder {root} is not one folder every process sees (set $JAXJUDGE_CACHE to one)")
        if why is not None:
            warnings.warn(f"jaxjudge: the converted-parameter cache is not used under several processes: {why}; "
                          "each process converts the model from its source", stacklevel=2)
            use_cache = False
    sha = _cache.source_sha256(path, memo_dir=memo, verify=verify)
    if expected_sha256 is not None and sha != expected_sha256:
        raise ModelHashMismatch(path, sha, expected_sha256)
    key = _cache.cache_key(sha, dname)

    if use_cache:
        hit = _cache.load_converted(root, key, mesh=mesh, together=spmd)
        if hit is not None:
            judge = Judge(hit.config, hit.model, hit.tokenizer, hit.chat_template, source=str(path),
                          sha256=sha, special_tokens=hit.special_tokens or None)
            judge.mesh = mesh
            if verbose:
                print(f"jaxjudge: {path.name} restored from cache {root / key} "
                      f"in {time.perf_counter() - start:.2f}s")
            return judge

    if kind == "gguf":
        # Decoding is float32; bfloat16 judges keep half the host memory from here on.
        host = "float32" if dname == "float32" else ml_dtypes.bfloat16
        hf_config, tensors, tokenizer, template = _gguf.load_gguf(path, dtype=host)
        special = None
    else:
        hf_config = _hf.read_config(path)
        # On a mesh, each parameter is read block by block: only what this process's devices hold.
        reader = _hf.read_safetensors if mesh is None else _slices.lazy_safetensors
        tensors = _hf.decoder_tensors(hf_config, reader(path))
        tokenizer, template, tok_cfg = _hf.read_tokenizer(path)
        special = _hf.special_tokens(tok_cfg)
    judge = Judge.from_parts(hf_config, tensors, tokenizer, template, dtype=dname,
                             source=str(path), sha256=sha, mesh=mesh)
    if special:
        # The tokenizer_config's strings win over the ones derived from token ids.
        judge.special_tokens = {**judge.special_tokens, **special}
    del tensors
    if use_cache:
        try:
            _cache.save_converted(root, key, model=judge.model, hf_config=hf_config,
                                  tokenizer=tokenizer, chat_template=template,
                                  special_tokens=judge.special_tokens, source=str(path), sha256=sha,
                                  together=spmd)
        except OSError as e:  # a full or read-only disk costs the next load time, nothing else
            warnings.warn(f"jaxjudge: could not write the cache entry {root / key}: {e}", stacklevel=2)
    if verbose:
        print(f"jaxjudge: {path.name} converted in {time.perf_counter() - start:.2f}s"
              + (f", cached at {root / key}" if use_cache else ""))
    return judge
