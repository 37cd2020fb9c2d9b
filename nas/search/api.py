"""`nas.run_search`: the search from Python, on arrays in memory, with a user's own loss,
optimizer, augmentation and costs; and `run_study`, the one loop behind it and `nas-search`,
so a study made from a notebook and one made by the command line are the same study.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np

from nas import functions as fn_lib
from nas.search import inputs
from nas.search.execution.driver import StopSearch
from nas.search.result import SearchResult
from nas.search.store.study import Study
from nas.train.config import image_shape

__all__ = ["SearchInterrupted", "SearchResult", "StopSearch", "run_search", "run_study"]


class SearchInterrupted(KeyboardInterrupt):
    """`run_search` was interrupted: its message says how many candidates are done and how
    to go on. Raised from `run_search` itself, without the library's frames below it."""


def run_study(config: ml_collections.ConfigDict, workdir: str, *, budget_given: bool,
              functions: Mapping[str, Callable[..., Any]] | None = None,
              progress: bool = True, callbacks: Sequence[Callable[[Any], Any]] = (),
              on_checked: Callable[[], None] | None = None) -> tuple[Study, Path | None]:
    """Runs (or resumes) the search of `config` in `workdir`; (the study, the path of the
    report of what it holds now, written when it trained, else None).

    A resumed study keeps the budget it last ran to unless `budget_given`; a finished one
    says so in one line and trains nothing. `on_checked` runs once the settings are read
    (run_search writes the seeds' files then, so a bad field leaves nothing behind)."""
    from nas.cli_messages import check_workdir
    from nas.search.reporting.report_state import (
        finished_line,
        finished_text,
        stored_budget,
        write_if_stale,
    )
    from nas.search.strategy.settings import read_settings

    settings = read_settings(config)  # the whole config, before the workdir exists
    if on_checked is not None:
        on_checked()
    check_workdir(workdir, create=True)
    if settings.executor == "ray" and settings.ray_address:
        from nas.search.execution.ray_parts import check_reachable

        check_reachable(settings.ray_address)  # before the study is written
    before = stored_budget(workdir)
    if before is not None and not budget_given:  # a resumed study keeps its budget
        config.search.max_candidates = before
    if functions is None:  # with functions, the driver checks them against the study first
        line = finished_line(workdir, config)  # finished: no driver set-up
        if line is not None:
            print(line, flush=True)
            return Study.load(workdir), None
    from nas.search.execution.driver import Driver

    driver = Driver(config, workdir, functions, settings)
    if driver.finished():  # resumed with nothing left to do: say so in one line
        print(finished_text(workdir, driver.study, driver.search.max_candidates), flush=True)
        return driver.study, None
    driver.check_seed_weights()  # before a line is printed or the study is written
    after = driver.search.max_candidates
    if before is not None and after > before:
        print(f"extending the search in {workdir} from {before} to {after} candidates",
              flush=True)
    study = driver.run(progress=progress, callbacks=callbacks)
    return study, write_if_stale(study)


