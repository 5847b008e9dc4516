"""Device mesh, logical-axis rules and sharded placement of judge parameters and batches.

One :func:`make_mesh` with a ``data`` axis (the batch) and a ``model`` axis (tensor
parallelism). Every parameter of :class:`~jaxjudge.models.decoder.Decoder` carries logical axis
names in its ``out_sharding`` metadata (``("embed", "q_heads", "head_dim")`` for q_proj, ...);
:data:`LOGICAL_AXIS_RULES` maps each logical name to a mesh axis. With ``model=1`` (the
default mesh) every parameter is replicated and only the batch is split; with ``model=m``
the head, MLP and vocabulary axes are split m ways, Megatron style (q/k/v and gate/up split by
output, o_proj and down_proj by input), so a judge that does not fit one device fits m.

A dimension whose size the mesh axis does not divide (e.g. 2 key/value heads on a 4-way model
axis) is replicated instead, so any mesh works for any model; :func:`param_shardings` reports
which.

A mesh may span several processes (one ``jax.distributed`` job, e.g. a multi-host TPU slice):
every process then runs the same program over the global mesh, inputs are placed from the
host arrays each process holds in full (`jaxjudge.multihost.spans_processes`), and results are
read back on every process with `jaxjudge.multihost.to_host`. The engine's extraction feeds
each process's rows only instead: `DataBlocks` says which blocks of the ``data`` axis this
process's devices hold, places a batch from those blocks' rows alone and reads them back from
its own devices.

The mesh uses ``AxisType.Auto`` axes: the decoder code carries no sharding annotations, and
XLA's propagation inserts the collectives from the parameter and batch shardings.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jaxjudge.models.kvcache import KVCache, init_cache
from jaxjudge.multihost import spans_processes, to_host  # re-exported: the helpers live in jaxjudge.multihost

__all__ = [
    "LOGICAL_AXIS_RULES",
    "make_mesh",
    "logical_spec",
    "param_shardings",
    "shard_state",
    "batch_sharding",
    "prefix_sharding",
    "shard_batch",
    "shard_prefixes",
    "cache_sharding",
    "new_cache",
    "Placement",
    "DataBlocks",
    "spans_processes",
    "to_host",
]

# The one rules table: logical axis name -> mesh axis (None: replicated).
LOGICAL_AXIS_RULES: dict[str, str | None] = {
    "batch": "data",
    "vocab": "model",
    "embed": None,
    "q_heads": "model",
    "kv_heads": "model",
    "head_dim": None,
    "mlp": "model",
    "norm": None,
    "layers": None,
    "cache_slots": None,
}


def make_mesh(data: int | None = None, model: int = 1, devices: Any = None) -> Mesh:
    """A ``(data, model)`` mesh over the available (or given) devices.

    Args:
        data: size of the batch axis (default: all devices not used by ``model``).
        model: size of the tensor-parallel axis (1: parameters replicated).
        devices: devices to use (default ``jax.devices()``).

    Returns:
        A ``Mesh`` with axes ``("data", "model")`` of type Auto. Over devices of several TPU
        slices (joined by the data-centre network, not ICI) the ``model`` axis stays inside one
        slice and ``data`` runs across them: slice ``s`` holds data rows ``s * data / slices``
        onwards (`mesh_utils.create_hybrid_device_mesh`).

    Raises:
        ValueError: the sizes do not divide the devices, or over several slices ``data`` is not a
            multiple of the slices (the message says which).
    """
    devices = list(jax.devices() if devices is None else devices)
    if model < 1 or len(devices) % model:
        raise ValueError(f"model={model} must be >= 1 and divide the {len(devices)} devices")
    if data is None:
        data = len(devices) // model
    if data < 1 or data * model > len(devices):
        raise ValueError(f"mesh data={data} x model={model} needs more than the {len(devices)} devices")
    devices = devices[: data * model]
    axis_types = (AxisType.Auto, AxisType.Auto)
    slices = sorted({getattr(d, "slice_index", 0) for d in devices})
    if len(slices) == 1:
        return jax.make_mesh((data, model), ("data", "model"), axis_types=axis_types, devices=devices)
    n = len(slices)
    if data % n:
        raise ValueError(f"mesh data={data} x model={model} over {n} slices: data must be a multiple of {n} "
                         "(model stays inside one slice)")
    # jax.make_mesh lets v5e meshes split a chip grid's physical axes; the same here.
    split = devices[0].device_kind in ("TPU v5 lite", "TPU v5e")
    grid = mesh_utils.create_hybrid_device_mesh((data // n, model), (n, 1), devices,
                                                allow_split_physical_axes=split)
    return Mesh(grid, ("data", "model"), axis_types=axis_types)


def logical_spec(
    axes: tuple[str | None, ...] | None,
    shape: tuple[int, ...],
    mesh: Mesh,
    rules: Mapping[str, str | None] = LOGICAL_AXIS_RULES,
) -> PartitionSpec:
    """Maps logical axis names to a PartitionSpec, replicating dims the mesh axis doesn't divide.

    Args:
        axes: logical name per dimension (None or missing: replicated).
        shape: the array shape (to check divisibility).
        mesh: the mesh.
        rules: logical name -> mesh axis name or None.

    Returns:
        A PartitionSpec with one entry per dimension.
    """
    if not axes:
        return PartitionSpec()
    if len(axes) != len(shape):
        raise ValueError(f"logical axes {axes} do not match shape {shape}")
    spec, used = [], set()
    for name, size in zip(axes, shape):
        if name is not None and name not in rules:
            raise ValueError(f"logical axis {name!r} has no entry in the sharding rules")
        mesh_axis = None if name is None else rules[name]
        # A size-1 mesh axis splits nothing: written as replicated, for readable specs.
        if (mesh_axis is None or mesh_axis in used or mesh_axis not in mesh.shape
                or mesh.shape[mesh_axis] == 1 or size % mesh.shape[mesh_axis]):
            spec.append(None)
        else:
            spec.append(mesh_axis)
            used.add(mesh_axis)
    return PartitionSpec(*spec)


def param_shardings(
    state: nnx.State, mesh: Mesh, rules: Mapping[str, str | None] = LOGICAL_AXIS_RULES
) -> nnx.State:
    """NamedSharding per parameter of a (possibly abstract) decoder state.

    Args:
        state: ``nnx.state(decoder)`` or the abstract state from ``nnx.eval_shape``.
        mesh: the mesh.
        rules: the rules table.

    Returns:
        A state-shaped tree of ``NamedSharding`` (plain leaves, no Variable wrappers).
    """

    def one(v):
        if isinstance(v, nnx.Variable):
            axes = v.get_metadata().get("out_sharding")
            return NamedSharding(mesh, logical_spec(axes, tuple(v.shape), mesh, rules))
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_state(
    state: nnx.State, mesh: Mesh, rules: Mapping[str, str | None] = LOGICAL_AXIS_RULES
) -> nnx.State:
    """Places every parameter of ``state`` on ``mesh`` according to the rules.

    Returns:
        A state with the same structure whose arrays are sharded (or replicated) on the mesh.
    """
    shardings = param_shardings(state, mesh, rules)
    return jax.tree.map(
        lambda v, s: v.replace(jax.device_put(v[...], s)) if isinstance(v, nnx.Variable) else
        jax.device_put(v, s),
        state,
        shardings,
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )


def _host_side(a: Any, mesh: Mesh | None) -> Any:
    # A process can place onto devices it does not own only what it holds whole on the host.
    if spans_processes(mesh) and isinstance(a, jax.Array) and a.is_fully_addressable:
        return np.asarray(a)
    return a


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Sharding of a batch-major array: dimension 0 over ``data``, the rest replicated."""
    return NamedSharding(mesh, PartitionSpec("data", *([None] * (ndim - 1))))


