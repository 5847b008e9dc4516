"""Two processes on one sweep from the command line (``--coordinator``, ``--num-processes``,
``--process-id``), on this CPU, three forced devices each: one SPMD program over the global mesh
``data 2 x model 3`` (each process one block of every batch's rows, the judge split three ways
on its own devices); each prints its plan line, and the stores and the report equal (1e-6) one
process's with the same mesh over six devices. Score, greedy generation, random-number and
content-free jobs.

Equal to float32 rounding, not to the bit: the model axis's all-reduce between two processes (over
gloo) adds the three shards' partial sums in another order than the one inside a process, and
on the real 30-layer SmolLM2 the log-probabilities differed by up to about 1.2e-5 (measured:
1.1e-5). Token ids, replies and labels are compared exactly.

The judge is the tiny random one with SmolLM2's tokenizer and chat template (tests/tiny_judge.py;
twelve query and six KV heads, so the three-way model axis splits it): what is checked is the
program over two processes, not the judge's numbers.

Slow: three fresh interpreters each load the judge and compile their programs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.regenerate import COMPARED, compare
from jaxjudge.experiment import ExperimentConfig, TaskSpec, config_to_dict

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.alone  # it starts processes of its own
FLOAT32_ATOL = 5e-5


def _experiment(tmp_path: Path, judge: Path, mesh: dict[str, int] | None = None, name: str = "twoproc") -> Path:
    from tests.tiny_judge import spec

    folder = tmp_path / "stsb"
    folder.mkdir(exist_ok=True)
    pairs = [("A man is playing a guitar.", "A man plays the guitar.", 4.6),
             ("A woman is slicing an onion.", "A cat sleeps on the sofa.", 0.2),
             ("Two dogs run in a field.", "Dogs are running outside.", 3.8),
             ("The child reads a book.", "A kid is reading.", 4.2),
             ("A plane is taking off.", "The stock market fell today.", 0.0),
             ("Someone is cooking pasta.", "A person makes spaghetti.", 3.9),
             ("The sun sets over the sea.", "Sunset at the beach.", 3.5),
             ("A boy kicks a ball.", "A girl sings a song.", 0.8)]

    def rows(sel):
        return "".join(json.dumps({"genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": s,
                                   "sentence1": a, "sentence2": b}) + "\n" for i, (a, b, s) in sel)

    (folder / "stsb_dev.jsonl").write_text(rows(list(enumerate(pairs))[:2]))
    (folder / "stsb_test.jsonl").write_text(rows(list(enumerate(pairs))[2:]))
    cfg = ExperimentConfig(
        name="twoproc", models=(spec(judge),),
        tasks=(TaskSpec("stsb", ("similarity",), data=str(folder), split="original"),),
        scales=("1-5",), methods=("vanilla", "generate", "contextual", "deb_r"), temperatures=(1.0,), lambdas_extended=None,
        prompt_style="raw", engine={"chunk_size": 2}, mesh=mesh, generation_max_new_tokens=8, n_boot=100,
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    data = tmp_path / f"{name}.json"
    data.write_text(json.dumps(config_to_dict(cfg)))
    path = tmp_path / f"{name}.py"
    path.write_text("import json\nfrom jaxjudge.experiment import config_from_dict\n\n\n"
                    f"def get_config(arg=None):\n    return config_from_dict(json.loads(open({str(data)!r}).read()))\n")
    return path


def _env(tmp_path: Path, tag: str, devices: int = 1) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAXJUDGE_CACHE": str(tmp_path / f"cache-{tag}"),
           "JAXJUDGE_XLA_CACHE": "", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # no compile cache under jax.distributed here
    return env


def _arrays(root: Path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(root.rglob("*.npz")):
        with np.load(f) as z:
            for k in z.files:
                out[f"{f.relative_to(root)}:{k}"] = z[k]
    return out


@pytest.mark.slow
def test_two_processes_sweep_equals_one(tmp_path, coordinator, tiny_gguf):
    spec = _experiment(tmp_path, tiny_gguf, {"data": 2, "model": 3}, "spmd")
    one = subprocess.run([sys.executable, "-m", "jaxjudge.cli", "sweep", str(spec), "--quiet",
                          "--stores", str(tmp_path / "one" / "stores"), "--results", str(tmp_path / "one" / "results"),
                          "--run", "r"], cwd=tmp_path, env=_env(tmp_path, "one", 6), capture_output=True, text=True,
                         timeout=900)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "plan: process 0 of 1" in one.stdout

    address = coordinator
    procs = [subprocess.Popen([sys.executable, "-m", "jaxjudge.cli", "sweep", str(spec), "--quiet",
                               "--stores", str(tmp_path / "two" / "stores"),
                               "--results", str(tmp_path / "two" / "results"), "--run", "r",
                               "--coordinator", address, "--num-processes", "2", "--process-id", str(i)],
                              cwd=tmp_path, env=_env(tmp_path, f"two{i}", 3), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    for i, (out, _) in enumerate(outs):
        plan = [line for line in out.splitlines() if line.startswith("plan:")]
        assert plan and f"process {i} of 2" in plan[0] and "3 devices [cpu:" in plan[0], out[-2000:]
        # Its devices, the global mesh, and its rows: block i of the data axis, all 3 model shards.
        assert "of 6; mesh {'data': 2, 'model': 3}" in plan[0], plan[0]
        assert f"rows in block(s) {i} of 2 of every batch, model shard(s) 0-2 of 3" in plan[0], plan[0]
    assert "written by process 0" in outs[1][0]
    # 6 test rows in chunks of 2: three chunks in the score store.
    a, b = _arrays(tmp_path / "one" / "stores"), _arrays(tmp_path / "two" / "stores")
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        if k.endswith(":@seal"):
            continue  # a chunk's seal holds the sha256 of its arrays' bytes: compared below, by value
        if a[k].dtype.kind == "f":
            np.testing.assert_allclose(b[k], a[k], atol=FLOAT32_ATOL, rtol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)
    ra = json.loads(next((tmp_path / "one" / "results").rglob("results.json")).read_text())
    rb = json.loads(next((tmp_path / "two" / "results").rglob("results.json")).read_text())
    assert len(list((tmp_path / "two" / "results").rglob("results.json"))) == 1
    # Labels exactly, numbers within the same float32 tolerance: regenerate.py's comparison.
    assert [d for part in COMPARED for d in compare(ra.get(part), rb.get(part), FLOAT32_ATOL, part)] == []


@pytest.mark.parametrize("flags, needle", [
    (["--coordinator", "127.0.0.1:1234"], "--num-processes, --process-id missing"),
    (["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"], "--coordinator: expected HOST:PORT"),
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"], "--process-id: expected 0 .. 1"),
])
def test_bad_launch_flags_are_one_line(tmp_path, tiny_gguf, flags, needle):
    spec = _experiment(tmp_path, tiny_gguf)
    proc = subprocess.run([sys.executable, "-m", "jaxjudge.cli", "extract", str(spec), "--quiet", *flags],
                          cwd=tmp_path, env=_env(tmp_path, "x"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "stores").exists()