def run_search(seed: Any, data: Any, *, workdir: str | os.PathLike, max_candidates: int,
               config: Any = None, overrides: Mapping[str, Any] | None = None,
               loss: Callable[..., Any] | None = None,
               optimizer: Callable[..., Any] | None = None,
               augment: Callable[..., Any] | None = None,
               costs: Mapping[str, Callable[..., Any]] | None = None,
               callbacks: Sequence[Callable[[Any], Any]] = (),
               progress: bool = True,
               extras: Mapping[str, Any] | None = None) -> SearchResult:
    """Searches from `seed` on `data` in `workdir` until `max_candidates` (the seed
    included) are finished, then writes `workdir/report/report.html`; returns the
    `SearchResult`. Called again with the same workdir it resumes the study, or returns the
    finished result without training. docs/guide.md ("From Python") has each in full.

    seed: what `nas.from_flax` or `nas.load_candidate` returns, the path of an exported
      candidate or graph JSON, or a zoo model name ("cnn", ...); or a list of them, the
      first being "the seed" the recommendation compares with. None only with
      `overrides={"search.start_from": OTHER_WORKDIR}` (the validation front there).
    data: (x_train, y_train, x_test, y_test) numpy arrays (uint8 images (N, H, W) or
      (N, H, W, C), integer labels from 0), or a dataset name ("folder:DIR", "npz:FILE",
      a tfds name). Decisions read a validation split of x_train; x_test is only reported.
    config: a search config (ConfigDict or a config file's path); by default
      `nas.search.presets.evolution`. overrides: dotted keys to values.
    loss(logits, labels[, batch]) -> scalar, optimizer(learning_rate_schedule) -> optax
      transform, augment(key, images) -> images: run inside every candidate's train step;
      costs {name: fn(candidate) -> float}, lower is better. Each is shipped by value.
    callbacks: fn(candidate) as each finishes; raising `nas.StopSearch` stops the search
      there (resumable), as Ctrl-C does. progress: a progress bar (tqdm.auto).
    extras: {name: array}, one row per example of x_train, with data as arrays or
      "npz:FILE": each row follows its example into the loss's `batch[name]`.

    Every mistake in the arguments is one ValueError naming the argument, before anything
    is written (no workdir is created)."""
    from nas.search.execution.executors import refuse_spawned_import

    refuse_spawned_import()  # a worker importing a script without the guard
    workdir = os.fspath(workdir)
    prepared = prepare(seed, data, workdir=workdir, max_candidates=max_candidates,
                       config=config, overrides=overrides, loss=loss, optimizer=optimizer,
                       augment=augment, costs=costs, callbacks=callbacks, extras=extras)

    def checked() -> None:
        prepared.write()
        done, started = _done_count(workdir)
        if started and done < max_candidates:
            print(f"resuming: {done} done, {max_candidates - done} to go", flush=True)

    try:
        study, report = run_study(prepared.config, workdir, budget_given=True,
                                  functions=prepared.functions, progress=progress,
                                  callbacks=tuple(callbacks), on_checked=checked)
    except KeyboardInterrupt:
        done = _done_count(workdir)[0]
        raise SearchInterrupted(f"interrupted: {done} of {max_candidates} candidates done, "
                                f"the running ones went back to pending; call run_search "
                                f"again to resume") from None
    if report is not None and progress:  # as nas-search: the report of what it holds now
        print(f"report: {report}", flush=True)
    return SearchResult(study)


def _done_count(workdir: str) -> tuple[int, bool]:
    """(finished candidates, whether there is any candidate) of the study in `workdir`."""
    from nas.search.store.study import StudyNotFoundError

    try:
        study = Study.load(workdir)
    except StudyNotFoundError:
        return 0, False
    counts = study.counts()
    return study.finished_count(counts), any(counts.values())


@dataclasses.dataclass
class Prepared:
    """run_search's arguments as a config and functions; `write` puts the seeds' files in
    the workdir once everything was checked."""

    config: ml_collections.ConfigDict
    functions: dict[str, Callable[..., Any]]
    saves: list[tuple[Any, str]]  # (a loaded candidate, where the study keeps its copy)

    def write(self) -> None:
        from nas.io.candidate import save_candidate

        for candidate, path in self.saves:  # kept once: `inputs.check_same_seed` reads it
            if not os.path.isfile(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                save_candidate(candidate, path)


def prepare(seed: Any, data: Any, *, workdir: str, max_candidates: int, config: Any,
            overrides: Mapping[str, Any] | None, loss: Any, optimizer: Any, augment: Any,
            costs: Mapping[str, Any] | None, callbacks: Sequence[Any],
            extras: Mapping[str, Any] | None = None) -> Prepared:
    """Every argument checked (one ValueError line naming it) into a search config."""
    from nas.cli_messages import check_workdir
    from nas.search.strategy.settings import filled

    try:
        check_workdir(workdir, create=True)
    except ValueError as e:
        raise ValueError(str(e).replace("--workdir", "workdir", 1)) from None
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, int) or \
            max_candidates < 1:
        raise ValueError(f"max_candidates: expected an integer >= 1, got {max_candidates!r}")
    for i, callback in enumerate(callbacks):
        if not callable(callback):
            raise ValueError(f"callbacks[{i}]: expected a function, got "
                             f"{type(callback).__name__}")
    cfg = inputs.base_search_config(config)
    set_keys = inputs.apply_overrides(cfg, overrides)
    seeds = inputs.read_seeds(seed, bool(cfg.search.start_from))
    cfg.search.max_candidates = max_candidates
    functions = _functions(cfg, loss=loss, optimizer=optimizer, augment=augment, costs=costs)

    arrays = None
    if isinstance(data, tuple | list):
        arrays = inputs.read_arrays(data)
        found = arrays.num_classes
    elif isinstance(data, str) and data:
        from nas.train.data import dataset_classes

        cfg.train.input.data.name = data
        try:
            found = dataset_classes(data, cfg.train.input.data_dir or None,
                                    cfg.train.input.data.split)
        except ValueError as e:
            raise ValueError(f"data: {str(e).splitlines()[0]}") from None
    else:
        raise ValueError(f"data: expected (x_train, y_train, x_test, y_test) arrays or a "
                         f"dataset name ('folder:DIR', 'npz:FILE', a tfds name), got "
                         f"{type(data).__name__}")
    npz = isinstance(data, str) and data.startswith("npz:")  # it may carry its own extras
    if extras is not None:
        if arrays is None and not npz:
            raise ValueError(f"extras: need data given as arrays or 'npz:FILE' (where the "
                             f"extras are stored beside the images), got {data!r}")
        arrays = (arrays or inputs.read_npz_arrays(data)).with_extras(extras)

    saves = _seeds_into(cfg, seeds, workdir, set_keys)
    for candidate, path in saves:
        inputs.check_same_seed(candidate, path)
    given = int(cfg.train.num_classes)
    if given and given != found:
        raise ValueError(f"config field 'train.num_classes' is {given}, but the data has "
                         f"{found} classes (0 takes the number from the data)")
    cfg.train.num_classes = found
    shape = image_shape(cfg.train)
    for one in seeds:
        inputs.check_classes(found, one.outputs(shape), arrays)
    if cfg.search.start_from and not _done_count(workdir)[1]:  # read when it is created
        from nas.search.execution.seeds import front_parts

        front_parts(str(cfg.search.start_from), cfg.train,
                    str(filled(cfg.search).selection.recommend_cost))
    if arrays is not None:
        stored = arrays.extras
    else:
        stored = inputs.read_npz_arrays(data).extras if npz else {}
    _check_traces(functions, found, shape, stored)
    fn_lib.pack(functions)  # each can be shipped, or one line naming it
    if arrays is not None:  # checked: kept as an npz in the data cache (not the workdir)
        from nas.train.digits import default_data_dir

        root = os.path.join(cfg.train.input.data_dir or default_data_dir(), "nas_arrays")
        cfg.train.input.data.name = f"npz:{arrays.save(root)}"
    return Prepared(cfg, functions, saves)


