"""The device mesh data parallelism runs on, and moving trees onto and off it.

Why: one `jax.sharding.Mesh` of every device of the run (all hosts' devices once
`jax.distributed` is initialized) with a single data axis, `AXIS`. A batch is one global
array sharded along that axis, each process contributing its own rows; parameters,
optimizer state and keys are replicated. The train and eval steps (`nas.train.steps`) are
per-device functions run under `jax.shard_map` inside `jax.jit` (`data_parallel`), so
their collectives (the mean of gradients, the sums of an evaluation) are written out
where they happen, and one compiled program serves one device or many.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "batch"
REPLICATED = PartitionSpec()
SHARDED = PartitionSpec(AXIS)


def valid_shape(shape: Any) -> bool:
    """Whether `shape` is a mesh shape: one entry, the data axis's device count (-1: every
    device, else >= 1)."""
    return (isinstance(shape, list | tuple) and len(shape) == 1
            and isinstance(shape[0], int) and not isinstance(shape[0], bool)
            and (shape[0] == -1 or shape[0] >= 1))


def check_shape(shape: Any) -> tuple[int]:
    """`shape` as a tuple, or a ValueError naming the config field."""
    if not valid_shape(shape):
        raise ValueError(f"config field 'mesh_shape' must be a list of one entry (data,): "
                         f"-1 (every device) or >= 1, got {shape!r}")
    return (int(shape[0]),)


def build(shape: Sequence[int] = (-1,), devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A data-axis mesh over `devices` (default: every device of every process, in the
    order `jax.devices()` gives them, so each process's devices are contiguous): all of
    them, or the first `shape[0]`."""
    (size,) = check_shape(shape)
    devices = list(jax.devices() if devices is None else devices)
    if size == -1:
        size = len(devices)
    if size > len(devices):
        raise ValueError(f"config field 'mesh_shape': {size} devices asked for, "
                         f"{len(devices)} present")
    if size != len(devices) and jax.process_count() > 1:
        raise ValueError(f"config field 'mesh_shape': with {jax.process_count()} processes "
                         f"the mesh takes every device ({len(devices)}), got {size}")
    return Mesh(np.array(devices[:size]), (AXIS,))


def from_config(config: Any) -> Mesh:
    """The mesh a training config asks for (`mesh_shape`, every device by default)."""
    return build(config.get("mesh_shape", (-1,)))


def size(mesh: Mesh) -> int:
    """Devices along the data axis (all processes)."""
    return int(mesh.shape[AXIS])


def local_devices(mesh: Mesh) -> list[jax.Device]:
    """This process's devices of `mesh`, in mesh order (the order of its rows of a batch)."""
    me = jax.process_index()
    return [d for d in mesh.devices.flat if d.process_index == me]


def local_size(mesh: Mesh) -> int:
    return len(local_devices(mesh))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, REPLICATED)


def sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, SHARDED)


def _put(x: Any, sharding: NamedSharding) -> jax.Array:
    if jax.process_count() == 1:
        # Always a new buffer: a tree may hold one array twice (the EMA starts as the
        # params), and a donated state must not hand XLA the same buffer twice.
        return jax.device_put(x, sharding, may_alias=False)
    return jax.make_array_from_process_local_data(sharding, np.asarray(x))


def put_replicated(tree: Any, mesh: Mesh) -> Any:
    """Every leaf on every device of `mesh` (the same host value in each process), each a
    buffer of its own."""
    sharding = replicated(mesh)
    return jax.tree.map(lambda x: _put(x, sharding), tree)


def put_sharded(tree: Any, mesh: Mesh) -> Any:
    """Leaves whose leading axis is this process's rows -> global arrays split along the
    data axis (each device gets `rows / local devices` consecutive rows)."""
    sharding, n = sharded(mesh), local_size(mesh)

    def put(x: Any) -> jax.Array:
        rows = np.shape(x)[0]
        if rows % n:
            raise ValueError(f"batch of {rows} does not split over {n} devices")
        return _put(x, sharding)

    return jax.tree.map(put, tree)


def to_host(tree: Any) -> Any:
    """Numpy copies of a tree's leaves as this process sees them: a replicated array once,
    an array sharded along the data axis as this process's rows in order.

    Read from the shards' buffers: indexing a global array would compile a slice program
    for every distinct leaf shape of every candidate."""
    def one(x: Any) -> np.ndarray:
        if not isinstance(x, jax.Array):
            return np.asarray(x)
        if x.is_fully_replicated:
            return np.asarray(x.addressable_shards[0].data)
        if x.is_fully_addressable:
            return np.asarray(x)
        shards = {(s.index[0].start or 0): s for s in x.addressable_shards}
        return np.concatenate([np.asarray(shards[k].data) for k in sorted(shards)])

    return jax.tree.map(one, tree)


def data_parallel(fn: Callable, mesh: Mesh, in_specs: tuple, out_specs: Any,
                  donate_argnums: tuple[int, ...] = ()) -> Any:
    """`fn`, written for one device's share (collectives over `AXIS`), as one jitted
    program over `mesh`: `in_specs` / `out_specs` say which arguments and results are
    replicated (`REPLICATED`) and which are split along the data axis (`SHARDED`)."""
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs),
                   donate_argnums=donate_argnums)
