"""The ``jaxjudge`` command: run experiment configs.

    jaxjudge extract experiments/score_range_bias.py        # forward passes -> stores (resumable)
    jaxjudge report  experiments/score_range_bias.py        # stores -> tables and figures, no model
    jaxjudge sweep   experiments/score_range_bias.py:quick  # both
    jaxjudge demo                                           # the main job on the embedded default
    jaxjudge demo --ci                                      # its reduced form (CI)
    jaxjudge store seal results/stores                      # seal stores written before seals
    jaxjudge store upgrade experiments/demo.py              # add setups to older stores' keys
    jaxjudge aot llama-3-8b --topology v5e:2x4 --mesh data=2,model=4   # compile for a TPU slice here

``store seal DIR`` seals every store under DIR (a store folder or a folder of them) whose
chunks were written before chunks recorded their store key and content hash: each such chunk
is checked (readable, example ids unique and complete) and then sealed as it is, so run it
only on stores whose current content you trust. Sealed chunks are verified, never re-sealed.

``store upgrade CONFIG`` gives the stores of a config written before store keys recorded their
setup (prompt style, the engine options that change what is stored, a digest of the prompts'
template and data) that setup, after checking every field their keys do hold against the
config; `report` refuses a store without one, or with another config's.

A config is ``path.py`` or ``path.py:arg`` (``arg`` goes to ``get_config``); ``--set
field=value`` overrides config fields (an unknown field is refused, naming it). Every problem
that can be seen before a forward pass (missing model or data file, a scale the tokenizer
cannot express, a store from another model) stops the command with a message naming it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax

from jaxjudge.aot import command as aot_command
from jaxjudge.data import DataError
from jaxjudge.experiment.distributed import cluster_from_flags, is_leader
from jaxjudge.experiment.distributed import start as start_processes
from jaxjudge.experiment import (
    ConfigError,
    check_location,
    check_run_name,
    collect_metadata,
    load_config,
    portable_path,
    run_dir,
    run_extractions,
    upgrade_stores,
)
from jaxjudge.models.config import UnsupportedConfigError
from jaxjudge.models.convert import ConversionError
from jaxjudge.models.gguf import GGUFFormatError, UnsupportedGGUFError
from jaxjudge.models.tokenizer import UnsupportedTokenizerError
from jaxjudge.prompts.candidates import CandidateTokenizationError
from jaxjudge.prompts.render import ContextOverflowError
from jaxjudge.prompts.template import TemplateError
from jaxjudge.report import StoreLookupError, report_from_store, write_run
from jaxjudge.report.terminal import terminal_report
from jaxjudge.store import StoreError, seal_store
from jaxjudge.store.location import LocationError, location

__all__ = ["main"]


def _demo_config_path() -> Path:
    """experiments/demo.py: in the working directory, else next to the installed package."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        path = base / "experiments" / "demo.py"
        if path.is_file():
            return path
    raise SystemExit("jaxjudge demo: experiments/demo.py not found (run it from the repository)")


def enable_compile_cache(folder: str | None = None) -> None:
    """Keep compiled XLA programs on disk: a repeated run skips most of its compile time.

    ``folder`` (a config's ``compile_cache``), else ``$JAXJUDGE_XLA_CACHE`` (default
    ``~/.cache/jaxjudge/xla``); an empty string turns the cache off. Either may be
    ``gs://bucket/prefix``: JAX reads and writes its cache there itself (through ``etils.epath``
    and ``gcsfs``), so the hosts of a pod share one; a mistyped or unserved URL is refused in
    one line naming the variable, never taken for a local folder.
    """
    if folder is None:
        folder = os.environ.get("JAXJUDGE_XLA_CACHE", str(Path.home() / ".cache" / "jaxjudge" / "xla"))
        check_location("$JAXJUDGE_XLA_CACHE", folder or None)
    if not folder:
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _extract(cfg, args) -> None:
    t0 = time.perf_counter()
    jobs = run_extractions(cfg, store_root=args.stores, models=args.models, progress=not args.quiet,
                           verify=args.verify)
    done = sum(j.computed for j in jobs)
    print(f"extract: {len(jobs)} jobs ({done} computed, {len(jobs) - done} from the store) "
          f"in {time.perf_counter() - t0:.1f} s")


