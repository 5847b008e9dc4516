"""Where the one-command run keeps its caches: under the stores folder it was given.

A run writes caches beside its stores and results: compiled XLA programs, converted weights and
the model-file digest memo, Hub downloads of a judge named by its id, and matplotlib's font list.
``jaxjudge sweep --data ...`` must write nowhere but its two folders, so `keep_caches_in` points
each of them under ``<stores>/.cache`` unless the user's environment already names a place.

It is called before the library is imported: matplotlib and huggingface_hub read their
variables when they are imported. So this module imports nothing of the library.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_VARIABLES", "keep_caches_in"]

CACHE_VARIABLES = {
    "JAXJUDGE_XLA_CACHE": "xla",  # compiled XLA programs (`jaxjudge.cli.enable_compile_cache`)
    "JAXJUDGE_CACHE": "converted",  # converted weights and the model-file digest memo (`jaxjudge.models.weights_cache`)
    "HF_HUB_CACHE": "huggingface",  # Hub downloads of a judge named by its id
    "MPLCONFIGDIR": "matplotlib",  # matplotlib's font list, written on its first use
}
"""Environment variable -> its folder under ``<stores>/.cache``."""


def keep_caches_in(stores: str) -> dict[str, str]:
    """Set each unset variable of `CACHE_VARIABLES` to its folder under ``<stores>/.cache``.

    ``HF_HUB_CACHE`` is left alone when ``HF_HOME`` is set (the user's Hub cache). A stores
    folder given as a URL (``gs://bucket/prefix``) sets nothing: the caches stay where the
    environment puts them.

    Returns:
      The variables set, with their values.
    """
    if "://" in str(stores):
        return {}
    base = Path(stores).expanduser().absolute() / ".cache"
    out = {}
    for name, sub in CACHE_VARIABLES.items():
        if name in os.environ or (name == "HF_HUB_CACHE" and "HF_HOME" in os.environ):
            continue
        out[name] = os.environ[name] = str(base / sub)
    return out
