"""`EngineOptions`: the engine's batching, context and store options, one dataclass for every
entry point (`extract`, `generate_scores`, `contrastive_generate`) and for configs.

Each entry point takes ``options`` (an `EngineOptions`, default the defaults) and the same
options as keywords, which override it (``extract(judge, prompts, scale, batch_size=8)``); an
unknown keyword is refused with its closest option named. A config's ``engine`` mapping is
checked against the same fields (`jaxjudge.experiment.ExperimentConfig.engine`).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["EngineOptions"]


def _at_least(lo: int) -> dict[str, Any]:
    return {"min": lo}


@dataclass(frozen=True)
class EngineOptions:
    """How the engine batches, stores and fits prompts (none changes a number beyond float rounding,
    except ``topk``, ``chunk_size``, ``overflow`` and ``context_length``, which stores key on).

    Attributes:
      batch_size: examples per forward call (rows, times the candidate variants; rounded up to
        a multiple of the mesh's data axis).
      chunk_size: most examples per store chunk (whole prefix groups are kept together);
        `extract` only.
      topk: k of the top-k tokens recorded at the answer position; `extract` only.
      overflow: ``"truncate"`` (cut the end of the shared prefix text, i.e. the source document,
        never the suffix; flagged in ``truncated``) or ``"raise"``
        (`jaxjudge.prompts.ContextOverflowError` naming the example).
      prefix_cache: compute each shared prefix once (True) or run every prompt in full.
      context_length: the context to fit in (None: the model's ``max_position_embeddings``;
        for contrastive generation the smaller of the two judges').
      max_batch_tokens: cap on rows x padded length per call (long prompts get smaller batches).
      min_prefix_tokens: shorter shared prefixes are not worth a separate prefill.
      groups_per_call: `extract` reads this many prefix groups in one call when each fits one call
        (each against its own prefix, each with a one-group call's ``batch_size`` and
        ``max_batch_tokens``); None: the mesh's ``data`` axis (1 on one device), so that every
        data shard prefills and reads its own group. A multiple or a divisor of the data axis (with
        fewer groups than data shards each prefix is computed once over the shards that read it).
      mesh: a ``jax.sharding.Mesh`` with a ``data`` axis for `extract` (None: the judge's own);
        not a config option (configs set ``ExperimentConfig.mesh``).
    """

    batch_size: int = field(default=16, metadata=_at_least(1))
    chunk_size: int = field(default=256, metadata=_at_least(1))
    topk: int = field(default=5, metadata=_at_least(1))
    overflow: Literal["truncate", "raise"] = "truncate"
    prefix_cache: bool = True
    context_length: int | None = field(default=None, metadata=_at_least(1))
    max_batch_tokens: int = field(default=8192, metadata=_at_least(1))
    min_prefix_tokens: int = field(default=32, metadata=_at_least(0))
    groups_per_call: int | None = field(default=None, metadata=_at_least(1))
    mesh: Any = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if "min" in f.metadata and not (value is None and f.default is None):
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < f.metadata["min"]:
                    what = "a positive int" if f.metadata["min"] == 1 else f"an int >= {f.metadata['min']}"
                    raise ValueError(f"engine option {f.name} must be {what}, got {value!r}")
                object.__setattr__(self, f.name, int(value))
        if self.overflow not in ("truncate", "raise"):
            raise ValueError(f"engine option overflow must be 'truncate' or 'raise', got {self.overflow!r}")
        if not isinstance(self.prefix_cache, (bool, np.bool_)):
            raise ValueError(f"engine option prefix_cache must be True or False, got {self.prefix_cache!r}")

    @classmethod
    def of(cls, options: EngineOptions | None = None, /, **overrides: Any) -> EngineOptions:
        """``options`` (default: the defaults) with keyword ``overrides``; an unknown name is
        refused with the closest option named."""
        if options is not None and not isinstance(options, EngineOptions):
            raise TypeError(f"options must be an EngineOptions, got {type(options).__name__}")
        names = cls.names()
        for k in overrides:
            if k not in names:
                close = difflib.get_close_matches(k, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(f"unknown engine option {k!r}{hint}; options: {', '.join(names)}")
        base = options or cls()
        return dataclasses.replace(base, **overrides) if overrides else base

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def config_fields(cls) -> dict[str, dataclasses.Field]:
        """The options a config's ``engine`` mapping may set (all but ``mesh``), by name."""
        return {f.name: f for f in dataclasses.fields(cls) if f.name != "mesh"}
