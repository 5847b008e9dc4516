"""Loading an experiment file: import it, call its ``get_config``, apply overrides.

An experiment file may import modules next to it (``from registry import QWEN_05B``): its
folder is on ``sys.path`` while it is imported and while ``get_config`` runs. It names its
variants in a dict (``VARIANTS``, keyed by the argument, None for the default) and picks one with
`pick_variant`, which refuses an unknown argument the same way in every file.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from jaxjudge.experiment.schema import ConfigError, ExperimentConfig, config_from_dict, with_overrides

__all__ = ["load_config", "pick_variant"]

V = TypeVar("V")


def pick_variant(experiment: str, arg: str | None, variants: Mapping[str | None, V]) -> V:
    """The variant an experiment file's ``get_config(arg)`` builds: ``variants[arg]``.

    Args:
      experiment: the file's name, which starts the error message (``"contrastive"``).
      arg: the argument of ``get_config`` (None: the default, if ``variants`` has a None key).
      variants: argument -> variant (whatever the file builds its config from).

    Raises:
      ConfigError: ``arg`` is not a key of ``variants``; the message lists the named variants
        (the default, None, is not listed) and suggests the closest one (the command line
        prints it as one line and exits 2, as for any config error).
    """
    if arg in variants:
        return variants[arg]
    known = sorted(k for k in variants if k is not None)
    hint = difflib.get_close_matches(str(arg), known, n=1)
    extra = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise ConfigError(f"{experiment}: unknown argument {arg!r}{extra}; use one of {known}")


def load_config(spec: str | os.PathLike, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Import an experiment file and call its ``get_config``.

    Args:
      spec: ``"experiments/score_range_bias.py"`` or ``"experiments/score_range_bias.py:quick"``
        (the part after ``:`` is passed to ``get_config(arg)``).
      overrides: field overrides, as `with_overrides`.

    Returns:
      The validated `ExperimentConfig` (files are not checked here: call `validate_config`).
    """
    text = os.fspath(spec)
    path_text, _, arg = text.partition(":") if not Path(text).is_file() else (text, "", "")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    name = f"jaxjudge_experiment_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ConfigError(f"cannot import config file {path}")
    module = importlib.util.module_from_spec(mod_spec)
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
        get = getattr(module, "get_config", None)
        if not callable(get):
            raise ConfigError(f"{path}: defines no get_config() function")
        cfg = get(arg) if arg else get()
    finally:
        sys.modules.pop(name, None)
        if added:
            sys.path.remove(folder)
    if isinstance(cfg, Mapping):
        cfg = config_from_dict(cfg)
    if not isinstance(cfg, ExperimentConfig):
        raise ConfigError(f"{path}: get_config() returned {type(cfg).__name__}, expected ExperimentConfig")
    return with_overrides(cfg, overrides) if overrides else cfg
