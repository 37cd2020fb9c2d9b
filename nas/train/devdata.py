"""A training set that lives on the devices, augmented inside the compiled step.

Why: on an accelerator a per-example numpy pipeline (grain) cannot keep up with a small
model's step (digits: 3.6k images/s against a 102k images/s CifarNet step on an H200). A
dataset under `input.device_data_bytes` is preprocessed once (the deterministic, eval-mode
part), put on the devices once, split along the data axis of the mesh (each device holds
its own share), and each step gathers its examples and crops / flips them with `jax.random`
inside the compiled train step.

Batches are a pure function of (seed, step): device d holds a fixed seeded share of the
examples and walks through a fresh permutation of its share every epoch (numpy, on the host:
only the `batch / devices` indices of a step travel to the device). So the same seed gives
the same batches, and a resumed run needs no iterator state.

Augmentation, as the grain path's: digits, folder: and npz: a random shift of
`data.shift_pad(image_size)` pixels (2 at 32x32);
CIFAR-10/100 pad 4 + random crop + horizontal flip; the padding value is what a zero pixel
becomes after normalization.
Other datasets (variable-size images, inception crops) stay on the grain path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nas.train import data as data_lib
from nas.train import extras as extras_lib
from nas.train import mesh as mesh_lib

# dataset -> (pad, flip, value of a zero pixel after normalization); a pad of None is
# `data.shift_pad` of the image size
_AUGMENT: dict[str, tuple[int, bool, Any]] = {
    "digits": (None, False, -1.0),
    "cifar10": (4, True, -data_lib.CIFAR_MEAN / data_lib.CIFAR_STD),
    "cifar100": (4, True, -data_lib.CIFAR_MEAN / data_lib.CIFAR_STD),
    "folder": (None, False, -1.0),  # users' own images (nas.train.userdata): as digits
    "npz": (None, False, -1.0),
}


def base_name(name: str) -> str:
    return name.split("/")[0].split(":")[0]


def supported(name: str) -> bool:
    return base_name(name) in _AUGMENT


def nbytes(source: Any, name: str, image_size: int, channels: int = 3) -> int:
    """Bytes the preprocessed (float32) split would take on the devices."""
    first = data_lib.make_preprocess(name, False, image_size, channels=channels)(source[0],
                                                                                 None)
    return len(source) * (sum(np.asarray(v).nbytes for k, v in first.items()
                              if k != "label") + 4)


@dataclass
class DeviceData:
    """This host's training examples on its devices, and how to draw each step's batch."""

    # {"image", "label", extras}: global arrays split along the mesh's data axis, device
    # d of this process holding rows [d * per_device, (d + 1) * per_device) of its share
    arrays: dict[str, jax.Array]
    per_device: int  # examples per device
    seed: int
    pad: int
    flip: bool
    fill: np.ndarray
    num_devices: int = 1  # this process's devices
    _perms: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)

    def _perm(self, epoch: int, device: int) -> np.ndarray:
        key = (epoch, device)
        if key not in self._perms:
            if len(self._perms) >= 4 * self.num_devices:  # bounded: the last epochs only
                self._perms.clear()
            self._perms[key] = np.random.default_rng([self.seed, epoch, device]).permutation(
                self.per_device)
        return self._perms[key]

    def indices(self, step: int, local_batch: int) -> np.ndarray:
        """(local_batch,) int32 positions of `step`'s examples within each device's share:
        this process's devices in order, `local_batch / devices` each."""
        n = self.num_devices
        if local_batch % n:
            raise ValueError(f"batch of {local_batch} does not split over {n} devices")
        b = local_batch // n
        pos = step * b + np.arange(b, dtype=np.int64)
        epochs, within = pos // self.per_device, pos % self.per_device
        out = np.empty((n, b), np.int32)
        for d in range(n):
            for e in np.unique(epochs):
                sel = epochs == e
                out[d, sel] = self._perm(int(e), d)[within[sel]]
        return out.reshape(-1)

    def augment_fn(self) -> Callable[[Mapping[str, jax.Array], jax.Array, jax.Array], dict]:
        """(device share, indices, key) -> batch {"image", "label", extras}, run on each
        device inside the train step."""
        pad, flip, fill = self.pad, self.flip, jnp.asarray(self.fill, jnp.float32)

        def one(image: jax.Array, key: jax.Array) -> jax.Array:
            h, w = image.shape[:2]
            kc, kf = jax.random.split(key)
            padded = jnp.pad(image - fill, ((pad, pad), (pad, pad), (0, 0))) + fill
            y, x = jax.random.randint(kc, (2,), 0, 2 * pad + 1)
            out = jax.lax.dynamic_slice(padded, (y, x, 0), (h, w, image.shape[2]))
            if flip:
                out = jnp.where(jax.random.bernoulli(kf), out[:, ::-1], out)
            return out

        def fn(share: Mapping[str, jax.Array], idx: jax.Array, key: jax.Array) -> dict:
            images = share["image"][idx]
            if pad:
                images = jax.vmap(one)(images, jax.random.split(key, idx.shape[0]))
            return {"image": images, **{k: v[idx] for k, v in share.items() if k != "image"}}

        return fn


