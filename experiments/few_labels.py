"""How many human labels does a judge save? Prediction-powered intervals from committed stores.

For n = 25, 50, 100, 200 human labels drawn at random (seeded, 200 draws each), the width of
the 95% interval for the mean human score (of all items; on SummEval also of each system and
of one paired system difference) from the human labels alone, from the vanilla judge plus the
labels, and from each debiased judge (Deb-R, Deb-T, contextual, batch and distribution
calibration; Deb-R and Deb-T with lambda searched on 0.1..1.0 and, as ``*_ext``, on 0.1..10;
all chosen on dev as in the report) plus the labels: prediction-powered inference,
power-tuned (PPI++). The effective number of labels is the number of human labels alone that
gives the same width. On SummEval also the system-level Kendall tau between the judge's and
the humans' rankings of the 16 systems, per range and method, with a document bootstrap.
See `jaxjudge.report.few_labels` for the protocol and `jaxjudge.metrics.inference` for the
estimators. No forward pass: the judge's predictions come from the stores, through the
report's own code path.

Run (from the repository root):

    python experiments/few_labels.py stsb          # committed: STS-B test split, Qwen2.5-Coder 0.5B
    python experiments/few_labels.py cpu           # committed: SummEval coherence, 6-document CPU subset
    python experiments/few_labels.py summeval      # full SummEval coherence (needs its stores)
    python experiments/few_labels.py stsb --set repeats=50 --set base.store_root=stores

Arguments of ``get_config``: ``"stsb"`` (the stores of ``random_number_debias.py:stsb``, in
``results/stores/stsb_qwen05``: the whole test split, 1,379 pairs, lambda chosen on its 300
dev pairs), ``"cpu"`` (SummEval coherence on ``CPU_SUMMEVAL_SUBSET``'s 6 documents x 16
systems, stores in ``results/stores/cpu_qwen``, 5 folds grouped by document as in
``random_number_debias.py:cpu``: a subset that shows the protocol and settles little), and
``"summeval"`` (all 100 documents, coherence, 5-fold grouped CV, reading the stores of
``random_number_debias.py:summeval`` in ``results/stores/summeval_qwen05``; ``--stores`` or
``--set base.store_root=...`` points it at another SummEval store).
Options: ``--set field=value`` (fields of `FewLabelsConfig`; ``base.<field>`` for the report
config), ``--stores`` (store root), ``--run`` (run name), ``--results`` (results root),
``--no-check-model`` (skip the model sha256 check against stores: it needs the model file).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from collections.abc import Sequence

from jaxjudge.data import DataError
from jaxjudge.experiment import (
    ConfigError,
    ExperimentConfig,
    TaskSpec,
    collect_metadata,
    command_line,
    pick_variant,
    run_dir,
)
from jaxjudge.report import StoreLookupError
from jaxjudge.experiment.few_labels import FewLabelsConfig
from jaxjudge.report.few_labels import FewLabelsError, run_few_labels
from jaxjudge.report.few_labels_write import write_few_labels

from registry import CPU_SUMMEVAL_SUBSET, QWEN_05B, STSB_SELECTION

METHODS = ("vanilla", "deb_r", "deb_t", "contextual", "batch", "distribution")


# The argument of `get_config` -> the report config's tasks and store root (no default).
VARIANTS = {
    "stsb": dict(
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=STSB_SELECTION),),
        store_root="results/stores/stsb_qwen05",
    ),
    "cpu": dict(
        tasks=(TaskSpec("summeval", ("coherence",), split="kfold", n_folds=5, subset=CPU_SUMMEVAL_SUBSET),),
        store_root="results/stores/cpu_qwen",
    ),
    "summeval": dict(
        tasks=(TaskSpec("summeval", ("coherence",), split="kfold", n_folds=5),),
        store_root="results/stores/summeval_qwen05",  # where random_number_debias.py:summeval extracts
    ),
}


def get_config(arg: str | None = None) -> FewLabelsConfig:
    variant = pick_variant("few_labels", arg, VARIANTS)
    base = ExperimentConfig(
        name="few_labels",
        description="Prediction-powered intervals: how many human labels a judge (vanilla or debiased) saves.",
        models=(QWEN_05B,),
        scales=("0-4", "1-5", "2-6", "3-7"),
        methods=METHODS,
        temperatures=(0.2,),
        greedy=False,
        deb_tp=(10,),  # lambda on 0.1..1.0 (deb_*_tp10) and on 0.1..10 (deb_*_tp10_ext), as the report
        select_metric="spearman",
        run=arg,
        **variant,
    )
    return FewLabelsConfig(
        base=base,
        score="expected@0.2",
        n_labels=(25, 50, 100, 200),
        repeats=200,
        seed=0,
        figure_scales=None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", choices=list(VARIANTS))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--stores", default=None, help="store root (default: the config's base.store_root)")
    ap.add_argument("--run", default=None, help="run name (default: the config's)")
    ap.add_argument("--results", default=None, help="results root (default: the config's base.results_root)")
    ap.add_argument("--no-check-model", action="store_true", help="do not check stores' model sha256")
    args = ap.parse_args(argv)

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    try:
        cfg = get_config(args.config).with_overrides(args.overrides)
        stores = args.stores or cfg.base.store_root
        result = run_few_labels(cfg, stores, check_model=not args.no_check_model)
    except (ConfigError, DataError, FewLabelsError, StoreLookupError, FileNotFoundError) as e:
        print(f"few_labels: {e}", file=sys.stderr)
        return 2
    out = run_dir(cfg.base, args.run, root=args.results)
    # The command as run from the repository root (the script by its path there).
    command = " ".join(["python experiments/few_labels.py", *command_line(["x", *sys.argv[1:]]).split(" ")[1:]])
    meta = collect_metadata(cfg.base, command=command, config_file=__file__, started_utc=started,
                            extra={"store_root": stores, "few_labels": cfg.to_dict()})
    paths = write_few_labels(result, cfg, out, meta)
    print(paths["markdown"].read_text(encoding="utf-8"))
    print(f"few_labels: {out} ({time.perf_counter() - t0:.1f} s, no forward pass)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