def _report(cfg, args, spec: str) -> Path:
    t0 = time.perf_counter()
    read: dict = {}
    results = report_from_store(args.stores or cfg.store_root, cfg, stores_read=read)
    out = run_dir(cfg, args.run, root=args.results)
    config_file = spec.split(":", 1)[0]
    stores = [{"store": portable_path(k), **v} for k, v in sorted(read.items())]
    meta = collect_metadata(cfg, config_file=config_file,
                            extra={"store_root": str(args.stores or cfg.store_root), "stores": stores})
    write_run(results, out, meta)
    # The primary endpoint's reading (else the papers' T = 0.2, else every reading); every number
    # of every reading is in the run folder's results.md.
    primary = getattr(cfg, "primary", None)
    scores = [primary.score] if primary is not None else ["expected@0.2"] if 0.2 in cfg.temperatures else None
    print()
    metric = f"{cfg.select_metric}_doc" if cfg.select_per_group else cfg.select_metric
    print(terminal_report(results, metric, scores=scores))
    # The folder goes on a line of its own: a long --results path must not widen the report.
    print(f"\nreport: {time.perf_counter() - t0:.1f} s, no forward pass; every number is in results.md of\n{out}")
    return out


def _seal(folder: str) -> int:
    root = location(folder, "store seal")
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    stores = sorted(p.parent for p in root.rglob("manifest.json"))
    if not stores:
        raise FileNotFoundError(f"{root}: no store under it (no manifest.json)")
    total = 0
    for st in stores:
        counts = seal_store(st)
        total += counts["sealed"]
        print(f"{st}: {counts['sealed']} chunks sealed, {counts['already']} already sealed (verified)")
    print(f"store seal: {len(stores)} stores, {total} chunks sealed")
    return 0


def _dry_run(cfg, args, cluster) -> int:
    """The plan of the run, printed; nothing loaded, no process joined."""
    from jaxjudge.experiment.distributed import launch_from_environment
    from jaxjudge.experiment.dry_run import Launch, describe_run

    processes, process_id = ((cluster.num_processes, cluster.process_id) if cluster is not None
                             else launch_from_environment())
    results = run_dir(cfg, args.run, root=args.results) if args.run or cfg.run else None
    for line in describe_run(cfg, Launch.counted(processes, process_id), store_root=args.stores, results=results,
                             models=args.models):
        print(line)
    return 0


def _anticipated(e: BaseException) -> bool:
    """An error the library raises on purpose, with a message naming the file, row, field or
    chunk: the CLI prints it as one line (exit code 2) instead of a traceback."""
    kinds = (ConfigError, LocationError, FileNotFoundError, StoreError, StoreLookupError, DataError, ContextOverflowError,
             CandidateTokenizationError, TemplateError, UnsupportedConfigError, ConversionError, GGUFFormatError,
             UnsupportedGGUFError, UnsupportedTokenizerError)
    return isinstance(e, kinds)


