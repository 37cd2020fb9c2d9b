"""`ReversibleTrainer`: trains networks of any depth with device memory independent of depth.

Why: a candidate whose parameters, optimizer state and activations do not fit in device
memory must still be trainable. The design follows Trax's memory-efficient trainer,
rebuilt on today's JAX:

* Parameters and optimizer state live in host memory (the `pinned_host` memory kind),
  packed per layer into one flat buffer (`revpack`), and the packed buffers of a run of
  identical couplings are stacked. A training step is one compiled program
  (`revprograms`): it moves each layer's row to the device when that layer runs and
  writes the updated row back, inside the program, so Python launches one program per
  step whatever the depth and reads back only the loss. (On the CPU the scans are
  unrolled: see `revprograms.default_unroll`.)
* Forward: a standard layer's inputs are kept (in host memory); a run of couplings
  `y1 = x1 + f(x2); y2 = x2 + g(y1)` is a `lax.scan` that overwrites the activation pair,
  so coupling outputs are never stored. The head (loss layer) runs forward, backward and
  its update.
* Backward, layers in reverse (a reverse scan per run of couplings): each coupling
  reconstructs its inputs from its outputs (`x2 = y2 - g(y1); x1 = y1 - f(x2)`),
  backpropagates, and updates its weights at once with its own optimizer state. This is
  exact: the gradient of a layer is taken at its pre-update weights and earlier layers
  never see later updates. A standard layer recomputes its forward from its kept inputs.
* Data parallel over a mesh's data axis (`nas.train.mesh`, the standard trainer's mesh
  when `train_and_eval` runs it): activations are sharded over the batch, the packed
  state is replicated (one host copy per device), the program is written for the global
  batch.

Copies per step between host and device memory (`step_counts()`), all inside the step's
program: each layer's packed row comes onto the device once per pass (2 per layer) and
goes back updated once (1 per layer); standard layers after the first also park their
inputs in host memory and fetch them back. Fewer is impossible with device memory flat in
depth: a layer's weights are needed twice per step with every other layer in between.
Across the program's boundary: the batch and step number in, the loss out.

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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from nas.graph.reversible import ReversibleSpec, from_graph
from nas.train import mesh as mesh_lib
from nas.train import optim, revlayers, revpack, revprograms
from nas.train.revprograms import Placement, ProgramCache, Segment


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
    unroll: unroll the scans over couplings (default: on the CPU only, see
      `revprograms.default_unroll`); the step is one program either way.
    devices / mesh: where it trains: a data-axis mesh (`nas.train.mesh.build`), or a mesh
      over these devices (default: the local devices); give one of them.
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
        unroll: bool | None = None,
        mesh: Mesh | None = None,
    ) -> None:
        if not isinstance(spec, ReversibleSpec):
            spec = from_graph(spec, constants)
        self.spec = spec
        self.layers = revlayers.make_layers(spec)
        if mesh is not None and devices is not None:
            raise ValueError("ReversibleTrainer: give devices or mesh, not both")
        if mesh is None:
            mesh = mesh_lib.build(devices=list(devices or jax.local_devices()))
        if jax.process_count() > 1:
            raise ValueError("the reversible trainer runs in one process; its mesh spans "
                             f"{jax.process_count()}")
        self.devices = list(mesh.devices.flat)
        self.n = len(self.devices)
        self.place = Placement(mesh)
        self.num_classes = int(config.num_classes)
        self.precision = precision
        self.unroll = unroll
        self.cache = cache if cache is not None else ProgramCache()
        self.step = 0
        self._static = repr((sorted(dict(sched_kw).items()), self.num_classes,
                             [d.id for d in self.devices], precision, unroll))
        self.temp_bytes: dict[str, int] = {}
        base = (self._split(params) if params is not None
                else self._init(tuple(image_shape), seed))
        frozen = set(frozen)
        self.layouts: list[revpack.Layout] = []
        packed: list[tuple[np.ndarray, ...]] = []
        for layer, w in zip(self.layers, base, strict=True):
            w = jax.tree.map(np.asarray, w)
            cfg = revlayers.layer_optimizer_config(config, layer.param_paths(w), frozen)
            layer.tx, _ = optim.make(cfg, w, sched_kw)
            layer.opt_signature = revlayers.opt_signature_of(cfg)
            opt = optim.init_state(layer.tx, w)
            layout = revpack.layout_of((w, opt))
            self.layouts.append(layout)
            packed.append(revpack.pack_host(layout, (w, opt)))
        self.segments: list[Segment] = revprograms.segments(self.layers, self.layouts)
        self.host = self._stack_to_host(packed)

    # ------------------------------------------------------------------ placement
    def _stack_to_host(self, packed: Sequence[tuple[np.ndarray, ...]]) -> list[tuple]:
        """Per segment, its layers' packed buffers stacked, in host memory."""
        out = []
        for seg in self.segments:
            rows = [packed[layer.index] for layer in seg.layers]
            stacked = tuple(np.stack(bufs) for bufs in zip(*rows, strict=True))
            out.append(tuple(jax.device_put(b, self.place.rep_host) for b in stacked))
        return out

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
        cpu = jax.local_devices(backend="cpu")[0]
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

    # ------------------------------------------------------------------ compiled programs
    def _program(self, kind: str, args: tuple, build: Any) -> Any:
        """The compiled program `kind` for this network and these argument shapes; shared
        through `cache` by every trainer of the same network and settings."""
        key = (kind, tuple(seg.key for seg in self.segments), self._static, _avals(args))
        entry = self.cache.get(key)
        if entry is None:  # memory analysis costs (tens of ms): once per compiled program
            prog = build()
            entry = (prog, revprograms.temp_bytes(prog))
            self.cache.put(key, entry)
        prog, self.temp_bytes[kind] = entry
        return prog

    def _shard(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[0] % self.n:
            raise ValueError(f"batch of {x.shape[0]} does not split over {self.n} devices")
        return x

    # ------------------------------------------------------------------ training
    def train_step(self, batch: Mapping[str, np.ndarray], rng: jax.Array) -> dict[str, float]:
        """One step on a global batch {"image", "label"}; returns the training loss."""
        args = (tuple(self.host), self._shard(batch["image"]), self._shard(batch["label"]),
                rng, np.int32(self.step))
        prog = self._program("step", args, lambda: revprograms.compile_step(
            self.segments, self.place, self.num_classes, self.precision, self.unroll, args))
        loss, host = prog(*args)
        self.host = list(host)
        self.step += 1
        return {"training_loss": float(loss)}

    def step_counts(self) -> dict[str, int]:
        """Per training step: compiled programs the trainer launches (`launches`), arrays
        passed into the program from numpy or read back (`boundary`: batch, labels, step
        number in, loss out), and packed rows or kept activations copied onto the device
        (`to_device`) and written to host memory (`to_host`) inside the program."""
        to_device = to_host = 0
        for seg in self.segments:
            n = len(seg.layers)
            if seg.kind == "head":
                to_device, to_host = to_device + 1, to_host + 1
            elif seg.kind == "coupling":
                to_device, to_host = to_device + 2 * n, to_host + n
            else:  # standard: its row twice; a later one parks its inputs and fetches them
                later = int(seg.start > 0)
                to_device, to_host = to_device + 2 + later, to_host + 1 + later
        return {"launches": 1, "boundary": 4, "to_device": to_device, "to_host": to_host}

    # ------------------------------------------------------------------ inference
    def _predict(self, images: np.ndarray, keep: bool) -> Any:
        args = (tuple(self.host), self._shard(images))
        prog = self._program(f"predict{int(keep)}", args, lambda: revprograms.compile_predict(
            self.segments, self.place, self.precision, self.unroll, keep, args))
        return prog(*args)

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Logits of a batch (divisible by the device count), in one program."""
        return np.asarray(self._predict(images, keep=False))

    def activations(self, images: np.ndarray) -> list[tuple[np.ndarray, ...]]:
        """The input stack of every layer and the head's (deterministic), for tests."""
        _, stacks, last = self._predict(images, keep=True)
        out: list[tuple[np.ndarray, ...]] = []
        for seg, stack in zip(self.segments, stacks, strict=False):
            rows = tuple(np.asarray(s) for s in stack)
            out += [tuple(r[j] for r in rows) for j in range(len(seg.layers))]
        return [*out, tuple(np.asarray(x) for x in last)]

    def _locate(self, index: int) -> tuple[int, int]:
        for s, seg in enumerate(self.segments):
            if seg.start <= index < seg.start + len(seg.layers):
                return s, index - seg.start
        raise ValueError(f"layer {index}: this network has {len(self.layers)} layers")

    def reconstruct(self, index: int, outputs: tuple[np.ndarray, ...]) -> tuple:
        """Inputs of coupling `index` recomputed from its outputs (no dropout)."""
        s, j = self._locate(index)
        seg = self.segments[s]
        if seg.kind != "coupling":
            raise ValueError(f"layer {index} ({self.layers[index].ref.prefix}) is not a "
                             f"coupling")
        args = (self.host[s], tuple(self._shard(o) for o in outputs))
        prog = self._program(f"reverse{index}", args,
                             lambda: revprograms.compile_reverse(seg, j, self.place, args))
        return tuple(np.asarray(x) for x in prog(*args))

    # ------------------------------------------------------------------ state
    def _packed(self) -> list[tuple[np.ndarray, ...]]:
        """Every layer's packed buffers as numpy, in layer order."""
        out = []
        for seg, bufs in zip(self.segments, self.host, strict=True):
            rows = [np.asarray(b) for b in bufs]
            out += [tuple(r[j] for r in rows) for j in range(len(seg.layers))]
        return out

    def _unpacked(self) -> list[tuple[Any, Any]]:
        return [revpack.unpack_host(layout, bufs)
                for layout, bufs in zip(self.layouts, self._packed(), strict=True)]

    @property
    def params(self) -> list[Any]:
        """Per-layer weights (base names) as numpy."""
        return [w for w, _ in self._unpacked()]

    @property
    def opt_state(self) -> list[Any]:
        """Per-layer optimizer states as numpy."""
        return [opt for _, opt in self._unpacked()]

    @property
    def full_params(self) -> dict[str, Any]:
        """Flat full-name params as numpy (the plain Model's `params`)."""
        out: dict[str, Any] = {}
        for layer, w in zip(self.layers, self.params, strict=True):
            out.update(layer.full_params(w))
        return out

    def state(self) -> dict[str, Any]:
        """Checkpointable state: per-layer params and optimizer state (numpy), and step."""
        layers = [{"params": w, "opt_state": opt} for w, opt in self._unpacked()]
        return {"layers": layers, "step": np.int32(self.step)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        layers = state["layers"]
        if len(layers) != len(self.layers):
            raise ValueError(f"state has {len(layers)} layers, this network {len(self.layers)}")
        packed = [revpack.pack_host(layout, (item["params"], item["opt_state"]))
                  for layout, item in zip(self.layouts, layers, strict=True)]
        self.host = self._stack_to_host(packed)
        self.step = int(np.asarray(state["step"]))

    def max_temp_bytes(self) -> int:
        """XLA's temporary bytes of the compiled training step (the largest of the
        programs compiled so far): with weights in host memory, its device working set."""
        return max(self.temp_bytes.values(), default=0)

    def layer_bytes(self) -> list[int]:
        """Bytes of each layer's parameters plus optimizer state."""
        return [layout.nbytes() for layout in self.layouts]


def _avals(tree: Any) -> tuple:
    """Shapes, dtypes and numpy-ness of call arguments (what a compiled program fixes)."""
    leaves, treedef = jax.tree.flatten(tree)
    return str(treedef), tuple((np.shape(x), np.dtype(x.dtype).str, isinstance(x, np.ndarray))
                               for x in leaves)
