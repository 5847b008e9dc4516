"""Typed config dataclasses: one checker driven by the fields' own annotations.

A config class is a frozen dataclass deriving from `Typed`. On construction every field is
checked against its annotation and coerced to it (a list becomes a tuple, an int a float, a
dict a read-only mapping, a dict a nested config); the same annotations parse ``--set
field=value`` overrides (`parse_text`). Annotations understood: ``str``, ``int``, ``float``,
``bool``, ``Literal[...]``, ``tuple[X, ...]``, ``tuple[X, Y]``, ``X | None``, nested `Typed`
classes, ``Mapping[K, V]`` and ``Any``.

What a type cannot say is declared on the field with `opt` (``opt(1000, min=1)``): numeric
bounds (``min``, ``max``, ``gt``, ``lt``, applied to every number the field holds),
``empty=True`` for a tuple or string that may be empty and ``empty=False`` for a mapping that
may not. Checks that relate fields to each other stay in the class's ``check`` method, run
after the fields are coerced.

Every error is a `ConfigError` whose message starts with the field's path, e.g.
``ExperimentConfig.tasks[0].aspects[1]: unknown value 'coherance' (did you mean 'coherence'?)``.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import math
import operator
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["ConfigError", "Typed", "opt", "choose", "coerce", "parse_text", "from_dict", "to_dict", "replace_fields",
           "build_dataclass"]


class ConfigError(ValueError):
    """An experiment config that cannot be run; the message names the field, file or value."""


_NO_DEFAULT = dataclasses.MISSING


def opt(default: Any = _NO_DEFAULT, *, factory: Any = _NO_DEFAULT, **bounds: Any) -> Any:
    """A dataclass field with declared checks: ``min``/``max``/``gt``/``lt`` bounds on every
    number it holds, ``empty=True`` to allow an empty tuple or string, ``empty=False`` to refuse
    an empty mapping."""
    return dataclasses.field(default=default, default_factory=factory, metadata=bounds)


def choose(where: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``, else a `ConfigError` suggesting the closest."""
    if value not in choices:
        hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ConfigError(f"{where}: unknown value {value!r}{extra}; choose from {list(choices)}")
    return value


def _unknown(where: str, given: Iterable[str], known: Sequence[str]) -> None:
    for k in given:
        if k not in known:
            hint = difflib.get_close_matches(str(k), list(known), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"{where}: unknown field {k!r}{extra}; known fields: {sorted(known)}")


# Declared bounds: name -> (interval bracket, comparison shown, test).
_BOUNDS = {"min": ("[", ">=", operator.ge), "gt": ("(", ">", operator.gt),
           "max": ("]", "<=", operator.le), "lt": (")", "<", operator.lt)}


def _bounded(where: str, value: float, meta: Mapping[str, Any]) -> None:
    lo = next((k for k in ("min", "gt") if k in meta), None)
    hi = next((k for k in ("max", "lt") if k in meta), None)
    if all(k is None or _BOUNDS[k][2](value, meta[k]) for k in (lo, hi)):
        return
    if lo and hi:
        raise ConfigError(f"{where}: must be in {_BOUNDS[lo][0]}{meta[lo]}, {meta[hi]}{_BOUNDS[hi][0]}, got {value!r}")
    k = lo or hi
    raise ConfigError(f"{where}: must be {_BOUNDS[k][1]} {meta[k]}, got {value!r}")


