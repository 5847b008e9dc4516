"""Two processes on one sweep from the command line (``--coordinator``, ``--num-processes``,
``--process-id``), on this CPU, three forced devices each, as the hosts of a pod run it: one
SPMD program over the global mesh ``data 2 x model 3`` (each process one block of every
batch's rows, the judge split three ways on its own devices), the data, stores and results in a
Cloud Storage bucket (the emulator), and no folder shared between the processes (each its own
working directory, home, model copy and converted-weights cache). Each prints its plan line;
each tokenises only the rows of its own block (counted: the two processes' rows of every
extraction are disjoint and together the one process's rows); no store chunk is read back during
extraction (counted: process 1 reads none, process 0 only the report's); and the stores (2e-5) and the
report (1e-4) equal one process's on local disk with the same mesh over six devices. Score,
greedy generation, random-number and content-free jobs.

Equal to float32 rounding, not to the bit: the model axis's all-reduce between two processes (over
gloo) adds the three shards' partial sums in another order than the one inside a process, and
each process pads its rows to other shapes than one process padding the whole batch; on the
real 30-layer SmolLM2 the log-probabilities differed by up to about 1.2e-5 (measured: 1.1e-5).
Token ids, replies and labels are compared exactly.

The judge is the tiny random one with SmolLM2's tokenizer and chat template (tests/tiny_judge.py;
twelve query and six KV heads, so the three-way model axis splits it): what is checked is the
program over two processes, not the judge's numbers.

Slow: three fresh interpreters each load the judge and compile their programs.

A second test runs the ``mesh="auto"`` planner's prompt lengths over two processes (no judge
loaded): each tokenises the texts of its own rows only, and both plan what one process plans. A
third runs ``mesh="auto"`` on CPU devices, where it plans no mesh and two processes share every
job's chunks by claim: each tokenises and reads only what it computes or reports.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.regenerate import COMPARED, compare
from jaxjudge.experiment import ExperimentConfig, TaskSpec, config_to_dict

from tests.processes import finish
from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.alone  # it starts processes of its own
STORE_ATOL = 2e-5  # float32 arrays of the stores
REPORT_ATOL = 1e-4  # numbers of results.json
PAIRS = [("A man is playing a guitar.", "A man plays the guitar.", 4.6),
         ("A woman is slicing an onion.", "A cat sleeps on the sofa.", 0.2),
         ("Two dogs run in a field.", "Dogs are running outside.", 3.8),
         ("The child reads a book.", "A kid is reading.", 4.2),
         ("A plane is taking off.", "The stock market fell today.", 0.0),
         ("Someone is cooking pasta.", "A person makes spaghetti.", 3.9),
         ("The sun sets over the sea.", "Sunset at the beach.", 3.5),
         ("A boy kicks a ball.", "A girl sings a song.", 0.8)]
# A tokenizer wrapper that keeps every text it encodes, and `counting(module, seen)`, which wraps
# the tokenizer ``module`` encodes with (its ``as_tokenizer``) so that its texts go to ``seen``.
COUNTING = """
import atexit, importlib, json, sys
from jaxjudge.engine.tokens import TOKENISED
render = importlib.import_module("jaxjudge.prompts.render")
as_tokenizer = render.as_tokenizer

class Counting:
    def __init__(self, tok, seen):
        self.tok, self.seen, self.normalizer, self.post_processor = tok, seen, tok.normalizer, tok.post_processor
    def encode_batch(self, texts, **kw):
        self.seen.extend(texts)
        return self.tok.encode_batch(texts, **kw)
    def encode(self, text, **kw):
        self.seen.append(text)
        return self.tok.encode(text, **kw)

def counting(module, seen):
    module.as_tokenizer = lambda t: t if isinstance(t, Counting) else Counting(as_tokenizer(t), seen)
