"""`EngineOptions`: one set of engine options for every entry point and for configs."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from jaxjudge.engine import EngineOptions, contrastive_generate, contrastive_generate_scores, extract, generate_scores


def test_defaults_and_keyword_overrides():
    o = EngineOptions()
    assert (o.batch_size, o.chunk_size, o.topk, o.overflow, o.prefix_cache, o.context_length, o.max_batch_tokens,
            o.min_prefix_tokens, o.mesh) == (16, 256, 5, "truncate", True, None, 8192, 32, None)
    base = EngineOptions(batch_size=4, overflow="raise")
    got = EngineOptions.of(base, topk=3)
    assert (got.batch_size, got.overflow, got.topk) == (4, "raise", 3) and base.topk == 5
    assert EngineOptions.of(None) == EngineOptions() and EngineOptions.of(base) is base
    with pytest.raises(TypeError, match=r"unknown engine option 'batchsize' \(did you mean 'batch_size'\?\)"):
        EngineOptions.of(batchsize=4)
    with pytest.raises(TypeError, match=r"options must be an EngineOptions, got dict"):
        EngineOptions.of({"batch_size": 4})
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.batch_size = 2


@pytest.mark.parametrize("field, value, message", [
    ("batch_size", 0, "engine option batch_size must be a positive int, got 0"),
    ("chunk_size", 2.5, "engine option chunk_size must be a positive int, got 2.5"),
    ("topk", True, "engine option topk must be a positive int, got True"),
    ("context_length", 0, "engine option context_length must be a positive int, got 0"),
    ("min_prefix_tokens", -1, "engine option min_prefix_tokens must be an int >= 0, got -1"),
    ("overflow", "cut", "engine option overflow must be 'truncate' or 'raise', got 'cut'"),
    ("prefix_cache", "yes", "engine option prefix_cache must be True or False, got 'yes'"),
])
def test_bad_values_name_the_option(field, value, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        EngineOptions(**{field: value})
    assert EngineOptions(min_prefix_tokens=0).min_prefix_tokens == 0


def test_every_entry_point_takes_the_same_options():
    names = set(EngineOptions.names())
    for fn in (extract, generate_scores, contrastive_generate, contrastive_generate_scores):
        params = inspect.signature(fn).parameters
        # The options arrive as one EngineOptions and as keywords; none is a parameter of its own.
        assert not names & set(params), (fn.__name__, names & set(params))
        if fn is not contrastive_generate_scores:  # passes its keywords on to contrastive_generate
            assert "options" in params
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
