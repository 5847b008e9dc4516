"""On-disk cache of converted judges: Orbax parameters plus tokenizer, template and config.

Converting a judge (dequantising a GGUF file, or reading and transposing safetensors) costs
seconds to minutes; restoring the converted parameters costs a fraction of that. A cache entry
is one folder under the cache root (``$JAXJUDGE_CACHE`` or ``~/.cache/jaxjudge/converted``)::

    <root>/<key>/params/          Orbax StandardCheckpointer, the decoder state as a pure dict
    <root>/<key>/tokenizer.json   the tokenizer (``tokenizers`` JSON)
    <root>/<key>/meta.json        format version, Hugging Face config dict, chat template,
                                  special-token strings, dtype, source, its sha256 and identity

The key is ``<identity>-<dtype>-v<FORMAT_VERSION>`` (`jaxjudge.models.source`): for a local
source its content hash (of the GGUF file, or of a Hugging Face folder's config, tokenizer and
safetensors files), so a renamed or copied file hits the same entry and an edited one misses;
for a ``gs://`` or Hub source a hash of its objects' generations and sizes or of its commit and
file hashes, so a warm entry is found without a byte of the source read or hashed. An entry is
written into a temporary folder next to it and renamed into place as the last step, so a
conversion killed half way leaves no entry that a later load could mistake for a complete one.

The cache root may be a bucket (``gs://bucket/prefix``, `jaxjudge.store.location`), which has
no rename: there an entry's parameters go to ``<key>/params-<tag>/`` (Orbax's own commit marker
for buckets), and ``meta.json``, written last by a single create that only the first writer
wins (``ifGenerationMatch=0``), names the parameter folder of the complete entry; a loser
deletes its own copy. The sha256 memo stays on the local disk (it is keyed by local files).

Parameters are restored straight into the abstract state of an ``nnx.eval_shape`` skeleton,
with each parameter's sharding when a mesh is given, so a judge that does not fit one device is
never gathered on one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import SingleDeviceSharding
from tokenizers import Tokenizer

from jaxjudge.models import hf, sharding
from jaxjudge.models.config import DecoderConfig, config_from_hf
from jaxjudge.models.convert import abstract_model
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.layers import as_dtype
from jaxjudge.multihost import agree, barrier
from jaxjudge.store import file_sha256
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import Location, is_bucket, location

__all__ = [
    "FORMAT_VERSION",
    "CachedJudge",
    "cache_root",
    "cache_key",
    "memo_file_sha256",
    "source_sha256",
    "save_converted",
    "load_converted",
    "clear_cache",
]

# Bump when the decoder's parameter layout or the entry layout changes: old entries then miss.
FORMAT_VERSION = 2  # 2: layers stacked on a leading [L] axis (version 1 held one entry per layer)

_HASH_MEMO = "sha256-memo.json"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Location:
    """The cache folder: ``cache_dir``, else ``$JAXJUDGE_CACHE``, else ``~/.cache/jaxjudge/converted``
    (a local path, or ``gs://bucket/prefix``)."""
    if cache_dir is not None:
        return location(cache_dir, "cache_dir").expanduser()
    env = os.environ.get("JAXJUDGE_CACHE")
    if env:
        return location(env, "$JAXJUDGE_CACHE").expanduser()
    return _local_root()


def _local_root() -> Path:
    return Path.home() / ".cache" / "jaxjudge" / "converted"


def dtype_name(dtype: Any) -> str:
    """``"float32"`` or ``"bfloat16"`` for any spelling of the two supported dtypes."""
    return jnp.dtype(as_dtype(dtype)).name


def cache_key(sha256: str, dtype: Any) -> str:
    """Entry name for a source's identity digest (`jaxjudge.models.source`: a local source's
    content hash) and a parameter dtype (includes :data:`FORMAT_VERSION`)."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"cache_key expects a hex sha256 digest, got {sha256!r}")
    return f"{sha256}-{dtype_name(dtype)}-v{FORMAT_VERSION}"


def memo_file_sha256(path: str | os.PathLike[str], memo_dir: str | os.PathLike[str] | None = None, *,
                verify: bool = False) -> str:
    """sha256 of a file, remembered across calls by (path, size, mtime, inode, ctime).

    Hashing a 1 GB judge takes seconds, which would dominate a cached load; the digest is kept
    in ``<memo_dir>/sha256-memo.json`` keyed by the resolved path and reused while the file's
    size, modification time, inode and status-change time (nanoseconds) are all unchanged. The
    status-change time moves on every write, even one whose author restores the mtime, so an
    in-place edit of the same size is hashed again. The memo is only a speed-up: ``verify``
    ignores it and hashes the bytes (refreshing the memo).

    Args:
        path: the file.
        memo_dir: folder for the memo (no memo when None).
        verify: hash the file even when the memo has an entry for it.

    Returns:
        The hex digest.
    """
    path = Path(path).resolve()
    if memo_dir is not None and is_bucket(memo_dir):
        memo_dir = _local_root()  # the memo is keyed by this machine's files: it stays on this machine
    stat = path.stat()
    stamp = [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]
    memo_path = None if memo_dir is None else Path(memo_dir) / _HASH_MEMO
    if memo_path is not None and not verify:
        hit = _read_memo(memo_path).get(str(path))
        if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
            return hit["sha256"]
    digest = file_sha256(path, block_size=1 << 22, fresh=verify)
    if memo_path is not None:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
        # Read the memo again and merge under a lock: other processes (the hosts of one run
        # sharing a cache folder) write theirs while this file was hashed, and a memo read
        # before the hash would drop their entries.
        with _locked(memo_path.with_name(f".{_HASH_MEMO}.lock")):
            memo = _read_memo(memo_path)
            memo[str(path)] = {"stamp": stamp, "sha256": digest}
            tmp = memo_path.with_name(f".{_HASH_MEMO}.{uuid.uuid4().hex}")
            tmp.write_text(json.dumps(memo))
            os.replace(tmp, memo_path)
    return digest


def _read_memo(memo_path: Path) -> dict[str, Any]:
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or a damaged one: only costs a re-hash
    return memo if isinstance(memo, dict) else {}


@contextlib.contextmanager
def _locked(lock_path: Path):
    """An exclusive advisory lock on ``lock_path`` (none where ``fcntl`` is missing)."""
    try:
        import fcntl  # noqa: PLC0415
    except ImportError:  # not POSIX: the memo may lose an entry, which costs a re-hash
        yield
        return
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def source_sha256(source: str | os.PathLike[str], memo_dir: str | os.PathLike[str] | None = None, *,
                  verify: bool = False) -> str:
    """Content hash of a model source: a GGUF file's sha256, or a Hugging Face folder's hash over
    its config, tokenizer and safetensors files; every file's sha256 memoised (see
    :func:`memo_file_sha256`: a shard is read once per version), ``verify`` bypassing the memo."""
    path = Path(source)
    if path.is_file():
        return memo_file_sha256(path, memo_dir, verify=verify)
    return hf.source_sha256(path, file_hash=lambda p: memo_file_sha256(p, memo_dir, verify=verify))


@dataclass
class CachedJudge:
    """What a cache entry restores to (the pieces :class:`~jaxjudge.models.judge.Judge` takes).

    Attributes:
        config: the decoder config.
        model: the decoder with restored parameters.
        tokenizer: the tokenizer.
        chat_template: the Jinja template or None.
        special_tokens: ``{"bos_token": ..., "eos_token": ...}`` strings for chat templates.
        hf_config: the Hugging Face config dict the config was read from.
        meta: the entry's full ``meta.json``.
    """

    config: DecoderConfig
    model: Decoder
    tokenizer: Tokenizer
    chat_template: str | None
    special_tokens: dict[str, str]
    hf_config: dict[str, Any]
    meta: dict[str, Any]


def save_converted(
    root: str | os.PathLike[str] | BucketPath,
    key: str,
    *,
    model: Decoder,
    hf_config: Mapping[str, Any],
    tokenizer: Tokenizer,
    chat_template: str | None,
    special_tokens: Mapping[str, str] | None = None,
    source: str | None = None,
    sha256: str | None = None,
    identity: Mapping[str, Any] | None = None,
    together: bool = False,
) -> Location:
    """Writes one cache entry atomically.

    Args:
        root: the cache root.
        key: the entry name (:func:`cache_key`).
        model: the converted decoder (its parameter dtype is recorded).
        hf_config: the Hugging Face config dict it was built from.
        tokenizer: the tokenizer.
        chat_template: the chat template or None.
        special_tokens: special-token strings the judge uses for chat templates.
        source, sha256: provenance, stored in ``meta.json``.
        identity: a remote source's identity fields (`jaxjudge.models.source.SourceIdentity`).
        together: every process of a ``jax.distributed`` job calls this for one model whose
            arrays span them (a mesh over their devices): one Orbax save into one temporary
            folder of a folder they share, each process writing its own shards, and process 0
            writing the rest and renaming the entry into place.

    Returns:
        The entry folder. If another process finished the same entry first, its copy is kept.
    """
    root = location(root, "cache root")
    root.mkdir(parents=True, exist_ok=True)
    final = root / key
    lead = not together or jax.process_index() == 0
    if together:
        # One temporary name for the job, drawn by process 0.
        tag = f"job-{agree(int.from_bytes(os.urandom(3), 'little')):06x}"
    else:
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if isinstance(root, BucketPath):
        return _save_to_bucket(final, tag, lead, together, model=model, hf_config=hf_config, tokenizer=tokenizer,
                               chat_template=chat_template, special_tokens=special_tokens, source=source,
                               sha256=sha256, identity=identity)
    tmp = root / f".tmp-{key}-{tag}"
    if lead:
        tmp.mkdir()
    if together:
        barrier(f"jaxjudge-cache-mkdir-{tag}")
    try:
        state = nnx.state(model)
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(tmp / "params", nnx.to_pure_dict(state))
            ckptr.wait_until_finished()
        if not lead:
            barrier(f"jaxjudge-cache-written-{tag}")
            return final
        (tmp / "tokenizer.json").write_text(tokenizer.to_str(), encoding="utf-8")
        meta = _meta(model, hf_config, chat_template, special_tokens, source, sha256, identity)
        # meta.json is the entry's completeness marker: written last inside the temporary folder.
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # a concurrent writer won; same content
    except BaseException:
        if lead:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if together:
        barrier(f"jaxjudge-cache-written-{tag}")
    return final


def _meta(model: Decoder, hf_config: Mapping[str, Any], chat_template: str | None,
          special_tokens: Mapping[str, str] | None, source: str | None, sha256: str | None,
          identity: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A cache entry's meta.json (its completeness marker), local folder or bucket alike."""
    return {
        "format_version": FORMAT_VERSION,
        "dtype": jnp.dtype(model.dtype).name,
        "hf_config": dict(hf_config),
        "chat_template": chat_template,
        "special_tokens": dict(special_tokens or {}),
        "source": source,
        "sha256": sha256,
        "identity": dict(identity or {}),
    }