def _one_line(e: BaseException) -> str:
    text = str(e) if not isinstance(e, KeyError) else str(e.args[0] if e.args else e)
    return text.strip() or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jaxjudge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, *, config: bool = True) -> None:
        if config:
            p.add_argument("config", help="experiment file, e.g. experiments/contrastive.py[:arg]")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                       help="override a config field (repeatable)")
        p.add_argument("--stores", default=None, help="store root (default: the config's store_root)")
        p.add_argument("--results", default=None, help="results root (default: the config's results_root)")
        p.add_argument("--run", default=None, help="run name (default: UTC date and time)")
        p.add_argument("--models", nargs="*", default=None, help="extract only these models")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        p.add_argument("--verify", action="store_true",
                       help="hash every model file now instead of reusing a memoised digest (the sha256 is "
                            "compared with the config's before any forward pass either way)")
        p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                       help="join a multi-process job: process 0's address (with --num-processes and "
                            "--process-id, on every process; a multi-host TPU slice needs none of the three)")
        p.add_argument("--num-processes", type=int, default=None, metavar="N", help="processes in the job")
        p.add_argument("--process-id", type=int, default=None, metavar="I", help="this process, 0 .. N-1")
        p.add_argument("--dry-run", action="store_true",
                       help="print the run's plan (launch, mesh and why, bytes per device, jobs and their stores, "
                            "where it writes) and stop: no model loads, no device is used beyond counting them, "
                            "no other process is joined")

    common(sub.add_parser("extract", help="run the forward passes of a config into stores"))
    common(sub.add_parser("report", help="tables and figures from existing stores (no forward pass)"))
    common(sub.add_parser("sweep", help="extract, then report"))
    demo = sub.add_parser("demo", help="the main job: SmolLM2 on the bundled SummEval subset")
    common(demo, config=False)
    demo.add_argument("--ci", action="store_true", help="reduced demo (one aspect, two ranges)")
    store = sub.add_parser("store", help="store maintenance")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    seal = store_sub.add_parser("seal", help="seal stores written before chunks were sealed (trusts their content)")
    seal.add_argument("folder", help="a store folder, or a folder of stores (e.g. results/stores)")
    upgrade = store_sub.add_parser("upgrade", help="add the setup entry to the keys of a config's stores written "
                                                   "before keys carried it (checks every field they hold)")
    upgrade.add_argument("config", help="the experiment file that wrote the stores, e.g. "
                                        "experiments/random_number_debias.py:stsb")
    upgrade.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    upgrade.add_argument("--stores", default=None, help="store root (default: the config's store_root)")
    aot_command.add_parser(sub)
    args = parser.parse_args(argv)

    if args.command == "aot":
        return aot_command.run(args)

    if args.command == "store" and args.store_command == "seal":
        try:
            return _seal(args.folder)
        except (StoreError, FileNotFoundError, LocationError) as e:
            print(f"jaxjudge store seal: {e}", file=sys.stderr)
            return 2
    if args.command == "store":
        try:
            counts = upgrade_stores(load_config(args.config, args.overrides), store_root=args.stores)
        except Exception as e:  # noqa: BLE001 - as below
            if not _anticipated(e):
                raise
            print(f"jaxjudge store upgrade: {_one_line(e)}", file=sys.stderr)
            return 2
        print(f"store upgrade: {counts['upgraded']} upgraded, {counts['current']} already current, "
              f"{counts['absent']} not extracted")
        return 0

    if args.command == "demo":
        spec = f"{_demo_config_path()}" + (":ci" if args.ci else "")
    else:
        spec = args.config
    try:
        cluster = cluster_from_flags(args.coordinator, args.num_processes, args.process_id)
        cfg = load_config(spec, args.overrides)
        enable_compile_cache(cfg.compile_cache)
        if args.run is not None:  # checked before any work: a run is one folder under the results root
            check_run_name("--run", args.run)
        for flag in ("stores", "results"):
            check_location(f"--{flag}", getattr(args, flag, None))
        if getattr(args, "dry_run", False):
            return _dry_run(cfg, args, cluster)
        start_processes(cluster)  # before anything touches a device
        if args.command in ("extract", "sweep", "demo"):
            _extract(cfg, args)
        if args.command in ("report", "sweep", "demo"):
            if is_leader():
                _report(cfg, args, spec)
            else:
                print(f"report: written by process 0 (this is process {jax.process_index()})")
    except Exception as e:  # noqa: BLE001 - anticipated errors become one line, the rest a traceback
        if not _anticipated(e):
            raise
        print(f"jaxjudge {args.command}: {_one_line(e)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