"""
# Runs the command line with the engine's record of the prompts it tokenises kept, a count of
# the texts the renderer's context check tokenises, and every store chunk read, written as JSON to
# argv[1] at exit ({"engine": one list of example ids per tokenisation, in call order; "render": a
# count; "reads": [store folder below the store root, chunk] per read, in order}).
COUNTED = COUNTING + """
from jaxjudge.cli import main
from jaxjudge.store import Store
TOKENISED.log, rendered, reads, read_chunk = [], [], [], Store.read_chunk

def counted_read(store, i):
    reads.append([str(store.root).split("/stores/", 1)[1], i])
    return read_chunk(store, i)

Store.read_chunk = counted_read
counting(render, rendered)
atexit.register(lambda: open(sys.argv[1], "w").write(json.dumps({"engine": TOKENISED.log, "render": len(rendered),
                                                                  "reads": reads})))
sys.exit(main(sys.argv[2:]))
"""
# The `mesh="auto"` planner's prompt lengths (`exchanged_lengths`, as `run_extractions` sizes the
# planner) for the config at argv[2], joined to the processes argv[3:] name (none: one process),
# the texts it tokenised kept; then the planner's plan for every device of the job at 16 GiB a
# chip (on CPU devices "auto" plans nothing). JSON to argv[1]: {"texts", "lengths", "plan"}.
PLANNED = COUNTING + """
import jax
from jaxjudge.data.tasks import load_task_data
from jaxjudge.experiment import load_config, load_tokenizer, plan_run
from jaxjudge.experiment.distributed import cluster_from_flags, start
from jaxjudge.models.machine import ChipMemory
hardware = importlib.import_module("jaxjudge.experiment.hardware")
launch = sys.argv[3:]
start(cluster_from_flags(launch[0], int(launch[1]), int(launch[2])) if launch else None)
cfg = load_config(sys.argv[2])
rp = plan_run(cfg)
texts = []
counting(hardware, texts)
tokenizers = {n: load_tokenizer(rp.paths[n])[0] for n in rp.judges}
data = {t.task: load_task_data(t) for t in cfg.tasks}
lengths = hardware.exchanged_lengths(cfg, {n: rp.jobs_of(n) for n in rp.judges}, tokenizers, data)
plan = hardware.auto_plan(cfg, [[(n, rp.paths[n])] for n in rp.judges], jax.devices(),
                          memory=ChipMemory("test", 16 << 30, "set by the test"), lengths=lengths)
