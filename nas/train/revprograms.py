"""The compiled per-layer programs of the reversible trainer, and where their data lives.

Why: a reversible step walks the layers one by one, so its cost on an accelerator is the
number of things launched per layer, not their size. Each program here does all of one
layer's work in one launch: it unpacks the layer's packed weights and optimizer state
(`revpack`), computes, repacks the updated state and writes it to host memory, and *also*
copies the next layer's packed buffer from host memory to the device, so that transfer
overlaps this layer's compute (XLA schedules the copy asynchronously) and the next layer
finds its weights already there. Python issues one call per layer and nothing else.

Placement (`Placement`): weights and optimizer state live in host memory (the
`pinned_host` memory kind, replicated over the local devices); activations are sharded
over the devices' batch axis; programs are written for the global batch and XLA adds the
cross-device reductions, so one device or several run the same code.

Precision: couplings run at `highest` matmul precision, forward and reverse alike, so that
inputs reconstructed from outputs equal the forward ones to float rounding even where the
default f32 matmul is TF32 (GPUs); other layers use the trainer's `precision` (None: the
JAX default).
"""

from __future__ import annotations

import collections
import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nas.train import revlayers, revpack
from nas.train.revlayers import Layer
from nas.train.revpack import Layout

AXIS = "batch"


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
    """Shardings of packed layer state (replicated; device or host) and activations."""

    devices: list[jax.Device]

    def __post_init__(self) -> None:
        mesh = Mesh(np.array(self.devices), (AXIS,))
        self.host_kind = host_memory_kind(self.devices[0])
        host = {"memory_kind": self.host_kind} if self.host_kind else {}
        self.rep = NamedSharding(mesh, PartitionSpec())
        self.act = NamedSharding(mesh, PartitionSpec(AXIS))
        self.rep_host = NamedSharding(mesh, PartitionSpec(), **host)
        self.act_host = NamedSharding(mesh, PartitionSpec(AXIS), **host)


@dataclass
class Program:
    """A compiled program and what one call of it moves, counted by array: copies onto the
    device (packed buffers, kept activations, numpy inputs) and writes to host memory
    (updated packed buffers, kept activations)."""

    fn: Any
    to_device: int
    to_host: int
    temp_bytes: int


