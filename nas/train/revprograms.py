"""The compiled programs of the reversible trainer: one per training step, one per inference.

Why: a step that walks the layers from Python costs launches and host round trips per
layer (measured: about 3 ms per coupling on an H200, 0.24x the standard step). Here the
whole step is one compiled program, whatever the depth:

* Consecutive couplings with the same structure, optimizer and packed layout form a
  `Segment`; their packed states (`revpack`) are stacked into one host buffer per element
  size, shape (couplings, elements).
* Forward: a segment is one `lax.scan` (on the CPU, the same loop written out: `_scan`)
  over its stacked host buffers; each iteration moves its layer's row to the device
  (`jax.device_put` to the device memory kind inside the program) and overwrites the
  activation pair, so no coupling output is stored.
* Backward: the same scan in reverse. Each iteration reconstructs its layer's inputs from
  its outputs, backpropagates, updates the layer with its own optimizer state and writes
  the updated row back to host memory. This is the backward pass of the whole scanned
  stack, written out (the role a `custom_vjp` around the stack plays): only the final pair
  and its cotangents are carried, so device memory holds about one layer at a time.
* Standard layers run once forward (their inputs are parked in host memory) and recompute
  their forward in the backward pass; the head does forward, backward and its update.

The program takes the host state as a donated argument and returns the updated state, so
Python issues one launch per step and reads back only the loss.

Placement (`Placement`): on a data-axis mesh (`nas.train.mesh`), packed states live in
host memory (`pinned_host` where the backend has it) replicated over its devices;
activations are sharded over the batch along its data axis; XLA adds the cross-device
sums, so one device or several run the same program.

Precision: couplings trace at `highest` matmul precision (exact reconstruction where the
default f32 matmul is TF32, i.e. GPUs); other layers use the trainer's `precision`.
"""

from __future__ import annotations

import collections
import contextlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nas.train import mesh as mesh_lib
from nas.train import revlayers, revpack
from nas.train.revlayers import Layer
from nas.train.revpack import Layout

AXIS = mesh_lib.AXIS


def host_memory_kind(device: jax.Device) -> str | None:
    """The host memory kind next to `device` (pinned if it has one), else None."""
    try:
        kinds = {m.kind for m in device.addressable_memories()}
    except Exception:  # platforms without memory kinds
        kinds = set()
    for kind in ("pinned_host", "unpinned_host"):
        if kind in kinds:
            return kind
    return None


@dataclass
class Placement:
    """Shardings of packed layer state (replicated; device or host) and activations, on a
    data-axis mesh (or a mesh over a list of devices)."""

    mesh: Mesh | list[jax.Device]

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, Mesh):
            self.mesh = Mesh(np.array(list(self.mesh)), (AXIS,))
        mesh = self.mesh
        self.devices = list(mesh.devices.flat)
        self.host_kind = host_memory_kind(self.devices[0])
        host = {"memory_kind": self.host_kind} if self.host_kind else {}
        self.rep = NamedSharding(mesh, PartitionSpec())
        self.act = NamedSharding(mesh, PartitionSpec(AXIS))
        self.rep_host = NamedSharding(mesh, PartitionSpec(), **host)
        self.act_host = NamedSharding(mesh, PartitionSpec(AXIS), **host)


@dataclass(frozen=True)
class Segment:
    """Consecutive layers run as one unit: a run of identical couplings (scanned), or one
    standard layer, or the head. Its host state is one buffer per element size, stacked
    over its layers: shape (len(layers), elements)."""

    kind: str
    layers: tuple[Layer, ...]
    layout: Layout

    @property
    def start(self) -> int:
        return self.layers[0].index

    @property
    def key(self) -> tuple:
        first = self.layers[0]
        return (self.kind, first.structure, first.opt_signature, self.layout.key,
                len(self.layers))