def prefix_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """Sharding of a prefill's ``[P, T]`` tokens or mask (P shared prefixes of T tokens).

    The prefixes over ``data`` when it divides P: each data shard prefills only its own
    groups'. With fewer prefixes than data shards (or a count it does not divide) each prefix
    is read by rows on several shards, so its KV cache must be on all of them: its tokens are
    then split over ``data`` (when it divides T), so that the slice computes every prefix once,
    each shard a run of its tokens, and the keys and values are gathered into the cache every
    shard reads, instead of each shard computing the whole prefix again. Otherwise replicated.
    """
    data = int(mesh.shape["data"])
    if data == 1 or shape[0] % data == 0:
        return batch_sharding(mesh, len(shape))
    if len(shape) > 1 and shape[1] % data == 0:
        return NamedSharding(mesh, PartitionSpec(None, "data", *([None] * (len(shape) - 2))))
    return NamedSharding(mesh, PartitionSpec())


def shard_batch(x: Any, mesh: Mesh, *, strict: bool = True) -> Any:
    """Places a batch-major array (or a pytree of them) with its batch split over ``data``.

    Args:
        x: arrays whose dimension 0 is the batch.
        mesh: the mesh.
        strict: raise when the batch is not a multiple of the data axis; otherwise such an
            array (e.g. a batch-1 shared prefix) is replicated.

    Raises:
        ValueError: if ``strict`` and the batch size is not a multiple of the data axis.
    """
    place = Placement(mesh)

    def put(a):
        a = np.asarray(a) if not isinstance(a, (np.ndarray, jax.Array)) else _host_side(a, mesh)
        if a.shape[0] % place.row_multiple and not strict:
            return place.replicated(a)
        return place.rows(a)

    return jax.tree.map(put, x)


