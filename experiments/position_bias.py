"""Position bias of the embedded SmolLM2 judge on SummEval summary pairs, judged in both orders.

For pairs of summaries of the same article whose expert scores (coherence by default) differ by
at least one point, the judge is asked "which of the two summaries is better, A or B?" with the
pair in both orders, and the full-vocabulary log-probabilities of the answer tokens "A" and "B"
as the first token of its reply are read. Reported: consistency across orders, the rate of
choosing the first slot, agreement of the combined verdict with the human preference
(inconsistent pairs count as ties, 1/2), single-order agreements, each with a standard error
clustered by article; and, beside them, whether the judge's preference follows the length
difference of the two summaries.

Run (from the repository root; writes results.json, results.md, pairs.jsonl, metadata.json):

    python experiments/position_bias.py --pairs 240 --aspect coherence --out results/position_bias/smollm2

Recompute a written run's verdicts and intervals from its ``pairs.jsonl`` with no model (the
forward-pass figures are kept from its ``results.json``):

    python experiments/position_bias.py --from-pairs results/position_bias/smollm2

`--data embedded` uses the 4-article SummEval subset shipped in the package instead of
../shared/data/summeval (for quick checks). Pairs are drawn with `--seed` (default 0), so the
same command gives the same pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jax

from jaxjudge import models
from jaxjudge.data import load_summeval, load_summeval_subset
from jaxjudge.data.summeval import summeval_subset_dir
from jaxjudge.diagnostics import rescore_position_bias_run, run_position_bias, write_position_bias
from jaxjudge.experiment.metadata import git_commit, package_versions, portable_path
from jaxjudge.store import file_sha256

REPO = Path(__file__).resolve().parents[1]
RESCORE_CHANGES = (
    "rates and accuracies get clustered Wilson intervals, which stay inside [0, 1] (before: t "
    "intervals, the consistency's reaching below 0)",
)
DEFAULT_DATA = REPO.parent / "shared" / "data" / "summeval"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=240, help="number of pairs (default 240)")
    ap.add_argument("--aspect", default="coherence", choices=("coherence", "consistency", "fluency", "relevance"))
    ap.add_argument("--min-gap", type=float, default=1.0, help="smallest human score difference of a pair")
    ap.add_argument("--seed", type=int, default=0, help="seed of the pair draw and slot assignment")
    ap.add_argument("--data", default=str(DEFAULT_DATA),
                    help="SummEval folder (default ../shared/data/summeval), or 'embedded' for the packaged subset")
    ap.add_argument("--model", default=None, help="judge model (default: the embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--no-prefix-cache", action="store_true", help="run every prompt in full")
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--from-pairs", metavar="DIR", default=None,
                    help="no model: recompute the verdicts and intervals of a written run from its pairs.jsonl")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.out is None and args.from_pairs is None:
        ap.error("give --out (a new run) or --from-pairs DIR (recompute a written run)")
    if args.pairs < 1:
        ap.error(f"--pairs must be >= 1, got {args.pairs}")
    return args


def load_examples(data: str) -> tuple[list, dict[str, Any]]:
    """SummEval examples and a description of where they came from (files and their sha256)."""
    if data == "embedded":
        folder = summeval_subset_dir()
        examples = load_summeval_subset()
        name = "embedded SummEval subset (jaxjudge/resources/summeval_subset)"
    else:
        folder = Path(data)
        if not folder.is_dir():
            raise FileNotFoundError(f"--data: SummEval folder not found: {data}")
        examples = load_summeval(folder)
        name = "SummEval (../shared/data/summeval)" if folder.resolve() == DEFAULT_DATA.resolve() else str(data)
    files = {p.name: file_sha256(p) for p in sorted(folder.glob("*.jsonl"))}
    return examples, {"name": name, "n_summaries": len(examples), "files_sha256": files}


def main(argv: Sequence[str] | None = None):
    """Runs the experiment and writes its folder; returns the `PositionBiasRun`."""
    args = parse_args(argv)
    if args.from_pairs:
        git = git_commit()  # before anything is rewritten
        summary = rescore_position_bias_run(args.from_pairs, changes=RESCORE_CHANGES)
        meta_path = Path(args.from_pairs) / "metadata.json"
        meta = json.loads(meta_path.read_text())
        if "rescored" not in meta:
            meta["forward_pass_git"] = meta.get("git")  # the original run's state, kept
        meta["git"] = git  # the state of the code that computed these results
        meta["rescored"] = {  # the forward pass is the original run's; the statistics are these
            "command": "python experiments/position_bias.py " + shlex.join(sys.argv[1:] if argv is None else argv),
            "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "git": git,
        }
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        if not args.quiet:
            print((Path(args.from_pairs) / "results.md").read_text())
        return summary
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    judge = models.load(args.model)
    t_load = time.perf_counter() - t0
    examples, data_info = load_examples(args.data)
    say(f"judge {judge} loaded in {t_load:.1f} s; {len(examples)} summaries")
    t1 = time.perf_counter()
    run = run_position_bias(judge, examples, aspect=args.aspect, n_pairs=args.pairs, seed=args.seed,
                            min_gap=args.min_gap, batch_size=args.batch_size,
                            prefix_cache=not args.no_prefix_cache, progress=not args.quiet)
    t_run = time.perf_counter() - t1
    meta = {
        "command": "python experiments/position_bias.py " + shlex.join(
            portable_path(a) if os.path.isabs(a) else a for a in (sys.argv[1:] if argv is None else argv)),
        "date_utc": started.isoformat(timespec="seconds"),
        "seed": args.seed,
        "model": {"file": Path(judge.source).name if judge.source else None, "sha256": judge.sha256,
                  "dtype": jax.numpy.dtype(judge.dtype).name},
        "data": data_info,
        "packages": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "jax_backend": jax.default_backend(),
        "jax_devices": len(jax.devices()),
        "git": git_commit(),
        "seconds": {"model_load": round(t_load, 2), "run": round(t_run, 2), "scoring": round(run.seconds, 2)},
    }
    paths = write_position_bias(run, args.out, meta)
    say(Path(paths["results_md"]).read_text())
    say(f"wrote {', '.join(portable_path(p) for p in paths.values())}")
    return run


if __name__ == "__main__":
    main()
