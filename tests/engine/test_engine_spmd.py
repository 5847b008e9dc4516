"""One SPMD program over a mesh that spans two processes equals one process.

Two processes under ``jax.distributed`` (CPU, loopback coordinator), three forced devices
each, one global mesh over the six: ``data 2 x model 3`` (rows split across the processes, the
judge within each) and ``data 1 x model 6`` (the judge's ``model`` axis across both processes).
Each runs score extraction into a shared store, greedy generation, prompt log-likelihoods and contrastive generation
(against a second random judge on the same mesh, each process tokenising only its own rows) on a tiny random judge
whose heads, MLP and vocabulary the six-way axis divides; a single process with six devices
runs the same on the same meshes, and one with one device without a mesh. Process 0 alone
writes the store; both processes return every row.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.xla_flags import xla_flags

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.alone  # it starts processes of its own

WORKER = """
import dataclasses
import sys
import jax
if {pid} >= 0:
    jax.distributed.initialize(coordinator_address={address!r}, num_processes=2, process_id={pid},
                               initialization_timeout=120)
sys.path.insert(0, {tests!r})
import numpy as np
from flax import nnx
from test_engine import byte_tokenizer, make_prompts
from jaxjudge import engine
from jaxjudge.models.config import LlamaConfig
from jaxjudge.models.judge import Judge
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.sharding import make_mesh, param_shardings
from jaxjudge.prompts import ScoreScale
from jaxjudge.engine.tokens import TOKENISED

tok = byte_tokenizer(True)
vocab = -(-tok.get_vocab_size() // 6) * 6
cfg = LlamaConfig.tiny(vocab_size=vocab, num_attention_heads=6, num_key_value_heads=6, intermediate_size=24,
                       max_position_embeddings=512, eos_token_ids=(10,))
prompts = make_prompts(n_groups=4, per_group=3)
out = {{}}
for data, model in {shapes!r}:
    judge = Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(0)), tok, source="tiny-spmd")
    tag = "none" if data is None else f"{{data}}x{{model}}"
    if data is not None:
        mesh = make_mesh(data, model)
        judge.shard(mesh)
        # The six-way model axis must really split the judge: no parameter left whole.
        if model == 6:
            specs = [s.spec for s in jax.tree.leaves(param_shardings(judge.state, mesh))]
            out["split_" + tag] = np.asarray(sum("model" in tuple(s) for s in specs), np.int64)
    ext = engine.extract(judge, prompts, ScoreScale(1, 10), chunk_size=3, progress=False,
                         store={store!r} + "/" + tag, min_prefix_tokens=4)
    for name, value in ext.arrays().items():
        out[tag + ":" + name] = value
    out[tag + ":computed"] = np.asarray(ext.computed_chunks, np.int64)
    texts, parsed, _ = engine.generate_scores(judge, prompts, ScoreScale(1, 10), max_new_tokens=6, progress=False,
                                              min_prefix_tokens=4, batch_size=4)
    out[tag + ":texts"] = np.asarray(texts)
    # Contrastive generation against a second judge on the same mesh; the prompts this process
    # tokenised for it are recorded.
    assistant = Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(1)), tok, source="tiny-spmd-assistant")
    if data is not None:
        assistant.shard(mesh)
    TOKENISED.log = []
    replies = engine.contrastive_generate(judge, assistant, prompts, max_new_tokens=6, lam=0.5, t_main=1.0,
                                          t_asst=2.0, alpha=0.05, progress=False, min_prefix_tokens=4, batch_size=4)
    out[tag + ":contrastive"] = np.asarray([r + [-1] * (6 - len(r)) for r in replies], np.int64)
    out[tag + ":contrastive_tokenised"] = np.asarray(sorted(i for call in TOKENISED.log for i in call))
    # Prompt log-likelihoods: whole texts (one with an NLL span) and plain strings.
    TOKENISED.log = []
    spanned = [dataclasses.replace(p, nll_span=(0, min(5, len(p.suffix)))) for p in prompts[:4]]
    out[tag + ":nll"] = engine.sequence_nll(judge, [*spanned, *prompts[4:], "a plain string", "another one here"],
                                           batch_size=3)
    out[tag + ":nll_tokenised"] = np.asarray(sorted(i for call in TOKENISED.log for i in call))
    TOKENISED.log = None
