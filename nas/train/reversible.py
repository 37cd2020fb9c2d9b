"""`ReversibleTrainer`: trains networks of any depth with device memory independent of depth.

Why: a candidate whose parameters, optimizer state and activations do not fit in device
memory must still be trainable. Following Trax's memory-efficient trainer (see
`shared/reference/reversible-trainer.md`), rebuilt on today's JAX:

* Parameters and optimizer state live in host memory (the `pinned_host` memory kind),
  packed per layer into one flat buffer (`revpack`). A layer's buffer is copied to the
  device only while that layer runs, by the program of the layer before it (so the copy
  overlaps compute), and the program that updates it writes it back (`revprograms`).
  A step launches one compiled program per layer and pass, plus a constant few.
* Forward, layer by layer: a standard layer's inputs are kept (in host memory); a
  coupling `y1 = x1 + f(x2); y2 = x2 + g(y1)` overwrites the activation pair, so its outputs
  are never stored. The head (loss layer) runs forward, backward and its update in one
  compiled call.
* Backward, layers in reverse: each coupling reconstructs its inputs from its outputs
  (`x2 = y2 - g(y1); x1 = y1 - f(x2)`), backpropagates, and updates its weights at once
  with its own optimizer state. This is exact: the gradient of a layer is taken at its
  pre-update weights and earlier layers never see later updates. A standard layer
  recomputes its forward from its kept inputs.
* Data parallel over the local devices: activations are sharded over the batch, the
  packed state is replicated (one host copy per device), the programs are written for the
  global batch (see `revprograms`).

Transfers per step (arrays, counted by `step_counts()`): each coupling's packed buffer is
copied onto the device once per pass (forward and backward: 2 per layer) and written back
to host memory once, updated, by its backward program (1 per layer); standard layers also
park their inputs in host memory. Fewer is impossible with device memory flat in depth: a
layer's weights are needed twice per step with every other layer in between.

Differences from the standard trainer (`nas.train.train`), all by construction:

* Gradient clipping (`grad_clip_norm`) is per layer (each layer's global norm), not over
  the whole model: a global norm would need every gradient before any update.
* Each layer has its own optimizer state; schedules, weight decay, frozen patterns and the
  `optax` transform are the same as the full-model optimizer's (patterns are matched
  against the full "op/param" paths).
* BatchNorm is rejected (its running statistics would be updated twice); no EMA.
* Dropout keys differ from the standard trainer's (a key per layer per step, for the
  global batch), so with dropout the two trainers draw different masks; without dropout
  they agree to float rounding.
* Couplings run at `highest` matmul precision (exact reconstruction on TF32 hardware).
* Reconstruction is exact only up to float rounding, so very deep stacks in low precision
  drift slightly from the standard trainer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from nas.graph.reversible import ReversibleSpec, from_graph
from nas.train import optim, revlayers, revpack, revprograms
from nas.train.revlayers import Layer
from nas.train.revprograms import Placement, ProgramCache

Hook = Callable[[str, Layer], None]


class ReversibleTrainer:
    """Holds a reversible network's weights and optimizer state in host memory and trains it.

    spec: a `ReversibleSpec`, or a graph marked reversible (with its `constants`).
    config: a training config (`nas.train.config`); its optimizer fields are used.
    sched_kw: `total_steps` etc. for the schedules (as for `optim.make`).
    params: optional flat full-name params (e.g. from the plain `Model.init`); default:
      initialized layer by layer from `seed`, each layer moved to host memory at once.
    precision: matmul precision of standard layers and the head (None: JAX's default);
      couplings always run at "highest".
    cache: compiled programs, shareable between trainers (default: this trainer's own).
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
        precision: str | None = None,
        cache: ProgramCache | None = None,
    ) -> None:
        if not isinstance(spec, ReversibleSpec):
            spec = from_graph(spec, constants)
        self.spec = spec
        self.layers = revlayers.make_layers(spec)
        self.devices = list(devices or jax.local_devices())
        self.n = len(self.devices)
        self.place = Placement(self.devices)
        self.num_classes = int(config.num_classes)
        self.precision = precision
        self.cache = cache if cache is not None else ProgramCache()
        self.step = 0
        self.hook: Hook | None = None
        self._static = repr((sorted(dict(sched_kw).items()), self.num_classes,
                             [d.id for d in self.devices], precision))
        self.temp_bytes: dict[tuple[str, str], int] = {}
        self.counters = {"to_device": 0, "to_host": 0, "launches": 0}
        self._last_counts = dict(self.counters)
        self._keys_fn = revprograms.keys_program(len(self.layers), self.place)
        self._programs: dict[tuple, revprograms.Program] = {}
        base = (self._split(params) if params is not None
                else self._init(tuple(image_shape), seed))
        frozen = set(frozen)
        self.layouts: list[revpack.Layout] = []
        self.host: list[tuple[jax.Array, ...]] = []
        for layer, w in zip(self.layers, base, strict=True):
            w = jax.tree.map(np.asarray, w)
            cfg = revlayers.layer_optimizer_config(config, layer.param_paths(w), frozen)
            layer.tx, _ = optim.make(cfg, w, sched_kw)
            layer.opt_signature = revlayers._signature(cfg)
            opt = optim.init_state(layer.tx, w)
            layout = revpack.layout_of((w, opt))
            self.layouts.append(layout)
            self.host.append(self._to_host(revpack.pack_host(layout, (w, opt))))

    # ------------------------------------------------------------------ placement
    def _to_host(self, bufs: tuple[np.ndarray, ...]) -> tuple[jax.Array, ...]:
        return tuple(jax.device_put(b, self.place.rep_host) for b in bufs)

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
        layer's weights are host numpy before the next layer is initialized."""
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
                with jax.default_device(cpu):  # eager: op-by-op kernels are cached
                    v = model.init({"params": k, "dropout": k}, x)
                parts.append(jax.tree.map(np.asarray, dict(v.get("params", {}))))
            w = {"f": parts[0], "g": parts[1]} if layer.kind == "coupling" else parts[0]
            out.append(w)
            if layer.kind != "head":
                abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), w)
                stack = jax.eval_shape(revlayers.eval_forward(layer), abstract, tuple(stack))
        return out

    # ------------------------------------------------------------------ compiled calls
    def _call(self, kind: str, layer: Layer, *args: Any) -> Any:
        """Run program `kind` of `layer`; compiled once per (structure, optimizer, layouts,
        shapes) and shared by every layer (and trainer, through `cache`) that matches."""
        fast = (kind, layer.index, _shapes(args[1:]))
        prog = self._programs.get(fast)
        if prog is None:
            layout = self.layouts[layer.index]
            key = (kind, layer.structure, layer.opt_signature, layout.key, self._static,
                   _avals(args[1:]))
            prog = self.cache.get(key)
            if prog is None:
                prog = revprograms.compile_program(kind, layer, layout, self.place,
                                                   self.num_classes, self.precision, args)
                self.cache.put(key, prog)
            self._programs[fast] = prog
            self.temp_bytes[(kind, layer.structure)] = prog.temp_bytes
        self.counters["launches"] += 1
        self.counters["to_device"] += prog.to_device
        self.counters["to_host"] += prog.to_host
        return prog.fn(*args)

    def _fetch(self, index: int) -> tuple[jax.Array, ...]:
        """Layer `index`'s packed state on the device (start of a pass)."""
        return self._call("fetch", self.layers[index], self.host[index])

    def _next(self, index: int) -> tuple[jax.Array, ...]:
        return self.host[index] if 0 <= index < len(self.layers) else ()

    def _keys(self, rng: jax.Array) -> tuple[jax.Array, ...]:
        self.counters["launches"] += 1
        self.counters["to_device"] += 1  # the step number
        return self._keys_fn(rng, np.int32(self.step))

    def _emit(self, event: str, layer: Layer) -> None:
        if self.hook is not None:
            self.hook(event, layer)

    def _shard(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[0] % self.n:
            raise ValueError(f"batch of {x.shape[0]} does not split over {self.n} devices")
        return x

    # ------------------------------------------------------------------ training
    def train_step(self, batch: Mapping[str, np.ndarray], rng: jax.Array) -> dict[str, float]:
        """One step on a global batch {"image", "label"}; returns the training loss."""
        start = dict(self.counters)
        images, labels = self._shard(batch["image"]), self._shard(batch["label"])
        keys = self._keys(rng)
        *body, head = self.layers
        pending: deque = deque()  # bounds how far Python runs ahead of the device
        stack: tuple = (images,)
        kept: dict[int, Any] = {}
        p = self._fetch(0)
        for layer in body:
            i = layer.index
            nxt = self.host[i + 1]
            if layer.kind == "coupling":
                stack, p = self._call("rev_fwd", layer, p, stack, keys[i], nxt)
            elif i == 0:  # its input is the batch itself, still at hand
                stack, p = self._call("std_fwd", layer, p, stack, keys[i], nxt)
            else:
                stack, p, kept[i] = self._call("std_fwd_keep", layer, p, stack, keys[i], nxt)
            _throttle(pending, stack[0])
            self._emit("forward", layer)
        loss, cts, p, self.host[head.index] = self._call(
            "head", head, p, stack, labels, keys[head.index], self._next(head.index - 1))
        self._emit("head", head)
        for layer in reversed(body):
            i = layer.index
            nxt = self._next(i - 1)
            if layer.kind == "coupling":
                stack, cts, p, self.host[i] = self._call("rev_bwd", layer, p, stack, cts,
                                                         keys[i], nxt)
            elif i == 0:
                p, self.host[i] = self._call("std_bwd_first", layer, p, (images,), cts,
                                             keys[i], nxt)
            else:
                stack, cts, p, self.host[i] = self._call("std_bwd", layer, p, kept.pop(i),
                                                         cts, keys[i], nxt)
            _throttle(pending, self.host[i][0] if self.host[i] else p)
            self._emit("backward", layer)
        self.step += 1
        out = {"training_loss": float(loss)}
        self.counters["to_host"] += 1  # the loss
        self._last_counts = {k: self.counters[k] - start[k] for k in start}
        return out

    def step_counts(self) -> dict[str, int]:
        """Arrays copied onto the device (`to_device`) and written to host memory
        (`to_host`), and compiled-program launches, of the last `train_step`: per coupling
        2, 1 and 2, plus a few per step."""
        return dict(self._last_counts)

    # ------------------------------------------------------------------ inference
    def _forward_stacks(self, images: np.ndarray, keep: bool) -> tuple[Any, list]:
        stack: tuple = (self._shard(images),)
        out = [tuple(np.asarray(s) for s in stack)] if keep else []
        *body, head = self.layers
        p = self._fetch(0)
        for layer in body:
            stack, p = self._call("eval_fwd", layer, p, stack, self.host[layer.index + 1])
            if keep:
                out.append(tuple(np.asarray(s) for s in stack))
        return self._call("head_logits", head, p, stack), out

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Logits of a batch (divisible by the device count), layer by layer."""
        logits, _ = self._forward_stacks(images, keep=False)
        return np.asarray(logits)

    def activations(self, images: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """The input stack of every layer and the head's (deterministic), for tests."""
        return self._forward_stacks(images, keep=True)[1]

    def reconstruct(self, index: int, outputs: tuple[np.ndarray, ...]) -> tuple:
        """Inputs of coupling `index` recomputed from its outputs (no dropout)."""
        layer = self.layers[index]
        if layer.kind != "coupling":
            raise ValueError(f"layer {index} ({layer.ref.prefix}) is not a coupling")
        ys = tuple(np.asarray(o) for o in outputs)
        xs = self._call("rev_reverse", layer, self._fetch(index), ys)
        return tuple(np.asarray(x) for x in xs)

    # ------------------------------------------------------------------ state
    def _unpacked(self, index: int) -> tuple[Any, Any]:
        return revpack.unpack_host(self.layouts[index], self.host[index])

    @property
    def params(self) -> list[Any]:
        """Per-layer weights (base names) as numpy."""
        return [self._unpacked(i)[0] for i in range(len(self.layers))]

    @property
    def opt_state(self) -> list[Any]:
        """Per-layer optimizer states as numpy."""
        return [self._unpacked(i)[1] for i in range(len(self.layers))]

    @property
    def full_params(self) -> dict[str, Any]:
        """Flat full-name params as numpy (the plain Model's `params`)."""
        out: dict[str, Any] = {}
        for layer, w in zip(self.layers, self.params, strict=True):
            out.update(layer.full_params(w))
        return out

    def state(self) -> dict[str, Any]:
        """Checkpointable state: per-layer params and optimizer state (numpy), and step."""
        layers = []
        for i in range(len(self.layers)):
            w, opt = self._unpacked(i)
            layers.append({"params": w, "opt_state": opt})
        return {"layers": layers, "step": np.int32(self.step)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        layers = state["layers"]
        if len(layers) != len(self.layers):
            raise ValueError(f"state has {len(layers)} layers, this network {len(self.layers)}")
        host = []
        for layout, item in zip(self.layouts, layers, strict=True):
            tree = (item["params"], item["opt_state"])
            host.append(self._to_host(revpack.pack_host(layout, tree)))
        self.host = host
        self.step = int(np.asarray(state["step"]))

    def max_temp_bytes(self) -> int:
        """The largest XLA temporary footprint of any compiled per-layer function so far:
        the step runs them one after another, so this is the step's temp peak."""
        return max(self.temp_bytes.values(), default=0)

    def layer_bytes(self) -> list[int]:
        """Bytes of each layer's parameters plus optimizer state."""
        return [layout.nbytes() for layout in self.layouts]


def _throttle(pending: deque, x: Any, depth: int = 2) -> None:
    """Wait for the output of the layer `depth` calls back, so that at most `depth`
    layers are queued on the device (their written-back buffers would all be allocated).

    An output already donated to a later program needs no wait: its memory is reused."""
    pending.append(x)
    if len(pending) > depth:
        old = pending.popleft()
        if not old.is_deleted():
            old.block_until_ready()


def _shapes(x: Any) -> tuple:
    return tuple((np.shape(a), isinstance(a, np.ndarray)) for a in jax.tree.leaves(x))


def _avals(tree: Any) -> tuple:
    """Shapes, dtypes and numpy-ness (a numpy input is a transfer) of call arguments."""
    leaves, treedef = jax.tree.flatten(tree)
    return str(treedef), tuple((np.shape(x), np.dtype(x.dtype).str, isinstance(x, np.ndarray))
                               for x in leaves)