def segments(layers: Sequence[Layer], layouts: Sequence[Layout]) -> list[Segment]:
    """Layers grouped into segments, in forward order."""
    out: list[Segment] = []
    for layer, layout in zip(layers, layouts, strict=True):
        prev = out[-1] if out else None
        if (layer.kind == "coupling" and prev is not None and prev.kind == "coupling"
                and prev.layers[0].structure == layer.structure
                and prev.layers[0].opt_signature == layer.opt_signature
                and prev.layout.key == layout.key):
            out[-1] = Segment("coupling", (*prev.layers, layer), layout)
        else:
            out.append(Segment(layer.kind, (layer,), layout))
    return out


class ProgramCache:
    """A bounded LRU of (compiled program, its temporary bytes) keyed by (kind, segment
    keys, settings, shapes).

    Owned by a trainer (or passed to several, e.g. by tests and benchmarks, to share
    compilations between trainers of the same network)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple, Any] = collections.OrderedDict()

    def get(self, key: tuple) -> Any:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def programs(self) -> list[Any]:
        """The compiled programs held, least recently used first."""
        return [program for program, _ in self._items.values()]

    def put(self, key: tuple, value: Any) -> None:
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _precision(name: str | None) -> Any:
    return jax.default_matmul_precision(name) if name else contextlib.nullcontext()


def default_unroll(place: Placement) -> bool:
    """Whether the loops over couplings are unrolled by default: on the CPU only.

    XLA:CPU runs the transposed convolutions of a backward pass about 20x slower inside a
    while loop than in straight-line code (measured, jax 0.10.2), and there host and device
    memory are the same RAM. Accelerators keep the rolled loop, which bounds device memory
    by construction and compiles in time independent of depth; unrolled, compile time grows
    with depth as the standard step's does. Launches per step are one either way."""
    return place.devices[0].platform == "cpu"


def _scan(body: Callable, carry: Any, xs: Any, length: int, reverse: bool = False,
          unroll: bool = False) -> tuple[Any, Any]:
    """`lax.scan`, or (unroll) the same loop written out in Python.

    Why not `lax.scan(..., unroll=True)`: a run of one coupling is then a one-trip loop,
    which XLA:CPU removes only after it has chosen convolution layouts, so that coupling's
    convolutions stay in a slow, non-canonical form (measured, jax 0.10.2: RevNet depth 2,
    width 8, whose runs are single couplings, 0.18x the standard step that way, 1.05x
    written out). Straight-line code has no loop at all."""
    if not unroll:
        return lax.scan(body, carry, xs, length=length, reverse=reverse)
    outs = []
    for i in (reversed(range(length)) if reverse else range(length)):
        carry, out = body(carry, jax.tree.map(lambda a, i=i: a[i], xs))
        outs.append(out)
    if reverse:
        outs.reverse()
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *outs) if outs else None
    return carry, stacked


def _indices(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.int32)


