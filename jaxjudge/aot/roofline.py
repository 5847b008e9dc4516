"""A roofline summed over a compiled TPU program's instructions, read from its HLO text.

A bound, not a measurement. The TensorCore runs a program's instructions (fusions, dots, copies)
one after another; only the asynchronous ones (``copy-start``, ``slice-start``, collectives'
``-start``) run beside them. So one run of the program takes at least

    sum over synchronous instructions of max(flops_i / peak, hbm_bytes_i / bandwidth)

and at least the whole program's HBM bytes (asynchronous copies included) at the bandwidth, and
its whole flops at the peak: `Roofline.seconds` is the largest of the three. Against one global
``max(flops / peak, bytes / bandwidth)`` this charges a memory-bound instruction (a slice of the
weights copied into a new layout, a cache update, the top-k) its own time instead of hiding it
behind another's compute.

Per instruction, read from the optimised HLO:

- **flops**: those of its dots and convolutions (``2 x`` result elements ``x`` contracted
  elements), inside a fusion's computation and the fusions nested in it; elementwise and
  reduction flops are left out (for a transformer layer a fraction of a percent of its dots');
- **HBM bytes**: the bytes of its operands and result that live in HBM (memory space 0; a
  buffer XLA placed in the chip's on-chip memories, ``S(1)`` and up in its layout, costs no
  HBM traffic). An operand that the instruction only slices (a layer's weights out of the
  scanned stack, through nested fusions and bitcasts) counts the slice's bytes; the buffer a
  ``dynamic-update-slice`` updates in place is not read, and only the update is written;
- **times run**: the body of a ``while`` loop whose condition is ``counter < N`` (the scanned
  layers) runs N times per run of its parent; a loop whose condition is anything else (the
  decoding loop's stop on end-of-sequence) ``default_trips`` times; with ``read_trips=False``
  every loop runs ``default_trips`` times (a program whose only loop is the one being costed
  per iteration: the decoding loop with its layers unrolled, whatever its condition says).

Collectives are priced apart (`jaxjudge.aot.cost`, by ring formulas); here they cost nothing.
Pallas kernels (``custom-call``) are charged their HBM bytes here and their flops by the caller
(``kernel_flops``, counted from the blocks they compute): the kernels' compute and their bytes
are added as ``max(sum of flops / peak, sum of bytes / bandwidth)``, which is at most the sum of
their per-kernel maxima, so still a lower bound on their time.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterator

from jaxjudge.aot.hlo import DTYPE_BYTES

__all__ = ["Instruction", "parse_module", "OpCost", "op_costs", "Roofline", "roofline", "shapes_of"]

_ARRAY = re.compile(r"(\w+)\[([\d,]*)\](\{[^}]*\})?")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s+\(")
_LINE = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*(?P<op>[\w\-]+)\(")
_SPACE = re.compile(r"S\((\d+)\)")
_ASYNC = ("copy-start", "slice-start", "all-reduce-start", "all-gather-start", "collective-permute-start",
          "reduce-scatter-start", "all-to-all-start", "send", "recv")
# No HBM traffic of their own (an async op's "-done" half costs nothing either: its "-start" is
# costed; collectives are priced by `jaxjudge.aot.cost`).
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
         "replica-id", "opt-barrier", "add-dependency", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
         "collective-permute"}
_VIEWS = {"bitcast", "reshape"}  # reinterpret a buffer: a slice after them still reads only the slice


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: its name, result type text, opcode, operand names, the text inside its
    parentheses (a parameter's number, a constant's value) and the attribute text after them."""

    name: str
    type: str
    op: str
    operands: tuple[str, ...]
    attrs: str
    root: bool = False
    args: str = ""


