"""The TPU table of docs/tpu.md: `jaxjudge aot` on the presets, one row per step, from its ``--json``.

    PYTHONPATH=.venv/libtpu python benchmarks/aot_table.py --out aot-table/   # compiles (long)
    python benchmarks/aot_table.py --out aot-table/ --only-format               # the rows again

Each case runs ``jaxjudge aot JUDGE --topology T --mesh data=D,model=M [--groups P] --json
OUT/NAME.json`` with its default SummEval-shaped steps (700-token prefix, 16 tails of 120, 16
decode rows at token 16; bfloat16, XLA attention, full depth), one case at a time, skipping a
case whose JSON is already there; then prints the Markdown rows. Every figure is a compiled
TPU program's (memory, collectives, XLA's cost analysis, the HBM bytes its HLO reads and writes)
or the cost model's bound on it (`jaxjudge.aot.roofline`: the roofline summed per instruction;
`jaxjudge.aot.cost`: ICI by the ring formula; MFU as [serialised, overlapped]), never a
measurement of a TPU; the one measured column is the compile's wall time on the host that ran it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30

# (file name, judge preset, label, topology, data, model, groups per step (None: one per data shard), steps)
CASES = [
    ("llama8b_v5e_d4m2_g2", "llama-3-8b", "Llama-3-8B", "v5e:2x4", 4, 2, 2, "score,decode"),
    ("llama8b_v5e_d2m4_g1", "llama-3-8b", "Llama-3-8B", "v5e:2x4", 2, 4, 1, "score"),
    ("llama8b_v5e_d2m4_g2", "llama-3-8b", "Llama-3-8B", "v5e:2x4", 2, 4, None, "score,decode"),
    ("llama70b_v5p_d1m4", "llama-3-70b", "Llama-3-70B", "v5p:2x2x1", 1, 4, None, "score,decode"),
    ("qwen32b_v6e_d1m8", "qwen3-32b", "Qwen3-32B", "v6e:2x4", 1, 8, None, "score,decode"),
]

HEAD = ("| judge, slice, mesh | step | HBM per chip, of usable (compiled program) | collectives per layer: all-reduce / all-gather "
        "| compiled / useful flops | HBM bytes per chip, per instruction (x arguments) | XLA's bytes accessed per chip "
        "| roofline ms: per instruction, a bound (global max, no bound) | ICI (ring) ms, bound "
        "| MFU bound [serialised, overlapped] | compile s, measured on the compiling host |")


def compile_case(out: Path, name: str, judge: str, topology: str, data: int, model: int, groups: int | None,
                 steps: str) -> None:
    cmd = [sys.executable, "-m", "jaxjudge.cli", "aot", judge, "--topology", topology, "--mesh",
           f"data={data},model={model}", "--steps", steps, "--json", str(out / f"{name}.json")]
    if groups is not None:
        cmd += ["--groups", str(groups)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    (out / f"{name}.txt").write_text(run.stdout + run.stderr)
    print(f"{name}: exit {run.returncode}, {time.perf_counter() - t0:.0f} s wall", file=sys.stderr)


def rows(label: str, topology: str, data: int, model: int, groups: int | None, reports: dict) -> list[str]:
    mesh = f"data {data} x model {model}" if data > 1 else f"model {model}"
    first = f"{label}, {topology}, {mesh} ({groups or data} group{'s' if (groups or data) > 1 else ''})"
    out = []
    for step, r in reports.items():
        layers = r["layers"]
        coll = r["collectives"]
        ratio = r["flops_compiled"] / r["flops_useful"] if r["flops_useful"] else float("nan")
        args = r["bytes"]["argument"]
        out.append(
            f"| {first if not out else ''} | {step} | {r['hbm_per_chip'] / GIB:.2f} of {r['hbm_capacity'] / GIB:.2f} GiB "
            f"| {(coll['all-reduce'] + coll['reduce-scatter']) / layers:.2f} / {coll['all-gather'] / layers:.2f} "
            f"| {ratio:.3f} | {r['hbm_bytes'] / 1e9:.2f} GB ({r['hbm_bytes'] / args:.1f}x) "
            f"| {r['bytes_accessed'] / 1e9:.2f} GB "
            f"| {r['roofline_seconds'] * 1e3:.2f} ({r['roofline_global_seconds'] * 1e3:.2f}) "
            f"| {r['ici_seconds'] * 1e3:.2f} | [{100 * r['mfu_bound'][0]:.1f}%, {100 * r['mfu_bound'][1]:.1f}%] "
            f"| {r['compile_seconds']:.1f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="aot-table", help="folder of the per-case JSON (reused when present)")
    parser.add_argument("--only-format", action="store_true", help="print the rows of the JSON already there")
    parser.add_argument("--cases", default=None, help="comma-separated case names (default: all)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [c for c in CASES if args.cases is None or c[0] in args.cases.split(",")]
    if not args.only_format:
        for name, judge, _, topology, data, model, groups, steps in wanted:
            if not (out / f"{name}.json").exists():
                compile_case(out, name, judge, topology, data, model, groups, steps)
    print(HEAD)
    print("|" + "---|" * (HEAD.count("|") - 1))
    for name, _, label, topology, data, model, groups, _ in wanted:
        path = out / f"{name}.json"
        if path.exists():
            print("\n".join(rows(label, topology, data, model, groups, json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
