"""Hugging Face tensors -> decoder parameters, through one declarative key table.

Both sources (a safetensors folder via :mod:`jaxjudge.models.hf`, a GGUF file via
:mod:`jaxjudge.models.gguf`) produce ``tensors: dict[str, np.ndarray]`` with Hugging Face names
and layouts. :data:`KEY_TABLE` maps each name pattern to a parameter path of
:class:`~jaxjudge.models.decoder.Decoder` and a layout transform; :func:`build_model` fills the
arrays into an ``nnx.eval_shape`` skeleton (nothing is allocated twice) and refuses a tensor
that maps nowhere, a parameter that no tensor fills, and a shape that does not match, naming
the key each time.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping

import jax
import numpy as np
from flax import nnx

from jaxjudge.models import sharding
from jaxjudge.models.decoder import Decoder
from jaxjudge.models.decoder_config import DecoderConfig
from jaxjudge.models.layers import as_dtype
from jaxjudge.models.slices import LazyTensor, layout_groups, read_block

__all__ = [
    "ConversionError",
    "KEY_TABLE",
    "FUSED_TABLE",
    "IGNORED_KEYS",
    "abstract_model",
    "build_model",
    "unfuse",
]


class ConversionError(ValueError):
    """A checkpoint that does not match the config (missing, unused or misshapen tensor)."""


def _transpose(w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """torch Linear ``[out, in]`` -> kernel ``[in, *out]`` (o_proj: ``[D, N*H]`` -> ``[N, H, D]``)."""
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    return w.T.reshape(shape)


def _reshape(w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Same values, target shape (biases ``[N*H]`` -> ``[N, H]``; identity for norms)."""
    return w.reshape(shape)


# hf key pattern -> (parameter path, transform). `{0}` is the layer index.
KEY_TABLE: tuple[tuple[str, str, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]], ...] = (
    (r"model\.embed_tokens\.weight", "embed_tokens.embedding", _reshape),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", "layers.{0}.input_layernorm.scale", _reshape),
    (r"model\.layers\.(\d+)\.(post_attention|pre_feedforward|post_feedforward)_layernorm\.weight",
     "layers.{0}.{1}_layernorm.scale", _reshape),
    (r"model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "layers.{0}.self_attn.{1}_norm.scale",
     _reshape),
    (r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.weight",
     "layers.{0}.self_attn.{1}_proj.kernel", _transpose),
    (r"model\.layers\.(\d+)\.self_attn\.([qkvo])_proj\.bias",
     "layers.{0}.self_attn.{1}_proj.bias", _reshape),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", "layers.{0}.mlp.{1}_proj.kernel",
     _transpose),
    (r"model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.bias", "layers.{0}.mlp.{1}_proj.bias",
     _reshape),
    (r"model\.norm\.weight", "norm.scale", _reshape),
    (r"lm_head\.weight", "lm_head.kernel", _transpose),
)

def _split_qkv(cfg: DecoderConfig) -> tuple[int, ...]:
    n, k, h = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    return (n * h, k * h, k * h)


def _split_gate_up(cfg: DecoderConfig) -> tuple[int, ...]:
    return (cfg.intermediate_size, cfg.intermediate_size)


# Fused tensors (Phi-3) -> the unfused Hugging Face names they stand for, split along rows
# (torch's output axis) into the sizes the config gives, in this order. Applied before KEY_TABLE.
FUSED_TABLE: tuple[tuple[str, tuple[str, ...], Callable[[DecoderConfig], tuple[int, ...]]], ...] = (
    (r"model\.layers\.(\d+)\.self_attn\.qkv_proj\.weight",
     ("model.layers.{0}.self_attn.q_proj.weight", "model.layers.{0}.self_attn.k_proj.weight",
      "model.layers.{0}.self_attn.v_proj.weight"), _split_qkv),
    (r"model\.layers\.(\d+)\.mlp\.gate_up_proj\.weight",
     ("model.layers.{0}.mlp.gate_proj.weight", "model.layers.{0}.mlp.up_proj.weight"), _split_gate_up),
)