def _balanced(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    closing: list[str] = []
    for i in range(start, len(text)):
        c = text[i]
        if c in pairs:
            closing.append(pairs[c])
        elif closing and c == closing[-1]:
            closing.pop()
            if not closing:
                return i + 1
    return len(text)


def _instruction(line: str) -> Instruction | None:
    m = _LINE.match(line)
    if not m:
        return None
    i = m.end()
    if line.startswith("(", i):
        j = _balanced(line, i)
    else:
        j = line.find(" ", i)
        j = len(line) if j < 0 else j
    type_text = line[i:j]
    op = _OPCODE.match(line, j)
    if not op:
        return None
    k = _balanced(line, op.end() - 1)
    inside = line[op.end():k - 1]
    operands = tuple(re.findall(r"%([\w.\-]+)", inside))
    return Instruction(m.group("name"), type_text, op.group("op"), operands, line[k:], bool(m.group("root")), inside)


def parse_module(hlo_text: str) -> tuple[dict[str, list[Instruction]], str | None]:
    """The module's computations (name -> instructions in order) and the entry computation's name."""
    comps: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        if not line.startswith((" ", "}")) and line.rstrip().endswith("{"):
            head = _HEADER.match(line)
            if head:
                current = head.group("name")
                comps[current] = []
                if line.startswith("ENTRY"):
                    entry = current
            continue
        if line.strip() == "}":  # (a Pallas call's backend config can run over lines of its own)
            current = None
            continue
        if current is not None:
            ins = _instruction(line)
            if ins is not None:
                comps[current].append(ins)
    return comps, entry


def shapes_of(type_text: str) -> list[tuple[str, tuple[int, ...], int]]:
    """(dtype, dims, memory space) of every array in a type (one shape or a tuple)."""
    out = []
    for dtype, dims, layout in _ARRAY.findall(type_text):
        if dtype not in DTYPE_BYTES:
            continue
        space = _SPACE.search(layout or "")
        out.append((dtype, tuple(int(d) for d in dims.split(",") if d), int(space.group(1)) if space else 0))
    return out


def _bytes(type_text: str, hbm_only: bool = False) -> int:
    return sum(math.prod(dims) * DTYPE_BYTES[dt] for dt, dims, space in shapes_of(type_text)
               if not hbm_only or space == 0)


def _attr(attrs: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=(\{{[^}}]*\}}|%?[\w.\->]+)", attrs)
    return m.group(1).strip("{}").lstrip("%") if m else None


def _dims_attr(attrs: str, key: str) -> list[int]:
    value = _attr(attrs, key)
    return [int(x) for x in value.split(",") if x.strip()] if value else []


def _window(window: str, key: str, spatial: int, default: int) -> list[int]:
    m = re.search(rf"\b{key}=([\d_x\-]+)", window)
    if not m:
        return [default] * spatial
    return [int(v.split("_")[0]) if key == "pad" else int(v) for v in m.group(1).split("x")]


