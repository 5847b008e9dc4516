"""The engine's jitted entry points are named step objects (`jaxjudge.engine.step`), and
`jaxjudge aot` compiles exactly the objects `engine.extract` calls, placed as the engine places
their arguments; `jaxjudge.aot` defines no forward pass of its own."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from jaxjudge import engine
from jaxjudge.aot import PRESETS, Workload, aot_compile
from jaxjudge.engine import primitives
from jaxjudge.engine.decode import DECODE
from jaxjudge.engine.step import recording
from jaxjudge.models import sharding
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import RenderedPrompt, ScoreScale

ROOT = Path(__file__).resolve().parents[2]
# Llama-3's structure at a width the model axis of 4 splits (8 query heads, 4 KV heads).
HF = {**PRESETS["llama-3-8b"], "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96,
      "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 16, "vocab_size": 512,
      "max_position_embeddings": 512}


def _tokenizer() -> Tokenizer:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    pairs = [("Ġ", d) for d in "0123456789"]
    for a, b in pairs:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def _specs(tree) -> list[tuple]:
    """The partition spec of every array leaf (trailing unsplit dimensions dropped)."""
    out = []
    for leaf in jax.tree.leaves(tree):
        spec = tuple(leaf.sharding.spec)
        while spec and spec[-1] is None:
            spec = spec[:-1]
        out.append(spec)
    return out


@pytest.mark.slow
def test_aot_lowers_the_step_objects_engine_extract_calls_with_their_shardings():
    mesh = sharding.make_mesh(2, 4, devices=jax.devices()[:8])
    cfg = config_from_hf(HF)
    judge = Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(0)), _tokenizer(), source="random").shard(mesh)
    rng = np.random.default_rng(0)
    letters = list("abcdefghij")
    docs = ["".join(rng.choice(letters, 40)) for _ in range(2)]  # each document's shared prefix
    prompts = [RenderedPrompt(docs[d], "".join(rng.choice(letters, 8)) + ":", f"d{d}/{j}", f"d{d}", " ", False)
               for d in range(2) for j in range(4)]
    with recording() as used:
        out = engine.extract(judge, prompts, ScoreScale(1, 5), progress=False)
    assert len(out) == 8 and np.isfinite(out.cand_logprobs).all()
    with recording() as lowered:
        reports = aot_compile(HF, topology="v5e:2x4", mesh_shape={"data": 2, "model": 4}, dtype="float32",
                              workload=Workload(prefix=40, tails=4, tail_len=9), devices=jax.devices()[:8],
                              steps=("score",))
    assert [r.step for r in reports] == ["prefill", "read_rows", "score"]
    called = {u.step for u in used if u.how == "call"}
    assert called == {primitives.PREFILL, primitives.READ_ROWS}
    assert all(u.how == "lower" for u in lowered)
    # The very objects (identity: one jitted function, one set of static and donated arguments).
    assert {id(u.step) for u in lowered} == {id(s) for s in called}
    assert primitives.PREFILL.donate == ("cache",) and DECODE.donate == ("caches",)
    # Placed alike: for each step, the engine's arguments and aot's abstract ones have the same
    # partition specs, parameters and KV caches included (graphdefs are static, not arrays).
    for step in called:
        run = next(u for u in used if u.step is step)
        low = next(u for u in lowered if u.step is step)
        assert len(run.args) == len(low.args)
        for a, b in zip(run.args[1:], low.args[1:]):
            assert (a is None) == (b is None)
            if a is not None:
                assert _specs(a) == _specs(b), step.name
        assert {k: v for k, v in run.kwargs.items() if k != "topk"} == {
            k: v for k, v in low.kwargs.items() if k != "topk"}


def test_aot_defines_no_forward_pass_of_its_own():
    source = "\n".join(p.read_text() for p in (ROOT / "jaxjudge" / "aot").glob("*.py"))
    for needle in (r"\bforward\(", r"nnx\.merge\(", r"\.trunk\(", r"\.head\(", r"jax\.jit\("):
        assert not re.search(needle, source), needle