# Buffers some exporters save that carry no parameters (recomputed from the config).
IGNORED_KEYS: tuple[str, ...] = (r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq",)

_COMPILED = tuple((re.compile(p), path, fn) for p, path, fn in KEY_TABLE)
_FUSED = tuple((re.compile(p), names, sizes) for p, names, sizes in FUSED_TABLE)


def unfuse(cfg: DecoderConfig, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Splits fused tensors (:data:`FUSED_TABLE`) into the unfused names; others pass through.

    Raises:
        ConversionError: a fused tensor whose rows do not add up to the config's sizes, or whose
            parts are also present unfused (both named).
    """
    out: dict[str, np.ndarray] = {}
    for key, value in tensors.items():
        for pattern, names, sizes_fn in _FUSED:
            m = pattern.fullmatch(key)
            if m is None:
                continue
            sizes = sizes_fn(cfg)
            if value.shape[0] != sum(sizes):
                raise ConversionError(
                    f"tensor {key!r} has {value.shape[0]} rows; the config needs "
                    f"{' + '.join(map(str, sizes))} = {sum(sizes)}")
            bounds = np.cumsum((0,) + sizes)
            for name, lo, hi in zip(names, bounds[:-1], bounds[1:]):
                name = name.format(*m.groups())
                if name in tensors:
                    raise ConversionError(f"tensor {name!r} is present both alone and inside {key!r}")
                out[name] = value.row_range(lo, hi) if isinstance(value, LazyTensor) else np.asarray(value)[lo:hi]
            break
        else:
            out[key] = value
    return out
_IGNORED = tuple(re.compile(p) for p in IGNORED_KEYS)


def _param_path(key: str) -> tuple[str, Callable] | None:
    for pattern, path, fn in _COMPILED:
        m = pattern.fullmatch(key)
        if m:
            return path.format(*m.groups()), fn
    return None


def abstract_model(cfg: DecoderConfig, dtype: Any = "float32", **options: Any) -> Decoder:
    """The decoder with ``ShapeDtypeStruct`` leaves: shapes and dtypes, no memory.

    Args:
        cfg: the config.
        dtype: parameter and compute dtype (``"float32"`` or ``"bfloat16"``).
        **options: `Decoder`'s construction options (``scan_unroll``,
            ``fused_gate_up_min_rows``, ``attention_query_chunk``).

    Returns:
        An abstract :class:`Decoder` (``nnx.eval_shape``).
    """
    d = as_dtype(dtype)
    return nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0), dtype=d, param_dtype=d, **options))


def _flat(state: nnx.State) -> dict[str, nnx.Variable]:
    """Dotted parameter path (``layers.0.self_attn.q_proj.kernel``) -> Variable."""
    return {".".join(str(p) for p in path): v for path, v in nnx.to_flat_state(state)}


_LAYERS = "layers."


def _stacked(path: str) -> tuple[str, int | None]:
    """A table path -> (stacked parameter path, layer): ``layers.3.mlp.up_proj.kernel`` ->
    ``("layers.mlp.up_proj.kernel", 3)``; a path outside the layers -> ``(path, None)``."""
    if path.startswith(_LAYERS):
        index, _, rest = path[len(_LAYERS):].partition(".")
        return _LAYERS + rest, int(index)
    return path, None


def _hf_name(path: str) -> str:
    """Inverse of the table for error messages (``layers.3.mlp.up_proj.kernel`` -> HF key)."""
    if path == "lm_head.kernel":
        return "lm_head.weight"
    if path == "embed_tokens.embedding":
        return "model.embed_tokens.weight"
    name = path.replace(".kernel", ".weight").replace(".scale", ".weight")
    return "model." + name


def _from_blocks(src: Any, shape: tuple[int, ...], stacked: bool, dtype: Any, sharding_: Any) -> jax.Array:
    """A parameter made from the blocks its addressable devices hold, each read from the source
    (`jaxjudge.models.slices.read_block`); a stacked parameter's block is one per layer it spans."""
    done: dict[tuple[tuple[int, int], ...], np.ndarray] = {}  # replicas of one block are read once

    def block(index: tuple[slice, ...]) -> np.ndarray:
        spans = tuple(s.indices(n)[:2] for s, n in zip(index, shape))
        if spans not in done:
            done[spans] = read(index)
        return done[spans]

    def read(index: tuple[slice, ...]) -> np.ndarray:
        if not stacked:
            tensor, transposed = src
            return read_block(tensor, transposed, shape, index).astype(dtype)
        lo, hi = index[0].indices(shape[0])[:2]
        return np.stack([read_block(src[layer][0], src[layer][1], shape[1:], index[1:]).astype(dtype)
                         for layer in range(lo, hi)])

    return jax.make_array_from_callback(shape, sharding_, block)


def _check_tied_head(tensors: Mapping[str, np.ndarray], head: Any) -> None:
    """Some exporters write a tied head out as well; it is accepted only if it is the tie."""
    emb = tensors.get("model.embed_tokens.weight")
    if emb is None or emb.shape != head.shape or not np.array_equal(emb, head):
        raise ConversionError(
            "tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but the config "
            "ties the embeddings (tie_word_embeddings=True)"
        )


def _shape_error(key: str, value: Any, hit: tuple[str, Callable], target: tuple[int, ...], e: ValueError
                 ) -> ConversionError:
    return ConversionError(f"tensor {key!r} has shape {tuple(np.shape(value))}, which does not fit parameter "
                           f"{hit[0]!r} of shape {target}: {e}")


@dataclasses.dataclass
class _Filling:
    """The parameters of one decoder being filled from tensors: whole ones placed at once,
    stacked ones gathered in one ``[L, ...]`` host buffer layer by layer, lazy ones (on a mesh)
    remembered to be read device block by device block.

    Attributes:
        slots: parameter path -> its abstract Variable.
        shardings: parameter path -> its sharding (None: no mesh).
        dtype: the parameter dtype.
    """

    slots: dict[str, Any]
    shardings: dict[str, Any] | None
    dtype: Any
    buffers: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    layers_filled: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    filled: dict[str, Any] = dataclasses.field(default_factory=dict)
    lazy: dict[str, Any] = dataclasses.field(default_factory=dict)  # path -> (LazyTensor, transposed), or layer -> that

    def slot(self, cfg: DecoderConfig, key: str) -> tuple[tuple[str, Callable], str, int | None, tuple[int, ...]]:
        """The table's entry for ``key``, its parameter path, layer and the shape one tensor fills."""
        hit = _param_path(key)
        path, layer = (None, None) if hit is None else _stacked(hit[0])
        if path not in self.slots or (layer is not None and layer >= self.slots[path].shape[0]):
            raise ConversionError(
                f"tensor {key!r} is not used by the {cfg.model_type} decoder built from this config"
                + ("" if hit is None else f" (it would fill {hit[0]!r}, which the config lacks)")
            )
        shape = self.slots[path].shape
        return hit, path, layer, tuple(shape[1:] if layer is not None else shape)

    def add_lazy(self, key: str, value: LazyTensor, hit: tuple[str, Callable], path: str, layer: int | None,
                 target: tuple[int, ...]) -> None:
        """A tensor read later, device block by device block (only what this process's devices hold)."""
        transposed = hit[1] is _transpose
        try:
            if transposed and value.ndim != 2:
                raise ValueError(f"expected a 2-D weight, got shape {value.shape}")
            layout_groups(tuple(value.shape[::-1] if transposed else value.shape), target)
        except ValueError as e:
            raise _shape_error(key, value, hit, target, e) from None
        if value.dtype.kind not in "fV":
            raise ConversionError(f"tensor {key!r} has non-float dtype {value.dtype}")
        if layer is None:
            self.lazy[path] = (value, transposed)
        else:
            self.lazy.setdefault(path, {})[layer] = (value, transposed)
            self.layers_filled.setdefault(path, set()).add(layer)

    def add(self, key: str, value: Any, hit: tuple[str, Callable], path: str, layer: int | None,
            target: tuple[int, ...]) -> None:
        """A tensor in memory, transformed by its table entry: placed, or into its layer's buffer row."""
        try:
            arr = hit[1](np.asarray(value), target)
        except ValueError as e:
            raise _shape_error(key, value, hit, target, e) from None
        if np.dtype(arr.dtype).kind not in "fV":
            raise ConversionError(f"tensor {key!r} has non-float dtype {arr.dtype}")
        if layer is None:
            self.filled[path] = jax.device_put(arr.astype(self.dtype), None if self.shardings is None
                                               else self.shardings[path])
            return
        if path not in self.buffers:
            self.buffers[path] = np.empty(tuple(self.slots[path].shape), self.dtype)
        self.buffers[path][layer] = arr.astype(self.dtype)
        self.layers_filled.setdefault(path, set()).add(layer)

    def check_complete(self) -> None:
        """Raises `ConversionError` naming (up to five of) the parameters no tensor filled."""
        missing = []
        for path in sorted(self.slots):
            if path.startswith(_LAYERS):
                absent = sorted(set(range(self.slots[path].shape[0])) - self.layers_filled.get(path, set()))
                missing += [f"layers.{i}.{path[len(_LAYERS):]}" for i in absent]
            elif path not in self.filled and path not in self.lazy:
                missing.append(path)
        if missing:
            names = ", ".join(f"{_hf_name(p)!r} (for {p})" for p in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise ConversionError(f"missing tensor(s) {names}{more}")

    def placed(self) -> dict[str, Any]:
        """Every parameter on its devices: the buffers placed, the lazy ones read block by block."""
        for path, buf in self.buffers.items():
            self.filled[path] = jax.device_put(buf, None if self.shardings is None else self.shardings[path])
        for path, src in self.lazy.items():
            self.filled[path] = _from_blocks(src, tuple(self.slots[path].shape), path.startswith(_LAYERS),
                                             self.dtype, self.shardings[path])
        return self.filled


def build_model(
    cfg: DecoderConfig,
    tensors: Mapping[str, np.ndarray],
    dtype: Any = "float32",
    *,
    mesh: Any = None,
    rules: Mapping[str, str | None] | None = None,
) -> Decoder:
    """Fills Hugging Face tensors into a :class:`Decoder`.

    Args:
        cfg: the config the tensors belong to.
        tensors: Hugging Face name -> array in the Hugging Face layout (float16/bfloat16/float32;
            q/k rows in Hugging Face order), or -> `jaxjudge.models.slices.LazyTensor`: then,
            on a mesh, each device's block of each parameter is read from the file alone.
        dtype: parameter and compute dtype, ``"float32"`` or ``"bfloat16"``.
        mesh: optional mesh; each parameter is then placed directly with its sharding
            (:mod:`jaxjudge.models.sharding`), never gathered whole on one device.
        rules: logical-axis rules for ``mesh`` (default: the project table).

    Returns:
        The decoder, parameters on device.

    Raises:
        ConversionError: naming an unused tensor key, a parameter no tensor fills, or a tensor
            whose shape does not match the config.
    """
    d = as_dtype(dtype)
    graphdef, abstract = nnx.split(abstract_model(cfg, d))
    shardings = None
    if mesh is not None:
        shardings = _flat(sharding.param_shardings(abstract, mesh, rules or sharding.LOGICAL_AXIS_RULES))
    fill = _Filling(_flat(abstract), shardings, d)
    tensors = unfuse(cfg, tensors)
    for key in sorted(tensors):
        value = tensors[key]
        if any(p.fullmatch(key) for p in _IGNORED):
            continue
        if key == "lm_head.weight" and cfg.tie_word_embeddings:
            _check_tied_head(tensors, value)
            continue
        hit, path, layer, target = fill.slot(cfg, key)
        if shardings is not None and isinstance(value, LazyTensor):
            fill.add_lazy(key, value, hit, path, layer, target)
        else:
            fill.add(key, value, hit, path, layer, target)
    fill.check_complete()
    filled = fill.placed()
    state = nnx.from_flat_state(
        [(path, v.replace(filled[".".join(str(p) for p in path)]))
         for path, v in nnx.to_flat_state(abstract)]
    )
    return nnx.merge(graphdef, state)
