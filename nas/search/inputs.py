"""`nas.run_search`'s arguments (the seed, the data, the config and its overrides), checked
before anything is written: each mistake is one `ValueError` line naming the argument."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import runpy
from collections.abc import Mapping, Sequence
from typing import Any

import ml_collections
import numpy as np

from nas.search.presets import evolution
from nas.train.recipes import small_images

ARRAY_NAMES = ("x_train", "y_train", "x_test", "y_test")
SEED_FILE = "seed.zip"  # a seed given as a loaded candidate is saved here, in the workdir


@dataclasses.dataclass(frozen=True)
class Seed:
    """What a search starts from: a loaded candidate, a file, or a zoo model name."""

    candidate: Any = None  # nas.io.candidate.ExportedCandidate, saved into the workdir
    path: str = ""  # an exported candidate or graph JSON on disk
    model_name: str = ""  # a zoo model
    input_shape: tuple[int, ...] | None = None  # one example's (H, W, C), when known
    found: Any = None  # what `path` held, as read once (an export, or a graph JSON's bytes)

    def outputs(self, shape: tuple[int, ...]) -> int | None:
        """The size of the seed's logits on images of `shape` (H, W, C); None for a zoo
        model (built for the data's)."""
        if self.model_name:
            return None
        import jax
        import jax.numpy as jnp

        from nas.graph import Model
        from nas.graph.serialize import load

        candidate = self.candidate or self.found
        if isinstance(candidate, bytes):  # a graph JSON: no variables
            (graph, constants), variables = load(candidate), None
        else:
            graph, constants = candidate.graph, candidate.constants
            variables = candidate.variables
        model = Model(graph, constants)
        x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)  # shapes only
        if variables is None:
            variables = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), x)
        out = jax.eval_shape(lambda v, x: model.apply(v, x, deterministic=True, training=False),
                             variables, x)
        return int(jax.tree.leaves(out)[0].shape[-1])


def read_seed(seed: Any) -> Seed:
    """One seed, as `run_search` takes it."""
    from nas import zoo
    from nas.io.candidate import ExportedCandidate, read_graph_or_export_for

    if isinstance(seed, ExportedCandidate):
        return Seed(candidate=seed, input_shape=_shape(seed.input_shape))
    if isinstance(seed, os.PathLike) or (isinstance(seed, str) and (
            os.path.exists(os.path.expanduser(seed)) or seed.endswith((".zip", ".json")))):
        path = os.path.abspath(os.path.expanduser(os.fspath(seed)))
        found = read_graph_or_export_for("seed", path)
        shape = None if isinstance(found, bytes) else _shape(found.input_shape)
        return Seed(path=path, input_shape=shape, found=found)
    if isinstance(seed, str) and seed in zoo.MODEL_NAMES:
        return Seed(model_name=seed)
    raise ValueError(f"seed: expected a candidate (nas.from_flax, nas.load_candidate), the "
                     f"path of an exported candidate or graph JSON, or a zoo model name "
                     f"({', '.join(zoo.MODEL_NAMES)}), got {_short(seed)}")


def read_seeds(seed: Any, start_from: bool) -> list[Seed]:
    """One seed or a list of them (mistakes naming `seed[i]`); None only with
    `search.start_from`."""
    if seed is None:
        if start_from:
            return []
        raise ValueError("seed: expected a model to start from (or a list of them), got "
                         "None (None only with search.start_from)")
    if not isinstance(seed, list | tuple):
        return [read_seed(seed)]
    if not seed and not start_from:
        raise ValueError("seed: expected at least one model to start from, got an empty "
                         "list")
    out = []
    for i, one in enumerate(seed):
        try:
            out.append(read_seed(one))
        except ValueError as e:
            raise ValueError(f"seed[{i}]{str(e).removeprefix('seed')}") from None
    return out


def check_same_seed(candidate: Any, path: str) -> None:
    """A study started from a loaded candidate keeps its copy at `path`: resuming it with
    another model is one line (its children descend from the first one)."""
    if not os.path.isfile(path):
        return
    from nas.graph.serialize import graph_to_json
    from nas.io.candidate import load_candidate

    kept = load_candidate(path)
    if graph_to_json(kept.graph, kept.constants) != graph_to_json(candidate.graph,
                                                                  candidate.constants):
        raise ValueError(f"seed: the study in {os.path.dirname(path)} started from another "
                         f"model ({path}); resume it with that one, or start a new workdir")


def _shape(shape: Any) -> tuple[int, ...] | None:
    return None if shape is None else tuple(int(d) for d in shape)


@dataclasses.dataclass(frozen=True)
class Arrays:
    """Images and labels held in memory, checked."""

    arrays: dict[str, np.ndarray]
    num_classes: int
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # per example

    def with_extras(self, extras: Any) -> Arrays:
        """These arrays and `extras` ({name: one row per training example}), checked."""
        from nas.train.extras import checked

        return dataclasses.replace(self, extras=checked(extras, len(self.arrays["x_train"])))

    def save(self, root: str) -> str:
        """The npz under `root`, named by the arrays' content, so the same arrays given
        again (a resumed search) name the same file, written once."""
        from nas.atomic import atomic_write_with

        h = hashlib.sha256()
        for name, a in [*((n, self.arrays[n]) for n in ARRAY_NAMES),
                        *sorted(self.extras.items())]:
            a = np.ascontiguousarray(a)
            h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.tobytes())
        path = os.path.join(os.path.abspath(root), f"arrays-{h.hexdigest()[:20]}.npz")
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_with(path, lambda f: np.savez(f, **self.arrays, **self.extras))
        return path