def _functions(cfg: ml_collections.ConfigDict, **given: Any) -> dict[str, Callable[..., Any]]:
    """The user's functions by key, and their names in `cfg` (train.loss, search.costs)."""
    out = {}
    for key in ("loss", "optimizer", "augment"):
        fn = given[key]
        if fn is None:
            continue
        if not callable(fn):
            raise ValueError(f"{key}: expected a function, got {type(fn).__name__}")
        cfg.train[key] = fn_lib.name_of(fn)
        out[key] = fn
    costs = given["costs"]
    if costs is not None:
        if not isinstance(costs, Mapping):
            raise ValueError(f"costs: expected a dict of name to function, got "
                             f"{type(costs).__name__}")
        names = {}
        for name, fn in costs.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"costs: a cost's name must be an identifier, got {name!r}")
            if not callable(fn):
                raise ValueError(f"costs[{name!r}]: expected a function, got "
                                 f"{type(fn).__name__}")
            names[name] = fn_lib.name_of(fn)
            out[f"costs.{name}"] = fn
        cfg.search.costs = names
    return out


def _check_traces(functions: Mapping[str, Callable[..., Any]], num_classes: int,
                  shape: tuple[int, ...], extras: Mapping[str, Any] | None = None) -> None:
    """The loss traces to a scalar on logits and integer labels (and the batch, for a loss
    that takes it), the augmentation keeps the images' shape, the optimizer returns an
    optax transformation: else one line each."""
    import jax
    import jax.numpy as jnp

    from nas.train import extras as extras_lib

    if "loss" in functions:
        name = fn_lib.name_of(functions["loss"])
        logits = jax.ShapeDtypeStruct((2, num_classes), jnp.float32)
        labels = jax.ShapeDtypeStruct((2,), jnp.int32)
        what = f"logits {logits.shape} float32 and labels {labels.shape} int32"
        args: tuple[Any, ...] = (logits, labels)
        loss = functions["loss"]
        if extras_lib.takes_batch(loss):
            batch = {"images": jax.ShapeDtypeStruct((2, *shape), jnp.float32), "labels": labels,
                     **{k: jax.ShapeDtypeStruct((2, *np.shape(v)[1:]), np.asarray(v).dtype)
                        for k, v in (extras or {}).items()}}
            args = (logits, labels, batch)
            what += f" and a batch of {', '.join(batch)}"

            def loss(lg: Any, lb: Any, b: Any, fn: Any = functions["loss"]) -> Any:
                return extras_lib.call_loss(fn, lg, lb, b)
        out = _traced("loss", loss, *args, what=what, name=name)
        if not hasattr(out, "shape") or tuple(out.shape) != ():
            raise ValueError(f"loss: {name} returned shape "
                             f"{getattr(out, 'shape', type(out).__name__)}, expected a scalar "
                             f"(the batch's mean loss)")
    if "augment" in functions:
        images = jax.ShapeDtypeStruct((2, *shape), jnp.float32)
        key = jax.ShapeDtypeStruct((2,), jnp.uint32)
        out = _traced("augment", functions["augment"], key, images,
                      what=f"a key and images {images.shape} float32")
        if getattr(out, "shape", None) != images.shape:
            raise ValueError(f"augment: {fn_lib.name_of(functions['augment'])} returned "
                             f"shape {getattr(out, 'shape', type(out).__name__)}, expected "
                             f"the images' {images.shape}")
    if "optimizer" in functions:
        from nas.train.optim import user_transform

        try:
            user_transform(functions["optimizer"], lambda step: 1e-3)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's code: its error, named
            raise ValueError(f"optimizer: {fn_lib.name_of(functions['optimizer'])}(schedule) "
                             f"raised {type(e).__name__}: {_first(e)}") from None


