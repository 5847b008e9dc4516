"""The :class:`Judge`: a converted decoder with its tokenizer, chat template and provenance.

A judge only models: it runs its network on token arrays placed on its mesh and turns text
into tokens and back.

- the network: ``forward`` (logits at chosen positions only, no cache), ``prefill`` /
  ``extend`` (KV cache and shared prefix), ``new_cache``; shapes and the padding convention
  are those of :mod:`jaxjudge.models.decoder`;
- placement: ``shard`` (parameters onto a mesh), ``put_rows`` / ``round_rows`` (batches with
  their rows over the ``data`` axis), ``put_replicated``;
- text: ``encode`` / ``decode``, ``apply_chat_template``.

Everything built from those calls lives in the engine: the scoring primitives (row reads,
prefix and token NLL: `jaxjudge.engine.calls`), the one decoding loop for greedy, sampled and
contrastive replies (`jaxjudge.engine.decode`), and the simple path for notebooks
(`jaxjudge.engine.calls.next_token_logits`, ``generate_text``, ``text_nll``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxjudge.models import decoder as _dec
from jaxjudge.models import sharding
from jaxjudge.models import splash
from jaxjudge.models.config import DecoderConfig, config_from_hf
from jaxjudge.models.convert import build_model
from jaxjudge.models.decoder import KVCache
from jaxjudge.prompts.chat import render_chat_template

__all__ = ["Judge", "render_chat_template"]


def _last_real_index(mask_bt: np.ndarray) -> np.ndarray:
    """Index of the last True of each row [B] (works for either padding side)."""
    mask_bt = np.asarray(mask_bt, bool)
    if not mask_bt.any(axis=1).all():
        raise ValueError("every row needs at least one real token (mask row all False)")
    t = mask_bt.shape[1]
    return (t - 1 - np.argmax(mask_bt[:, ::-1], axis=1)).astype(np.int32)


class Judge:
    """A judge model ready to score: config, parameters, tokenizer, chat template, provenance.

    Args:
        config: the decoder config.
        model: the :class:`~jaxjudge.models.decoder.Decoder` holding the parameters.
        tokenizer: a ``tokenizers.Tokenizer`` (adds BOS itself when its post-processor does).
        chat_template: Jinja chat template or None.
        source: where the model came from (path or repo id).
        sha256: content hash of the source (the cache key).
        special_tokens: optional ``{"bos_token": str, "eos_token": str}`` for chat templates;
            by default the strings of the config's BOS/first EOS ids.

    Attributes:
        config, tokenizer, chat_template, source, sha256: as given.
        graphdef, state: ``nnx.split(model)``; the jitted functions take these.
        dtype: compute dtype.
        mesh: the mesh after :meth:`shard`, else None.
        attention: ``"xla"`` or ``"splash"`` (:meth:`use_attention`).
    """

    def __init__(
        self,
        config: DecoderConfig,
        model: _dec.Decoder,
        tokenizer: Any,
        chat_template: str | None = None,
        *,
        source: str | None = None,
        sha256: str | None = None,
        special_tokens: Mapping[str, str] | None = None,
    ):
        self.config = config
        self.graphdef, self.state = nnx.split(model)
        self.dtype = model.dtype
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.source = source
        self.sha256 = sha256
        self.mesh = None
        self.attention = "xla"
        self._interpret = False
        tokens = dict(special_tokens or {})
        if tokenizer is not None:
            if "bos_token" not in tokens and config.bos_token_id is not None:
                tok = tokenizer.id_to_token(config.bos_token_id)
                if tok is not None:
                    tokens["bos_token"] = tok
            if "eos_token" not in tokens and config.eos_token_ids:
                tok = tokenizer.id_to_token(config.eos_token_ids[0])
                if tok is not None:
                    tokens["eos_token"] = tok
        self.special_tokens = tokens

    @classmethod
    def from_parts(
        cls,
        hf_config: Mapping[str, Any],
        tensors: Mapping[str, np.ndarray],
        tokenizer: Any,
        chat_template: str | None = None,
        *,
        dtype: Any = "float32",
        source: str | None = None,
        sha256: str | None = None,
        mesh: Any = None,
    ) -> "Judge":
        """Builds a judge from the ``(hf_config, tensors, tokenizer, chat_template)`` tuple that
        both :func:`jaxjudge.models.hf.load_hf` and the GGUF reader return."""
        cfg = config_from_hf(hf_config)
        model = build_model(cfg, tensors, dtype, mesh=mesh)
        judge = cls(cfg, model, tokenizer, chat_template, source=source, sha256=sha256)
        judge.mesh = mesh
        return judge

    # ------------------------------------------------------------------ basics

    @property
    def model(self) -> _dec.Decoder:
        """The decoder module (merged from graphdef and state)."""
        return nnx.merge(self.graphdef, self.state)

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def pad_id(self) -> int:
        return self.config.pad_token_id if self.config.pad_token_id is not None else 0

    def __repr__(self) -> str:
        return (f"Judge({type(self.config).__name__}, {self.config.num_params() / 1e6:.1f}M params, "
                f"dtype={jnp.dtype(self.dtype).name}, source={self.source!r})")

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (BOS added when the tokenizer's post-processor adds it)."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def shard(self, mesh: Any, rules: Mapping[str, str | None] | None = None) -> "Judge":
        """Places the parameters on ``mesh`` by the logical-axis rules (in place; returns self)."""
        self.state = sharding.shard_state(self.state, mesh, rules or sharding.LOGICAL_AXIS_RULES)
        self.mesh = mesh
        if self.attention == "splash":  # the kernel runs under shard_map over this mesh
            self.use_attention("splash", interpret=self._interpret)
        return self

    def use_attention(self, kind: str, *, interpret: bool = False) -> "Judge":
        """Which attention the jitted passes run (in place; returns self).

        ``"xla"`` (the default): XLA's dense masked attention, every backend. ``"splash"``: JAX's
        Pallas splash kernel for a TPU (`jaxjudge.models.splash`) wherever it serves: a prefill
        and the rows read against a shared prefix (a layer with a sliding window where the
        window cuts nothing on a device's rows, else XLA there); steps through a per-row cache
        (decoding) stay on XLA. ``interpret`` runs the kernel in Pallas's
        interpreter, on any backend (slow; for checking it off a TPU).
        """
        if kind not in ("xla", "splash"):
            raise ValueError(f"use_attention: kind must be 'xla' or 'splash', got {kind!r}")
        if kind == "splash" and not interpret:
            splash.require_tpu({d for leaf in jax.tree.leaves(self.state) for d in leaf.devices()},
                               "this judge's parameters are")
        model = nnx.merge(self.graphdef, self.state)
        spec = splash.SplashKernel(mesh=self.mesh, interpret=interpret) if kind == "splash" else None
        splash.use_kernel(model, spec)
        self.graphdef, self.state = nnx.split(model)
        self.attention, self._interpret = kind, bool(interpret)
        return self

    # ------------------------------------------------------------------ fast path

    def forward(self, tokens_bt: Any, mask_bt: Any, read_idx_br: Any,
                positions_bt: Any = None) -> jax.Array:
        """Logits at ``read_idx`` only, no cache.

        Args:
            tokens_bt: [B, T] int token ids (padding anywhere, see ``mask_bt``).
            mask_bt: [B, T] bool, True for real tokens.
            read_idx_br: [B, R] int, indices in [0, T) whose next-token logits are returned.
            positions_bt: [B, T] int rotary positions (default: count of real tokens before).

        Returns:
            logits [B, R, V] float32 (a device array).
        """
        tokens_bt, mask_bt = np.asarray(tokens_bt, np.int32), np.asarray(mask_bt, bool)
        args = [self.put_rows(tokens_bt), self.put_rows(mask_bt),
                self.put_rows(np.asarray(read_idx_br, np.int32))]
        pos = None if positions_bt is None else self.put_rows(np.asarray(positions_bt, np.int32))
        logits, _ = _dec.forward(self.graphdef, self.state, *args, pos)
        return logits

    def new_cache(self, batch: int, max_length: int) -> KVCache:
        """An empty KV cache of ``batch`` rows and ``max_length`` slots in the compute dtype
        (on a mesh: rows over ``data``, key/value heads over ``model`` where they divide)."""
        return sharding.new_cache(self.config, batch, max_length, self.dtype, self.mesh)

    def prefill(self, tokens_bt: Any, mask_bt: Any = None, *, max_length: int | None = None,
                read_idx_br: Any = None) -> tuple[jax.Array, KVCache]:
        """Runs tokens into a fresh cache.

        For a shared prefix pass one row (``[1, P]``) and keep the default ``max_length`` (P):
        the result is the ``prefix`` argument of :meth:`extend`.

        Args:
            tokens_bt: [B, T] token ids.
            mask_bt: [B, T] bool (default all True).
            max_length: cache slots S >= T (default T); leave room for continuations or
                generated tokens when this cache will be extended.
            read_idx_br: [B, R] positions to read (default: each row's last real token).

        Returns:
            (logits [B, R, V], cache of B rows, S slots, ``length == T``).
        """
        tokens_bt = np.asarray(tokens_bt, np.int32)
        b, t = tokens_bt.shape
        s = t if max_length is None else max_length
        if s < t:
            raise ValueError(f"max_length={s} is shorter than the {t} tokens to prefill")
        return self.extend(tokens_bt, mask_bt, read_idx_br=read_idx_br, cache=self.new_cache(b, s))

    def extend(
        self,
        tokens_bt: Any,
        mask_bt: Any = None,
        *,
        read_idx_br: Any = None,
        prefix: KVCache | None = None,
        cache: KVCache | None = None,
        max_length: int | None = None,
        positions_bt: Any = None,
    ) -> tuple[jax.Array, KVCache | None]:
        """Continues a shared prefix and/or a per-row cache with new tokens.

        Args:
            tokens_bt: [B, T] token ids of the continuations.
            mask_bt: [B, T] bool (default all True).
            read_idx_br: [B, R] indices into the T tokens to read logits at (default: each
                row's last real token, R = 1).
            prefix: a cache of P prefixes (from :meth:`prefill`; P divides B): row b continues
                prefix b // (B / P), one prefix every row continues when P = 1. Read only, so
                one prefix serves any number of calls.
            cache: a batch-B cache to append to; it is DONATED (consumed), use the returned one.
            max_length: when no ``cache`` is given, allocate a fresh one of this many slots
                (for generating afterwards); when both are None no cache is kept (cheapest).
            positions_bt: [B, T] rotary positions (default: continue the count of real tokens
                in prefix and cache).

        Returns:
            (logits [B, R, V] float32, the updated or new cache, or None).
        """
        tokens_bt = np.asarray(tokens_bt, np.int32)
        b, t = tokens_bt.shape
        mask_bt = np.ones((b, t), bool) if mask_bt is None else np.asarray(mask_bt, bool)
        if mask_bt.shape != (b, t):
            raise ValueError(f"mask shape {mask_bt.shape} != tokens shape {(b, t)}")
        if read_idx_br is None:
            read_idx_br = _last_real_index(mask_bt)[:, None]
        read_idx_br = np.asarray(read_idx_br, np.int32)
        if read_idx_br.ndim != 2 or read_idx_br.shape[0] != b:
            raise ValueError(f"read_idx must be [B={b}, R], got shape {read_idx_br.shape}")
        if read_idx_br.size and (read_idx_br.min() < 0 or read_idx_br.max() >= t):
            raise ValueError(f"read_idx values must lie in [0, {t})")
        if prefix is not None and b % prefix.batch_size:
            raise ValueError(f"{b} rows cannot continue {prefix.batch_size} prefixes: each prefix takes B / P "
                             f"consecutive rows, so P must divide B")
        if cache is None and max_length is not None:
            if max_length < t:
                raise ValueError(f"max_length={max_length} is shorter than the {t} new tokens")
            cache = self.new_cache(b, max_length)
        if cache is not None:
            if cache.batch_size != b:
                raise ValueError(f"cache has batch {cache.batch_size}, tokens have {b}")
            used = int(cache.length)
            if used + t > cache.max_length:
                raise ValueError(
                    f"cache overflow: {used} slots used + {t} new tokens > {cache.max_length} slots")
        pos = None if positions_bt is None else self.put_rows(np.asarray(positions_bt, np.int32))
        return _dec.forward(self.graphdef, self.state, self.put_rows(tokens_bt),
                            self.put_rows(mask_bt), self.put_rows(read_idx_br), pos, cache, prefix)

    # ------------------------------------------------------------------ placement

    def round_rows(self, n: int) -> int:
        """``n`` rounded up to a multiple of the mesh's ``data`` axis (the rows of a batch)."""
        multiple = 1 if self.mesh is None else int(self.mesh.shape["data"])
        return -(-n // multiple) * multiple

    def put_rows(self, x: Any) -> jax.Array:
        """A batch-major array on the device(s), its rows split over the mesh's ``data`` axis (a
        batch the axis does not divide, e.g. a batch-1 prefix, is replicated)."""
        if self.mesh is None:
            return jnp.asarray(x)
        return sharding.shard_batch(x if isinstance(x, jax.Array) else np.asarray(x), self.mesh, strict=False)

    def put_prefixes(self, x: Any) -> jax.Array:
        """A prefill's ``[P, T]`` tokens or mask: the prefixes over the mesh's ``data`` axis, or,
        with fewer prefixes than data shards, their tokens (`jaxjudge.models.sharding.prefix_sharding`)."""
        if self.mesh is None:
            return jnp.asarray(x)
        return sharding.shard_prefixes(x, self.mesh)

    def put_replicated(self, tree: Any) -> Any:
        """A pytree copied to every device of the mesh (or to the one device)."""
        return sharding.Placement(self.mesh).replicated(tree)

    # ------------------------------------------------------------------ text

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *,
                            add_generation_prompt: bool = True, **variables: Any) -> str:
        """Renders ``messages`` with the model's chat template (see :func:`render_chat_template`).

        The result is text; BOS appears in it only if the template writes it, so tokenise with
        ``encode(text, add_special_tokens=False)`` when the template already starts with BOS.

        Raises:
            ValueError: the model has no chat template.
        """
        if not self.chat_template:
            raise ValueError(f"model {self.source!r} has no chat template")
        merged = {**self.special_tokens, **variables}
        return render_chat_template(self.chat_template, messages,
                                    add_generation_prompt=add_generation_prompt, **merged)
