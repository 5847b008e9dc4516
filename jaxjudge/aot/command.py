"""``jaxjudge aot JUDGE --topology v5e:2x4 --mesh data=2,model=4``: compile for a TPU slice here.

Prints one row per engine step (``prefill``, ``read_rows``, their sum ``score``, ``decode``, as
`jaxjudge.aot.compile` lowers them) of the compiled program's per-chip memory,
collectives, flops and the roofline model; ``--json`` writes the same as one object per step,
``--dump DIR`` each step's compiled HLO text. A judge that does not fit the chips exits 2 with
one line naming the bytes it needs per chip. Compiled programs and a cost model, not
measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from jaxjudge.aot.presets import judge_config
from jaxjudge.models.config import UnsupportedConfigError, config_from_hf

__all__ = ["add_parser", "run", "parse_mesh", "format_table"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("aot", help="compile the scoring and decode steps for a TPU slice on this host "
                                   "(needs libtpu: pip install -e '.[tpu]'); a cost model, not a measurement")
    p.add_argument("judge", help="a preset (llama-3-8b, qwen2.5-14b, gemma-3-27b, qwen3-32b, llama-3-70b), "
                                 "a config.json path or a Hub repo id")
    p.add_argument("--topology", default="v5e:2x4", help="TPU topology, e.g. v5e:2x4, v5p:2x2x1, v6e:2x4")
    p.add_argument("--slices", type=int, default=1,
                   help="slices of --topology joined by the data-centre network (model stays inside one)")
    p.add_argument("--mesh", default="auto", help="axis sizes, e.g. data=2,model=4, or auto (the default: the mesh "
                                                   "planner's smallest model axis that fits, the rest on data)")
    p.add_argument("--dtype", default="bfloat16", help="float32 or bfloat16")
    p.add_argument("--prefix", type=int, default=700, help="tokens of the shared prefix")
    p.add_argument("--tails", type=int, default=16, help="continuations of each prefix scored per step")
    p.add_argument("--groups", type=int, default=None,
                   help="prefix groups per scoring step, a multiple or a divisor of the data axis (default: one "
                        "per data shard, as the engine reads them)")
    p.add_argument("--tail-len", type=int, default=120, help="tokens per continuation")
    p.add_argument("--decode-rows", type=int, default=16, help="rows of a decode step")
    p.add_argument("--decode-len", type=int, default=16, help="tokens generated per row")
    p.add_argument("--layers", type=int, default=None, help="compile this many layers (default: full depth)")
    p.add_argument("--steps", default="score,decode",
                   help="which of the engine's steps to compile: prefill, read_rows, decode; score = prefill and "
                        "read_rows, with their sum")
    p.add_argument("--attention", default="xla", choices=("xla", "splash"),
                   help="XLA's dense masked attention, or JAX's Pallas splash kernel for the prefix prefill and "
                        "the reads against it (its flops counted from the blocks it computes)")
    p.add_argument("--dump", default=None, help="write each compiled step's HLO text as DIR/STEP.hlo.txt")
    p.add_argument("--json", dest="json_file", default=None, help="write the reports as JSON")
    return p


def parse_mesh(text: str | None, chips: int) -> dict[str, int]:
    """``"data=2,model=4"`` -> ``{"data": 2, "model": 4}``; -1 (or a missing axis) takes the rest.

    Raises:
        ValueError: an unknown axis, a size that is not an integer, or sizes that do not
            multiply to ``chips``.
    """
    if text is None:
        return {"data": 1, "model": chips}
    sizes: dict[str, int] = {}
    for part in filter(None, (s.strip() for s in text.split(","))):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in ("data", "model"):
            raise ValueError(f"--mesh: unknown axis {name!r} (axes: data, model)")
        try:
            sizes[name] = int(value)
        except ValueError:
            raise ValueError(f"--mesh: axis {name!r} has size {value!r}, not an integer") from None
    sizes.setdefault("data", -1)
    sizes.setdefault("model", -1)
    free = [k for k, v in sizes.items() if v == -1]
    known = 1
    for k, v in sizes.items():
        if v != -1:
            if v < 1:
                raise ValueError(f"--mesh: axis {k!r} has size {v}")
            known *= v
    if len(free) == 2:
        sizes = {"data": 1, "model": chips}
    elif free:
        if chips % known:
            raise ValueError(f"--mesh {text}: {known} does not divide the {chips} chips")
        sizes[free[0]] = chips // known
    if sizes["data"] * sizes["model"] != chips:
        raise ValueError(f"--mesh {text}: data x model = {sizes['data'] * sizes['model']}, the topology has "
                         f"{chips} chips")
    return sizes


def planned_mesh(hf: dict[str, Any], args: argparse.Namespace, chips: int) -> dict[str, int]:
    """``--mesh auto``: `jaxjudge.models.mesh_plan.plan_mesh` for the step shapes of ``args``
    (padded as the engine pads them), its line printed. Raises ValueError where nothing fits."""
    # Imported when called (from `run`), as `run`'s own: these import jax.
    from jaxjudge.engine.primitives import bucket_length, slot_bucket
    from jaxjudge.models.machine import usable_memory  # local: imports jax, as `run`'s own
    from jaxjudge.models.mesh_plan import CallShape, plan_mesh  # local: imports jax, as `run`'s own

    p, t = bucket_length(args.prefix), bucket_length(args.tail_len)
    decode = "decode" in args.steps
    step = CallShape(p, slot_bucket(p), args.tails, t, args.groups, args.decode_rows if decode else 0,
                t + args.decode_len if decode else 0)
    plan = plan_mesh([(args.judge, config_from_hf(hf))], args.dtype, step, chips, usable_memory(args.topology),
                     slices=args.slices)
    print(plan.line())
    return plan.shape


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


def format_table(reports: list[Any]) -> str:
    """The reports as a fixed-width table (per chip unless the column says otherwise). ``MFU bound``
    is ``[serialised, overlapped]``: upper bounds of a cost model (`jaxjudge.aot.cost`), not measured."""
    head = ("step", "fits", "HBM GiB", "usable", "temp GiB", "copies GB", "all-red", "red-sc", "all-gath",
            "coll MB", "ICI ms", "useful TF", "compiled/useful", "HBM GB", "roofline ms", "global ms", "x HBM bound",
            "MFU bound",
            "compile s")
    rows = [head]
    for r in reports:
        rows.append((
            r.step, "yes" if r.fits else "NO", _gib(r.hbm_per_chip), _gib(r.hbm_capacity), _gib(r.bytes["temp"]),
            f"{r.hbm_copy_bytes / 1e9:.3f}",
            str(r.collectives["all-reduce"]), str(r.collectives["reduce-scatter"]), str(r.collectives["all-gather"]),
            f"{sum(r.collective_bytes.values()) / 1e6:.1f}", f"{r.ici_seconds * 1e3:.3f}",
            f"{r.flops_useful / 1e12:.3f}",
            f"{r.flops_compiled / r.flops_useful:.3f}" if r.flops_useful else "-",
            f"{r.hbm_bytes / 1e9:.3f}", f"{r.roofline_seconds * 1e3:.3f}", f"{r.roofline_global_seconds * 1e3:.3f}",
            f"{r.roofline_seconds / r.hbm_bound_seconds:.2f}" if r.hbm_bound_seconds else "-",
            f"[{100 * r.mfu_bound[0]:.1f}%, {100 * r.mfu_bound[1]:.1f}%]", f"{r.compile_seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """The command; exit status 0, or 2 with one line on stderr for an anticipated problem."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # compile for the TPU, run nothing on it
    # (`jaxjudge.cli.main` sets both before its first import of jax, which is what makes them
    # count there; here they cover a caller of `run` that imported nothing of jax yet.)
    # local: jaxjudge.aot.compile imports jax and libtpu's helpers, only for a compile
    from jaxjudge.aot.compile import (DoesNotFitError, LibtpuMissingError, Workload, aot_compile,
                                      describe_host_for_libtpu, tpu_devices)

    try:
        hf = judge_config(args.judge)
        describe_host_for_libtpu(args.topology)
        if args.slices < 1:
            raise ValueError(f"--slices must be at least 1, got {args.slices}")
        devices = tpu_devices(args.topology, slices=args.slices)
        mesh = planned_mesh(hf, args, len(devices)) if args.mesh == "auto" else parse_mesh(args.mesh, len(devices))
        steps = tuple(s.strip() for s in args.steps.split(",") if s.strip())
        bad = sorted(set(steps) - {"score", "prefill", "read_rows", "decode"})
        if bad:
            raise ValueError(f"--steps: unknown step(s) {bad} (steps: score = prefill + read_rows, decode)")
        work = Workload(prefix=args.prefix, tails=args.tails, tail_len=args.tail_len, groups=args.groups,
                        decode_rows=args.decode_rows, decode_len=args.decode_len)
        reports = aot_compile(hf, topology=args.topology, mesh_shape=mesh, dtype=args.dtype, workload=work,
                              layers=args.layers, steps=steps, dump=args.dump, devices=devices,
                              attention=args.attention)
    except (DoesNotFitError, LibtpuMissingError, ValueError, UnsupportedConfigError) as e:
        print(f"jaxjudge aot: {e}", file=sys.stderr)
        return 2
    print(f"{args.judge} on {args.topology}, mesh data={mesh['data']} x model={mesh['model']}, {args.dtype}, "
          f"{args.attention} attention, "
          f"{reports[0].layers} layers; {args.groups or mesh['data']} prefix group(s) of "
          f"{args.prefix} tokens, each with {args.tails} tails x {args.tail_len}; decode "
          f"{args.decode_rows} rows, {args.decode_len} tokens a call (its row: per generated token)")
    print(format_table(reports))
    if args.slices > 1:
        for r in reports:
            kinds = ", ".join(f"{n} {k} ({r.slice_transfer_bytes[k] / 1e6:.3f} MB)" for k, n in r.slice_transfers.items())
            print(f"{r.step}: compiled per slice ({r.chips_per_program} chips a program); between the {r.slices} "
                  f"slices, over the data-centre network (not in the ICI time): {kinds or 'nothing'}")
    print("Compiled TPU programs and a cost model on published chip figures, not measurements: 'MFU bound' is "
          "[collectives serialised, collectives overlapped], each an upper bound (every matmul at peak; 'roofline ms': "
          "the program's instructions one after another, each max(its flops at peak, its HBM bytes at the HBM "
          "bandwidth), 'HBM GB' the bytes of arrays in HBM they read and write, both from the full-depth program's "
          "HLO; 'global ms': max(compiled flops at peak, XLA's bytes accessed at the bandwidth), not a bound since "
          "XLA counts on-chip arrays too; 'ICI ms': each collective by a ring formula over its mesh axis, links without "
          "wraparound on axes shorter than a torus, plus a latency per ring step; 'usable': the runtime's HBM "
          "limit). Compiled flops and bytes accessed: " + "; ".join(f"{r.step} from {r.cost_from}" for r in reports) + " (XLA counts a "
          "loop body once). HBM bound: the step's argument bytes at the published bandwidth.")
    if args.json_file:
        with open(args.json_file, "w") as f:
            json.dump({r.step: r.as_dict() for r in reports}, f, indent=1)
    return 0