class _Parts:
    """The traced pieces every program is made of, for one placement."""

    def __init__(self, place: Placement, num_classes: int, precision: str | None,
                 unroll: bool | None = None) -> None:
        self.place = place
        self.num_classes = num_classes
        self.precision = precision
        self.unroll = default_unroll(place) if unroll is None else unroll

    def fetch(self, seg: Segment, row: tuple) -> tuple[Any, Any]:
        """One layer's (weights, optimizer state) from its host row, on the device."""
        return revpack.unpack(seg.layout, jax.device_put(row, self.place.rep))

    def store(self, seg: Segment, w: Any, opt: Any) -> tuple:
        """Packed (weights, optimizer state), written to host memory."""
        return jax.device_put(revpack.pack(seg.layout, (w, opt)), self.place.rep_host)

    def act(self, xs: Any) -> Any:
        return jax.lax.with_sharding_constraint(xs, self.place.act)

    @staticmethod
    def row(bufs: tuple, j: int = 0) -> tuple:
        return tuple(b[j] for b in bufs)

    # ------------------------------------------------------------------ training
    def forward(self, seg: Segment, bufs: tuple, xs: tuple, key: Callable) -> tuple:
        """Activations after `seg` (a standard layer or a run of couplings)."""
        layer = seg.layers[0]
        if seg.kind == "standard":
            w, _ = self.fetch(seg, self.row(bufs))
            with _precision(self.precision):
                return self.act(revlayers.standard_forward(layer)(w, xs, key(layer.index)))
        fwd = revlayers.coupling_forward(layer)

        def body(xs, item):
            row, i = item
            w, _ = self.fetch(seg, row)
            with _precision("highest"):
                return self.act(fwd(w, xs, key(i))), None

        xs, _ = _scan(body, tuple(xs), (bufs, _indices(seg.start, len(seg.layers))),
                      len(seg.layers), unroll=self.unroll)
        return xs

    def backward(self, seg: Segment, bufs: tuple, ys: tuple, cts: tuple, key: Callable,
                 inputs: tuple | None) -> tuple[tuple, tuple, tuple]:
        """(inputs, their cotangents, updated stacked host state) of `seg` from its outputs
        `ys` and their cotangents; a standard layer gets its kept `inputs`."""
        layer = seg.layers[0]
        if seg.kind == "standard":
            w, opt = self.fetch(seg, self.row(bufs))
            with _precision(self.precision):
                cxs, w, opt = revlayers.standard_backward(layer)(w, opt, inputs, cts,
                                                                 key(layer.index))
            return inputs, cxs, tuple(b[None] for b in self.store(seg, w, opt))
        bwd = revlayers.coupling_backward(layer)

        def body(carry, j):
            ys, cts, bufs = carry
            w, opt = self.fetch(seg, tuple(lax.dynamic_index_in_dim(b, j, keepdims=False)
                                           for b in bufs))
            with _precision("highest"):
                xs, cts, w, opt = bwd(w, opt, ys, cts, key(seg.start + j))
            # The updated row overwrites its own (already read) row of the carried stack in
            # place, once everything that reads the row is computed (`_after`): otherwise
            # XLA copies the whole stack every iteration.
            at = _after(j, (xs, cts))
            bufs = tuple(lax.dynamic_update_index_in_dim(b, r, at, 0)
                         for b, r in zip(bufs, self.store(seg, w, opt), strict=True))
            return (self.act(xs), self.act(cts), bufs), None

        (xs, cxs, new), _ = _scan(body, (tuple(ys), tuple(cts), tuple(bufs)),
                                  _indices(0, len(seg.layers)), len(seg.layers),
                                  reverse=True, unroll=self.unroll)
        return xs, cxs, new

    def head(self, seg: Segment, bufs: tuple, xs: tuple, labels: Any,
             key: Callable) -> tuple[Any, tuple, tuple]:
        layer = seg.layers[0]
        w, opt = self.fetch(seg, self.row(bufs))
        with _precision(self.precision):
            loss, cts, w, opt = revlayers.head_step(layer, self.num_classes)(
                w, opt, xs, labels, key(layer.index))
        return loss, self.act(cts), tuple(b[None] for b in self.store(seg, w, opt))

    # ------------------------------------------------------------------ inference
    def eval_forward(self, seg: Segment, bufs: tuple, xs: tuple,
                     keep: bool) -> tuple[tuple, Any]:
        """Deterministic activations after `seg`, and (keep) each layer's input stack:
        stacked over the segment's layers."""
        layer = seg.layers[0]
        if seg.kind == "standard":
            w, _ = self.fetch(seg, self.row(bufs))
            with _precision(self.precision):
                out = self.act(revlayers.eval_forward(layer)(w, xs))
            return out, (tuple(x[None] for x in xs) if keep else None)
        fwd = revlayers.eval_forward(layer)

        def body(xs, row):
            w, _ = self.fetch(seg, row)
            with _precision("highest"):
                return self.act(fwd(w, xs)), (xs if keep else None)

        return _scan(body, tuple(xs), bufs, len(seg.layers), unroll=self.unroll)


