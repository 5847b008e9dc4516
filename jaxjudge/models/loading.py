"""Loading a judge from a source: GGUF file, Hugging Face folder, ``gs://`` object or prefix, or
Hub repo id, through the converted-parameter cache (:func:`load`, re-exported as
``jaxjudge.models.load``)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import jax
import ml_dtypes

from jaxjudge.models import weights_cache as _weights_cache
from jaxjudge.models import gguf as _gguf
from jaxjudge.models import hf as _hf
from jaxjudge.models import sharding as _sharding
from jaxjudge.models import slices as _slices
from jaxjudge.models import source as _source
from jaxjudge.models.judge import Judge
from jaxjudge.store import CLAIM_STALE_S
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.files import claim_file

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

    The entry is found by the source's identity (`jaxjudge.models.source`): a warm entry of a
    ``gs://`` or Hub source is restored with none of its bytes read or hashed; a cold one is
    fetched once (a temporary download, or the Hub cache), hashed and converted.

    Args:
        source: a ``.gguf`` file, a Hugging Face model folder, a ``gs://`` object (GGUF) or
            prefix (a Hugging Face folder), or a Hub repo id (``"owner/name"`` or
            ``"owner/name@revision"``, fetched only when online). None: the embedded default,
            SmolLM2-135M-Instruct (:func:`default_model_path`).
        dtype: parameter and compute dtype, ``"float32"`` or ``"bfloat16"``.
        cache_dir: cache root (default ``$JAXJUDGE_CACHE`` or ``~/.cache/jaxjudge/converted``).
        use_cache: read and write the converted-parameter cache (False: convert every time,
            write nothing). The processes of a ``mesh`` spanning several (`jax.distributed`) use
            one entry together: process 0 decides whether it exists, all restore it into their
            shards, or all convert and write it in one Orbax save (a folder they share). Judges
            of a process's own (no mesh, or its own devices) share a bucket's entries, one
            process converting while the others wait (`_lookup`); under several processes with
            a local cache folder each converts from the source.
        mesh: optional ``jax.sharding.Mesh`` (``data`` and ``model`` axes); parameters are then
            placed by the project's logical-axis rules, restored directly into their shardings.
        verbose: print where the judge came from and how long it took.
        expected_sha256: the source's content hash as a config records it; a source that
            hashes otherwise raises `ModelHashMismatch`, a local one before any weights are read.
            A remote source's warm entry is checked against the hash recorded when it was
            converted from the objects (generations) or commit that key it, not against bytes
            read now (see ``verify``); a cold one's fetched bytes are hashed before conversion.
        verify: hash the source's bytes now (a local one's instead of its memoised digest; a
            remote one's fetched again, its warm entry not used).

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
    dname = _weights_cache.dtype_name(dtype)
    root = _weights_cache.cache_root(cache_dir)
    memo = root if use_cache else None
    spmd = _sharding.spans_processes(mesh)
    if use_cache and jax.process_count() > 1:
        use_cache = _cache_shared(root, spmd)
    ident = _source.source_identity(source, memo_dir=memo, verify=verify)
    where = ident.path or ident.source
    _check_sha256(where, ident.sha256, expected_sha256)
    key = _weights_cache.cache_key(ident.digest, dname)
    hit, claim = (_lookup(root, key, mesh, spmd) if use_cache and not (verify and ident.sha256 is None)
                  else (None, None))
    if hit is not None:
        _say(verbose, f"{ident.source} restored from cache {root / key}", start)
        return _restored(hit, ident, where, expected_sha256, mesh)
    try:
        with _source.local_copy(ident) as path:
            sha = ident.sha256 or _source.fetched_sha256(path)  # a remote source's bytes, as fetched
            _check_sha256(where, sha, expected_sha256)
            judge, hf_config, tokenizer, template = _convert(path, dname, mesh, source=str(where), sha256=sha)
        if use_cache:
            _save(root, key, judge, hf_config, tokenizer, template, identity=ident.fields, together=spmd)
    finally:
        if claim is not None:
            claim.release()
    _say(verbose, f"{ident.source} converted" + (f", cached at {root / key}," if use_cache else ""), start)
    return judge


def _restored(hit: _weights_cache.CachedJudge, ident: _source.SourceIdentity, where: Any, expected: str | None,
              mesh: Any) -> Judge:
    """The judge a cache entry holds, its source's content hash checked: a local source's own; a
    remote source's the one recorded when the entry was converted from what keys it."""
    sha = ident.sha256 or hit.meta.get("sha256")
    _check_sha256(where, sha or "not recorded in the cache entry", expected)
    judge = Judge(hit.config, hit.model, hit.tokenizer, hit.chat_template, source=str(where),
                  sha256=sha, special_tokens=hit.special_tokens or None)
    judge.mesh = mesh
    return judge