open(sys.argv[1], "w").write(json.dumps({"texts": texts, "lengths": lengths, "plan": plan.line()}))
"""

def _stsb_files() -> dict[str, str]:
    def rows(sel):
        return "".join(json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": s,
                                   "sentence1": a, "sentence2": b}) + "\n" for i, (a, b, s) in sel)

    return {"stsb_dev.jsonl": rows(list(enumerate(PAIRS))[:2]), "stsb_test.jsonl": rows(list(enumerate(PAIRS))[2:])}


def _experiment(tmp_path: Path, judge: Path | str, mesh: dict[str, int] | None = None, name: str = "twoproc",
                data: str | None = None, **fields) -> Path:
    """The config file (in ``tmp_path``): STS-B from ``data`` (default: a folder written here;
    ``"shared"``: ``$JAXJUDGE_DATA_DIR/stsb``), the judge at ``judge`` (a relative path: the
    judge's file in ``tmp_path``, named from the working directory); ``fields`` replace the
    config's."""
    import dataclasses

    from tests.tiny_judge import spec

    if data is None:
        folder = tmp_path / "stsb"
        folder.mkdir(exist_ok=True)
        for file, text in _stsb_files().items():
            (folder / file).write_text(text)
        data = str(folder)
    model = spec(tmp_path / judge)
    if not Path(judge).is_absolute():
        model = dataclasses.replace(model, path=str(judge))
    cfg = ExperimentConfig(
        name="twoproc", models=(model,),
        tasks=(TaskSpec("stsb", ("similarity",), data=data, split="original"),),
        scales=("1-5",), methods=("vanilla", "generate", "contextual", "deb_r"), temperatures=(1.0,), lambdas_extended=None,
        prompt_style="raw", engine={"chunk_size": 2}, mesh=mesh, generation_max_new_tokens=8, n_boot=100,
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    text = json.dumps(config_to_dict(dataclasses.replace(cfg, **fields)))
    path = tmp_path / f"{name}.py"
    path.write_text("import json\nfrom jaxjudge.experiment import config_from_dict\n\n\n"
                    f"def get_config(arg=None):\n    return config_from_dict(json.loads({text!r}))\n")
    return path


def _env(tmp_path: Path, tag: str, devices: int = 1, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAXJUDGE_CACHE": str(tmp_path / f"cache-{tag}"),
           "JAXJUDGE_XLA_CACHE": "", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": xla_flags(devices), **extra}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # no compile cache under jax.distributed here
    return env


def _arrays(root) -> dict[str, np.ndarray]:
    """Every array of every chunk under a store root (a local folder or a bucket prefix)."""
    out = {}
    for f in sorted(root.rglob("*.npz")):
        with np.load(io.BytesIO(f.read_bytes())) as z:
            for k in z.files:
                out[f"{f.relative_to(root)}:{k}"] = z[k]
    return out


def _worst(a, b) -> float:
    """The largest difference between two results.json trees' numbers (NaN where both are)."""
    if isinstance(a, dict):
        return max((_worst(a[k], b[k]) for k in a if k in b), default=0.0)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return max((_worst(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return 0.0 if (a != a and b != b) else abs(float(a) - float(b))
    return 0.0


@pytest.mark.slow
def test_two_processes_on_a_bucket_equal_one_on_disk(tmp_path, coordinator, tiny_gguf, gcs_bucket):
    from jaxjudge.store.location import location

    def own_folder(tag: str) -> Path:
        """A process's working directory: its copy of the judge and of the config, its home."""
        where = tmp_path / tag
        (where / "home").mkdir(parents=True)
        shutil.copy(tiny_gguf, where / "tiny-judge.gguf")
        _experiment(where, "tiny-judge.gguf", {"data": 2, "model": 3}, "spmd", data="shared")
        (where / "counted.py").write_text(COUNTED)
        return where

    def command(where: Path, stores, results, *launch: str) -> list[str]:
        return [sys.executable, str(where / "counted.py"), str(where / "tokenised.json"), "sweep", "spmd.py",
                "--quiet", "--stores", str(stores), "--results", str(results), "--run", "r", *launch]

    one = own_folder("one")
    for file, text in _stsb_files().items():
        (one / "data" / "stsb").mkdir(parents=True, exist_ok=True)
        (one / "data" / "stsb" / file).write_text(text)
        location(f"{gcs_bucket}/data/stsb/{file}").write_text(text)
    # The one process on local disk runs beside the two (the reference shares nothing with them).
    folders = [own_folder(f"p{i}") for i in range(2)]
    stores, results = location(f"{gcs_bucket}/stores"), location(f"{gcs_bucket}/results")
    alone = subprocess.Popen(command(one, one / "stores", one / "results"), cwd=one, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=_env(one, "one", 6, HOME=str(one / "home"), JAXJUDGE_DATA_DIR=str(one / "data")))
    procs = [subprocess.Popen(command(where, stores, results, "--coordinator", coordinator, "--num-processes", "2",
                                      "--process-id", str(i)),
                              cwd=where, env=_env(where, f"p{i}", 3, HOME=str(where / "home"),
                                                  JAXJUDGE_DATA_DIR=f"{gcs_bucket}/data"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, where in enumerate(folders)]
    run, *outs = finish([alone, *procs], 900)
    assert "plan: process 0 of 1" in run[0]
    for i, (out, _) in enumerate(outs):
        plan = [line for line in out.splitlines() if line.startswith("plan:")]
        assert plan and f"process {i} of 2" in plan[0] and "3 devices [cpu:" in plan[0], out[-2000:]
        # Its devices, the global mesh, and its rows: block i of the data axis, all 3 model shards.
        assert "of 6; mesh {'data': 2, 'model': 3}" in plan[0], plan[0]
        assert f"rows in block(s) {i} of 2 of every batch, model shard(s) 0-2 of 3" in plan[0], plan[0]
    assert "written by process 0" in outs[1][0]
    # Nothing was written beside the processes' own folders: no local store, report or data.
    for where in folders:
        assert not (where / "stores").exists() and not (where / "results").exists() and not (where / "gs:").exists()

    # Each process tokenised only its own block's rows: in every extraction, the two processes'
    # rows are disjoint and together are the rows one process tokenises; the renderer's context
    # check tokenised none (every prompt fits by its byte bound).
    counts = [json.loads((where / "tokenised.json").read_text()) for where in (one, *folders)]
    assert [c["render"] for c in counts] == [0, 0, 0], counts
    alone, *fed = (c["engine"] for c in counts)
    assert len(alone) == len(fed[0]) == len(fed[1]) > 3, (len(alone), len(fed[0]), len(fed[1]))
    for every, first, second in zip(alone, *fed):
        assert not set(first) & set(second), (first, second)
        assert sorted(first + second) == sorted(every), (every, first, second)
    assert sum(map(len, fed[0])) > 0 and sum(map(len, fed[1])) > 0
    # No process read back a chunk it had computed: process 1 read none, process 0 only the
    # report's, the same reads as the one process.
    alone, first, second = (c["reads"] for c in counts)
    print(f"chunks read: one process {len(alone)}, two processes {len(first)} and {len(second)}")
    assert second == [] and sorted(first) == sorted(alone) and alone, (alone, first)

    # 6 test rows in chunks of 2: three chunks in the score store.
    _same_runs(one / "stores", one / "results", stores, results)


def _same_runs(stores_a, results_a, stores_b, results_b) -> None:
    """Two runs' stores equal within `STORE_ATOL` (labels and ids exactly) and their one
    results.json each within `REPORT_ATOL` (regenerate.py's comparison); the largest differences
    printed."""
    a, b = _arrays(stores_a), _arrays(stores_b)
    assert a.keys() == b.keys() and len(a) > 0
    worst = 0.0
    for k in a:
        if k.endswith(":@seal"):
            continue  # a chunk's seal holds the sha256 of its arrays' bytes: compared below, by value
        if a[k].dtype.kind == "f":
            np.testing.assert_allclose(b[k], a[k], atol=STORE_ATOL, rtol=0, err_msg=k)
            both = np.isfinite(a[k]) & np.isfinite(b[k])
            worst = max(worst, float(np.abs(a[k][both] - b[k][both]).max(initial=0.0)))
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    assert len(list(results_b.rglob("results.json"))) == 1
    ra = json.loads(next(results_a.rglob("results.json")).read_text())
    rb = json.loads(next(results_b.rglob("results.json")).read_text())
    # Labels exactly, numbers within the float32 tolerance: regenerate.py's comparison.
    assert [d for part in COMPARED for d in compare(ra.get(part), rb.get(part), REPORT_ATOL, part)] == []
    print(f"largest difference: stores {worst:.2e}, results.json "
          f"{max(_worst(ra.get(part), rb.get(part)) for part in COMPARED):.2e}")


@pytest.mark.slow
def test_auto_on_cpu_processes_tokenise_and_read_only_their_own_chunks(tmp_path, coordinator, tiny_gguf):
    """``mesh="auto"`` on CPU devices plans no mesh: two processes share the chunks of every job
    by claim (one store folder). Each tokenises only the rows of the chunks it computes (counted:
    the rows the two tokenised, added up, are the rows one process tokenises, none more often),
    process 1 reads no chunk and process 0 only the report's (the one process's reads),
    and the stores and report equal one process's. Methods without generation, whose pass one
    process decodes from the score pass and two processes run apart."""
    from collections import Counter

    config = _experiment(tmp_path, tiny_gguf, "auto", "auto", methods=("vanilla", "contextual", "deb_r"))
    (tmp_path / "counted.py").write_text(COUNTED)

    def launch(tag: str, *flags: str) -> subprocess.Popen:
        runs = "one" if tag == "one" else "two"
        return subprocess.Popen([sys.executable, str(tmp_path / "counted.py"), str(tmp_path / f"{tag}.json"), "sweep",
                                 str(config), "--quiet", "--stores", str(tmp_path / runs / "stores"), "--results",
                                 str(tmp_path / runs / "results"), "--run", "r", *flags],
                                cwd=tmp_path, env=_env(tmp_path, tag), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    outs = finish([launch("one"), *(launch(f"p{i}", "--coordinator", coordinator, "--num-processes", "2",
                                           "--process-id", str(i)) for i in range(2))], 900)
    for i, (out, _) in enumerate(outs[1:]):
        plan = [line for line in out.splitlines() if line.startswith("plan:")]
        assert plan and f"process {i} of 2" in plan[0] and "by claim" in plan[0], out[-2000:]
    one, *each = (json.loads((tmp_path / f"{tag}.json").read_text()) for tag in ("one", "p0", "p1"))
    every = Counter(e for call in one["engine"] for e in call)
    mine = [Counter(e for call in run["engine"] for e in call) for run in each]
    assert mine[0] + mine[1] == every, (every, mine)
    assert mine[0].total() > 0 and mine[1].total() > 0
    assert each[1]["reads"] == [] and sorted(each[0]["reads"]) == sorted(one["reads"]) and one["reads"]
    print(f"rows tokenised: one process {every.total()}, two processes {mine[0].total()} and {mine[1].total()}; "
          f"chunks read: one process {len(one['reads'])}, two processes {len(each[0]['reads'])} and "
          f"{len(each[1]['reads'])}")
    _same_runs(tmp_path / "one" / "stores", tmp_path / "one" / "results", tmp_path / "two" / "stores",
               tmp_path / "two" / "results")


def test_auto_mesh_planner_tokenises_each_process_rows_only(tmp_path, coordinator, tiny_gguf):
    """Under ``mesh="auto"`` the planner's prompt lengths come from each process's own rows and
    one exchange of the longest: each of two processes tokenises a share of the texts one
    process tokenises (none twice in it), together every one, and both plan what one process
    plans, with the same lengths."""
    from collections import Counter

    config = _experiment(tmp_path, tiny_gguf, "auto", "auto")
    (tmp_path / "planned.py").write_text(PLANNED)

    def launch(tag: str, devices: int, *flags: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(tmp_path / "planned.py"), str(tmp_path / f"{tag}.json"),
                                 str(config), *flags], cwd=tmp_path, env=_env(tmp_path, tag, devices),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    finish([launch("one", 6), *(launch(f"p{i}", 3, coordinator, "2", str(i)) for i in range(2))], 300)
    one, *each = (json.loads((tmp_path / f"{tag}.json").read_text()) for tag in ("one", "p0", "p1"))
    assert each[0]["lengths"] == each[1]["lengths"] == one["lengths"] and one["lengths"]
    assert each[0]["plan"] == each[1]["plan"] == one["plan"], (one["plan"], each[0]["plan"])
    every, mine = Counter(one["texts"]), [Counter(run["texts"]) for run in each]
    # Each process tokenised only texts of its own rows: fewer than one process, none that one
    # process does not tokenise, and together all of them (a prefix two processes' rows share is
    # tokenised by each).
    for got in mine:
        assert 0 < got.total() < every.total() and not got - every, (got, every)
    assert not every - (mine[0] + mine[1])
    print(f"texts tokenised for the planner: one process {every.total()}, "
          f"two processes {mine[0].total()} and {mine[1].total()}")
