"""Regenerate every committed run from its committed stores and compare with its results.json.

Usage (from the repository root; no model and no forward pass)::

    python experiments/regenerate.py                 # every run that has stores
    python experiments/regenerate.py score_range_bias/stsb few_labels/cpu
    python experiments/regenerate.py --markdown      # rewrite results.md from the committed results

A run qualifies when its ``metadata.json`` command is a ``jaxjudge report`` of an experiment
config or a ``python experiments/few_labels.py`` run (the position-bias run reads a model and is
left out). Each is recomputed in memory (nothing is written) and compared field by field with the
committed ``results.json``: labels and counts exactly, numbers within ``--tol`` (default 1e-6,
absolute, or relative for numbers above 1: float32 reductions under XLA follow the CPU's vector
width and the array layout, see ``tests/experiments/test_regenerate.py``).
Prints one line per run with its time, the total time, and exits 1 if any run differs.
With ``--add`` a run whose every committed number regenerates within the tolerance gets what the
code now computes beside them (new keys such as ``p_interval``, new parts such as
``invariance``), every committed value kept as it is (`with_added`).
With ``--markdown`` nothing is recomputed: each ``jaxjudge report`` run's ``results.md`` is written
again from its committed ``results.json`` and ``metadata.json`` (after a change to the tables
alone, such as a new section; the numbers, the metadata and the figures stay as committed).
Compiled XLA programs are kept on disk as `jaxjudge report` keeps them (``$JAXJUDGE_XLA_CACHE``;
an empty value turns the cache off, for a cold timing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import jax

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from jaxjudge.cli import enable_compile_cache  # noqa: E402
from jaxjudge.experiment import load_config  # noqa: E402
from jaxjudge.report import report_from_store  # noqa: E402
from jaxjudge.report.few_labels import run_few_labels  # noqa: E402
from jaxjudge.report.registered import settle  # noqa: E402
from jaxjudge.report.results import Results  # noqa: E402
from jaxjudge.report.tables import markdown_report  # noqa: E402
from jaxjudge.store.registration import registration_of_stores  # noqa: E402


RATIO_FIELDS = ("vs_vanilla", "vs_generate")
RATIO_TOL = 1e-4
"""Tolerance (absolute or relative) of the ratio fields (``relative.vs_vanilla``): when the
statistic's layout changed and every estimate stayed within 1e-6, the ratios moved by up to
5e-5 relative (a vanilla estimate near 0) and 2e-6 absolute (m - b near 0)."""


COMPARED = ("rows", "notes", "ranges", "endpoints")
"""The parts of a report's results.json compared (aux holds figure extras only)."""

ADDED = ("invariance",)
"""Parts added after some runs were committed: compared where the committed results carry them."""

ADDED_KEYS = ("p_interval",)
"""Keys added after some runs were committed (the interval's own p-value beside each Wald ``p``):
compared where the committed results carry them, not a difference where they do not."""


def compare(a: Any, b: Any, tol: float, where: str = "results", added_ok: bool = False) -> list[str]:
    """Differences between two JSON trees: exact for labels and counts, ``tol`` for floats;
    keys of ``a`` (fresh) in `ADDED_KEYS` that ``b`` (committed) lacks are not differences, nor,
    with ``added_ok``, any key of ``a`` that ``b`` lacks."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return [f"{where}: {type(b).__name__}, not a dict"]
        extra = set(a) - set(b) if added_ok else (set(a) - set(b)) & set(ADDED_KEYS)
        if set(a) - extra != set(b):
            return [f"{where}: keys differ {sorted((set(a) - extra) ^ set(b))}"]
        return [d for k in b for d in compare(a[k], b[k], tol, f"{where}.{k}", added_ok)]
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return [f"{where}: lengths differ"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in compare(x, y, tol, f"{where}[{i}]", added_ok)]
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or isinstance(a, str) or isinstance(b, str):
            return [f"{where}: {a!r} vs {b!r}"]
        if math.isnan(a) and math.isnan(b):
            return []
        # A relative improvement (m - b) / |b| divides by the vanilla estimate, which can be near
        # 0 (a correlation of 0.003): its float32 noise is the estimates' divided by |b|.
        ratio = where.rsplit(".", 1)[-1] in RATIO_FIELDS or ".relative." in where  # over ranges: per resample
        t = RATIO_TOL if ratio else tol
        return [] if math.isclose(a, b, rel_tol=t, abs_tol=t) else [f"{where}: {a!r} vs {b!r}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def with_added(committed: Any, fresh: Any) -> Any:
    """``committed`` with every key of ``fresh`` it lacks added (recursively); its own values kept."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        return {**{k: with_added(v, fresh[k]) if k in fresh else v for k, v in committed.items()},
                **{k: v for k, v in fresh.items() if k not in committed}}
    if isinstance(committed, list) and isinstance(fresh, list) and len(committed) == len(fresh):
        return [with_added(x, y) for x, y in zip(committed, fresh)]
    return committed