def coerce(where: str, value: Any, tp: Any, meta: Mapping[str, Any] = types.MappingProxyType({})) -> Any:
    """Check ``value`` against the annotation ``tp`` and return it in that type's form.

    Args:
      where: the field's path, which every error message starts with.
      value: the given value.
      tp: the resolved annotation (see `typing.get_type_hints`).
      meta: the field's declared checks (see `opt`).

    Raises:
      ConfigError: the value does not fit the type or the declared checks.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return coerce(where, value, inner[0], meta)
        # Several kinds (``Literal["auto"] | Mapping[str, int]``): the first that takes the value.
        errors = []
        for tp_i in inner:
            try:
                return coerce(where, value, tp_i, meta)
            except ConfigError as e:
                errors.append(str(e).removeprefix(f"{where}: "))
        raise ConfigError(f"{where}: {'; or '.join(errors)}")
    if origin is Literal:
        return choose(where, value, args)
    if tp is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise ConfigError(f"{where}: must be a bool, got {value!r}")
        return bool(value)
    if tp is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"{where}: must be an integer, got {value!r}")
        _bounded(where, int(value), meta)
        return int(value)
    if tp is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{where}: must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: must be finite, got {value!r}")
        _bounded(where, float(value), meta)
        return float(value)
    if tp is str:
        if not isinstance(value, str) or (not meta.get("empty") and not value.strip()):
            raise ConfigError(f"{where}: must be a non-empty string, got {value!r}")
        return value
    if origin is tuple:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise ConfigError(f"{where}: must be a list or tuple, got {value!r}")
        items, inner = tuple(value), {k: v for k, v in meta.items() if k != "empty"}
        if len(args) == 2 and args[1] is Ellipsis:
            if not items and not meta.get("empty"):
                raise ConfigError(f"{where}: must not be empty")
            return tuple(coerce(f"{where}[{i}]", v, args[0], inner) for i, v in enumerate(items))
        if len(items) != len(args):
            raise ConfigError(f"{where}: must hold {len(args)} items, got {value!r}")
        return tuple(coerce(f"{where}[{i}]", v, a, inner) for i, (v, a) in enumerate(zip(items, args)))
    if origin in (Mapping, dict) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: must be a dict, got {type(value).__name__}")
        kt, vt = args or (Any, Any)
        if not value and meta.get("empty") is False:
            raise ConfigError(f"{where}: must be a non-empty dict, got {dict(value)!r}")
        inner = {k: v for k, v in meta.items() if k != "empty"}
        return types.MappingProxyType({coerce(f"{where} key", k, kt): coerce(f"{where}[{k!r}]", v, vt, inner)
                                       for k, v in value.items()})
    if isinstance(tp, type) and issubclass(tp, Typed):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: must be a {tp.__name__} or a dict, got {value!r}")
        return from_dict(tp, value, where)
    raise TypeError(f"{where}: unsupported annotation {tp!r}")  # a bug in a config class, not in a config


def parse_text(where: str, text: str, tp: Any) -> Any:
    """A command-line value (``--set field=value``) read as the annotation ``tp`` says.

    Numbers and bools by their type (``true``/``false``), ``none`` for an optional field,
    strings as given (surrounding quotes removed), tuples as comma lists (``1-5,3-7``) or as a
    bracketed literal, mappings and nested configs as a JSON or Python literal. The result is
    then checked by `coerce`.
    """
    text = text.strip()
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return parse_text(where, text, inner[0])
        words = [w for a in inner if typing.get_origin(a) is Literal for w in typing.get_args(a)]
        return text if text in words else _literal(where, text)
    if tp is bool:
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if text.lower() not in words:
            raise ConfigError(f"{where}: must be a bool (true or false), got {text!r}")
        return words[text.lower()]
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ConfigError(f"{where}: must be {'an integer' if tp is int else 'a number'}, got {text!r}") from None
    if tp is str or origin is Literal:
        return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text
    if origin is tuple:
        if text.startswith(("[", "(")):
            return _literal(where, text)
        item = args[0] if args and (len(args) == 1 or args[1] is Ellipsis) else Any
        return tuple(parse_text(f"{where}[{i}]", t, item) for i, t in enumerate(p for p in text.split(",") if p.strip()))
    return _literal(where, text)


def _literal(where: str, text: str) -> Any:
    """A JSON or Python literal (dicts, lists, nested configs on the command line)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ConfigError(f"{where}: cannot read {text!r} as a value (write a JSON or Python literal)") from None


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


@dataclass(frozen=True)
class Typed:
    """Base of the config dataclasses: fields coerced to their annotations, then `check`."""

    def __post_init__(self) -> None:
        for f, tp in _fields(type(self)):
            # Frozen: the coerced value replaces the given one once, here, for every field.
            object.__setattr__(self, f.name, coerce(f"{self.where()}.{f.name}", getattr(self, f.name), tp, f.metadata))
        self.check()

    def where(self) -> str:
        """The prefix of this object's error messages."""
        return type(self).__name__

    def check(self) -> None:
        """Checks across fields; override in a subclass."""


def from_dict(cls: type, d: Mapping[str, Any], where: str | None = None) -> Any:
    """``cls(**d)`` after refusing unknown fields (naming the closest known one)."""
    where = where or cls.__name__
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: must be a dict, got {type(d).__name__}")
    _unknown(where, d, [f.name for f in dataclasses.fields(cls)])
    return cls(**d)


def build_dataclass(cls: type, d: Mapping[str, Any], where: str) -> Any:
    """A plain frozen dataclass ``cls`` (one that does not derive from `Typed`, e.g. a method's
    options declared below the experiment layer) from a dict: unknown fields refused with the
    closest known one, each given value coerced to its field's annotation and ``metadata``
    bounds, the rest left to the class's defaults."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: must be a dict, got {type(d).__name__}")
    _unknown(where, d, [f.name for f in dataclasses.fields(cls)])
    given = {f.name: coerce(f"{where}.{f.name}", d[f.name], tp, f.metadata) for f, tp in _fields(cls) if f.name in d}
    return cls(**given)


def to_dict(value: Any) -> Any:
    """A JSON-able form of a config (tuples as lists, mappings as dicts); `from_dict` inverts it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_dict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_dict(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def replace_fields(obj: Any, overrides: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Parse overrides of ``obj``'s fields: ``["n_boot=200", "scales=1-5,2-6"]`` (each value read
    by `parse_text` as its field's annotation) or a dict; a bare value for a tuple field becomes
    a one-item tuple. Returns field -> new value (checked when the object is rebuilt)."""
    cls = type(obj)
    types_of = {f.name: tp for f, tp in _fields(cls)}
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
    else:
        items = []
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like field=value")
            k, v = item.split("=", 1)
            items.append((k.strip(), v))
    _unknown(cls.__name__, [k for k, _ in items], list(types_of))
    out = {}
    for k, v in items:
        tp = types_of[k]
        if isinstance(v, str) and not isinstance(overrides, Mapping):
            v = parse_text(f"{cls.__name__}.{k}", v, tp)
        elif isinstance(v, (str, int, float)) and _is_tuple(tp):
            v = (v,)
        out[k] = v
    return out


def _is_tuple(tp: Any) -> bool:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return typing.get_origin(tp) is tuple or any(typing.get_origin(a) is tuple for a in args)