def shard_prefixes(x: Any, mesh: Mesh) -> jax.Array:
    """Places a prefill's ``[P, T]`` tokens or mask by `prefix_sharding`."""
    a = np.asarray(x) if not isinstance(x, (np.ndarray, jax.Array)) else _host_side(x, mesh)
    return jax.device_put(a, prefix_sharding(mesh, tuple(a.shape)))


class Placement:
    """Where a call's arrays go: one device, or rows split over a mesh's ``data`` axis with
    shared arrays (a prefix cache) replicated.

    Args:
        mesh: a mesh with a ``data`` axis, or None (the default device).
    """

    def __init__(self, mesh: Mesh | None = None):
        self.mesh = mesh
        self.row_multiple = 1 if mesh is None else int(mesh.shape["data"])

    def rows(self, x: Any) -> jax.Array:
        """A batch-major array, split over ``data``.

        Raises:
            ValueError: the batch is not a multiple of the data axis.
        """
        if self.mesh is None:
            return jnp.asarray(x)
        if x.shape[0] % self.row_multiple:
            raise ValueError(
                f"batch size {x.shape[0]} is not a multiple of the mesh data axis "
                f"({self.row_multiple}); pad the batch"
            )
        return jax.device_put(_host_side(x, self.mesh), batch_sharding(self.mesh, x.ndim))

    def replicated(self, tree: Any) -> Any:
        """A pytree copied to every device of the mesh."""
        if self.mesh is None:
            return jax.tree.map(jnp.asarray, tree)
        tree = jax.tree.map(lambda a: _host_side(a, self.mesh), tree)
        return jax.device_put(tree, NamedSharding(self.mesh, PartitionSpec()))

    def round_rows(self, n: int) -> int:
        """``n`` rounded up to a multiple of the data axis."""
        return -(-n // self.row_multiple) * self.row_multiple

    def empty_cache(self, judge: Any, batch: int, slots: int) -> KVCache:
        """An empty KV cache for ``judge`` (anything with ``config`` and ``dtype``), its rows
        split over ``data`` like the batch and its key/value heads over ``model``."""
        return new_cache(judge.config, batch, slots, judge.dtype, self.mesh)


@functools.lru_cache(maxsize=64)
def _cache_maker(cfg: Any, batch: int, slots: int, dtype: Any, mesh: Mesh):
    make = functools.partial(init_cache, cfg, batch, slots, dtype)
    return jax.jit(make, out_shardings=cache_sharding(mesh, jax.eval_shape(make)))


def new_cache(cfg: Any, batch: int, slots: int, dtype: Any, mesh: Mesh | None = None) -> KVCache:
    """An empty KV cache, created where it lives: on a mesh each device writes the zeros of its
    own shard (rows over ``data``, K/V heads over ``model``), never the whole cache on one
    device first."""
    if mesh is None:
        return init_cache(cfg, batch, slots, dtype)
    return _cache_maker(cfg, batch, slots, jnp.dtype(dtype), mesh)()


def cache_sharding(mesh: Mesh, cache: KVCache, rules: Mapping[str, str | None] = LOGICAL_AXIS_RULES):
    """Shardings for a KVCache: batch over ``data``, key/value heads over ``model``."""
    kv = NamedSharding(mesh, logical_spec(("layers", "batch", "cache_slots", "kv_heads", "head_dim"),
                                          tuple(cache.k.shape), mesh, rules))
    row = NamedSharding(mesh, logical_spec(("batch", "cache_slots"), tuple(cache.valid.shape),
                                           mesh, rules))
    return KVCache(k=kv, v=kv, positions=row, valid=row, length=NamedSharding(mesh, PartitionSpec()),
                   empty=cache.empty)


class DataBlocks:
    """The blocks of a mesh's ``data`` axis, and which of them this process's devices hold.

    A batch split over ``data`` is D blocks of equal rows, block d on the devices at data
    coordinate d. Under a mesh over several processes each process holds some blocks (one
    each on a ``data 2 x model 3`` mesh over two processes of three devices; every process
    holds the one block of ``data 1 x model 6``), so it can place a batch from the rows of
    its blocks alone (`place`) and read them back from its own devices (`read`): no process
    builds, or receives, the global batch.

    Args:
        mesh: a mesh with a ``data`` axis.
    """

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        grid = np.asarray(mesh.devices)
        axis = list(mesh.axis_names).index("data")
        self.n = int(grid.shape[axis])
        per_block = np.moveaxis(grid, axis, 0).reshape(self.n, -1)
        self.holders: tuple[tuple[int, ...], ...] = tuple(
            tuple(sorted({d.process_index for d in per_block[b]})) for b in range(self.n))
        me = jax.process_index()
        self.mine: tuple[int, ...] = tuple(b for b in range(self.n) if me in self.holders[b])

    def place(self, blocks: Mapping[int, np.ndarray], rows: int) -> jax.Array:
        """A global ``[n * rows, ...]`` array split over ``data``, built from this process's
        blocks only (``blocks[b]``: block b's ``[rows, ...]`` rows, for every b in `mine`)."""
        first = np.asarray(blocks[self.mine[0]])
        shape = (self.n * rows, *first.shape[1:])
        sharding = batch_sharding(self.mesh, first.ndim)
        arrays = []
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            start = index[0].indices(shape[0])[0]
            b = start // rows
            part = np.asarray(blocks[b], first.dtype)
            if part.shape != (rows, *first.shape[1:]):
                raise ValueError(f"block {b} has shape {part.shape}, expected {(rows, *first.shape[1:])}")
            arrays.append(jax.device_put(part, device))
        return jax.make_array_from_single_device_arrays(shape, sharding, arrays)

    def read(self, x: jax.Array, block: int) -> np.ndarray:
        """Block ``block``'s rows of a batch-major global array (one of `mine`), read from this
        process's own devices."""
        rows = x.shape[0] // self.n
        lo, hi = block * rows, (block + 1) * rows
        for shard in x.addressable_shards:
            idx = shard.index
            start, stop, _ = idx[0].indices(x.shape[0])
            whole = all(s.indices(n)[:2] == (0, n) for s, n in zip(idx[1:], x.shape[1:]))
            if start <= lo and hi <= stop and whole:
                return np.asarray(shard.data)[lo - start:hi - start]
        raise ValueError(f"block {block} of an array sharded as {x.sharding} is not whole on this process")
