"""Tokenizers rebuilt from the vocabulary a GGUF file carries.

A GGUF file has no ``tokenizer.json``: it stores the vocabulary, the BPE merges (or SentencePiece
scores), the token types and the special token ids as metadata under llama.cpp's key names
(``tokenizer.ggml.*``). This module turns that metadata into a ``tokenizers.Tokenizer`` that
produces the same ids as the model's own Hugging Face tokenizer.

Two vocabulary kinds are supported, named by ``tokenizer.ggml.model``:

* ``"gpt2"``: byte-level BPE (SmolLM, Qwen2, Llama-3, ...). How text is cut into words before
  the merges run depends on the model and is named by ``tokenizer.ggml.pre``; each supported
  value maps to the split rule the model's own tokenizer uses (see :data:`PRE_TOKENIZERS`). An
  unknown value raises instead of silently using GPT-2's rule, which would give different ids.
* ``"llama"``: SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Gemma). The merges
  are rebuilt from the token scores (highest-scoring merged piece first) when the file lists none;
  Gemma files rank by file order instead, because their scores do not follow merge order.

Tokens typed CONTROL (and UNKNOWN, and the BOS/EOS/UNK/PAD ids) become special added tokens,
tokens typed USER_DEFINED become non-special added tokens: both are matched whole in raw text.
``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` are honoured by a post-processor, so
``tokenizer.encode(text).ids`` is what the model expects to read.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors

__all__ = [
    "PRE_TOKENIZERS",
    "TOKEN_TYPE_NORMAL",
    "TOKEN_TYPE_UNKNOWN",
    "TOKEN_TYPE_CONTROL",
    "TOKEN_TYPE_USER_DEFINED",
    "TOKEN_TYPE_UNUSED",
    "TOKEN_TYPE_BYTE",
    "UnsupportedTokenizerError",
    "byte_level_alphabet",
    "tokenizer_from_gguf_metadata",
]

# Token types as llama.cpp numbers them in `tokenizer.ggml.token_type`.
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6


class UnsupportedTokenizerError(ValueError):
    """The GGUF vocabulary names a tokenizer kind or split rule this module does not rebuild."""


# Word-splitting rules, as the models' own tokenizer.json files spell them.
# GPT-2's rule is the one built into `pre_tokenizers.ByteLevel(use_regex=True)`.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2 differs from Llama-3 only in cutting every digit on its own.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2_pre() -> tuple[Any, Any]:
    return None, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _smollm_pre() -> tuple[Any, Any]:
    # SmolLM's tokenizer.json isolates every digit before GPT-2's rule runs (llama.cpp writes the
    # same as a `\p{N}` split ahead of the GPT-2 expression).
    return None, pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _split_then_bytes(pattern: str) -> Any:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _llama3_pre() -> tuple[Any, Any]:
    return None, _split_then_bytes(_LLAMA3_SPLIT)


def _qwen2_pre() -> tuple[Any, Any]:
    # Qwen2's own tokenizer NFC-normalises first; the split rule then sees composed characters.
    return normalizers.NFC(), _split_then_bytes(_QWEN2_SPLIT)


# `tokenizer.ggml.pre` -> (builder of (normalizer or None, pre-tokenizer), BPE ignore_merges).
# Llama-3 looks a whole word up in the vocabulary before merging (its tokenizer.json sets
# `ignore_merges`).
PRE_TOKENIZERS: dict[str, tuple[Callable[[], tuple[Any, Any]], bool]] = {
    "gpt-2": (_gpt2_pre, False),
    "gpt2": (_gpt2_pre, False),
    "default": (_gpt2_pre, False),
    "smollm": (_smollm_pre, False),
    "llama-bpe": (_llama3_pre, True),
    "llama3": (_llama3_pre, True),
    "llama-v3": (_llama3_pre, True),
    "qwen2": (_qwen2_pre, False),
    "deepseek-r1-qwen": (_qwen2_pre, False),
}


@functools.cache
def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level vocabularies.

    Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls, space, ...) are
    given the code points from 256 upwards, in byte order.

    Returns:
        A dict of all 256 byte values to one-character strings.
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
            *range(ord("\xae"), ord("\xff") + 1)]
    table = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _as_byte_level(token: str, alphabet: frozenset[str]) -> str:
    """The byte-level spelling of a token some writers store as raw UTF-8 text."""
    if set(token) <= alphabet:
        return token
    table = byte_level_alphabet()
    return "".join(table[b] for b in token.encode("utf-8"))


def _meta(meta: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = meta.get(key, default)
    return default if value is None else value


def _special_ids(meta: Mapping[str, Any]) -> dict[str, int]:
    ids = {}
    for name in ("bos", "eos", "unknown", "padding"):
        value = meta.get(f"tokenizer.ggml.{name}_token_id")
        if value is not None:
            ids[name] = int(value)
    return ids


def _byte_level_model(meta: Mapping[str, Any], tokens: Sequence[str], source: str) -> Tokenizer:
    pre_name = _meta(meta, "tokenizer.ggml.pre", "default")
    if pre_name == "default":
        # Older files have no split rule, and llama.cpp writes "default" for vocabularies its
        # converter did not recognise: GPT-2's rule is a guess there, as it is in transformers.
        warnings.warn(
            f"{source}: tokenizer.ggml.pre is {meta.get('tokenizer.ggml.pre')!r}; splitting words "
            "with GPT-2's rule, which may not be the model's own",
            stacklevel=3,
        )
    if pre_name not in PRE_TOKENIZERS:
        raise UnsupportedTokenizerError(
            f"{source}: tokenizer.ggml.pre={pre_name!r} is not supported; supported split rules: "
            f"{sorted(PRE_TOKENIZERS)}"
        )
    build, ignore_merges = PRE_TOKENIZERS[pre_name]
    merges_raw = meta.get("tokenizer.ggml.merges")
    if merges_raw is None:
        raise UnsupportedTokenizerError(f"{source}: byte-level vocabulary without tokenizer.ggml.merges")
    alphabet = frozenset(byte_level_alphabet().values())
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(_as_byte_level(token, alphabet), index)
    merges = []
    for row, merge in enumerate(merges_raw):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{source}: tokenizer.ggml.merges[{row}]={merge!r} is not 'left right'")
        merges.append((parts[0], parts[1]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                               fuse_unk=False, byte_fallback=False, ignore_merges=ignore_merges))
    normalizer, pre = build()
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    return tok


def _merges_from_ranking(tokens: Sequence[str], ranks: Sequence[float]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary.

    SentencePiece's BPE merges, at every step, the adjacent pair whose joined piece has the best
    score. The equivalent merge list has one entry per way of writing a piece as two shorter
    pieces, ranked by the joined piece's score (ties: longer left part, then longer right part,
    then vocabulary order), which is also the order Hugging Face's converter produces.

    Args:
        tokens: the vocabulary, by id.
        ranks: one score per token; higher merges first.

    Returns:
        Merges as (left, right) pairs, best first.
    """
    ids: dict[str, int] = {}
    score: dict[str, float] = {}
    for index, (token, rank) in enumerate(zip(tokens, ranks)):
        ids[token] = index
        score[token] = float(rank)
    candidates = []
    for token, rank in score.items():
        pairs = [(token[:k], token[k:]) for k in range(1, len(token))
                 if token[:k] in ids and token[k:] in ids]
        pairs.sort(key=lambda p: (ids[p[0]], ids[p[1]]))
        candidates.extend((rank, len(left), len(right), left, right) for left, right in pairs)
    # A stable sort on the descending key keeps vocabulary order among equal keys.
    candidates.sort(key=lambda c: (c[0], c[1], c[2]), reverse=True)
    return [(c[3], c[4]) for c in candidates]