def _after(index: jax.Array, trees: Any) -> jax.Array:
    """`index`, as a value that depends on every array of `trees` (min(i, i + any NaN) is
    i whatever the data, and XLA cannot fold it away)."""
    total = sum(jnp.sum(x) for x in jax.tree.leaves(trees))
    return jnp.minimum(index, index + jnp.isnan(total).astype(index.dtype))


def train_step_fn(segs: Sequence[Segment], parts: _Parts) -> Callable:
    """(host state, images, labels, rng, step) -> (loss, updated host state)."""
    *body, head = segs

    def step(host, images, labels, rng, step):
        base = jax.random.fold_in(rng, step)

        def key(i):
            return jax.random.fold_in(base, i)

        xs: tuple = (images,)
        kept: dict[int, Any] = {}
        for s, seg in enumerate(body):
            if seg.kind == "standard":
                # The step's own input is the batch; later standard inputs wait on host.
                kept[s] = xs if s == 0 else jax.device_put(xs, parts.place.act_host)
            xs = parts.forward(seg, host[s], xs, key)
        new: list[Any] = [None] * len(segs)
        loss, cts, new[-1] = parts.head(head, host[-1], xs, labels, key)
        for s in reversed(range(len(body))):
            seg = body[s]
            inputs = None
            if seg.kind == "standard":
                inputs = kept[s] if s == 0 else jax.device_put(kept[s], parts.place.act)
            xs, cts, new[s] = parts.backward(seg, host[s], xs, cts, key, inputs)
        return loss, tuple(new)

    return step


def predict_fn(segs: Sequence[Segment], parts: _Parts, keep: bool) -> Callable:
    """(host state, images) -> logits, and (keep) every segment's stacked input stacks."""
    *body, head = segs

    def predict(host, images):
        xs: tuple = (images,)
        stacks = []
        for s, seg in enumerate(body):
            xs, stack = parts.eval_forward(seg, host[s], xs, keep)
            stacks.append(stack)
        w, _ = parts.fetch(head, parts.row(host[-1]))
        with _precision(parts.precision):
            logits = revlayers.head_logits(head.layers[0])(w, xs)
        return (logits, tuple(stacks), xs) if keep else logits

    return predict


def reverse_fn(seg: Segment, j: int, parts: _Parts) -> Callable:
    """(host state of `seg`, outputs) -> inputs of its `j`-th coupling (no dropout)."""
    rev = revlayers.coupling_reverse(seg.layers[j])

    def reverse(bufs, ys):
        w, _ = parts.fetch(seg, parts.row(bufs, j))
        with _precision("highest"):
            return rev(w, ys)

    return reverse


def compile_step(segs: Sequence[Segment], place: Placement, num_classes: int,
                 precision: str | None, unroll: bool | None, args: tuple) -> Any:
    """The training step, compiled on example `args`; the host state is donated."""
    parts = _Parts(place, num_classes, precision, unroll)
    ins = (place.rep_host, place.act, place.act, place.rep, place.rep)
    outs = (place.rep, place.rep_host)
    jitted = jax.jit(train_step_fn(segs, parts), in_shardings=ins, out_shardings=outs,
                     donate_argnums=(0,) if place.host_kind else ())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
        return jitted.lower(*args).compile()


def compile_predict(segs: Sequence[Segment], place: Placement, precision: str | None,
                    unroll: bool | None, keep: bool, args: tuple) -> Any:
    parts = _Parts(place, 0, precision, unroll)
    return jax.jit(predict_fn(segs, parts, keep),
                   in_shardings=(place.rep_host, place.act)).lower(*args).compile()


def compile_reverse(seg: Segment, j: int, place: Placement, args: tuple) -> Any:
    parts = _Parts(place, 0, None)
    return jax.jit(reverse_fn(seg, j, parts),
                   in_shardings=(place.rep_host, place.act)).lower(*args).compile()


def temp_bytes(compiled: Any) -> int:
    """XLA's temporary bytes of a compiled program (0 where not reported)."""
    try:
        return int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # backends without memory analysis
        return 0
