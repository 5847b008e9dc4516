"""Where a judge's weights come from, and what names them for the converted-parameter cache.

A model source is a local GGUF file or Hugging Face folder, a ``gs://`` object (a GGUF file) or
prefix (a Hugging Face folder), or a Hugging Face Hub repo id (``owner/name``, or
``owner/name@revision``). Its identity (`source_identity`) is what the cache key
(`jaxjudge.models.weights_cache.cache_key`) is made from, and it is found without reading the weights
wherever the source's keeper can say what it holds:

- a local file or folder: its content sha256 (a GGUF file's, or a folder's over its config,
  tokenizer and safetensors files), each file's digest memoised
  (`jaxjudge.models.weights_cache.memo_file_sha256`): the key is the content hash, as it always was;
- ``gs://``: each object's name, generation and size, from the object listing. The service
  never gives other bytes the same name and generation, so an unchanged object hits the cache
  with none of its bytes read or hashed, and a rewritten one (a new generation) misses;
- a Hub repo: the commit its revision resolves to and each file's hash (the weights' LFS
  sha256, the small files' git blob ids), from the Hub's API (``HfApi.model_info``). Offline
  (``HF_HUB_OFFLINE=1``) or without an answer, the repo id resolves to the snapshot in the Hub
  cache and is known by its content hash, as a local folder is.

A remote identity is the sha256 of those fields (JSON): 64 hex digits like a content hash, in
the same key format. The content hash of a remote source is not known from its metadata: it is
computed from the local copy made to convert it (`local_copy`) and recorded in the cache
entry's ``meta.json``, where a warm load finds it (`jaxjudge.models.loading.load`).

What a run checks before it loads the weights (config, tokenizer, chat template, content hash:
`source_header`, `content_sha256`) comes for a remote source from the same entry (its
``meta.json`` and ``tokenizer.json``), so a run over a cached ``gs://`` or Hub model reads and
hashes none of it; a cold one is fetched once for the checks and the load together
(`keeping_copies`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from jaxjudge.models import weights_cache as _weights_cache
from jaxjudge.models import gguf as _gguf
from jaxjudge.models import hf as _hf
from jaxjudge.models.gguf_file import GGUFFile, TruncatedHeader
from jaxjudge.models.tokenizer import tokenizer_from_gguf_metadata
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import is_bucket, location

__all__ = ["SourceHeader", "SourceIdentity", "bucket_identity", "content_sha256", "fetched_sha256", "hub_identity",
           "is_remote", "keeping_copies", "local_copy", "local_tokenizer", "source_header", "source_identity",
           "source_outline"]


@dataclass(frozen=True)
class SourceIdentity:
    """What names a model source's weights.

    Attributes:
        source: the source as given (a path, a ``gs://`` URL, a repo id).
        kind: ``"local"``, ``"bucket"`` or ``"hub"``.
        digest: 64 hex digits the cache key is made from: the content sha256 of a local source,
            the sha256 of ``fields`` for a remote one.
        sha256: the content hash where it is known without fetching the source (a local one),
            else None.
        fields: a remote source's identity: ``{"objects": [[url, generation, size], ...]}`` for a
            bucket, ``{"repo", "revision", "files": [[name, hash], ...]}`` for the Hub.
        path: the local file or folder (a local source; a Hub snapshot already resolved offline).
    """

    source: str
    kind: str
    digest: str
    sha256: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def _digest(fields: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def source_identity(source: str | os.PathLike[str], memo_dir: str | os.PathLike[str] | None = None, *,
                    verify: bool = False) -> SourceIdentity:
    """The identity of a model source (see the module docstring).

    Args:
        source: a local file or folder, a ``gs://`` object or prefix, or a Hub repo id.
        memo_dir: where a local source's file digests are memoised (none when None).
        verify: hash a local source's bytes even where the memo has their digest.

    Raises:
        FileNotFoundError: the source does not exist (nor is it a reachable or cached Hub repo).
    """
    if isinstance(source, BucketPath) or is_bucket(source):
        return bucket_identity(source)
    text = os.fspath(source)
    path = Path(text).expanduser()
    if not path.exists() and _hf.is_repo_id(text):
        hub = hub_identity(text)
        if hub is not None:
            return hub
    if not path.is_file():
        path = _hf.resolve_source(text)  # a folder, or (offline) a repo id's snapshot in the Hub cache
    sha = _weights_cache.source_sha256(path, memo_dir, verify=verify)
    return SourceIdentity(text, "local", sha, sha, path=path)


def bucket_identity(url: str | BucketPath) -> SourceIdentity:
    """A ``gs://`` source's identity: its objects' names, generations and sizes (for a prefix,
    the model files right under it), from the listing; no object's bytes are read.

    Raises:
        FileNotFoundError: no such object, or no model file under the prefix.
    """
    where = location(url, "model source")
    found = [(o, g, s) for o, g, s in where.objects()
             if o == where or ("/" not in str(o.relative_to(where)) and _hf.is_source_file(o.name))]
    if not found:
        raise FileNotFoundError(f"{where}: no model object there (a GGUF object, or a prefix holding a Hugging "
                                "Face folder's config, tokenizer and safetensors files)")
    fields = {"objects": [[str(o), g, s] for o, g, s in found]}
    return SourceIdentity(str(where), "bucket", _digest(fields), fields=fields)


def _hub_api() -> Any:
    """The Hub's API client, or None offline (``HF_HUB_OFFLINE``)."""
    # Heavy to import (its HTTP stack) and needed only for a repo id.
    from huggingface_hub import HfApi, constants

    return None if constants.HF_HUB_OFFLINE else HfApi()