class ProgramCache:
    """A bounded LRU of compiled programs keyed by (kind, structure, layouts, shapes).

    Owned by a trainer (or passed to several, e.g. by tests and benchmarks, to share
    compilations between trainers of the same network)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple, Program] = collections.OrderedDict()

    def get(self, key: tuple) -> Program | None:
        item = self._items.get(key)
        if item is not None:
            self._items.move_to_end(key)
        return item

    def put(self, key: tuple, value: Program) -> None:
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def _to(x: Any, sharding: Any) -> Any:
    return jax.device_put(x, sharding)


def body(kind: str, layer: Layer, layout: Layout, place: Placement,
         num_classes: int) -> tuple[Callable, tuple, Any]:
    """(function, in_shardings, out_shardings) of one program kind for `layer`.

    Argument conventions: `p` the layer's packed state on the device, `h_next` the packed
    host buffers to bring to the device for the layer that runs next (`()` for none),
    `xs`/`ys` activation tuples, `cts` their cotangents, `key` the layer's dropout key.
    """
    rep, act, rep_h, act_h = place.rep, place.act, place.rep_host, place.act_host

    def weights(p):
        return revpack.unpack(layout, p)[0]

    def state(p):
        return revpack.unpack(layout, p)

    def store(w, opt):
        return _to(revpack.pack(layout, (w, opt)), rep_h)

    if kind == "fetch":
        return (lambda h: _to(h, rep)), (rep_h,), rep
    if kind in ("std_fwd", "std_fwd_keep", "rev_fwd"):
        fwd = (revlayers.coupling_forward(layer) if kind == "rev_fwd"
               else revlayers.standard_forward(layer))

        def forward(p, xs, key, h_next):
            ys = fwd(weights(p), xs, key)
            if kind == "std_fwd_keep":  # a standard layer's inputs wait in host memory
                return ys, _to(h_next, rep), _to(xs, act_h)
            return ys, _to(h_next, rep)

        outs = (act, rep, act_h) if kind == "std_fwd_keep" else (act, rep)
        return forward, (rep, act, rep, rep_h), outs
    if kind == "head":
        step = revlayers.head_step(layer, num_classes)

        def head(p, xs, labels, key, h_next):
            w, opt = state(p)
            loss, cts, w, opt = step(w, opt, xs, labels, key)
            return loss, cts, _to(h_next, rep), store(w, opt)

        return head, (rep, act, act, rep, rep_h), (rep, act, rep, rep_h)
    if kind == "rev_bwd":
        bwd = revlayers.coupling_backward(layer)

        def rev_bwd(p, ys, cts, key, h_next):
            w, opt = state(p)
            xs, cts, w, opt = bwd(w, opt, ys, cts, key)
            return xs, cts, _to(h_next, rep), store(w, opt)

        return rev_bwd, (rep, act, act, rep, rep_h), (act, act, rep, rep_h)
    if kind in ("std_bwd", "std_bwd_first"):
        bwd = revlayers.standard_backward(layer)
        first = kind == "std_bwd_first"

        def std_bwd(p, kept, cts, key, h_next):
            w, opt = state(p)
            xs = kept if first else _to(kept, act)
            cxs, w, opt = bwd(w, opt, xs, cts, key)
            if first:  # nothing below: no input cotangents, no activations
                return _to(h_next, rep), store(w, opt)
            return xs, cxs, _to(h_next, rep), store(w, opt)

        ins = (rep, act, act, rep, rep_h) if first else (rep, act_h, act, rep, rep_h)
        outs = (rep, rep_h) if first else (act, act, rep, rep_h)
        return std_bwd, ins, outs
    if kind == "eval_fwd":
        fwd = revlayers.eval_forward(layer)
        return ((lambda p, xs, h_next: (fwd(weights(p), xs), _to(h_next, rep))),
                (rep, act, rep_h), (act, rep))
    if kind == "head_logits":
        logits = revlayers.head_logits(layer)
        return (lambda p, xs: logits(weights(p), xs)), (rep, act), act
    if kind == "rev_reverse":
        rev = revlayers.coupling_reverse(layer)
        return (lambda p, ys: rev(weights(p), ys)), (rep, act), act
    raise ValueError(f"unknown program kind {kind!r}")


# Programs that consume the layer's device copy (and its activations) donate them.
_DONATE = {"std_fwd": (0,), "std_fwd_keep": (0,), "rev_fwd": (0, 1), "head": (0,),
           "rev_bwd": (0, 1, 2), "std_bwd": (0, 2), "std_bwd_first": (0,),
           "eval_fwd": (0,), "fetch": ()}


def compile_program(kind: str, layer: Layer, layout: Layout, place: Placement,
                    num_classes: int, precision: str | None, args: tuple) -> Program:
    """Lower and compile `kind` for `layer` on example `args` (concrete or abstract)."""
    fn, ins, outs = body(kind, layer, layout, place, num_classes)
    if kind in ("rev_fwd", "rev_bwd", "rev_reverse") or (
            kind == "eval_fwd" and layer.kind == "coupling"):
        precision = "highest"
    ctx = (jax.default_matmul_precision(precision) if precision
           else contextlib.nullcontext())
    donate = _DONATE.get(kind, ()) if place.host_kind else ()
    jitted = jax.jit(fn, in_shardings=ins, out_shardings=outs, donate_argnums=donate)
    with ctx, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
        compiled = jitted.lower(*args).compile()
    to_device = _count_transfers(args, ins)
    to_host = _count_host(outs, jax.eval_shape(fn, *args))
    try:
        temp = int(compiled.memory_analysis().temp_size_in_bytes)
    except Exception:  # backends without memory analysis
        temp = 0
    return Program(compiled, to_device, to_host, temp)


def _count_transfers(args: tuple, shardings: tuple) -> int:
    """Arrays an argument list moves onto the device: numpy inputs and host-kind inputs."""
    n = 0
    for arg, sharding in zip(args, shardings, strict=True):
        host = getattr(sharding, "memory_kind", None) not in (None, "device")
        for leaf in jax.tree.leaves(arg):
            n += int(host or isinstance(leaf, np.ndarray | np.generic))
    return n


def _count_host(shardings: Any, out: Any) -> int:
    """Outputs written to host memory."""
    if not isinstance(shardings, tuple):
        shardings, out = (shardings,), (out,)
    return sum(len(jax.tree.leaves(o)) for s, o in zip(shardings, out, strict=True)
               if getattr(s, "memory_kind", None) not in (None, "device"))


def keys_program(n: int, place: Placement) -> Callable:
    """(rng, step) -> one dropout key per layer, fold_in(fold_in(rng, step), layer)."""
    def keys(rng, step):
        base = jax.random.fold_in(rng, step)
        return tuple(jax.random.fold_in(base, i) for i in range(n))

    return jax.jit(keys, out_shardings=place.rep)
