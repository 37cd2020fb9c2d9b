"""`ReversibleTrainer`: trains networks of any depth with device memory independent of depth.

Why: a candidate whose parameters, optimizer state and activations do not fit in device
memory must still be trainable. Following Trax's memory-efficient trainer (see
`shared/reference/reversible-trainer.md`), rebuilt on today's JAX:

* Parameters and optimizer state live in host memory (`pinned_host` memory kind of the
  first local device, or the CPU device where that kind does not exist). A layer's weights
  (and, in the backward pass, its optimizer state) are copied to the device only while that
  layer runs, and the updated ones are copied back right after.
* Forward, layer by layer: a standard layer's inputs are kept (in host memory); a
  coupling `y1 = x1 + f(x2); y2 = x2 + g(y1)` overwrites the activation pair, so its outputs
  are never stored. The head (loss layer) runs forward, backward and its update in one
  compiled call.
* Backward, layers in reverse: each coupling reconstructs its inputs from its outputs
  (`x2 = y2 - g(y1); x1 = y1 - f(x2)`), backpropagates, and updates its weights at once
  with its own optimizer state. This is exact: the gradient of a layer is taken at its
  pre-update weights and earlier layers never see later updates. A standard layer
  recomputes its forward from its kept inputs.
* Data parallel over the local devices with `pmap` semantics (see `revlayers`).

Differences from the standard trainer (`nas.train.train`), all by construction:

* Gradient clipping (`grad_clip_norm`) is per layer (each layer's global norm), not over
  the whole model: a global norm would need every gradient before any update.
* Each layer has its own optimizer state; schedules, weight decay, frozen patterns and the
  `optax` transform are the same as the full-model optimizer's (patterns are matched
  against the full "op/param" paths).
* BatchNorm is rejected (its running statistics would be updated twice); no EMA.
* Dropout keys differ from the standard trainer's (a key per layer per step), so with
  dropout the two trainers draw different masks; without dropout they agree to float
  rounding.
* Reconstruction is exact only up to float rounding, so very deep stacks in low precision
  drift slightly from the standard trainer.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from nas.graph.reversible import ReversibleSpec, from_graph
from nas.graph.serialize import graph_to_json
from nas.train import optim, revlayers, steps
from nas.train.revlayers import KINDS, Layer

Hook = Callable[[str, Layer], None]


def host_sharding(device: jax.Device) -> jax.sharding.Sharding:
    """Host memory next to `device`: its pinned_host memory kind, else the CPU device."""
    try:
        kinds = {m.kind for m in device.addressable_memories()}
    except Exception:  # platforms without memory kinds
        kinds = set()
    if "pinned_host" in kinds:
        return SingleDeviceSharding(device, memory_kind="pinned_host")
    return SingleDeviceSharding(jax.devices("cpu")[0])


def _with_kind(x: Any, kind: str) -> Any:
    """An activation (sharded over devices) moved to another memory kind of its devices."""
    return jax.device_put(x, x.sharding.with_memory_kind(kind))


def _avals(tree: Any) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((np.shape(x), np.dtype(x.dtype if hasattr(x, "dtype") else type(x)).str)
                          for x in leaves)


class ReversibleTrainer:
    """Holds a reversible network's weights and optimizer state in host memory and trains it.

    spec: a `ReversibleSpec`, or a graph marked reversible (with its `constants`).
    config: a training config (`nas.train.config`); its optimizer fields are used.
    sched_kw: `total_steps` etc. for the schedules (as for `optim.make`).
    params: optional flat full-name params (e.g. from the plain `Model.init`); default:
      initialized layer by layer from `seed`, each layer moved to host memory at once.
    """

    def __init__(
        self,
        spec: ReversibleSpec | Any,
        constants: Mapping[str, Any] | None = None,
        *,
        config: Any,
        sched_kw: Mapping[str, Any],
        image_shape: Sequence[int] = (32, 32, 3),
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
        frozen: Iterable[str] = (),
        devices: Sequence[jax.Device] | None = None,
    ) -> None:
        if not isinstance(spec, ReversibleSpec):
            spec = from_graph(spec, constants)
        self.spec = spec
        self.layers = revlayers.make_layers(spec)
        self.devices = list(devices or jax.local_devices())
        self.n = len(self.devices)
        # Weights are broadcast to every device (the compiled pmap wants them replicated).
        self.device = NamedSharding(Mesh(np.array(self.devices), (revlayers.AXIS,)),
                                    PartitionSpec())
        self.host = host_sharding(self.devices[0])
        self.num_classes = int(config.num_classes)
        self.step = 0
        self.hook: Hook | None = None
        self._static = json.dumps([dict(sched_kw), self.num_classes,
                                   [d.id for d in self.devices]], sort_keys=True, default=str)
        self.temp_bytes: dict[tuple[str, str], int] = {}
        base = (self._split(params) if params is not None
                else self._init(tuple(image_shape), seed))
        frozen = set(frozen)
        self.params: list[Any] = []
        self.opt_state: list[Any] = []
        for layer, w in zip(self.layers, base, strict=True):
            cfg = revlayers.layer_optimizer_config(config, layer.param_paths(w), frozen)
            layer.tx, _ = optim.make(cfg, w, sched_kw)
            layer.opt_signature = revlayers._signature(cfg)
            with jax.default_device(jax.devices("cpu")[0]):
                opt = layer.tx.init(jax.tree.map(np.asarray, w))  # eager: no compile
            self.params.append(self._to_host(w))
            self.opt_state.append(self._to_host(opt))

    # ------------------------------------------------------------------ placement
    def _to_host(self, tree: Any) -> Any:
        """Host copy; a replicated array contributes its first device's copy only."""
        def one(x: Any) -> Any:
            if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
                x = x.addressable_shards[0].data
            return jax.device_put(x, self.host)

        return jax.tree.map(one, tree)

    def _to_device(self, tree: Any) -> Any:
        return jax.device_put(tree, self.device)

    def _split(self, params: Mapping[str, Any]) -> list[Any]:
        """Flat full-name params -> per-layer base trees; every name must be used."""
        used: set[str] = set()
        out = []
        for layer in self.layers:
            w = layer.base_params(params)
            used |= set(layer.full_params(w))
            out.append(w)
        extra = set(params) - used
        if extra:
            raise ValueError(f"params: {sorted(extra)[:5]} belong to no layer of this network")
        return out

    def _init(self, image_shape: tuple[int, ...], seed: int) -> list[Any]:
        """Layer-by-layer init on the CPU, shapes passed forward with eval_shape; each
        layer's weights go to host memory before the next layer is initialized."""
        cpu = jax.devices("cpu")[0]
        stack: tuple = (jax.ShapeDtypeStruct((1, *image_shape), np.float32),)
        out = []
        root = jax.random.PRNGKey(seed)
        for layer in self.layers:
            keys = jax.random.split(jax.random.fold_in(root, layer.index), 2)
            # f sees x2, g sees y1 (shaped like x1); other layers see the whole stack.
            feeds = [[stack[1]], [stack[0]]] if layer.kind == "coupling" else [list(stack)]
            parts = []
            for model, feed, k in zip(layer.models, feeds, keys, strict=False):
                x = {n: np.zeros(s.shape, s.dtype)
                     for n, s in zip(model.graph.input_names, feed, strict=True)}
                with jax.default_device(cpu):
                    v = _init_fn(model)(k, x)
                parts.append(self._to_host(dict(v.get("params", {}))))
            w = {"f": parts[0], "g": parts[1]} if layer.kind == "coupling" else parts[0]
            out.append(w)
            if layer.kind != "head":
                abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), w)
                stack = jax.eval_shape(revlayers.eval_forward(layer), abstract, tuple(stack))
        return out

    # ------------------------------------------------------------------ compiled calls
    def _call(self, kind: str, layer: Layer, *args: Any) -> Any:
        """Run `kind` for `layer`, compiling once per (structure, optimizer, shapes) in
        this process: layers (and trainers) with the same structure share executables."""
        key = (kind, layer.structure, layer.opt_signature, self._static, _avals(args))
        fn = _COMPILED.get(key)
        if fn is None:
            maker, in_axes, out_axes = KINDS[kind]
            if kind.startswith("std_bwd"):
                body = maker(layer, kind == "std_bwd")
            elif kind == "head":
                body = maker(layer, self.num_classes)
            else:
                body = maker(layer)
            pm = jax.pmap(body, axis_name=revlayers.AXIS, in_axes=in_axes, out_axes=out_axes,
                          devices=self.devices)
            fn = pm.lower(*args).compile()
            _COMPILED.put(key, fn)
        tk = (kind, layer.structure)
        if tk not in self.temp_bytes:
            stats = fn.memory_analysis()
            self.temp_bytes[tk] = int(getattr(stats, "temp_size_in_bytes", 0) or 0)
        return fn(*args)

    def _keys(self, rng: jax.Array, step: int) -> np.ndarray:
        base = jax.random.fold_in(rng, step)
        return np.asarray(jax.vmap(lambda i: jax.random.fold_in(base, i))(
            np.arange(len(self.layers))))

    def _emit(self, event: str, layer: Layer) -> None:
        if self.hook is not None:
            self.hook(event, layer)

    def _store(self, layer: Layer, w: Any, opt: Any) -> None:
        self.params[layer.index] = self._to_host(w)
        self.opt_state[layer.index] = self._to_host(opt)

    # ------------------------------------------------------------------ training
    def train_step(self, batch: Mapping[str, np.ndarray], rng: jax.Array) -> dict[str, float]:
        """One step on a global batch {"image", "label"}; returns the training loss."""
        sharded = steps.shard(dict(batch), self.n)
        keys = self._keys(rng, self.step)
        stack: tuple = (sharded["image"],)
        kept: dict[int, Any] = {}
        *body, head = self.layers
        for layer in body:
            w = self._to_device(self.params[layer.index])
            if layer.kind == "standard":
                kept[layer.index] = stack if layer.index == 0 else _to_host_stack(stack)
                stack = self._call("std_fwd", layer, w, stack, keys[layer.index])
            else:
                stack = self._call("rev_fwd", layer, w, stack, keys[layer.index])
            self._emit("forward", layer)
            del w
        w, opt = self._to_device((self.params[head.index], self.opt_state[head.index]))
        loss, cts, w, opt, _ = self._call("head", head, w, opt, stack, sharded["label"],
                                          keys[head.index])
        self._emit("head", head)
        self._store(head, w, opt)
        for layer in reversed(body):
            w, opt = self._to_device((self.params[layer.index], self.opt_state[layer.index]))
            if layer.kind == "coupling":
                stack, cts, w, opt, _ = self._call("rev_bwd", layer, w, opt, stack, cts,
                                                   keys[layer.index])
            else:
                xs = kept.pop(layer.index)
                xs = xs if layer.index == 0 else _to_device_stack(xs)
                kind = "std_bwd_first" if layer.index == 0 else "std_bwd"
                cts, w, opt, _ = self._call(kind, layer, w, opt, xs, cts, keys[layer.index])
                stack = xs
            self._emit("backward", layer)
            self._store(layer, w, opt)
            del w, opt
        self.step += 1
        return {"training_loss": float(loss)}

    # ------------------------------------------------------------------ inference
    def predict(self, images: np.ndarray) -> np.ndarray:
        """Logits of a batch (divisible by the device count), layer by layer."""
        stack: tuple = (steps.shard({"x": np.asarray(images)}, self.n)["x"],)
        *body, head = self.layers
        for layer in body:
            stack = self._call("eval_fwd", layer, self._to_device(self.params[layer.index]),
                               stack)
        logits = self._call("head_logits", head, self._to_device(self.params[head.index]),
                            stack)
        return np.asarray(logits).reshape(-1, logits.shape[-1])

    def activations(self, images: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """The input stack of every layer and the head's (deterministic), for tests."""
        stack: tuple = (steps.shard({"x": np.asarray(images)}, self.n)["x"],)
        out = [tuple(np.asarray(s) for s in stack)]
        for layer in self.layers[:-1]:
            stack = self._call("eval_fwd", layer, self._to_device(self.params[layer.index]),
                               stack)
            out.append(tuple(np.asarray(s) for s in stack))
        return out

    def reconstruct(self, index: int, outputs: tuple[np.ndarray, ...]) -> tuple:
        """Inputs of coupling `index` recomputed from its outputs (no dropout)."""
        layer = self.layers[index]
        if layer.kind != "coupling":
            raise ValueError(f"layer {index} ({layer.ref.prefix}) is not a coupling")
        key = np.asarray(jax.random.PRNGKey(0))
        ys = tuple(np.asarray(o) for o in outputs)
        xs = self._call("rev_reverse", layer, self._to_device(self.params[index]), ys, key)
        return tuple(np.asarray(x) for x in xs)

    # ------------------------------------------------------------------ state
    @property
    def full_params(self) -> dict[str, Any]:
        """Flat full-name params as numpy (the plain Model's `params`)."""
        out: dict[str, Any] = {}
        for layer, w in zip(self.layers, self.params, strict=True):
            out.update(layer.full_params(jax.tree.map(np.asarray, w)))
        return out

    def state(self) -> dict[str, Any]:
        """Checkpointable state: per-layer params and optimizer state (host), and step."""
        return {"layers": [{"params": w, "opt_state": o}
                           for w, o in zip(self.params, self.opt_state, strict=True)],
                "step": np.int32(self.step)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        layers = state["layers"]
        if len(layers) != len(self.layers):
            raise ValueError(f"state has {len(layers)} layers, this network {len(self.layers)}")
        self.params = [self._to_host(item["params"]) for item in layers]
        self.opt_state = [self._to_host(item["opt_state"]) for item in layers]
        self.step = int(np.asarray(state["step"]))

    def max_temp_bytes(self) -> int:
        """The largest XLA temporary footprint of any compiled per-layer function so far:
        the step runs them one after another, so this is the step's temp peak."""
        return max(self.temp_bytes.values(), default=0)

    def layer_bytes(self) -> list[int]:
        """Bytes of each layer's parameters plus optimizer state."""
        return [_nbytes(w) + _nbytes(o) for w, o in zip(self.params, self.opt_state,
                                                          strict=True)]


class _Lru:
    """A small LRU of compiled executables, so a long search does not keep them all."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple, Any] = collections.OrderedDict()

    def get(self, key: tuple) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        return None

    def put(self, key: tuple, value: Any) -> None:
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)


_COMPILED = _Lru(256)
_INIT_FNS = _Lru(64)


def _init_fn(model: Any) -> Callable:
    """A jitted `model.init` shared by every model with the same graph and constants."""
    key = (graph_to_json(model.graph, model.constants),)
    fn = _INIT_FNS.get(key)
    if fn is None:
        fn = jax.jit(lambda r, x: model.init({"params": r, "dropout": r}, x))
        _INIT_FNS.put(key, fn)
    return fn


def _nbytes(tree: Any) -> int:
    return int(sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape))
                   for x in jax.tree.leaves(tree)))


def _to_host_stack(stack: tuple) -> tuple:
    try:
        return tuple(_with_kind(x, "pinned_host") for x in stack)
    except (ValueError, TypeError, RuntimeError):  # no host memory kind: numpy on the host
        return tuple(np.asarray(x) for x in stack)


def _to_device_stack(stack: tuple) -> tuple:
    return tuple(x if isinstance(x, np.ndarray) else _with_kind(x, "device") for x in stack)