def _traced(key: str, fn: Callable[..., Any], *args: Any, what: str, name: str = "") -> Any:
    import jax

    from nas.train.extras import MissingExtra

    try:
        return jax.eval_shape(fn, *args)
    except MissingExtra:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: its error, named
        raise ValueError(f"{key}: {name or fn_lib.name_of(fn)} fails to trace on {what}: "
                         f"{type(e).__name__}: {_first(e)}") from None


def _first(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else ""


def _seeds_into(cfg: ml_collections.ConfigDict, seeds: Sequence[inputs.Seed], workdir: str,
                set_keys: Sequence[str]) -> list[tuple[Any, str]]:
    """The seeds as config fields (the first as `search.seed_graph` or the zoo model, the
    others as `search.extra_seeds`; all of them there with `search.start_from`, whose
    front comes first), and the images at their input shape (size and channels) unless
    the overrides set them. Returns each loaded candidate with where the study keeps it."""
    root = os.path.abspath(workdir)
    paths = [seed.path if seed.candidate is None else
             os.path.join(root, inputs.SEED_FILE if i == 0 else f"seed{i}.zip")
             for i, seed in enumerate(seeds)]  # a zoo model's path is ""
    names = [seed.model_name or path for seed, path in zip(seeds, paths, strict=True)]
    saves = [(seed.candidate, path) for seed, path in zip(seeds, paths, strict=True)
             if seed.candidate is not None]
    first = 0
    if not cfg.search.start_from and seeds:
        first = 1
        if seeds[0].model_name:
            cfg.train.model_name = seeds[0].model_name
            cfg.search.seed_graph = ""
        else:
            cfg.search.seed_graph = names[0]
    cfg.search.extra_seeds = tuple(names[first:])
    shapes = [(i, s.input_shape) for i, s in enumerate(seeds) if s.input_shape is not None]
    for i, shape in shapes[1:]:
        if shape != shapes[0][1]:
            raise ValueError(f"seed[{i}]: input shape {shape} differs from seed"
                             f"[{shapes[0][0]}]'s {shapes[0][1]} (expected every seed to "
                             f"take the same images)")
    if not shapes and cfg.search.start_from:  # the earlier study's images, unless set
        from nas.search.execution.seeds import source_study, stored_shape

        # a resumed study reads its own (the earlier one may be gone by now)
        where = workdir if _done_count(workdir)[1] else str(cfg.search.start_from)
        with source_study(where) as study:
            theirs = stored_shape(study.config)
        shapes = [] if theirs is None else [(0, theirs)]
    if not shapes:
        return saves
    shape = shapes[0][1]
    if len(shape) != 3 or shape[0] != shape[1] or shape[2] not in (1, 3):
        raise ValueError(f"seed: input shape {shape}: nas trains square images "
                         f"with 1 or 3 channels, (H, H, 1) or (H, H, 3)")
    if "train.input.image_size" not in set_keys:
        cfg.train.input.image_size = int(shape[0])
    if "train.input.channels" not in set_keys:
        cfg.train.input.channels = int(shape[2])
    return saves