def _report_run(words: list[str], folder: Path) -> dict[str, Any]:
    spec = words[2]
    overrides = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    cfg = load_config(spec, overrides)
    res = report_from_store(cfg.store_root, cfg)
    # A confirmatory run's registered verdicts, settled (in memory) with its family's committed runs.
    settle(res, folder, cfg.confirmation.runs if cfg.confirmation is not None else ())
    fresh = res.to_dict()
    return {k: fresh[k] for k in COMPARED + ADDED if k in fresh}


def _few_labels_run(words: list[str]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "experiments"))
    import few_labels  # noqa: PLC0415  (the experiment script, importable only from here)

    cfg = few_labels.get_config(words[2])
    return json.loads(json.dumps(run_few_labels(cfg, cfg.base.store_root)))


def runs(selected: list[str]) -> list[tuple[str, list[str]]]:
    out = []
    for meta in sorted((REPO / "results").glob("*/*/metadata.json")):
        name = f"{meta.parent.parent.name}/{meta.parent.name}"
        if selected and name not in selected:
            continue
        words = shlex.split(json.loads(meta.read_text())["command"])
        if words[:3] in (["python", "-m", "jaxjudge.cli"], ["python3", "-m", "jaxjudge.cli"]):
            words = ["jaxjudge", *words[3:]]  # the same command, run as a module
        if words[:2] == ["jaxjudge", "report"] or words[:2] == ["python", "experiments/few_labels.py"]:
            out.append((name, words))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="experiment/run names (default: all)")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--markdown", action="store_true",
                    help="rewrite results.md from the committed results.json and metadata.json (no recomputation)")
    ap.add_argument("--add", action="store_true",
                    help="where every committed number regenerates within --tol, add to results.json what the code "
                    "now computes beside it (new keys and parts only; every committed value kept as it is)")
    ap.add_argument("--registration", action="store_true",
                    help="record in each report run's results.json whether its analysis plan was registered before "
                    "extraction (from its stores' manifests and the store root's records; no recomputation), then "
                    "rewrite its results.md")
    args = ap.parse_args(argv)
    os.chdir(REPO)
    if args.registration:
        for name, words in runs(args.runs):
            if words[0] != "jaxjudge":
                continue
            folder = REPO / "results" / name
            cfg = load_config(words[2], [words[i + 1] for i, w in enumerate(words) if w == "--set"])
            meta = json.loads((folder / "metadata.json").read_text())
            res = Results.load_json(folder / "results.json")
            res.registration = registration_of_stores(cfg, cfg.store_root, [REPO / s["store"] for s in meta["stores"]])
            res.save_json(folder / "results.json")
            print(f"{name}: {res.registration['status']}")
        args.markdown = True
    if args.markdown:
        for name, words in runs(args.runs):
            if words[0] != "jaxjudge":
                continue  # the few-labels runs write their own tables
            folder = REPO / "results" / name
            md = markdown_report(Results.load_json(folder / "results.json"),
                                 json.loads((folder / "metadata.json").read_text()))
            changed = md != (folder / "results.md").read_text(encoding="utf-8")
            (folder / "results.md").write_text(md, encoding="utf-8")
            print(f"{name}: results.md {'rewritten' if changed else 'unchanged'}")
        return 0
    enable_compile_cache()  # as `jaxjudge report` does: a repeated run skips the XLA compiles
    todo = runs(args.runs)
    if args.runs and len(todo) != len(args.runs):
        print(f"regenerate: no such regenerable run among {sorted(set(args.runs) - {n for n, _ in todo})}", file=sys.stderr)
        return 2
    failed, t_all = 0, time.perf_counter()
    for name, words in todo:
        t0 = time.perf_counter()
        fresh = _report_run(words, REPO / "results" / name) if words[0] == "jaxjudge" else _few_labels_run(words)
        path = REPO / "results" / name / "results.json"
        whole = json.loads(path.read_text())
        committed = {k: whole[k] for k in COMPARED + ADDED if k in whole} if words[0] == "jaxjudge" else whole
        if words[0] == "jaxjudge" and not args.add:  # a part added since this run was committed is not compared
            fresh = {k: v for k, v in fresh.items() if k in committed or k in COMPARED}
        diffs = compare(fresh, committed, args.tol, added_ok=args.add)
        if args.add and not diffs and with_added(committed, fresh) != committed:
            path.write_text(json.dumps({**whole, **with_added(committed, fresh)}, indent=1, allow_nan=False) + "\n",
                            encoding="utf-8")
            print(f"{name}: added {sorted(set(fresh) - set(committed))} and keys inside (values kept)")
        failed += bool(diffs)
        status = "identical" if not diffs else f"{len(diffs)} differences, first: {diffs[0]}"
        print(f"{name}: {status} ({time.perf_counter() - t0:.1f} s)", flush=True)
        # Each compiled XLA program holds memory mappings of its own; the 18 runs' programs
        # together pass the kernel's per-process limit (vm.max_map_count, 65,530 by default),
        # after which LLVM cannot map a new program and the process dies. Programs of one run
        # are not reused by the next, so drop them (the on-disk compile cache keeps them).
        jax.clear_caches()
    print(f"regenerate: {len(todo) - failed} of {len(todo)} runs identical within {args.tol:g} "
          f"({time.perf_counter() - t_all:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