def hub_identity(repo: str) -> SourceIdentity | None:
    """A Hub repo id's identity: the commit its revision (``owner/name@revision``, default the
    main branch) resolves to and the hashes of the model files at that commit, from the Hub's
    metadata. None offline or when the Hub does not answer (the caller then uses the Hub cache)."""
    api = _hub_api()
    if api is None:
        return None
    repo_id, _, revision = repo.partition("@")
    try:
        info = api.model_info(repo_id, revision=revision or None, files_metadata=True)
    except Exception:  # noqa: BLE001 - unreachable, unknown or gated: the Hub cache is the fallback
        return None
    files = sorted([s.rfilename, s.lfs.sha256 if s.lfs is not None else s.blob_id] for s in info.siblings or ()
                   if "/" not in s.rfilename and _hf.is_source_file(s.rfilename))
    fields = {"repo": repo_id, "revision": info.sha, "files": files}
    return SourceIdentity(repo, "hub", _digest(fields), fields=fields)


def is_remote(source: Any) -> bool:
    """Whether a model source is a ``gs://`` object or prefix, or a Hub repo id: a string naming
    no local path (a `pathlib.Path` is local)."""
    if isinstance(source, BucketPath) or is_bucket(source):
        return True
    if isinstance(source, Path):
        return False
    text = os.fspath(source)
    return _hf.is_repo_id(text) and not Path(text).expanduser().exists()


@dataclass(frozen=True)
class SourceHeader:
    """What a run checks of a model before it loads the weights (`source_header`).

    Attributes:
        hf_config: the Hugging Face config dict (a GGUF file's, as converted).
        tokenizer: the ``tokenizers.Tokenizer``.
        chat_template: the Jinja template, or None.
        sha256: the source's content hash; None for a cache entry that recorded none.
    """

    hf_config: dict[str, Any]
    tokenizer: Any
    chat_template: str | None
    sha256: str | None


_HEADERS: dict[str, SourceHeader] = {}
"""Headers read in this process, by identity digest."""