def _taps(n_in: int, n_out: int, size: int, pad_lo: int, stride: int, lhs_dilate: int, rhs_dilate: int) -> int:
    """Pairs (output position, window position) of one spatial dimension that land on a real input
    element (not padding, not a hole of the input's dilation)."""
    last = (n_in - 1) * lhs_dilate
    count = 0
    for w in range(size):
        offset = w * rhs_dilate - pad_lo  # input position of output 0
        if lhs_dilate == 1:  # o * stride + offset in [0, last]
            lo = max(0, -(offset // stride) if offset < 0 else 0)
            while lo < n_out and lo * stride + offset < 0:
                lo += 1
            hi = min(n_out - 1, (last - offset) // stride) if last - offset >= 0 else -1
            count += max(0, hi - lo + 1)
        else:
            count += sum(1 for o in range(n_out)
                         if 0 <= o * stride + offset <= last and (o * stride + offset) % lhs_dilate == 0)
    return count


def _conv_flops(lhs: tuple[int, ...], rhs: tuple[int, ...], out: tuple[int, ...], labels: str, window: str) -> float:
    """Multiply-adds x 2 of a convolution, counting only window taps on real input elements (XLA:TPU
    writes a batched dot as a convolution whose batch is a padded spatial dimension: most of its
    window falls on padding)."""
    lhs_l, rest = labels.split("_")
    rhs_l, out_l = rest.split("->")
    spatial = sorted(c for c in lhs_l if c.isdigit())
    n = len(spatial)
    pads, strides = _window(window, "pad", n, 0), _window(window, "stride", n, 1)
    lhs_dil, rhs_dil = _window(window, "lhs_dilate", n, 1), _window(window, "rhs_dilate", n, 1)
    taps = 1
    for k, d in enumerate(spatial):
        taps *= _taps(lhs[lhs_l.index(d)], out[out_l.index(d)], rhs[rhs_l.index(d)], pads[k], strides[k],
                      lhs_dil[k], rhs_dil[k])
    return 2.0 * out[out_l.index("b")] * out[out_l.index("f")] * rhs[rhs_l.index("i")] * taps


class _Module:
    def __init__(self, hlo_text: str, read_trips: bool = True):
        self.comps, self.entry = parse_module(hlo_text)
        self.read_trips = read_trips
        self.types = {c: {i.name: i.type for i in instrs} for c, instrs in self.comps.items()}
        self._flops: dict[str, float] = {}

    def operand_type(self, comp: str, name: str) -> str:
        return self.types[comp].get(name, "")

    def flops(self, comp: str) -> float:
        """Dot and convolution flops of one run of a computation (nested fusions and calls included)."""
        if comp not in self._flops:
            total = 0.0
            for ins in self.comps.get(comp, []):
                total += self._instruction_flops(comp, ins)
                if ins.op in ("fusion", "call"):
                    total += self.flops(_attr(ins.attrs, "calls") or _attr(ins.attrs, "to_apply") or "")
            self._flops[comp] = total
        return self._flops[comp]

    def _instruction_flops(self, comp: str, ins: Instruction) -> float:
        out = shapes_of(ins.type)
        if ins.op not in ("dot", "convolution") or not out or len(ins.operands) < 2:
            return 0.0
        result = math.prod(out[0][1])
        if ins.op == "dot":
            lhs = shapes_of(self.operand_type(comp, ins.operands[0]))
            contracted = math.prod(lhs[0][1][d] for d in _dims_attr(ins.attrs, "lhs_contracting_dims")) if lhs else 1
            return 2.0 * result * contracted
        lhs = shapes_of(self.operand_type(comp, ins.operands[0]))
        rhs = shapes_of(self.operand_type(comp, ins.operands[1]))
        labels = _attr(ins.attrs, "dim_labels") or ""
        if not lhs or not rhs or labels.count("_") != 1 or "->" not in labels:
            return 0.0
        return _conv_flops(lhs[0][1], rhs[0][1], out[0][1], labels, _attr(ins.attrs, "window") or "")

    def users(self, comp: str, name: str) -> list[tuple[Instruction, int]]:
        return [(i, k) for i in self.comps.get(comp, []) for k, o in enumerate(i.operands) if o == name]

    def read_of_param(self, comp: str, index: int, full: int) -> int:
        """HBM bytes read of a fused computation's parameter ``index`` of ``full`` bytes."""
        param = next((i for i in self.comps.get(comp, []) if i.op == "parameter" and i.args.strip() == str(index)),
                     None)
        if param is None:
            return full
        return min(full, self._read_of_value(comp, param.name, full))

    def _read_of_value(self, comp: str, name: str, full: int) -> int:
        total = 0
        for user, k in self.users(comp, name):
            if user.op in ("dynamic-slice", "slice", "gather") and k == 0:
                total += _bytes(user.type)
            elif user.op == "dynamic-update-slice" and k == 0:
                continue  # the buffer updated in place is not read
            elif user.op in _VIEWS:
                total += self._read_of_value(comp, user.name, full)
            elif user.op == "fusion":
                called = _attr(user.attrs, "calls") or ""
                total += self.read_of_param(called, k, full)
            else:
                return full
            if total >= full:
                return full
        return total

    def written(self, comp: str, ins: Instruction) -> int:
        """HBM bytes a fusion writes: its result's, an in-place update's bytes only."""
        hbm_out = [space == 0 for _, _, space in shapes_of(ins.type)]
        if not any(hbm_out):
            return 0
        called = _attr(ins.attrs, "calls") or ""
        roots = [i for i in self.comps.get(called, []) if i.root]
        if not roots:
            return _bytes(ins.type, hbm_only=True)
        root = roots[0]
        elements = root.operands if root.op == "tuple" else (root.name,)
        defs = {i.name: i for i in self.comps[called]}
        total = 0
        for element, in_hbm in zip(elements, hbm_out):
            if not in_hbm:
                continue
            d = defs.get(element)
            while d is not None and d.op in _VIEWS and d.operands:
                d = defs.get(d.operands[0])
            if d is not None and d.op == "dynamic-update-slice" and len(d.operands) > 1:
                total += _bytes(self.types[called].get(d.operands[1], ""))
            elif d is not None:
                total += _bytes(d.type)
        return total

    def trips(self, cond: str, default: int) -> int:
        """N for a loop condition ``counter < N`` (N a constant), else ``default``."""
        instrs = self.comps.get(cond, []) if self.read_trips else []
        root = next((i for i in instrs if i.root), None)
        if root is None or root.op != "compare" or "direction=LT" not in root.attrs:
            return default
        consts = {i.name: i.args.strip() for i in instrs if i.op == "constant"}
        bound = consts.get(root.operands[1], "") if len(root.operands) > 1 else ""
        return int(bound) if bound.isdigit() else default


@dataclasses.dataclass(frozen=True)
class OpCost:
    """One instruction's share of one run of the program (already times ``times``)."""

    name: str
    computation: str
    op: str
    flops: float
    hbm_bytes: float
    times: int
    asynchronous: bool = False
    kernel: bool = False


def _hbm_operands(mod: _Module, comp: str, ins: Instruction) -> int:
    return sum(_bytes(mod.operand_type(comp, o), hbm_only=True) for o in ins.operands)


def _cost_of(mod: _Module, comp: str, ins: Instruction) -> tuple[float, float]:
    """(flops, HBM bytes) of one run of one scheduled instruction."""
    if ins.op == "fusion":
        called = _attr(ins.attrs, "calls") or ""
        read = 0
        for k, o in enumerate(ins.operands):
            full = _bytes(mod.operand_type(comp, o), hbm_only=True)
            read += mod.read_of_param(called, k, full) if full else 0
        return mod.flops(called), float(read + mod.written(comp, ins))
    if ins.op in ("dynamic-slice", "slice", "slice-start"):
        src = _bytes(mod.operand_type(comp, ins.operands[0]), hbm_only=True) if ins.operands else 0
        out = shapes_of(ins.type)
        if ins.op == "slice-start":  # ((operands), destination, context)
            out = out[len(ins.operands):len(ins.operands) + 1]
        part = math.prod(out[0][1]) * DTYPE_BYTES[out[0][0]] if out else 0
        dest = part if out and out[0][2] == 0 else 0
        return 0.0, float((part if src else 0) + dest)
    if ins.op == "dynamic-update-slice":
        update = _bytes(mod.operand_type(comp, ins.operands[1])) if len(ins.operands) > 1 else 0
        hbm_update = _bytes(mod.operand_type(comp, ins.operands[1]), hbm_only=True) if len(ins.operands) > 1 else 0
        return 0.0, float(hbm_update + (update if _bytes(ins.type, hbm_only=True) else 0))
    if ins.op == "copy-start":  # (destination, source, context): read the source, write the destination
        shapes = shapes_of(ins.type)
        src = _bytes(mod.operand_type(comp, ins.operands[0]), hbm_only=True) if ins.operands else 0
        dest = math.prod(shapes[0][1]) * DTYPE_BYTES[shapes[0][0]] if shapes and shapes[0][2] == 0 else 0
        return 0.0, float(src + dest)
    return mod._instruction_flops(comp, ins), float(_hbm_operands(mod, comp, ins) + _bytes(ins.type, hbm_only=True))


def _walk(mod: _Module, comp: str, times: int, default_trips: int) -> Iterator[OpCost]:
    for ins in mod.comps.get(comp, []):
        if ins.op == "while":
            body, cond = _attr(ins.attrs, "body") or "", _attr(ins.attrs, "condition") or ""
            n = mod.trips(cond, default_trips)
            yield from _walk(mod, cond, times * n, default_trips)
            yield from _walk(mod, body, times * n, default_trips)
            continue
        if ins.op == "call":
            yield from _walk(mod, _attr(ins.attrs, "to_apply") or "", times, default_trips)
            continue
        if ins.op == "conditional":  # the cheapest branch: a lower bound whichever runs
            branches = (_attr(ins.attrs, "branch_computations") or "").replace("%", "").split(",")
            costs = [list(_walk(mod, b.strip(), times, default_trips)) for b in branches if b.strip()]
            if costs:
                yield from min(costs, key=lambda c: sum(o.hbm_bytes + o.flops for o in c))
            continue
        if ins.op in _FREE or ins.op.endswith("-done"):
            continue
        flops, nbytes = _cost_of(mod, comp, ins)
        asynchronous = ins.op in _ASYNC
        yield OpCost(ins.name, comp, ins.op, flops * times, nbytes * times, times, asynchronous,
                     ins.op == "custom-call")


def op_costs(hlo_text: str, default_trips: int = 1, read_trips: bool = True) -> list[OpCost]:
    """Every costed instruction of one run of the program's entry computation."""
    mod = _Module(hlo_text, read_trips)
    if mod.entry is None:
        raise ValueError("HLO text has no ENTRY computation")
    return list(_walk(mod, mod.entry, 1, default_trips))


@dataclasses.dataclass(frozen=True)
class Roofline:
    """The bound for one run of a program on one chip (see the module docstring).

    Attributes:
        flops: dot and convolution flops read from the HLO, plus ``kernel_flops``.
        hbm_bytes: HBM bytes read and written, asynchronous copies included.
        fused_seconds: the sum over synchronous instructions of their own max(compute, HBM),
            plus the kernels' max(compute, HBM) over their sums.
        seconds: the bound: max(fused_seconds, hbm_bytes / bandwidth, flops / peak).
        hbm_bound_share: the share of ``fused_seconds`` spent in instructions whose HBM time
            exceeds their compute time.
    """

    flops: float
    hbm_bytes: float
    fused_seconds: float
    seconds: float
    hbm_bound_share: float


def roofline(hlo_text: str, peak_flops: float, hbm_bandwidth: float, default_trips: int = 1,
             kernel_flops: float = 0.0, read_trips: bool = True) -> Roofline:
    """The per-instruction roofline of one run of a compiled program (per chip)."""
    costs = op_costs(hlo_text, default_trips, read_trips)
    fused = hbm_side = 0.0
    kernel_bytes = 0.0
    for c in costs:
        if c.asynchronous:
            continue
        if c.kernel:
            kernel_bytes += c.hbm_bytes
            continue
        compute, memory = c.flops / peak_flops, c.hbm_bytes / hbm_bandwidth
        fused += max(compute, memory)
        hbm_side += memory if memory > compute else 0.0
    kernels = max(kernel_flops / peak_flops, kernel_bytes / hbm_bandwidth)
    fused += kernels
    flops = sum(c.flops for c in costs) + kernel_flops
    nbytes = sum(c.hbm_bytes for c in costs)
    return Roofline(flops, nbytes, fused, max(fused, nbytes / hbm_bandwidth, flops / peak_flops),
                    hbm_side / fused if fused else 0.0)
