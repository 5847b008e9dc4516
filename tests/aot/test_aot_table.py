"""`benchmarks/aot_table.py`: the TPU table rows of docs/tpu.md from `jaxjudge aot --json` reports (the
formatting only; the compiles themselves take minutes a case)."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def _report(step: str) -> dict:
    return {"layers": 32, "collectives": {"all-reduce": 66, "reduce-scatter": 0, "all-gather": 48},
            "flops_compiled": 1.1e12, "flops_useful": 1.0e12, "bytes": {"argument": 4e9},
            "bytes_accessed": 10e9, "hbm_bytes": 4.4e9, "roofline_seconds": 0.0214, "roofline_global_seconds": 0.01221, "hbm_per_chip": 3.5 * GIB, "hbm_capacity": 15.75 * GIB,
            "ici_seconds": 0.0125, "mfu_bound": [0.472, 0.895], "compile_seconds": 42.94}


def test_rows_from_the_json_reports(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("aot_table", ROOT / "benchmarks" / "aot_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    (tmp_path / "llama8b_v5e_d2m4_g1.json").write_text(json.dumps({"prefill": _report("prefill")}))
    assert table.main(["--out", str(tmp_path), "--only-format", "--cases", "llama8b_v5e_d2m4_g1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == table.HEAD and len(lines) == 3
    assert lines[2] == ("| Llama-3-8B, v5e:2x4, data 2 x model 4 (1 group) | prefill | 3.50 of 15.75 GiB | 2.06 / 1.50 "
                        "| 1.100 | 4.40 GB (1.1x) | 10.00 GB | 21.40 (12.21) | 12.50 | [47.2%, 89.5%] | 42.9 |")


def test_the_docs_table_is_the_scripts():
    """docs/tpu.md's TPU table has the header the script prints, and every row its column count."""
    spec = importlib.util.spec_from_file_location("aot_table", ROOT / "benchmarks" / "aot_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    lines = (ROOT / "docs" / "tpu.md").read_text().splitlines()
    start = lines.index(table.HEAD)
    rows = list(itertools.takewhile(lambda ln: ln.startswith("|"), lines[start + 2:]))
    assert len(rows) == 19 and all(ln.count("|") == table.HEAD.count("|") for ln in rows)