def _sentencepiece_model(meta: Mapping[str, Any], tokens: Sequence[str], architecture: str,
                         source: str) -> Tokenizer:
    gemma = architecture.startswith("gemma")
    tokens = list(tokens)
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab[token] = index
    if meta.get("tokenizer.ggml.merges") is not None:
        merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    elif gemma:
        merges = _merges_from_ranking(tokens, [-i for i in range(len(tokens))])
    else:
        scores = meta.get("tokenizer.ggml.scores")
        if scores is None:
            raise UnsupportedTokenizerError(
                f"{source}: SentencePiece vocabulary has neither merges nor tokenizer.ggml.scores"
            )
        merges = _merges_from_ranking(tokens, scores)
    ids = _special_ids(meta)
    unk = tokens[ids["unknown"]] if "unknown" in ids and ids["unknown"] < len(tokens) else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    if gemma:
        # No prefix space; every space becomes the space mark before the merges run.
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        tok.decoder = decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        )
        return tok
    add_prefix = bool(_meta(meta, "tokenizer.ggml.add_space_prefix", True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first" if add_prefix else "never", split=False
    )
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _added_tokens(tok: Tokenizer, meta: Mapping[str, Any], tokens: Sequence[str],
                  byte_level: bool) -> None:
    types = meta.get("tokenizer.ggml.token_type")
    if types is None:
        types = [TOKEN_TYPE_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(
            f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens"
        )
    special_ids = set(_special_ids(meta).values())
    alphabet = frozenset(byte_level_alphabet().values())
    special, plain = [], []
    for index, (token, kind) in enumerate(zip(tokens, types)):
        is_special = kind in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN) or index in special_ids
        if not is_special and kind != TOKEN_TYPE_USER_DEFINED:
            continue
        # A token outside the byte alphabet in a byte-level vocabulary cannot be one of the
        # model's strings (the vocabulary is written in that alphabet); matching it whole would
        # assign it text it never stood for.
        if byte_level and not set(token) <= alphabet:
            continue
        added = AddedToken(token, special=is_special, normalized=False)
        (special if is_special else plain).append(added)
    if special:
        tok.add_special_tokens(special)
    if plain:
        tok.add_tokens(plain)


def _post_processor(tok: Tokenizer, meta: Mapping[str, Any], tokens: Sequence[str],
                    default_bos: bool, source: str) -> None:
    ids = _special_ids(meta)
    around: dict[str, str] = {}
    specials = []
    for name, default in (("bos", default_bos), ("eos", False)):
        if not bool(_meta(meta, f"tokenizer.ggml.add_{name}_token", default)):
            continue
        if name not in ids or ids[name] >= len(tokens):
            raise ValueError(
                f"{source}: tokenizer.ggml.add_{name}_token is set but tokenizer.ggml.{name}_token_id "
                "is missing or out of range"
            )
        around[name] = tokens[ids[name]]
        specials.append((around[name], ids[name]))

    def template(piece: str, type_id: int) -> list[str]:
        out = [f"{piece}:{type_id}"]
        if "bos" in around:
            out.insert(0, f"{around['bos']}:{type_id}")
        if "eos" in around:
            out.append(f"{around['eos']}:{type_id}")
        return out

    tok.post_processor = processors.TemplateProcessing(
        single=template("$A", 0), pair=template("$A", 0) + template("$B", 1), special_tokens=specials
    )


def tokenizer_from_gguf_metadata(
    meta: Mapping[str, Any], *, source: str = "GGUF file"
) -> Tokenizer:
    """Builds the tokenizer a GGUF file's ``tokenizer.ggml.*`` metadata describes.

    Args:
        meta: the file's metadata as plain Python values (strings, numbers, lists), keyed by
            GGUF key (``tokenizer.ggml.tokens``, ``tokenizer.ggml.merges``, ...), including
            ``general.architecture``.
        source: the file name, used in error messages.

    Returns:
        A ``tokenizers.Tokenizer`` whose ``encode(text).ids`` are the model's token ids,
        including BOS/EOS when the file asks for them.

    Raises:
        UnsupportedTokenizerError: the vocabulary kind or split rule is not supported (named).
        ValueError: the metadata is inconsistent (field named).
    """
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ValueError(f"{source}: no tokenizer.ggml.tokens in the metadata")
    kind = meta.get("tokenizer.ggml.model")
    architecture = str(meta.get("general.architecture", ""))
    if kind == "llama" and architecture.startswith("gemma"):
        # Gemma files store runs of two or more spaces as real spaces; the vocabulary the model
        # was trained with spells them with the SentencePiece space mark. The same spelling is
        # used for the vocabulary and for the user-defined tokens: matched whole in the raw text
        # as runs of spaces, they would become new ids instead of the vocabulary's.
        tokens = ["\u2581" * len(t) if len(t) > 1 and not t.strip(" ") else t for t in tokens]
    if kind == "gpt2":
        tok = _byte_level_model(meta, tokens, source)
        default_bos = False
    elif kind == "llama":
        tok = _sentencepiece_model(meta, tokens, architecture, source)
        # llama.cpp adds BOS for SentencePiece vocabularies that do not say otherwise.
        default_bos = True
    else:
        raise UnsupportedTokenizerError(
            f"{source}: tokenizer.ggml.model={kind!r} is not supported (supported: 'gpt2', 'llama')"
        )
    _added_tokens(tok, meta, tokens, byte_level=kind == "gpt2")
    _post_processor(tok, meta, tokens, default_bos, source)
    return tok
