"""Sliding-window judges through the engine: prefix cache, batched continuations, generation.

A tiny random Gemma 3 (a local layer with a window of 8 tokens, a global layer, two rotary
bases) and a tiny Gemma 2 (the same layers, soft-capped scores and logits) read prompts
of 60-140 tokens, many times their window. The references are full forward passes of one
example at a time, without prefix cache, buckets or batching (the decoder's full forward is held
to transformers' torch models in ``test_models_parity.py``, with windows shorter than the
prompt); greedy replies are rebuilt by one full forward pass per generated token, without a
KV cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from jaxjudge import engine
from jaxjudge.models.config import Gemma2Config, Gemma3TextConfig
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import ScoreScale

from test_engine import byte_tokenizer, check_against_reference, make_prompts

WINDOW = 8


def windowed_judge(family: str) -> Judge:
    """A deterministic random 2-layer judge of ``family`` (local then global) whose windows are far shorter than
    the prompts (seed 0, norms randomised so the q/k and sandwich norms are not identities)."""
    tok = byte_tokenizer()
    common = dict(vocab_size=tok.get_vocab_size(), sliding_window=WINDOW, sliding_layers=(True, False),
                  max_position_embeddings=512, eos_token_ids=(10,))
    if family == "gemma3":
        cfg = Gemma3TextConfig.tiny(**common)
    else:
        cfg = Gemma2Config.tiny(attn_logit_softcapping=2.0, final_logit_softcapping=4.0, **common)
    model = Decoder(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        if path[-1] == "scale":
            var.set_value(var.get_value() + 0.3 * rng.standard_normal(var.shape).astype(np.float32))
    return Judge(cfg, model, tok, source=f"tiny-{family}")


@pytest.fixture(scope="module")
def judges():
    """family -> judge, each built on first use."""
    cache = {}

    def get(family: str) -> Judge:
        if family not in cache:
            cache[family] = windowed_judge(family)
        return cache[family]

    return get


def long_prompts():
    # Two documents of 20 words (~100 bytes = tokens), each shared by two summaries.
    return make_prompts(n_groups=2, per_group=2, doc_words=20, solo=False)


def test_prompts_are_longer_than_the_window(judges):
    judge = judges("gemma3")
    lengths = [len(judge.encode(p.text)) for p in long_prompts()]
    assert min(lengths) > 8 * WINDOW
    assert judge.config.layer_window(0) == WINDOW and judge.config.layer_window(1) is None


@pytest.mark.parametrize(("family", "prefix_cache"), [("gemma3", True), ("gemma3", False), ("gemma2", True)],
                         ids=["gemma3-prefix", "gemma3-noprefix", "gemma2-prefix"])
def test_scores_match_full_forward(judges, family, prefix_cache):
    judge = judges(family)
    prompts = long_prompts()
    # 1-10: the two-token candidate "10" is read through the batched continuation.
    out = engine.extract(judge, prompts, ScoreScale(1, 10), batch_size=2, progress=False,
                         prefix_cache=prefix_cache, min_prefix_tokens=4, topk=4)
    check_against_reference(judge, prompts, out)


def greedy_by_full_forward(judge: Judge, ids: list[int], steps: int, length: int = 256) -> list[int]:
    """Greedy tokens, each from a full forward pass over everything so far (no cache).

    Every pass is right-padded to ``length`` (one compilation): causal attention never reads the
    later slots.
    """
    ids = list(ids)
    out = []
    for _ in range(steps):
        tokens = np.zeros((1, length), np.int32)
        tokens[0, : len(ids)] = ids
        mask = np.arange(length)[None] < len(ids)
        logits = np.asarray(judge.forward(tokens, mask, [[len(ids) - 1]]))[0, 0]
        tok = int(np.argmax(logits))
        out.append(tok)
        if tok in judge.config.eos_token_ids:
            break
        ids.append(tok)
    return out


def test_generation_matches_full_forward_greedy(judges):
    judge = judges("gemma3")
    prompts = long_prompts()[1:3]  # one from each group
    steps = 2 * WINDOW
    out = engine.extract(judge, prompts, ScoreScale(1, 5), generate_tokens=steps, batch_size=2,
                         progress=False, prefix_cache=True, min_prefix_tokens=4)
    check_against_reference(judge, prompts, out)
    for i, p in enumerate(prompts):
        want = greedy_by_full_forward(judge, judge.encode(p.text), steps)
        n = int(out.generated_lengths[i])
        assert list(out.generated_ids[i, :n]) == want, p.example_id
