"""Where a judge's weights come from, and what names them for the converted-parameter cache.

A model source is a local GGUF file or Hugging Face folder, a ``gs://`` object (a GGUF file) or
prefix (a Hugging Face folder), or a Hugging Face Hub repo id (``owner/name``, or
``owner/name@revision``). Its identity (`source_identity`) is what the cache key
(`jaxjudge.models.cache.cache_key`) is made from, and it is found without reading the weights
wherever the source's keeper can say what it holds:

- a local file or folder: its content sha256 (a GGUF file's, or a folder's over its config,
  tokenizer and safetensors files), each file's digest memoised
  (`jaxjudge.models.cache.memo_file_sha256`): the key is the content hash, as it always was;
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

from jaxjudge.models import cache as _cache
from jaxjudge.models import hf as _hf
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import is_bucket, location

__all__ = ["SourceIdentity", "bucket_identity", "hub_identity", "local_copy", "source_identity"]


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
    sha = _cache.source_sha256(path, memo_dir, verify=verify)
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


@contextlib.contextmanager
def local_copy(identity: SourceIdentity) -> Iterator[Path]:
    """The source as a local file or folder, to convert: a local source's own path; a Hub repo's
    snapshot at the identified commit (the Hub cache keeps it); a bucket's objects downloaded at
    their identified generations into a temporary folder (``$TMPDIR``), deleted on exit.

    Raises:
        google.api_core.exceptions.NotFound: an object was replaced since it was identified.
    """
    if identity.path is not None:
        yield identity.path
    elif identity.kind == "hub":
        yield _hf.resolve_source(identity.fields["repo"], revision=identity.fields["revision"])
    else:
        with tempfile.TemporaryDirectory(prefix="jaxjudge-source-") as tmp:
            where = BucketPath(identity.source)
            objects = identity.fields["objects"]
            one = len(objects) == 1 and objects[0][0] == identity.source  # a file, not a prefix
            dest = Path(tmp) / (where.name or "model")
            if not one:
                dest.mkdir()
            for url, generation, _ in objects:
                obj = BucketPath(url)
                obj.download(dest if one else dest / obj.name, generation)
            yield dest
