"""The :class:`Judge`: a converted decoder with its tokenizer, chat template and provenance.

Two levels of use:

- the simple path, for notebooks and checks: ``judge.next_token_logits(prompts) -> [B, V]``
  (raw strings, no chat template), ``judge.generate_text(prompts, max_new_tokens=...)``,
  ``judge.text_nll(texts)``, ``judge.apply_chat_template(messages)``;
- the fast path, for the engine (arrays in, arrays out, one jit compilation per shape):
  ``forward`` (logits at chosen positions only), ``prefill`` / ``extend`` (KV cache and shared
  prefix), ``generate_tokens`` (decoding with the cache), and the typed primitives the engine
  composes: ``prefill_prefix`` (a shared prefix into a batch-1 cache), ``read_rows`` (batched
  continuations read at chosen positions, reduced on the device), ``contrastive_decode``,
  ``prefix_nll`` / ``token_nll`` (negative log-likelihoods). The jitted code is in :mod:`jaxjudge.models.primitives`; shapes and the
  padding convention are those of :mod:`jaxjudge.models.decoder`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxjudge.models import decoder as _dec
from jaxjudge.models import primitives as _prim
from jaxjudge.models import sharding
from jaxjudge.models.config import DecoderConfig, config_from_hf
from jaxjudge.models.convert import build_model
from jaxjudge.models.decoder import KVCache, pad_batch
from jaxjudge.models.primitives import PrefixNLL, RowReads, TokenNLL, bucket_length, slot_bucket
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
            prefix: a batch-1 cache (from :meth:`prefill`) every row continues; read only, so
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
        if prefix is not None and prefix.batch_size != 1:
            raise ValueError(f"a prefix must have batch 1, got {prefix.batch_size}")
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

    def generate_tokens(
        self,
        logits_bv: jax.Array,
        cache: KVCache,
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
        top_k: int | None = None,
        prefix: KVCache | None = None,
        stop_at_eos: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decodes from a prompt's cache (see :func:`jaxjudge.models.decoder.generate`).

        Args:
            logits_bv: logits after each row's last prompt token [B, V].
            cache: the prompt cache with ``max_new_tokens - 1`` free slots (DONATED).
            max_new_tokens: G.
            temperature: 0 for greedy.
            seed: sampling seed (row b, step g uses ``sample_key(key(seed), g, b)``).
            top_k: optional top-k restriction.
            prefix: the prefix the cache continues, if any.
            stop_at_eos: report tokens after the first EOS as padding.

        Returns:
            (tokens [B, G] int32 numpy, lengths [B]: tokens up to and including EOS).
        """
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        free = cache.max_length - int(cache.length)
        if free < max_new_tokens - 1:
            raise ValueError(f"cache has {free} free slots; generating {max_new_tokens} tokens "
                             f"needs {max_new_tokens - 1}")
        tokens, lengths, _ = _dec.generate(
            self.graphdef, self.state, jnp.asarray(logits_bv), cache, jax.random.key(seed), prefix,
            max_new_tokens=max_new_tokens, temperature=float(temperature), top_k=top_k,
            eos_ids=tuple(self.config.eos_token_ids) if stop_at_eos else (), pad_id=self.pad_id)
        return sharding.to_host(tokens), sharding.to_host(lengths)

    # ------------------------------------------------------------------ engine primitives

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

    def put_replicated(self, tree: Any) -> Any:
        """A pytree copied to every device of the mesh (or to the one device)."""
        return sharding.Placement(self.mesh).replicated(tree)

    def _right_padded(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """One row right-padded to its `bucket_length`: ``(tokens [1, T], mask [1, T])``."""
        p = len(ids)
        tokens = np.full((1, bucket_length(p)), self.pad_id, np.int32)
        tokens[0, :p] = ids
        mask = np.zeros(tokens.shape, bool)
        mask[0, :p] = True
        return tokens, mask

    def prefill_prefix(self, ids: Sequence[int]) -> KVCache:
        """The batch-1 KV cache of a shared prefix, replicated over the mesh.

        The tokens are right-padded to `bucket_length` (the prefill's compute) inside a cache
        of `slot_bucket` slots (what later calls attend to), so few shapes compile. The result
        is the ``prefix`` of `read_rows` and :meth:`extend`.
        """
        tokens, mask = self._right_padded(ids)
        cache = sharding.new_cache(self.config, 1, slot_bucket(tokens.shape[1]), self.dtype, self.mesh)
        tokens, mask, read = self.put_replicated((tokens, mask, np.zeros((1, 1), np.int32)))
        _, cache = _dec.forward(self.graphdef, self.state, tokens, mask, read, None, cache, None)
        return cache

    def read_rows(self, tokens_bt: np.ndarray, mask_bt: np.ndarray, read_br: np.ndarray, pick_read_bm: np.ndarray,
                  pick_token_bm: np.ndarray, *, answer_read: int, topk: int, prefix: KVCache | None = None,
                  nll_use_bt: np.ndarray | None = None, generate_tokens: int = 0) -> RowReads:
        """Batched continuations read at chosen positions, reduced on the device (see
        `jaxjudge.models.primitives.read_rows` for the arguments, as numpy arrays here).

        ``tokens_bt`` is left-padded with B from `round_rows`; ``prefix`` comes from
        `prefill_prefix`; ``generate_tokens`` G > 0 also decodes a greedy reply of G tokens
        from the same prefill (the answer read must be each row's last token).
        """
        put = self.put_rows
        args = (put(tokens_bt), put(mask_bt), put(np.asarray(read_br, np.int32)), put(pick_read_bm),
                put(pick_token_bm))
        if generate_tokens:
            cache = self.new_cache(tokens_bt.shape[0], tokens_bt.shape[1] + generate_tokens)
            return _prim.read_rows_and_generate(
                self.graphdef, self.state, *args, cache, prefix, answer_read=answer_read, topk=topk,
                max_new_tokens=generate_tokens, eos_ids=tuple(int(e) for e in self.config.eos_token_ids),
                pad_id=self.pad_id)
        nll_use = None if nll_use_bt is None else put(nll_use_bt)
        return _prim.read_rows(self.graphdef, self.state, *args, prefix, nll_use, answer_read=answer_read, topk=topk)

    def prefix_nll(self, ids: Sequence[int]) -> PrefixNLL:
        """Each token's NLL in a shared prefix, and the next token's log-probabilities."""
        return _prim.prefix_nll(self.graphdef, self.state, *self.put_replicated(self._right_padded(ids)))

    def token_nll(self, tokens_bt: np.ndarray, mask_bt: np.ndarray, count_bt: np.ndarray | None = None, *,
                  chunk: int = 128) -> TokenNLL:
        """Summed NLL of each row's tokens after its first (or of the slots ``count_bt`` marks:
        slot j predicts the token at j + 1), and how many tokens were summed."""
        put = self.put_rows
        return _prim.token_nll(self.graphdef, self.state, put(tokens_bt), put(mask_bt),
                               None if count_bt is None else put(count_bt), chunk=chunk)

    def contrastive_decode(self, assistant: "Judge", logits_main: jax.Array, logits_asst: jax.Array,
                           cache_main: KVCache, cache_asst: KVCache, prefix_main: KVCache | None,
                           prefix_asst: KVCache | None, *, lam: float, t_main: float, t_asst: float, alpha: float,
                           vocab: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Greedy contrastive decoding against ``assistant`` from both judges' prompt caches (from
        :meth:`extend`; DONATED), by `jaxjudge.models.primitives.contrastive_decode`.

        Returns:
            (tokens [B, G] int32, lengths [B] int32 up to and including the first EOS).
        """
        params = tuple(np.float32(x) for x in (lam, t_main, t_asst, alpha))
        out = _prim.contrastive_decode(
            self.graphdef, self.state, assistant.graphdef, assistant.state, logits_main, logits_asst, cache_main,
            cache_asst, prefix_main, prefix_asst, *params, vocab=vocab, max_new_tokens=max_new_tokens,
            eos_ids=tuple(int(e) for e in self.config.eos_token_ids), pad_id=self.pad_id)
        return sharding.to_host(out.tokens_bg), sharding.to_host(out.lengths_b)

    # ------------------------------------------------------------------ simple path

    def _encode_batch(self, prompts: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a list of strings, not one string")
        out = []
        for i, p in enumerate(prompts):
            ids = self.encode(p) if isinstance(p, str) else [int(x) for x in p]
            if not ids:
                raise ValueError(f"prompt {i} encodes to no tokens")
            out.append(ids)
        return out

    def next_token_logits(self, prompts: Sequence[str], *, batch_size: int = 8) -> np.ndarray:
        """Next-token logits after each raw prompt (no chat template applied).

        Prompts are tokenised, left-padded to a length bucket and run ``batch_size`` at a time.

        Args:
            prompts: B strings (or token-id lists).
            batch_size: rows per forward call.

        Returns:
            logits [B, V] float32 numpy.
        """
        seqs = self._encode_batch(prompts)
        out = []
        for start in range(0, len(seqs), batch_size):
            chunk = seqs[start:start + batch_size]
            rows = len(chunk)
            # Pad the row count too, so the last partial chunk reuses the compiled shape.
            chunk = chunk + [chunk[-1]] * (min(batch_size, len(seqs)) - rows)
            tokens, mask = pad_batch(chunk, length=bucket_length(max(map(len, chunk))),
                                     pad_id=self.pad_id)
            read = np.full((len(chunk), 1), tokens.shape[1] - 1, np.int32)
            out.append(np.asarray(self.forward(tokens, mask, read))[:rows, 0])
        return np.concatenate(out, axis=0)

    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        seed: int = 0,
        top_k: int | None = None,
        stop_at_eos: bool = True,
    ) -> list[list[int]]:
        """Generates after each raw prompt with the KV cache.

        Returns:
            B lists of generated token ids (up to and including the first EOS).
        """
        seqs = self._encode_batch(prompts)
        tokens, mask = pad_batch(seqs, length=bucket_length(max(map(len, seqs))), pad_id=self.pad_id)
        t = tokens.shape[1]
        logits, cache = self.prefill(tokens, mask, max_length=t + max_new_tokens)
        out, lengths = self.generate_tokens(logits[:, 0], cache, max_new_tokens=max_new_tokens,
                                            temperature=temperature, seed=seed, top_k=top_k,
                                            stop_at_eos=stop_at_eos)
        return [row[:n].tolist() for row, n in zip(out, lengths)]

    def generate_text(self, prompts: Sequence[str], **kwargs: Any) -> list[str]:
        """:meth:`generate`, decoded to strings (special tokens dropped)."""
        return [self.decode(ids) for ids in self.generate(prompts, **kwargs)]

    def text_nll(self, texts: Sequence[str] | Sequence[Sequence[int]], *, chunk: int = 128,
                 batch_size: int = 8) -> tuple[np.ndarray, np.ndarray]:
        """Summed token negative log-likelihood of each text (for prompt perplexity).

        Every token after the first is scored given the ones before it (the BOS, when the
        tokenizer adds one, is context only). The engine's `jaxjudge.engine.sequence_nll` is
        the batched, bucketed mean of the same sums.

        Returns:
            (summed NLL in nats [B] float64, number of scored tokens [B] int); the
            perplexity is ``exp(sum / count)``.
        """
        seqs = self._encode_batch(texts)
        outs = []
        for start in range(0, len(seqs), batch_size):
            chunk_seqs = seqs[start:start + batch_size]
            tokens, mask = pad_batch(chunk_seqs, length=bucket_length(max(map(len, chunk_seqs))),
                                     pad_id=self.pad_id)
            outs.append(self.token_nll(tokens, mask, chunk=chunk))
        return (np.concatenate([np.asarray(o.sums_b, np.float64) for o in outs]),
                np.concatenate([np.asarray(o.counts_b) for o in outs]))

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
