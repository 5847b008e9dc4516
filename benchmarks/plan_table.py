"""The planner table of docs/tpu.md: the mesh planner on `jaxjudge aot`'s presets and slices.

    python benchmarks/plan_table.py                      # the planner alone (seconds, no libtpu)
    PYTHONPATH=.venv/libtpu python benchmarks/plan_table.py --compile   # and `jaxjudge aot` per mesh

For each judge (Llama-3-8B, Qwen3-32B, Llama-3-70B, bfloat16) and slice (v5e-8, v5p-8 with its
4 chips, v6e-8, v5e-16) it prints the mesh `jaxjudge.models.mesh_plan.plan_mesh` chooses for
`jaxjudge aot`'s default step shapes (700-token prefix, 16 tails of 120, 16 decode rows at
token 16), its bytes per chip (a model's estimate) against the chip's usable memory, or the
refusal where no mesh fits. ``--compile`` also runs ``jaxjudge aot JUDGE --topology T --mesh
data=D,model=M`` for each chosen mesh (libtpu needed) and adds the compiled programs' HBM per
chip (XLA's memory analysis of the steps ``--steps`` names, by default the scoring and decode
steps): compiled programs, not measurements of a TPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxjudge.aot.presets import PRESETS  # noqa: E402
from jaxjudge.engine.primitives import bucket_length, slot_bucket  # noqa: E402
from jaxjudge.models.config import config_from_hf  # noqa: E402
from jaxjudge.models.machine import GIB, usable_memory  # noqa: E402
from jaxjudge.models.mesh_plan import CallShape, MeshPlanError, plan_mesh  # noqa: E402

JUDGES = {"llama-3-8b": "Llama-3-8B", "qwen3-32b": "Qwen3-32B", "llama-3-70b": "Llama-3-70B"}
SLICES = {"v5e:2x4": "v5e-8", "v5p:2x2x1": "v5p-8 (4 chips)", "v6e:2x4": "v6e-8", "v5e:4x4": "v5e-16"}


def aot_step(prefix: int = 700, tails: int = 16, tail_len: int = 120, decode_rows: int = 16,
             decode_len: int = 16) -> CallShape:
    """`jaxjudge aot`'s default workload, padded as the engine pads it."""
    p, t = bucket_length(prefix), bucket_length(tail_len)
    return CallShape(prefix_len=p, prefix_slots=slot_bucket(p), tails=tails, tail_len=t, groups=None,
                decode_rows=decode_rows, decode_slots=t + decode_len)


def compiled_hbm(judge: str, topology: str, data: int, model: int, steps: str) -> dict[str, float]:
    """HBM per chip (GiB) of each step as `jaxjudge aot` compiles it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "aot.json"
        cmd = [sys.executable, "-m", "jaxjudge.cli", "aot", judge, "--topology", topology,
               "--mesh", f"data={data},model={model}", "--steps", steps, "--json", str(out)]
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
        if run.returncode:
            return {"error": (run.stderr.strip().splitlines() or ["?"])[-1]}
        reports = json.loads(out.read_text())
    return {step: r["hbm_per_chip"] / GIB for step, r in reports.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compile", action="store_true", help="also compile each chosen mesh with jaxjudge aot")
    parser.add_argument("--steps", default="score,decode", help="the steps --compile compiles")
    parser.add_argument("--json", dest="json_file", default=None, help="write the rows as JSON")
    args = parser.parse_args(argv)
    step = aot_step()
    rows = []
    head = "| judge | slice | mesh chosen | per chip, planned (parameters + KV + activations) | usable | why |"
    if args.compile:
        head = head[:-len(" why |")] + f" compiled {' / '.join(args.steps.split(','))} | why |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for judge, jname in JUDGES.items():
        cfg = config_from_hf(PRESETS[judge])
        for topology, sname in SLICES.items():
            chips = math.prod(int(x) for x in topology.split(":")[1].split("x"))
            memory = usable_memory(topology)
            row = {"judge": judge, "topology": topology, "chips": chips, "usable_gib": memory.usable_bytes / GIB}
            try:
                plan = plan_mesh([(judge, cfg)], "bfloat16", step, chips, memory)
            except MeshPlanError as e:
                row["refused"] = str(e)
                cells = [jname, sname, "**none fits**", str(e).split(": ", 1)[1].split(", more")[0],
                         f"{memory.usable_bytes / GIB:.2f} GiB"]
                if args.compile:
                    cells.append("-")
                cells.append("refused")
                print("| " + " | ".join(cells) + " |")
                rows.append(row)
                continue
            b = plan.per_chip
            row.update(data=plan.data, model=plan.model, parameters=b.parameters, kv_cache=b.kv_cache,
                       activations=b.activations, tried=plan.tried, replicated_kv=plan.replicated_kv)
            smaller = ", ".join(f"model {m}: {t / GIB:.1f}" for m, t in plan.tried if m < plan.model)
            why = (f"smaller axes need {smaller} GiB > {plan.budget / GIB:.2f}" if smaller else
                   f"fits with model 1 (budget {plan.budget / GIB:.2f})")
            if plan.replicated_kv:
                why += f"; {plan.replicated_kv[0][1]} KV heads replicated"
            cells = [jname, sname, f"data {plan.data} x model {plan.model}",
                     f"{b.parameters / GIB:.2f} + {b.kv_cache / GIB:.2f} + {b.activations / GIB:.2f} = "
                     f"**{b.total / GIB:.2f} GiB**", f"{memory.usable_bytes / GIB:.2f} GiB"]
            if args.compile:
                hbm = compiled_hbm(judge, topology, plan.data, plan.model, args.steps)
                row["compiled_gib"] = hbm
                cells.append(hbm["error"] if "error" in hbm else " / ".join(f"{v:.2f}" for v in hbm.values()) + " GiB")
            cells.append(why)
            print("| " + " | ".join(cells) + " |", flush=True)
            rows.append(row)
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(rows, indent=1, default=list))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