def read_arrays(data: Sequence[Any]) -> Arrays:
    """`(x_train, y_train, x_test, y_test)`, checked as an npz file's are."""
    from nas.train.userfiles import checked_arrays

    if len(data) != 4:
        raise ValueError(f"data: expected (x_train, y_train, x_test, y_test), got a "
                         f"{type(data).__name__} of {len(data)}")
    given = dict(zip(ARRAY_NAMES, (np.asarray(a) for a in data), strict=True))
    arrays, _, num_classes = checked_arrays("data", given)
    return Arrays(arrays, num_classes)


def read_npz_arrays(name: str) -> Arrays:
    """The arrays of the data named "npz:FILE" (saved again beside extras given in memory)."""
    from nas.train import userdata, userfiles

    content = userfiles.read("npz", userdata.path_of(name))
    return Arrays(dict(content.reader.arrays), content.num_classes, dict(content.extras))


def check_classes(num_classes: int, outputs: int | None, labels: Arrays | None) -> None:
    """The data's classes against the seed's outputs."""
    if outputs is None or num_classes == outputs:
        return
    if num_classes > outputs:
        where = "data: labels" if labels is not None else "data"
        raise ValueError(f"{where} go up to {num_classes - 1}, outside [0, {outputs}) of "
                         f"the seed's {outputs} outputs")
    raise ValueError(f"data: the labels name {num_classes} classes but the seed has "
                     f"{outputs} outputs (expected as many classes as outputs)")


def base_search_config(config: Any) -> ml_collections.ConfigDict:
    """`config` (a ConfigDict, a dict, or a config file's path, copied), by default
    `nas.search.presets.evolution` around the small-images recipe."""
    if config is None:
        out = evolution(small_images())
        out.train.num_classes = 0  # from the data
        return out
    if isinstance(config, str | os.PathLike):
        path = os.fspath(config)
        file, _, arg = path.partition(":")
        if not os.path.isfile(file):
            raise ValueError(f"config: {file}: No such file or directory")
        try:
            made = runpy.run_path(file)["get_config"](arg or None)
        except Exception as e:  # noqa: BLE001 - the user's file: its error, named
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"config: {file}: {first}") from None
        config = made
    if isinstance(config, Mapping):
        config = ml_collections.ConfigDict(dict(config))
    if not isinstance(config, ml_collections.ConfigDict):
        raise ValueError(f"config: expected a ConfigDict, a dict or a config file's path, "
                         f"got {_short(config)}")
    if "train" not in config or "search" not in config:
        raise ValueError("config: expected a search config with 'train' and 'search' "
                         "sections")
    return ml_collections.ConfigDict(config.to_dict())  # the caller's stays unchanged


# The one section whose keys the user picks (a bound per cost): an override may add one.
OPEN_SECTION = ("search", "constraints")


def split_open_overrides(argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """(`argv` without them, {NAME: value}) of the `--config.search.constraints.NAME=V`
    arguments, which ml_collections would refuse for a NAME its config lacks. A value is a
    float where it reads as one, else text (refused with the config)."""
    prefix = "--config." + ".".join(OPEN_SECTION) + "."
    rest, found = [], {}
    for arg in argv:
        name, sep, text = arg[len(prefix):].partition("=")
        if not arg.startswith(prefix) or not sep or not name or "." in name:
            rest.append(arg)
            continue
        try:
            found[name] = float(text)
        except ValueError:
            found[name] = text
    return rest, found


def add_open_overrides(config: ml_collections.ConfigDict, values: Mapping[str, Any]) -> None:
    """Sets `split_open_overrides`' values in `config.search.constraints`."""
    if not values or "search" not in config:
        return
    if "constraints" not in config.search:
        with config.search.unlocked():
            config.search.constraints = {}
    apply_overrides(config, {".".join((*OPEN_SECTION, k)): v for k, v in values.items()})


def apply_overrides(config: ml_collections.ConfigDict, overrides: Mapping[str, Any] | None
                    ) -> list[str]:
    """Sets each dotted key (e.g. "train.total_epochs") as `--config.KEY=V` would; returns
    the keys set."""
    if overrides is None:
        return []
    if not isinstance(overrides, Mapping):
        raise ValueError(f"overrides: expected a dict of dotted keys to values, got "
                         f"{_short(overrides)}")
    for key, value in overrides.items():
        parts = str(key).split(".")
        node = config
        for i, part in enumerate(parts[:-1]):
            if not isinstance(node, ml_collections.ConfigDict) or part not in node:
                raise ValueError(f"overrides: unknown key {key!r} (the config has no field "
                                 f"{'.'.join(parts[:i + 1])!r})")
            node = node[part]
        if parts[:-1] == list(OPEN_SECTION) and isinstance(node, ml_collections.ConfigDict):
            with node.unlocked():
                node[parts[-1]] = value  # a bound on any cost: checked with the config
            continue
        if not isinstance(node, ml_collections.ConfigDict) or parts[-1] not in node:
            raise ValueError(f"overrides: unknown key {key!r} (the config has no such field)")
        try:
            node[parts[-1]] = _as_field(node[parts[-1]], value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"overrides: {key}: {str(e).splitlines()[0]}") from None
    return [str(k) for k in overrides]


def _as_field(current: Any, value: Any) -> Any:
    """`value` for a field holding `current`: an int for a float and a list for a tuple are
    converted; other types must match."""
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(value)
    if isinstance(current, ml_collections.ConfigDict):
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a dict, got {type(value).__name__}")
        return ml_collections.ConfigDict(dict(value))
    if current is not None and not isinstance(value, type(current)) and not (
            isinstance(current, Mapping) and isinstance(value, Mapping)):
        raise TypeError(f"expected {type(current).__name__}, got {type(value).__name__} "
                        f"{value!r:.60}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
