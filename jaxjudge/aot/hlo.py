"""Collectives of a compiled program, read from its HLO text.

Each collective instruction of the optimised HLO is counted by kind, and its result bytes are
summed per chip (the shapes in a compiled SPMD program are per-device shapes). A collective in
the body of a while loop (the scanned layers) runs once per iteration: `collectives` multiplies
it by the loop's trip count when the caller gives one (the HLO text of a TPU program does not
state it). The bytes are
what one chip's collective produces, not a link-level traffic model: a ring all-reduce of B
bytes over n chips moves about 2 (n - 1) / n x B per chip, an all-gather (n - 1) / n of its
result.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

__all__ = ["COLLECTIVE_KINDS", "DTYPE_BYTES", "Collective", "collectives", "count_by_kind", "bytes_by_kind", "hbm_copy_bytes",
           "slice_transfers", "partitions"]

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# Bytes of one element per HLO element type (sub-byte types rounded up).
DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
               "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3b11fnuz": 1}
# "%name = TYPE kind(" or "name = TYPE kind-start(": TYPE is one shape or a tuple of shapes.
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\(.*?\)|[\w]+\[[^\]]*\](?:\{[^}]*\})?)\s+"
                    r"(?P<kind>" + "|".join(COLLECTIVE_KINDS) + r")(?P<start>-start)?\(")
_SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction: its kind, HLO name, result bytes per chip, and its line."""

    kind: str
    name: str
    bytes: int
    line: str
    times: int = 1


def _shape_bytes(type_text: str) -> int:
    total = 0
    for dtype, dims in _SHAPE.findall(type_text):
        if dtype not in DTYPE_BYTES:
            continue
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * DTYPE_BYTES[dtype]
    return total


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s+\(.*\{\s*$")
_WHILE_BODY = re.compile(r"\swhile\(.*?body=%?(?P<body>[\w.\-]+)")


def _instruction_lines(hlo_text: str) -> Iterator[tuple[str | None, str]]:
    """(name of the computation it belongs to, line) for every line below a computation's header."""
    current = None
    for line in hlo_text.splitlines():
        head = _COMPUTATION.match(line)
        if head and not line.startswith(" "):
            current = head.group("name")
            continue
        yield current, line


def collectives(hlo_text: str, loop_trips: int = 1) -> list[Collective]:
    """Every collective of an HLO module (an async ``-start``/``-done`` pair counted once).

    For an async start whose result is a tuple (operands, results, ...), the bytes are those of
    its last element, the result buffer. A collective inside the body computation of a while
    loop gets ``times = loop_trips``.
    """
    bodies = {m.group("body") for m in _WHILE_BODY.finditer(hlo_text)}
    out = []
    for current, line in _instruction_lines(hlo_text):
        m = _INSTR.match(line)
        if not m:
            continue
        type_text = m.group("type")
        if m.group("start") and type_text.startswith("("):
            shapes = _SHAPE.findall(type_text)
            nbytes = _shape_bytes("{}[{}]".format(*shapes[-1])) if shapes else 0
        else:
            nbytes = _shape_bytes(type_text)
        times = loop_trips if current in bodies else 1
        out.append(Collective(m.group("kind"), m.group("name"), nbytes, line.strip(), times))
    return out


def count_by_kind(found: list[Collective]) -> dict[str, int]:
    """Number of collectives run per kind (every kind listed, zeros included)."""
    return {k: sum(c.times for c in found if c.kind == k) for k in COLLECTIVE_KINDS}


def bytes_by_kind(found: list[Collective]) -> dict[str, int]:
    """Result bytes per chip per kind, over every run of each collective."""
    return {k: sum(c.bytes * c.times for c in found if c.kind == k) for k in COLLECTIVE_KINDS}


# A program for several slices is compiled per slice (``num_partitions`` = one slice's chips): its
# collectives' replica groups name that slice's chips only, and what crosses slices over the
# data-centre network is a host transfer, a ``send`` whose attributes name the collective it does.
_TRANSFER = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>\(.*?\))\s+send\(.*"
                       r'_xla_megascale_transfer_type="(?P<kind>[A-Z_]+)"')
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")


def slice_transfers(hlo_text: str, loop_trips: int = 1) -> list[Collective]:
    """The transfers between slices of a multi-slice program (its data-centre network sends), as
    collectives: the kind the transfer does (``ALL_GATHER`` -> ``all-gather``), the bytes one
    chip sends, ``loop_trips`` times in a while loop's body. Empty for a one-slice program."""
    bodies = {m.group("body") for m in _WHILE_BODY.finditer(hlo_text)}
    out = []
    for current, line in _instruction_lines(hlo_text):
        m = _TRANSFER.match(line)
        if m:
            shapes = _SHAPE.findall(m.group("type"))
            nbytes = _shape_bytes("{}[{}]".format(*shapes[0])) if shapes else 0
            out.append(Collective(m.group("kind").lower().replace("_", "-"), m.group("name"), nbytes, line.strip(),
                                  loop_trips if current in bodies else 1))
    return out


def partitions(hlo_text: str) -> int | None:
    """The chips one compiled program runs on (its module's ``num_partitions``), if stated."""
    m = _PARTITIONS.search(hlo_text)
    return int(m.group(1)) if m else None


_CALLED = re.compile(r"(?:calls|body|condition|to_apply)=%?([\w.\-]+)")
_COPY = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<type>\(.*?\)|\w+\[[^\]]*\](?:\{[^}]*\})?)\s+"
                   r"(?P<kind>copy|copy-start)\(")
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")


def hbm_copy_bytes(hlo_text: str, loop_trips: int = 1) -> int:
    """Bytes per chip that the program's copy instructions write to HBM in one run.

    XLA inserts a copy where an operand's layout is not the one its consumer wants (for example
    one layer's weights sliced from the scanned stack and laid out again for the TPU's dot); each
    such copy writes its result to HBM and is read back once. A copy (or an async
    ``copy-start``, whose destination is its result tuple's first element) into another memory
    space (``S(1)`` and up: the chip's own memories, where XLA prefetches operands) is not
    counted. A copy inside the body of a while loop, or inside a computation it calls (fusions),
    counts ``loop_trips`` times.
    """
    calls: dict[str | None, set[str]] = {}
    found: list[tuple[str | None, int]] = []
    for current, line in _instruction_lines(hlo_text):
        calls.setdefault(current, set()).update(_CALLED.findall(line))
        m = _COPY.match(line)
        if not m:
            continue
        dest = m.group("type")
        if m.group("kind") == "copy-start":  # (destination, source, context)
            first = re.match(r"\(\s*(\w+\[[^\]]*\](?:\{[^}]*\})?)", dest)
            dest = first.group(1) if first else ""
        space = _MEMORY_SPACE.search(dest)
        if space and int(space.group(1)) != 0:
            continue
        found.append((current, _shape_bytes(dest)))
    in_loop: set[str] = set()
    todo = [m.group("body") for m in _WHILE_BODY.finditer(hlo_text)]
    while todo:
        name = todo.pop()
        if name not in in_loop:
            in_loop.add(name)
            todo.extend(calls.get(name, ()))
    return sum(nbytes * (loop_trips if comp in in_loop else 1) for comp, nbytes in found)