def _save_to_bucket(final: BucketPath, tag: str, lead: bool, together: bool, *, model: Decoder,
                    hf_config: Mapping[str, Any], tokenizer: Tokenizer, chat_template: str | None,
                    special_tokens: Mapping[str, str] | None, source: str | None, sha256: str | None,
                    identity: Mapping[str, Any] | None) -> BucketPath:
    """`save_converted` into a bucket (see the module docstring): no rename, one create decides."""
    params = final / f"params-{tag}"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(str(params), nnx.to_pure_dict(nnx.state(model)))
        ckptr.wait_until_finished()
    if lead:
        tok = final / "tokenizer.json"  # the same text for every writer of this key (same source)
        if not tok.is_file():
            tok.write_text(tokenizer.to_str())
        meta = {**_meta(model, hf_config, chat_template, special_tokens, source, sha256, identity),
                "params": params.name}
        if not (final / "meta.json").create(json.dumps(meta, indent=1).encode("utf-8")):
            params.rmtree()  # another writer's entry is complete: same content, keep theirs
    if together:
        barrier(f"jaxjudge-cache-written-{tag}")
    return final


def shared_by_all(root: str | os.PathLike[str]) -> bool:
    """Whether every process of the ``jax.distributed`` job sees the same folder ``root`` (a
    collective): process 0 writes a token there, and each process must read it back."""
    root = location(root, "cache root")
    token = agree(int.from_bytes(os.urandom(3), "little"))
    mark = root / f".shared-{token:06x}"
    if jax.process_index() == 0:
        try:
            root.mkdir(parents=True, exist_ok=True)
            mark.write_text(str(token))
        except OSError:
            pass
    barrier(f"jaxjudge-shared-{token:06x}")
    try:
        seen = int(mark.read_text()) == token
    except (OSError, ValueError):
        seen = False
    every = bool(np.all(multihost_utils.process_allgather(np.int32(seen))))
    if jax.process_index() == 0:
        mark.unlink(missing_ok=True)
    return every