np.savez({result!r}, **out)
if {pid} >= 0:
    jax.distributed.shutdown()
"""


def _launch(tmp_path: Path, name: str, pid: int, devices: int, shapes, address: str = "") -> tuple:
    script = tmp_path / f"{name}.py"
    result = tmp_path / f"{name}.npz"
    script.write_text(WORKER.format(address=address, pid=pid, tests=str(TESTS), store=str(tmp_path / f"store-{name.split('_')[0]}"),
                                    result=str(result), shapes=shapes))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc, result


@pytest.mark.slow
def test_mesh_over_two_processes_equals_one_process(tmp_path, coordinator):
    shapes = [(2, 3), (1, 6)]
    address = coordinator
    runs = [_launch(tmp_path, f"spmd_{pid}", pid, 3, shapes, address) for pid in range(2)]
    runs.append(_launch(tmp_path, "single", -1, 6, shapes))
    runs.append(_launch(tmp_path, "nomesh", -1, 1, [(None, None)]))
    logs = []
    try:
        for proc, _ in runs:
            out, _ = proc.communicate(timeout=600)
            text = out.decode(errors="replace")
            logs.append("\n".join(line for line in text.splitlines() if "Gloo" not in line)[-4000:])
    finally:
        for proc, _ in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for (proc, _), log in zip(runs, logs):
        assert proc.returncode == 0, "\n\n".join(logs)
    spmd0, spmd1, single, nomesh = (dict(np.load(r)) for _, r in runs)

    # The 6-way axis splits q, k, v, o, gate, up, down (each stacked over the layers), the
    # embedding and the output head.
    assert spmd0["split_1x6"] == single["split_1x6"] == 9
    for tag in ("2x3", "1x6"):
        names = sorted(k for k in single if k.startswith(tag + ":") and not k.endswith("_tokenised"))
        assert len(names) > 5
        for name in names:
            a = single[name]
            for got in (spmd0, spmd1):
                if a.dtype.kind == "f":
                    # Float32 rounding only: the model axis's all-reduce between processes adds the
                    # shards' partial sums in another order than inside one process.
                    np.testing.assert_allclose(got[name], a, atol=2e-5, rtol=0, err_msg=name)
                else:
                    np.testing.assert_array_equal(got[name], a, err_msg=name)
        # Against one device without a mesh, to float32 reduction order.
        for name in names:
            plain = nomesh["none:" + name.split(":", 1)[1]]
            if name.endswith(":computed"):
                continue
            if plain.dtype.kind == "f":
                np.testing.assert_allclose(single[name], plain, atol=1e-4, rtol=0, err_msg=name)
            elif not name.endswith((":texts", ":contrastive", ":greedy_ids", ":topk_ids", ":valid")):
                np.testing.assert_array_equal(single[name], plain, err_msg=name)
    # Contrastive generation over two processes fed per host: each process tokenised its own
    # block's rows only, the two blocks together every prompt once.
    mine = [set(run["2x3:contrastive_tokenised"].tolist()) for run in (spmd0, spmd1)]
    assert mine[0] and mine[1] and not mine[0] & mine[1], mine
    assert sorted(mine[0] | mine[1]) == sorted(single["2x3:contrastive_tokenised"].tolist())
    # The same for the prompt log-likelihoods (the one-process path tokenises them outside the
    # engine's record); their values are compared with one process's above.
    mine = [set(run["2x3:nll_tokenised"].tolist()) for run in (spmd0, spmd1)]
    assert mine[0] and mine[1] and not mine[0] & mine[1], mine
    assert len(mine[0] | mine[1]) == len(single["2x3:nll"]) and np.isfinite(single["2x3:nll"]).all()
    # One worker: both processes computed every chunk together, process 0 wrote them.
    assert spmd0["2x3:computed"].tolist() == spmd1["2x3:computed"].tolist() == single["2x3:computed"].tolist()
    chunks = sorted((tmp_path / "store-spmd" / "2x3" / "chunks").glob("*.npz"))
    assert len(chunks) == len(single["2x3:computed"]) > 1