def source_header(source: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None, *,
                  verify: bool = False) -> SourceHeader:
    """A model's config, tokenizer, chat template and content hash, no tensor converted.

    A remote source with a converted entry in the cache (``cache_dir``, default
    `jaxjudge.models.weights_cache.cache_root`; either dtype) is answered from the entry's ``meta.json``
    and ``tokenizer.json``, keyed by its identity: none of its bytes read or hashed. Otherwise
    (and under ``verify``) the source is read: a local one's files (its hash memoised), a remote
    one fetched (`local_copy`; kept by `keeping_copies` for the load that follows) and hashed.
    """
    root = _weights_cache.cache_root(cache_dir)
    ident = source_identity(source, memo_dir=root, verify=verify)
    if not verify and ident.digest in _HEADERS:
        return _HEADERS[ident.digest]
    header = None if verify or ident.kind == "local" else _cached_header(root, ident.digest)
    if header is None:
        with local_copy(ident) as path:
            header = SourceHeader(*_read_header(path), ident.sha256 or fetched_sha256(path))
    _HEADERS[ident.digest] = header
    return header


HEAD_BYTES = 4 << 20
"""The first read of a ``gs://`` GGUF object's header by `source_outline` (doubled until the
header parses): a judge's header is mostly its tokenizer, 1.8 MB for SmolLM2 and 6 MB for
Qwen2.5's 150,000-token vocabulary."""