def load(source: Any, name: str, image_size: int, seed: int,
         devices: mesh_lib.Mesh | Sequence[jax.Device], channels: int = 3,
         rows: int = 0) -> DeviceData:
    """Preprocess every example once (eval mode) and put an equal share on each of this
    process's devices of the mesh `devices` (or of a mesh over a list of devices).

    `rows`: room for this many examples in all (at least the source's), the rest zeros that
    no step draws. Why: the arrays' shapes are the compiled train step's, so runs on parts
    of one split (the search's training part, each finals fold, the retrain) given room for
    the whole split compile one step between them."""
    mesh = devices if isinstance(devices, mesh_lib.Mesh) else mesh_lib.build(
        devices=list(devices))
    pad, flip, fill = _AUGMENT[base_name(name)]
    pad = data_lib.shift_pad(image_size) if pad is None else pad
    pp = data_lib.make_preprocess(name, False, image_size, channels=channels)
    examples = [pp(source[i], None) for i in range(len(source))]
    n = mesh_lib.local_size(mesh)
    per_device = len(examples) // n
    if per_device < 1:
        raise ValueError(f"input: {len(examples)} training examples cannot be split over "
                         f"{n} devices")
    # A seeded shuffle before the split, so that no device holds only a few classes.
    order = np.random.default_rng([seed, 2**31 - 1]).permutation(len(examples))
    order = order[: per_device * n]
    images = np.stack([ex["image"] for ex in examples])[order]
    labels = np.asarray([ex["label"] for ex in examples], np.int32)[order]
    arrays = {"image": images, "label": labels}
    for key in extras_lib.keys_of(examples[0]):  # each follows its example
        arrays[key] = np.stack([ex[key] for ex in examples])[order]
    room = max(per_device, -(-int(rows) // n))
    if room > per_device:  # each device's share first, then its zeros
        arrays = {k: _with_room(v, n, per_device, room) for k, v in arrays.items()}
    return DeviceData(mesh_lib.put_sharded(arrays, mesh), per_device, seed, pad, flip,
                      np.broadcast_to(fill, (3,)), n)


def _with_room(values: np.ndarray, devices: int, per_device: int, room: int) -> np.ndarray:
    """`values` (devices * per_device rows, device d's share in a row block of its own)
    with `room` rows per device: each share followed by zero rows."""
    shares = values.reshape(devices, per_device, *values.shape[1:])
    out = np.zeros((devices, room, *values.shape[1:]), values.dtype)
    out[:, :per_device] = shares
    return out.reshape(devices * room, *values.shape[1:])