def _save(root: Any, key: str, judge: Judge, hf_config: dict[str, Any], tokenizer: Any, template: str | None, *,
          identity: dict[str, Any], together: bool) -> None:
    """Writes a converted judge's cache entry; a full or read-only disk costs the next load time,
    nothing else (a warning)."""
    try:
        _weights_cache.save_converted(root, key, model=judge.model, hf_config=hf_config, tokenizer=tokenizer,
                              chat_template=template, special_tokens=judge.special_tokens, source=judge.source,
                              sha256=judge.sha256, identity=identity, together=together)
    except OSError as e:
        warnings.warn(f"jaxjudge: could not write the cache entry {root / key}: {e}", stacklevel=3)


def _say(verbose: bool, what: str, start: float) -> None:
    if verbose:
        print(f"jaxjudge: {what} in {time.perf_counter() - start:.2f}s")


CLAIM_POLL_S = 1.0
"""How often a process waiting for another's conversion of a cache entry looks again."""


def _lookup(root: Any, key: str, mesh: Any, spmd: bool) -> tuple[_weights_cache.CachedJudge | None, Any]:
    """The cache entry ``key``, or None and this process's claim to convert it.

    In a bucket, for a judge of this process's own (no mesh spanning processes), one process
    converts a missing entry and the others read it: each looks for the entry, else claims its
    conversion (``<root>/.<key>.claim``, `jaxjudge.store.files.claim_file`), else waits for the
    holder (`CLAIM_POLL_S`); a holder silent for `CLAIM_STALE_S` is taken over. Elsewhere, a
    plain look (every process of a spanning mesh looks together).
    """
    if spmd or not isinstance(root, BucketPath):
        return _weights_cache.load_converted(root, key, mesh=mesh, together=spmd), None
    while True:
        hit = _weights_cache.load_converted(root, key, mesh=mesh)
        if hit is not None:
            return hit, None
        claim = claim_file(root / f".{key}.claim", (root / key / "meta.json").is_file, stale_after=CLAIM_STALE_S)
        if claim is not None:
            return None, claim
        time.sleep(CLAIM_POLL_S)


def _cache_shared(root: Any, spmd: bool) -> bool:
    """Whether the cache serves a load under several processes (a collective when ``spmd``).

    Orbax saves and restores as one job across processes: only the processes of one mesh, and
    only in a folder they all see. Per-process judges share a bucket's entries (`_lookup`: one
    converts, the others wait and read). Otherwise each process converts the model from its source.
    """
    if not spmd and isinstance(root, BucketPath):
        return True
    why = ("per-process judges (a mesh over every process's devices shares one entry)" if not spmd else
           None if _weights_cache.shared_by_all(root) else
           f"the cache folder {root} is not one folder every process sees (set $JAXJUDGE_CACHE to one)")
    if why is not None:
        warnings.warn(f"jaxjudge: the converted-parameter cache is not used under several processes: {why}; "
                      "each process converts the model from its source", stacklevel=3)
    return why is None


def _check_sha256(where: Any, actual: str | None, expected: str | None) -> None:
    """Refuse a source whose content hash is known and is not the expected one."""
    if expected is not None and actual is not None and actual != expected:
        raise ModelHashMismatch(where, actual, expected)


def _convert(path: Path, dname: str, mesh: Any, *, source: str, sha256: str) -> tuple[Judge, dict[str, Any], Any, Any]:
    """A judge converted from a local GGUF file or Hugging Face folder, with the Hugging Face
    config, tokenizer and chat template a cache entry records."""
    if path.is_file():
        if not _is_gguf(path):
            raise ValueError(
                f"{path} is a file but not a GGUF file; pass a .gguf file or a Hugging Face folder"
            )
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
                             source=source, sha256=sha256, mesh=mesh)
    if special:
        # The tokenizer_config's strings win over the ones derived from token ids.
        judge.special_tokens = {**judge.special_tokens, **special}
    return judge, hf_config, tokenizer, template
