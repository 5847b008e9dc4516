"""Where a run reads and writes: a local folder, or a prefix of a Cloud Storage bucket.

`location` turns what a config or a flag says into one of two kinds of path with the same
small pathlib API (``/``, ``name``, ``parent``, ``relative_to``, ``exists``, ``is_file``,
``is_dir``, ``iterdir``, ``glob``, ``read_bytes``/``read_text``, ``write_bytes``/``write_text``,
``mkdir``, ``unlink``, ``open``):

- a local (or mounted) folder is a `pathlib.Path`, read and written exactly as before;
- ``gs://bucket/prefix`` is a `jaxjudge.store.bucket.BucketPath`, read and written through
  fsspec's ``gcsfs`` filesystem, with the two conditional writes fsspec cannot express
  (rewrite only if the generation matches, delete only if it matches) made through
  ``google-cloud-storage``, the client gcsfs itself depends on. Both reach the Cloud Storage
  emulator through ``STORAGE_EMULATOR_HOST``, as every Google client does.

`check_location` refuses, before any work and in one line naming the field, what neither kind
serves: a scheme without its libraries (``gs://`` without the ``gcs`` extra), a scheme this
version does not serve (``s3://``, ``file://``), and a mistyped URL (``gs:/bucket``) that would
otherwise become a local folder called ``gs:``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Union

from jaxjudge.store.bucket import BucketPath

__all__ = ["LocationError", "SERVED", "check_location", "is_bucket", "location"]

SERVED = {"gs": ("gcsfs", "google.cloud.storage")}
"""Each URL scheme a run can read and write, and the modules it needs (the ``gcs`` extra)."""

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://(.*)$")
_TYPO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)/*(.*)$")  # gs:/bucket, gs:bucket, gs:///bucket is a URL
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class LocationError(ValueError):
    """A location no installed library can serve, or a mistyped URL; the message names the field."""


def _missing(scheme: str) -> list[str]:
    out = []
    for mod in SERVED[scheme]:
        try:
            if importlib.util.find_spec(mod) is None:
                out.append(mod)
        except (ImportError, ValueError):
            out.append(mod)
    return out


def check_location(name: str, value: str | os.PathLike | None) -> None:
    """Refuse ``value`` (a field or flag ``name``) unless it is a local path or a URL whose
    scheme the installed libraries serve; a mistyped URL is refused, never taken for a folder.

    Raises:
      LocationError: one line, starting with ``name``.
    """
    if value is None:
        return
    if isinstance(value, BucketPath):
        value = str(value)
    text = os.fspath(value)
    served = ", ".join(f"{s}://bucket/prefix" for s in SERVED)
    m = _URL.match(text)
    if m:
        scheme, rest = m.group(1).lower(), m.group(2)
        if scheme not in SERVED:
            raise LocationError(f"{name}: {text!r} names a {scheme!r} location, which this version cannot read or "
                                f"write (it serves local folders and {served})")
        missing = _missing(scheme)
        if missing:
            raise LocationError(f"{name}: {text!r} needs {', '.join(missing)}, which are not installed "
                                f"(pip install 'jaxjudge[gcs]')")
        bucket = rest.split("/", 1)[0]
        if not _BUCKET.match(bucket):
            raise LocationError(f"{name}: {text!r} does not name a bucket ({bucket!r} is not a bucket name); "
                                f"write {scheme}://bucket/prefix")
        return
    m = _TYPO.match(text)
    if m and len(m.group(1)) > 1:  # one letter is a Windows drive (C:/stores)
        scheme = m.group(1).lower()
        hint = f" (did you mean '{scheme}://{m.group(2)}'?)" if scheme in SERVED else ""
        raise LocationError(f"{name}: {text!r} looks like a mistyped {scheme!r} URL{hint}; a URL is "
                            f"scheme://bucket/prefix, and a local folder cannot start with '{m.group(1)}:'")


def is_bucket(path: object) -> bool:
    """Whether ``path`` is a bucket location (a `BucketPath` or a ``gs://`` string)."""
    if isinstance(path, BucketPath):
        return True
    return isinstance(path, str) and bool(_URL.match(path))


Location = Union[Path, BucketPath]


def location(value: str | os.PathLike, name: str = "location") -> Location:
    """The path ``value`` names: a `pathlib.Path`, or a `BucketPath` for ``gs://bucket/prefix``.

    Raises:
      LocationError: as `check_location` (``name`` is the field it names).
    """
    if isinstance(value, (Path, BucketPath)):
        return value
    check_location(name, value)
    text = os.fspath(value)
    if _URL.match(text):
        return BucketPath(text)
    return Path(text)