def _restore_target(abstract_state: nnx.State, mesh: Any, rules: Mapping[str, str | None] | None):
    """The pure-dict restore target: shapes, dtypes and the sharding of every parameter."""
    pure = nnx.to_pure_dict(abstract_state)
    if mesh is None:
        device = SingleDeviceSharding(jax.devices()[0])
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=device), pure)
    shardings = nnx.to_pure_dict(
        sharding.param_shardings(abstract_state, mesh, rules or sharding.LOGICAL_AXIS_RULES)
    )
    return jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), pure, shardings
    )


def load_converted(
    root: str | os.PathLike[str],
    key: str,
    *,
    mesh: Any = None,
    rules: Mapping[str, str | None] | None = None,
    together: bool = False,
) -> CachedJudge | None:
    """Restores a cache entry, or returns None when there is none (or it is from another format).

    Args:
        root: the cache root.
        key: the entry name (:func:`cache_key`).
        mesh: optional mesh; parameters are then restored directly into their shardings.
        rules: logical-axis rules for ``mesh``.
        together: every process of a ``jax.distributed`` job calls this for a ``mesh`` that
            spans them: process 0's view of whether the entry exists decides for all (the
            folder must be one they share), and each process restores its own shards.

    Returns:
        The restored pieces, or None on a miss.

    Raises:
        ValueError: the entry exists but is damaged (named); delete it to reconvert.
    """
    entry = location(root, "cache root") / key
    meta_path = entry / "meta.json"
    present = meta_path.is_file()
    if together:
        present = bool(agree(int(present)))
        if present and not meta_path.is_file():
            raise ValueError(f"cache entry {entry}: process 0 has it, process {jax.process_index()} does not see "
                             "it; the cache folder must be one every process shares ($JAXJUDGE_CACHE)")
    if not present:
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"cache entry {entry}: meta.json is unreadable ({e}); delete the folder") from e
    if meta.get("format_version") != FORMAT_VERSION:
        return None
    cfg = config_from_hf(meta["hf_config"])
    graphdef, abstract_state = nnx.split(abstract_model(cfg, meta["dtype"]))
    target = _restore_target(abstract_state, mesh, rules)
    try:
        params = entry / meta.get("params", "params")
        with ocp.StandardCheckpointer() as ckptr:
            restored = ckptr.restore(str(params) if isinstance(params, BucketPath) else params, target)
        tok = entry / "tokenizer.json"
        tokenizer = (Tokenizer.from_str(tok.read_text(encoding="utf-8")) if isinstance(tok, BucketPath)
                     else Tokenizer.from_file(str(tok)))
    except Exception as e:
        raise ValueError(
            f"cache entry {entry} is damaged ({type(e).__name__}: {e}); delete the folder to reconvert"
        ) from e
    nnx.replace_by_pure_dict(abstract_state, restored)
    model = nnx.merge(graphdef, abstract_state)
    return CachedJudge(
        config=cfg,
        model=model,
        tokenizer=tokenizer,
        chat_template=meta.get("chat_template"),
        special_tokens=dict(meta.get("special_tokens") or {}),
        hf_config=meta["hf_config"],
        meta=meta,
    )


def clear_cache(cache_dir: str | os.PathLike[str] | None = None) -> int:
    """Deletes every entry (and leftover temporary folder) under the cache root.

    Returns:
        The number of folders removed.
    """
    root = cache_root(cache_dir)
    if not root.is_dir():
        return 0
    removed = 0
    for child in root.iterdir():
        if child.is_dir() and ((child / "meta.json").is_file() or child.name.startswith(".tmp-")):
            if isinstance(child, BucketPath):
                child.rmtree()
            else:
                shutil.rmtree(child)
            removed += 1
    return removed
