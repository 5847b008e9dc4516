"""The engine's jitted entry points as named step objects, so that what runs and what `jaxjudge aot`
compiles ahead of time are the same programs.

A `Step` wraps one ``jax.jit``-ed function with its name and the static and donated arguments
it was jitted with (`Step.jit` jits it from the same names, written once); calling it calls the
function, ``lower`` lowers it (for abstract arguments
with shardings, as `jaxjudge.aot.compile` does). The engine calls its device work only through
these objects: `PREFILL` (prefixes into a KV cache, `jaxjudge.engine.calls.prefill_prefixes`),
`READ_ROWS` and `READ_ROWS_AND_GENERATE` (`calls.read_rows`), `PREFIX_NLL` and `TOKEN_NLL`, and
`DECODE` (the decoding loop, `jaxjudge.engine.decode`). `recording` lists the steps called or
lowered inside a ``with`` block, with their arguments (for tests and for tracing what a run
compiles).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import jax

__all__ = ["Step", "Use", "recording"]

_RECORDERS: list[list["Use"]] = []


@dataclasses.dataclass(frozen=True)
class Use:
    """One call or lowering of a step: the step, ``"call"`` or ``"lower"``, and its arguments."""

    step: "Step"
    how: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True, eq=False)
class Step:
    """One jitted entry point of the engine.

    Attributes:
        name: what the step does (``"prefill"``, ``"read_rows"``, ...).
        fn: the ``jax.jit``-ed function.
        static: its static argument names.
        donate: its donated argument names (their buffers are consumed by a call).
    """

    name: str
    fn: Callable[..., Any]
    static: tuple[str, ...] = ()
    donate: tuple[str, ...] = ()

    @classmethod
    def jit(cls, name: str, fn: Callable[..., Any], *, static: tuple[str, ...] = (),
            donate: tuple[str, ...] = ()) -> Step:
        """``fn`` jitted with ``static`` and ``donate`` as its static and donated argument names,
        as the step ``name``."""
        return cls(name, jax.jit(fn, static_argnames=static, donate_argnames=donate), static, donate)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _RECORDERS:
            _record(Use(self, "call", args, kwargs))
        return self.fn(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        """``fn.lower(...)``: the step's program for these (possibly abstract) arguments."""
        if _RECORDERS:
            _record(Use(self, "lower", args, kwargs))
        return self.fn.lower(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Step({self.name!r}, static={self.static}, donate={self.donate})"


def _record(use: Use) -> None:
    for r in _RECORDERS:
        r.append(use)


@contextlib.contextmanager
def recording() -> Iterator[list[Use]]:
    """Lists every step called or lowered inside the block (in order)."""
    uses: list[Use] = []
    _RECORDERS.append(uses)
    try:
        yield uses
    finally:
        _RECORDERS.remove(uses)
