"""Tests of the position-bias runner (`jaxjudge.diagnostics.run`) and experiments/position_bias.py.

Fast tests use a tiny random Llama over a byte-level tokenizer (every byte one token, plus
"Ġ" + digit merges so a merge across the prompt/answer boundary can be provoked) with a small
chat template written here. References are independent of the runner: the chat text is
rendered through the judge's own `apply_chat_template` from `format_user`, and the answer
log-probabilities come from the judge's plain `next_token_logits` on the whole text, normalised
with scipy. The SmolLM2 run on SummEval articles is marked slow.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from scipy import stats
from scipy.special import log_softmax
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from jaxjudge.data import Example
from jaxjudge.diagnostics import (
    SUMMARY_PAIRWISE,
    Pairs,
    PairwiseTemplate,
    answer_token_ids,
    choice_logprobs,
    pair_length_bias,
    pairs_from_examples,
    pairwise_chat_prompts,
    position_bias,
    position_bias_table,
    run_position_bias,
    write_position_bias,
)
from jaxjudge.engine import calls
from jaxjudge.models.config import LlamaConfig
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import CandidateTokenizationError, ChatFormat, RenderedPrompt

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "position_bias.py"

CHAT = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SHORT = PairwiseTemplate(
    name="short_pairwise",
    system="Judge.",
    user="Rate {aspect}: {aspect_definition}.\nDoc: {document}\n\nA: {summary_a}\nB: {summary_b}\nA or B?",
    aspect_definitions={"coherence": "well organised"},
)
WORDS = "alpha beta gamma delta the a of to cat dog sat on mat ran fast slow red blue".split()


def byte_tokenizer() -> Tokenizer:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("Ġ", d) for d in "0123456789"]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.fixture(scope="module")
def judge() -> Judge:
    tok = byte_tokenizer()
    cfg = LlamaConfig.tiny(vocab_size=tok.get_vocab_size(), max_position_embeddings=1024, eos_token_ids=(10,))
    return Judge(cfg, Decoder(cfg, rngs=nnx.Rngs(0)), tok, chat_template=CHAT, source="tiny")


def synthetic_examples(n_docs: int = 3, per_doc: int = 6, seed: int = 2) -> list[Example]:
    rng = np.random.default_rng(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS, n))

    out = []
    for d in range(n_docs):
        doc = text(12)
        for j in range(per_doc):
            fields = {"document": doc, "summary": text(int(rng.integers(2, 9)))}
            out.append(Example(id=f"d{d}/s{j}", group=f"d{d}", fields=fields,
                               scores={"coherence": float(rng.integers(1, 6))}))
    return out


N_PAIRS, PAIR_SEED = 9, 3


@pytest.fixture(scope="module")
def case(judge):
    """Synthetic examples, their seeded pairs and the reference log-probs of both orders."""
    exs = synthetic_examples()
    pairs = pairs_from_examples(exs, "coherence", n_pairs=N_PAIRS, seed=PAIR_SEED)
    return exs, pairs, *reference_logprobs(judge, SHORT, pairs, exs, "coherence")


def reference_logprobs(judge: Judge, template: PairwiseTemplate, pairs: Pairs, examples, aspect: str):
    """[P, 2] x 2 orders of log p("A"), log p("B"): whole text, plain path, scipy log-softmax."""
    a_id, b_id = (judge.encode(c, add_special_tokens=False) for c in template.choices)
    assert len(a_id) == len(b_id) == 1
    out = []
    for order in ("forward", "swapped"):
        seqs = []
        for f, s in zip(pairs.first.tolist(), pairs.second.tolist()):
            a, b = (f, s) if order == "forward" else (s, f)
            user = template.format_user(document=examples[f].fields["document"],
                                        summary_a=examples[a].fields["summary"],
                                        summary_b=examples[b].fields["summary"], aspect=aspect)
            text = judge.apply_chat_template([{"role": "system", "content": template.system},
                                              {"role": "user", "content": user}])
            seqs.append(judge.encode(text, add_special_tokens=False))
        lp = log_softmax(calls.next_token_logits(judge, seqs, batch_size=4).astype(np.float64), axis=-1)  # [P, V]
        out.append(lp[:, [a_id[0], b_id[0]]])
    return out


# ------------------------------------------------------------------------------ prompts


def test_user_message_splits_before_the_first_summary():
    kw = dict(document="The article.", summary_a="first one", summary_b="second one", aspect="coherence")
    head, tail = SUMMARY_PAIRWISE.format_user_parts(**kw)
    assert head + tail == SUMMARY_PAIRWISE.format_user(**kw)
    assert "The article." in head and head.endswith("Summary A:\n") and tail.startswith("first one\n")
    head2, _ = SUMMARY_PAIRWISE.format_user_parts(**{**kw, "summary_a": "x", "summary_b": "y"})
    assert head2 == head  # the shared prefix does not depend on the pair
    # Summaries before the document: nothing but the first line's start can be shared.
    late = PairwiseTemplate("late", "s", "A: {summary_a}\nB: {summary_b}\nDoc: {document} ({aspect})")
    assert late.split_index == 0
    assert late.format_user_parts(**kw) == ("", late.format_user(**kw))
    with pytest.raises(ValueError, match=r"no \{summary_a\}/\{summary_b\}"):
        PairwiseTemplate("none", "s", "Doc: {document}").split_index  # noqa: B018


def test_chat_prompts_are_the_chat_of_the_user_message(judge):
    exs = synthetic_examples()
    pairs = pairs_from_examples(exs, "coherence", n_pairs=6, seed=1)
    chat = ChatFormat(CHAT)
    fwd, swp = pairwise_chat_prompts(pairs, [e.fields["document"] for e in exs], [e.fields["summary"] for e in exs],
                                     "coherence", chat, template=SHORT)
    for k, (f, s) in enumerate(zip(pairs.first, pairs.second)):
        for prompt, (a, b) in ((fwd[k], (f, s)), (swp[k], (s, f))):
            user = SHORT.format_user(document=exs[f].fields["document"], summary_a=exs[a].fields["summary"],
                                     summary_b=exs[b].fields["summary"], aspect="coherence")
            want = judge.apply_chat_template([{"role": "system", "content": SHORT.system},
                                              {"role": "user", "content": user}])
            assert prompt.text == want
            assert prompt.group == pairs.group[k] and prompt.add_special_tokens is False
        assert fwd[k].prefix == swp[k].prefix and exs[f].fields["document"] in fwd[k].prefix
    with pytest.raises(ValueError, match="mixes two different documents"):
        pairwise_chat_prompts(pairs, [f"doc{i}" for i in range(len(exs))], [e.fields["summary"] for e in exs],
                              "coherence", chat, template=SHORT)


def test_answer_tokens_must_be_single_tokens_of_their_own(judge):
    tok = judge.tokenizer
    prompts = [RenderedPrompt("x\n", "Which?\n<|assistant|>\n", "p0", "g"),
               RenderedPrompt("y\n", "Other?\n<|assistant|>\n", "p1", "g")]
    ids = answer_token_ids(tok, prompts, ("A", "B"))
    assert ids.tolist() == [tok.token_to_id("A"), tok.token_to_id("B")]
    with pytest.raises(CandidateTokenizationError, match=r"answer 'AB'.*not one token"):
        answer_token_ids(tok, prompts, ("AB", "B"))
    # A prompt ending in a space: " 1" merges into one token "Ġ1", so "1" has no token of its own.
    spaced = [RenderedPrompt("", "Pick one: ", "p2", "g")]
    with pytest.raises(CandidateTokenizationError, match=r"example 'p2'.*answer '1'"):
        answer_token_ids(tok, spaced, ("1", "2"))
    with pytest.raises(ValueError, match="share a token"):
        answer_token_ids(tok, prompts, ("A", "A"))
    with pytest.raises(ValueError, match="at least two"):
        answer_token_ids(tok, prompts, ("A",))


# ------------------------------------------------------------------------------ scoring


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_choice_logprobs_equal_a_full_forward(judge, case, prefix_cache):
    exs, pairs, ref_f, ref_s = case
    fwd, swp = pairwise_chat_prompts(pairs, [e.fields["document"] for e in exs], [e.fields["summary"] for e in exs],
                                     "coherence", ChatFormat(CHAT), template=SHORT)
    # batch_size 2: several batches per document, and a partial last batch.
    got = choice_logprobs(judge, fwd + swp, SHORT.choices, batch_size=2, prefix_cache=prefix_cache)
    p = len(pairs)
    np.testing.assert_allclose(got.logprobs[:p], ref_f, atol=1e-4, rtol=0)
    np.testing.assert_allclose(got.logprobs[p:], ref_s, atol=1e-4, rtol=0)
    assert got.example_ids == [x.example_id for x in fwd + swp]
    assert got.n_prompt_tokens.tolist() == [len(judge.encode(x.text, add_special_tokens=False)) for x in fwd + swp]
    assert not got.truncated.any()


def test_choice_logprobs_rejects_bad_input(judge):
    p = RenderedPrompt("", "Which?\n", "p0", "g")
    with pytest.raises(ValueError, match="empty"):
        choice_logprobs(judge, [])
    with pytest.raises(ValueError, match="duplicate example id 'p0'"):
        choice_logprobs(judge, [p, p])
    with pytest.raises(TypeError, match=r"prompts\[0\] is a str"):
        choice_logprobs(judge, ["Which?"])
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        choice_logprobs(judge, [p], batch_size=0)


# ------------------------------------------------------------------------------ statistics


def _cr1_se(values: np.ndarray, groups: list[str]) -> float:
    """Cluster-robust SE of a mean, written out: G/(G-1) * sum_g (sum_{i in g} e_i)^2 / N^2."""
    e = values - values.mean()
    sums = {}
    for g, x in zip(groups, e):
        sums[g] = sums.get(g, 0.0) + x
    g = len(sums)
    return math.sqrt(g / (g - 1) * sum(s * s for s in sums.values()) / len(values) ** 2)


def _table_case():
    rng = np.random.default_rng(5)
    p = 40
    lf = np.log(rng.dirichlet([1, 1, 1], p)[:, :2])
    ls = np.log(rng.dirichlet([1, 1, 1], p)[:, :2])
    ls[3] = ls[3, ::-1]
    lf[7, 1] = lf[7, 0]  # one tie
    human = rng.choice([-1, 1], p)
    groups = [f"doc{i % 9}" for i in range(p)]
    return lf, ls, human, groups


def test_table_intervals_are_clustered_wilson_inside_unit_interval():
    lf, ls, human, groups = _table_case()
    bias = position_bias(lf, ls, human, groups=groups)
    table = position_bias_table(bias, human, groups, alpha=0.1)
    t = stats.t.ppf(0.95, df=8)
    for name, row in table.items():
        m, se = row["estimate"], row["se"]
        # Wilson's closed form at n_eff = m (1 - m) / se^2, t quantile for 9 documents.
        n_eff = m * (1 - m) / se**2
        centre = (m + t**2 / (2 * n_eff)) / (1 + t**2 / n_eff)
        half = t * math.sqrt(m * (1 - m) / n_eff + t**2 / (4 * n_eff**2)) / (1 + t**2 / n_eff)
        assert row["low"] == pytest.approx(centre - half, rel=1e-9), name
        assert row["high"] == pytest.approx(centre + half, rel=1e-9), name
        assert 0.0 <= row["low"] <= m <= row["high"] <= 1.0, name
    with pytest.raises(ValueError, match="interval"):
        position_bias_table(bias, human, groups, interval="wald")


def test_committed_smollm2_consistency_interval_stays_in_unit_interval():
    # The committed run (results/position_bias/smollm2): 2 consistent pairs of 240 in 91 documents.
    # Its t interval was [-0.003, 0.020]; recomputed from pairs.jsonl, no model needed.
    folder = REPO / "results" / "position_bias" / "smollm2"
    rows = [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]
    lf = np.array([[r["logp_forward_A"], r["logp_forward_B"]] for r in rows])
    ls = np.array([[r["logp_swapped_A"], r["logp_swapped_B"]] for r in rows])
    human = np.array([r["human_pref"] for r in rows])
    groups = [r["document"] for r in rows]
    bias = position_bias(lf, ls, human, groups=groups)
    table = position_bias_table(bias, human, groups)
    c = table["consistency"]
    assert c["estimate"] == pytest.approx(2 / 240)
    assert 0.0 < c["low"] < 2 / 240 < c["high"] < 1.0
    assert (round(c["low"], 3), round(c["high"], 3)) == (0.002, 0.030)
    for row in table.values():
        assert 0.0 <= row["low"] <= row["estimate"] <= row["high"] <= 1.0
    committed = json.loads((folder / "results.json").read_text())["intervals"]
    for name, row in committed.items():  # the committed table is the recomputed one
        assert table[name] == pytest.approx(row, rel=1e-9, abs=1e-12), name
    old = position_bias_table(bias, human, groups, interval="t")
    assert old["consistency"]["low"] < 0  # what the committed run showed before


def test_table_rates_are_means_of_per_pair_values_with_clustered_t_intervals():
    lf, ls, human, groups = _table_case()
    bias = position_bias(lf, ls, human, groups=groups)
    table = position_bias_table(bias, human, groups, alpha=0.1, interval="t")

    # Per-pair values by explicit loops over the slot choices.
    chose_a_f = [1.0 if a > b else 0.0 if a < b else 0.5 for a, b in lf]
    chose_a_s = [1.0 if a > b else 0.0 if a < b else 0.5 for a, b in ls]
    first_slot = np.array([(x + y) / 2 for x, y in zip(chose_a_f, chose_a_s)])
    item_f = [1 if x == 1 else -1 if x == 0 else 0 for x in chose_a_f]
    item_s = [-1 if x == 1 else 1 if x == 0 else 0 for x in chose_a_s]
    consistent = np.array([float(a == b != 0) for a, b in zip(item_f, item_s)])
    combined = [a if a == b else 0 for a, b in zip(item_f, item_s)]
    credit = np.array([0.5 if v == 0 else float(v == h) for v, h in zip(combined, human)])
    t = stats.t.ppf(0.95, df=8)
    for name, values in (("first_slot_rate", first_slot), ("consistency", consistent), ("accuracy", credit)):
        row = table[name]
        assert row["estimate"] == pytest.approx(values.mean(), abs=1e-12)
        assert row["estimate"] == pytest.approx(getattr(bias, name), abs=1e-12)
        se = _cr1_se(values, groups)
        assert row["se"] == pytest.approx(se, rel=1e-9)
        assert row["low"] == pytest.approx(values.mean() - t * se, rel=1e-6)
        assert row["high"] == pytest.approx(values.mean() + t * se, rel=1e-6)
    assert table["accuracy"]["se"] == pytest.approx(bias.accuracy_se, rel=1e-12)
    for name in ("accuracy_forward", "accuracy_swapped", "accuracy_soft"):
        assert table[name]["estimate"] == pytest.approx(getattr(bias, name), abs=1e-12)
    with pytest.raises(ValueError, match="alpha"):
        position_bias_table(bias, human, groups, alpha=1.5)


def test_pair_length_bias_by_hand():
    # Items 0..5 with token lengths; four pairs.
    lengths = np.array([10, 20, 30, 40, 50, 50])
    pairs = Pairs(group=np.array(["a", "a", "b", "b"], dtype=object), first=np.array([0, 3, 2, 4]),
                  second=np.array([1, 2, 3, 5]), first_id=np.array(["0", "3", "2", "4"], dtype=object),
                  second_id=np.array(["1", "2", "3", "5"], dtype=object), human_pref=np.array([1, 1, -1, 1]),
                  gap=np.ones(4))
    prob_first = np.array([0.2, 0.9, 0.5, 0.7])
    lb, extra = pair_length_bias(pairs, lengths, prob_first)
    diff = np.array([-10, 10, -10, 0])
    assert lb.pearson_length == pytest.approx(stats.pearsonr(diff, prob_first)[0], abs=1e-12)
    assert lb.human_pearson_length == pytest.approx(stats.pearsonr(diff, [1, 1, -1, 1])[0], abs=1e-12)
    # Unequal-length pairs 0, 1, 2. Judge decisive on 0 (second, the longer, wins) and 1 (first, longer,
    # wins); humans prefer the longer in 1 and 2, the shorter in 0.
    assert extra == {"judge_prefers_longer": 1.0, "human_prefers_longer": pytest.approx(2 / 3), "n_unequal_length": 3}


# ------------------------------------------------------------------------------ whole run


def test_run_and_files_on_the_tiny_judge(judge, case, tmp_path):
    exs, pairs, ref_f, ref_s = case
    run = run_position_bias(judge, exs, n_pairs=N_PAIRS, seed=PAIR_SEED, template=SHORT, batch_size=2)
    assert run.pairs.first.tolist() == pairs.first.tolist() and run.pairs.second.tolist() == pairs.second.tolist()
    np.testing.assert_allclose(run.forward.logprobs, ref_f, atol=1e-4, rtol=0)
    np.testing.assert_allclose(run.swapped.logprobs, ref_s, atol=1e-4, rtol=0)
    assert run.bias.n_pairs == N_PAIRS
    assert run.settings["answer_token_ids"] == [judge.tokenizer.token_to_id(c) for c in "AB"]

    paths = write_position_bias(run, tmp_path / "out", {"command": "test", "seed": PAIR_SEED})
    results = json.loads(paths["results_json"].read_text())
    assert {"n_pairs", "n_documents", "position_bias", "intervals", "validity_rate", "greedy_tokens",
            "length_bias", "seconds_scoring"} <= set(results)
    assert results["position_bias"]["consistency"] == pytest.approx(run.bias.consistency)
    assert set(results["intervals"]) == {"consistency", "first_slot_rate", "accuracy", "accuracy_forward",
                                         "accuracy_swapped", "accuracy_soft"}
    rows = [json.loads(line) for line in paths["pairs"].read_text().splitlines()]
    assert len(rows) == N_PAIRS and rows[0]["logp_forward_A"] == pytest.approx(float(run.forward.logprobs[0, 0]))
    meta = json.loads(paths["metadata"].read_text())
    assert meta["command"] == "test" and meta["settings"]["seed"] == PAIR_SEED
    assert "| Consistency" in paths["results_md"].read_text()


def test_run_needs_document_and_summary_fields(judge):
    bad = [Example(id="x/1", group="x", fields={"document": "d"}, scores={"coherence": 1.0})]
    with pytest.raises(ValueError, match=r"example 0 \('x/1'\) lacks field\(s\) \['summary'\]"):
        run_position_bias(judge, bad)


# ------------------------------------------------------------------------------ SmolLM2, slow


def _load_script():
    spec = importlib.util.spec_from_file_location("position_bias_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_script_matches_full_forward(tmp_path, tiny_gguf):
    """The script on 8 seeded pairs of the 2 shortest packaged SummEval articles vs full forwards.

    The judge is the tiny random one with SmolLM2's tokenizer and chat template
    (tests/tiny_judge.py): what is checked, the script's prefix-cached pairs against whole-text
    forwards and the files it writes, does not depend on the weights. SmolLM2's own numbers
    are in the committed run (`results/position_bias/smollm2`, regenerated from its pairs)."""
    from jaxjudge import models
    from jaxjudge.data import load_summeval
    from jaxjudge.data.summeval import summeval_subset_dir

    # Two articles keep the test short (two prefix compilations); the files are SummEval rows.
    src = summeval_subset_dir()
    docs = [json.loads(x) for x in (src / "summeval_docs.jsonl").read_text().splitlines()]
    keep = {d["doc_id"] for d in sorted(docs, key=lambda d: (len(d["article"]), d["doc_id"]))[:2]}
    data = tmp_path / "data"
    data.mkdir()
    for name in ("summeval_docs.jsonl", "summeval_summaries.jsonl"):
        lines = [x for x in (src / name).read_text().splitlines() if json.loads(x)["doc_id"] in keep]
        (data / name).write_text("\n".join(lines) + "\n")

    out = tmp_path / "out"
    run = _load_script().main(["--pairs", "8", "--seed", "0", "--data", str(data), "--model", str(tiny_gguf),
                                "--out", str(out), "--quiet"])

    exs = load_summeval(data)
    pairs = pairs_from_examples(exs, "coherence", n_pairs=8, seed=0)
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines()]
    assert [r["first_id"] for r in rows] == [str(x) for x in pairs.first_id]
    assert [r["second_id"] for r in rows] == [str(x) for x in pairs.second_id]

    judge = models.load(tiny_gguf)
    ref_f, ref_s = reference_logprobs(judge, SUMMARY_PAIRWISE, pairs, exs, "coherence")
    got_f = np.array([[r["logp_forward_A"], r["logp_forward_B"]] for r in rows])
    got_s = np.array([[r["logp_swapped_A"], r["logp_swapped_B"]] for r in rows])
    np.testing.assert_allclose(got_f, ref_f, atol=1e-4, rtol=0)
    np.testing.assert_allclose(got_s, ref_s, atol=1e-4, rtol=0)

    results = json.loads((out / "results.json").read_text())
    assert results["n_pairs"] == 8 and results["n_documents"] == 2
    assert {"consistency", "first_slot_rate", "accuracy", "accuracy_se", "tie_rate", "accuracy_forward",
            "accuracy_swapped"} <= set(results["position_bias"])
    assert results["position_bias"]["first_slot_rate"] == pytest.approx(run.bias.first_slot_rate)
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["model"]["sha256"] == hashlib.sha256(Path(tiny_gguf).read_bytes()).hexdigest()
    assert meta["seed"] == 0 and meta["command"].startswith("python experiments/position_bias.py --pairs 8")
    assert {"jax", "flax", "numpy", "tokenizers"} <= set(meta["packages"])
    assert meta["settings"]["answer_token_ids"] == [judge.encode(c, add_special_tokens=False)[0] for c in "AB"]
    assert (out / "results.md").read_text().startswith("# Position bias: 8 SummEval pairs (coherence), 2 documents")