def source_outline(source: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> SourceHeader:
    """A model's config, tokenizer and chat template with as few of its bytes read as its keeper
    allows, for planning a run (``--dry-run``) without fetching it: a converted entry's, as
    `source_header`; else a local source's header; a ``gs://`` GGUF object's header by ranged
    reads (`HEAD_BYTES`, doubled until it parses); a ``gs://`` folder's or Hub repo's config and
    tokenizer files without the safetensors. ``sha256`` is what is known without reading the
    weights: a local source's (memoised) or a converted entry's, else None.
    """
    root = _weights_cache.cache_root(cache_dir)
    ident = source_identity(source, memo_dir=root)
    if ident.kind == "local":
        return SourceHeader(*_read_header(ident.path), ident.sha256)
    header = _HEADERS.get(ident.digest) or _cached_header(root, ident.digest)
    if header is not None:
        return header
    if ident.kind == "hub":
        folder = _hf.resolve_source(ident.fields["repo"], revision=ident.fields["revision"], weights=False)
        return SourceHeader(*_read_header(folder), None)
    ((url, generation, size), *more) = ident.fields["objects"]
    if not more and url == ident.source:  # one object: a GGUF file
        return SourceHeader(*_gguf_header(_gguf_head(BucketPath(url), generation, size), url), None)
    with tempfile.TemporaryDirectory(prefix="jaxjudge-outline-") as tmp:
        _download(ident, Path(tmp), weights=False)
        return SourceHeader(*_read_header(_copy_in(ident, Path(tmp))), None)


def _gguf_head(obj: BucketPath, generation: int, size: int) -> GGUFFile:
    """The header of the GGUF object ``obj`` from its first bytes, read in doubling ranges."""
    head, want = b"", HEAD_BYTES
    while True:
        if len(head) < min(want, size):
            head += obj.read_range(len(head), min(want, size), generation)
        try:
            return GGUFFile.from_head(head, size, str(obj))
        except TruncatedHeader:
            if len(head) >= size:
                raise
            want *= 2


def content_sha256(source: str | os.PathLike[str], memo_dir: str | os.PathLike[str] | None = None, *,
                   verify: bool = False) -> str | None:
    """A model source's content hash: a local one's (memoised in ``memo_dir`` unless ``verify``,
    `jaxjudge.models.weights_cache.source_sha256`), a remote one's from `source_header`."""
    if is_remote(source):
        return source_header(source, verify=verify).sha256
    return _weights_cache.source_sha256(source, memo_dir, verify=verify)


def _cached_header(root: Any, digest: str) -> SourceHeader | None:
    """The header a converted entry of the identity ``digest`` records, or None."""
    for dtype in ("float32", "bfloat16"):
        entry = root / _weights_cache.cache_key(digest, dtype)
        if not (entry / "meta.json").is_file():
            continue
        meta = json.loads((entry / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format_version") == _weights_cache.FORMAT_VERSION and (entry / "tokenizer.json").is_file():
            tokenizer = Tokenizer.from_str((entry / "tokenizer.json").read_text(encoding="utf-8"))
            return SourceHeader(meta["hf_config"], tokenizer, meta.get("chat_template"), meta.get("sha256"))
    return None


def _read_header(path: Path) -> tuple[dict[str, Any], Any, str | None]:
    """A local GGUF file's or Hugging Face folder's config, tokenizer and chat template."""
    if path.is_file():
        return _gguf_header(GGUFFile(path), path)
    return (_hf.read_config(path), *local_tokenizer(path))


def _gguf_header(reader: GGUFFile, name: str | Path) -> tuple[dict[str, Any], Any, str | None]:
    """The config, tokenizer and chat template of a GGUF header read once (``name``: its file or URL)."""
    return (_gguf.gguf_shape_config(name, reader), *_gguf_tokenizer(reader, name))


def _gguf_tokenizer(reader: GGUFFile, name: str | Path) -> tuple[Any, str | None]:
    template = reader.metadata.get("tokenizer.chat_template")
    return (tokenizer_from_gguf_metadata(dict(reader.metadata), source=str(name)),
            template if isinstance(template, str) else None)


def local_tokenizer(path: Path) -> tuple[Any, str | None]:
    """A local GGUF file's or Hugging Face folder's tokenizer and chat template (no weights read)."""
    if path.is_file():
        return _gguf_tokenizer(GGUFFile(path), path)
    tokenizer, template, _ = _hf.read_tokenizer(path)
    return tokenizer, template


_KEPT: list[Path] = []
"""The folder of `keeping_copies`, while one is open."""


@contextlib.contextmanager
def keeping_copies() -> Iterator[None]:
    """While open, a remote source `local_copy` fetches is kept (in a temporary folder, deleted on
    the outermost exit) and its content hash memoised there (`fetched_sha256`): a run's
    pre-flight (`source_header`) and its load of a cold source fetch and hash it once."""
    if _KEPT:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="jaxjudge-sources-") as tmp:
        _KEPT.append(Path(tmp))
        try:
            yield
        finally:
            _KEPT.clear()


def fetched_sha256(path: Path) -> str:
    """The content hash of a fetched copy: memoised beside the kept copies (`keeping_copies`),
    else hashed each time."""
    return _weights_cache.source_sha256(path, _KEPT[0] if _KEPT else None)


@contextlib.contextmanager
def local_copy(identity: SourceIdentity) -> Iterator[Path]:
    """The source as a local file or folder, to convert: a local source's own path; a Hub repo's
    snapshot at the identified commit (the Hub cache keeps it); a bucket's objects downloaded at
    their identified generations into a temporary folder (``$TMPDIR``), deleted on exit unless
    `keeping_copies` keeps it (one copy per identity).

    Raises:
        google.api_core.exceptions.NotFound: an object was replaced since it was identified.
    """
    if identity.path is not None:
        yield identity.path
    elif identity.kind == "hub":
        yield _hf.resolve_source(identity.fields["repo"], revision=identity.fields["revision"])
    elif _KEPT:
        folder = _KEPT[0] / identity.digest
        if not folder.is_dir():
            tmp = Path(tempfile.mkdtemp(dir=_KEPT[0]))
            _download(identity, tmp)
            tmp.rename(folder)  # complete copies only under the identity's name
        yield _copy_in(identity, folder)
    else:
        with tempfile.TemporaryDirectory(prefix="jaxjudge-source-") as tmp:
            _download(identity, Path(tmp))
            yield _copy_in(identity, Path(tmp))


def _copy_in(identity: SourceIdentity, folder: Path) -> Path:
    """Where `_download` puts a bucket source in ``folder``: the file, or the folder of a prefix."""
    return folder / (BucketPath(identity.source).name or "model")


def _download(identity: SourceIdentity, folder: Path, *, weights: bool = True) -> None:
    """A bucket source's objects, at their identified generations, into ``folder`` (a folder's
    safetensors only if ``weights``)."""
    objects = [o for o in identity.fields["objects"] if weights or not o[0].endswith(".safetensors")]
    one = len(objects) == 1 and objects[0][0] == identity.source  # a file, not a prefix
    dest = _copy_in(identity, folder)
    if not one:
        dest.mkdir()
    for url, generation, _ in objects:
        obj = BucketPath(url)
        obj.download(dest if one else dest / obj.name, generation)
