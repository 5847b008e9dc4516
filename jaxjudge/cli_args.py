"""The ``jaxjudge`` command line's parser: its commands, flags and the examples of ``--help``.

Nothing here imports jax or the library's heavy modules, so that ``jaxjudge --help`` answers at
once; the commands themselves (`jaxjudge.cli`) import what they run.
"""

from __future__ import annotations

import argparse

__all__ = ["EXAMPLES", "build_parser"]

EXAMPLES = """\
examples:
  jaxjudge demo                                     # the embedded judge on the bundled SummEval subset
  jaxjudge sweep --data qa.csv --template qa.txt --judge default \\
      --human rating --human-range 0-10 --group topic \\
      --ranges 1-5,3-7 --methods vanilla,deb_r --results out --stores st
                                                    # your data, your template, one command
  jaxjudge sweep experiments/score_range_bias.py    # a config: extract, then report
  jaxjudge report experiments/score_range_bias.py   # tables from the stores only, no model
  jaxjudge list methods                             # also: tasks, templates, judges
  jaxjudge sweep --help                             # every flag of the one-command run

A judge (--judge, --assistant, a config's ModelSpec.path) is 'default' (the embedded SmolLM2),
'gguf:<file>' (in $JAXJUDGE_GGUF_DIR), a GGUF file, a Hugging Face model folder, or a Hub id
such as Qwen/Qwen2.5-0.5B-Instruct (downloaded when the network allows).
"""

SWEEP_EXAMPLE = """\
The one-command run (no config file): --data, --template, --judge, --human, --human-range,
--results and --stores are required; it builds the config in memory and writes the run folder
a config writes (<results>/<data name>/<run>/: results.json, results.csv, results.md, figures).
Caches (compiled programs, converted weights, Hub downloads) go under <stores>/.cache unless
$JAXJUDGE_XLA_CACHE, $JAXJUDGE_CACHE, $HF_HUB_CACHE (or $HF_HOME), $MPLCONFIGDIR say otherwise.

  jaxjudge sweep --data qa.csv --template qa.txt --judge default --human rating \\
      --human-range 0-10 --group topic --ranges 1-5,3-7 --methods vanilla,deb_r \\
      --results out --stores st
"""


def _common(p: argparse.ArgumentParser, *, config: str | None = "required") -> None:
    if config == "required":
        p.add_argument("config", help="experiment file, e.g. experiments/contrastive.py[:arg]")
    elif config == "optional":
        p.add_argument("config", nargs="?", default=None,
                       help="experiment file, e.g. experiments/contrastive.py[:arg]; or the --data flags below")
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


def _data_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("one-command run (instead of a config file)")
    g.add_argument("--data", default=None, metavar="FILE",
                   help="the data: JSON Lines, CSV or Parquet, a path or gs://bucket/object")
    g.add_argument("--template", default=None, metavar="FILE",
                   help="the judge prompt: {{Field}} placeholders naming the data's columns, {min}/{max} the range")
    g.add_argument("--judge", default=None, metavar="MODEL",
                   help="default, gguf:<file>, a GGUF file, a Hugging Face folder or a Hub id org/name")
    g.add_argument("--human", default=None, metavar="FIELD", help="the column of human scores")
    g.add_argument("--human-range", default=None, metavar="LO-HI", help="their range, e.g. 0-10")
    g.add_argument("--id", dest="id_field", default=None, metavar="FIELD",
                   help="the column of unique item ids (default: the row number)")
    g.add_argument("--group", default=None, metavar="FIELD",
                   help="the column grouping items resampled and split together (default: each item alone)")
    g.add_argument("--split", default=None, metavar="FIELD",
                   help="a column holding dev or test per row (default: a seeded 5-fold split by group)")
    g.add_argument("--aspect", default=None, metavar="NAME", help="the aspect's name (default: the --human column)")
    g.add_argument("--ranges", default=None, metavar="R,...",
                   help="score ranges the judge is asked for (default: 0-4,1-5,2-6,3-7)")
    g.add_argument("--methods", default=None, metavar="M,...",
                   help="methods (default: vanilla; `jaxjudge list methods` lists them)")
    g.add_argument("--assistant", default=None, metavar="MODEL",
                   help="the contrastive methods' assistant model (same forms as --judge)")


def build_parser(add_aot=None) -> argparse.ArgumentParser:
    """The parser of every command.

    Args:
      add_aot: `jaxjudge.aot.command.add_parser`, to parse an ``aot`` command line; None: ``aot``
        is listed with its one-line help only (its module imports jax: ~3 s).
    """
    parser = argparse.ArgumentParser(
        prog="jaxjudge", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
        description="Score-range bias of LLM judges: extract score log-probabilities, debias, report intervals.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _common(sub.add_parser("extract", help="run the forward passes of a config into stores"))
    _common(sub.add_parser("report", help="tables and figures from existing stores (no forward pass)"))
    sweep = sub.add_parser("sweep", help="extract, then report: a config, or your data with --data ...",
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=SWEEP_EXAMPLE)
    _common(sweep, config="optional")
    _data_flags(sweep)
    demo = sub.add_parser("demo", help="the main job: SmolLM2 on the bundled SummEval subset")
    _common(demo, config=None)
    demo.add_argument("--ci", action="store_true", help="reduced demo (one aspect, two ranges)")
    listing = sub.add_parser("list", help="the built-in tasks, templates, methods and the judges at hand")
    listing.add_argument("what", nargs="?", default="all", choices=("all", "tasks", "templates", "methods", "judges"))
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
    if add_aot is not None:
        add_aot(sub)
    else:
        sub.add_parser("aot", help="compile the scoring and decode steps for a TPU slice on this host "
                                   "(`jaxjudge aot --help`)")
    return parser
