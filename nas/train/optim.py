"""The optimizer built from a config, in big_vision's `make` shape, on optax.

Why: every candidate in a search must be trained by exactly the same recipe, and that recipe
must be readable from its config. The update of a parameter p with gradient g is

    -schedule(step) * (lr * tx(clip(g)) + wd * p)        (wd only where `wd_pattern` matches)

and exactly 0 for frozen parameters (matched by `frozen_pattern`, by the `frozen` argument,
or by a `None` schedule in a `[(regex, schedule), ...]` list). Frozen parameters get no
optimizer state and do not count towards the clipping norm.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import optax

Schedule = Callable[[jax.Array], jax.Array]
FROZEN = "frozen"


def param_paths(params: Any) -> Any:
    """A tree like `params` whose leaves are their "op/param" path strings."""

    def name(path, _):
        return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)

    return jax.tree_util.tree_map_with_path(name, params)


def _steps(kw: Mapping, name: str, steps_per_epoch: float) -> int:
    """`<name>_steps`, or `<name>_epochs` converted to steps; not both."""
    steps, epochs = kw.get(f"{name}_steps"), kw.get(f"{name}_epochs")
    if steps is not None and epochs is not None:
        raise ValueError(f"schedule: give {name}_steps or {name}_epochs, not both")
    if epochs is not None:
        return int(round(epochs * steps_per_epoch))
    return int(steps or 0)


def _ramps(kw: Mapping, steps_per_epoch: float) -> tuple[int, int]:
    """(warmup, cooldown) steps as the schedule asks for them; negative ones are refused."""
    ramps = _steps(kw, "warmup", steps_per_epoch), _steps(kw, "cooldown", steps_per_epoch)
    for name, steps in zip(("warmup", "cooldown"), ramps, strict=True):
        if steps < 0:
            raise ValueError(f"schedule: {name} must be >= 0 steps, got {steps}")
    return ramps


def fitted_ramps(sched: Mapping[str, Any], total_steps: int,
                 steps_per_epoch: float = 1.0) -> tuple[int, int]:
    """(warmup, cooldown) steps of `sched` in a run of `total_steps`.

    Why: a first try on a small dataset has few steps per epoch, and a warmup sized for
    the bundled digits would outlast it. When warmup + cooldown exceed the run, both are
    scaled by the same factor to take half of it (rounded down), so the decay keeps the
    other half; `shortening_note` says so. Every caller (the trainers, search workers,
    `nas-train`'s checks) gets the same numbers from the same arguments."""
    warmup, cooldown = _ramps(dict(sched), steps_per_epoch)
    if warmup + cooldown <= total_steps:
        return warmup, cooldown
    half = max(0, int(total_steps)) // 2
    return warmup * half // (warmup + cooldown), cooldown * half // (warmup + cooldown)


def shortening_note(sched: Mapping[str, Any], total_steps: int,
                    steps_per_epoch: float = 1.0) -> str | None:
    """One line saying how `fitted_ramps` shortened `sched`, or None when it fits."""
    asked = _ramps(dict(sched), steps_per_epoch)
    got = fitted_ramps(sched, total_steps, steps_per_epoch)
    if asked == got:
        return None
    return (f"warmup ({asked[0]}) + cooldown ({asked[1]}) steps exceed the run's "
            f"{total_steps} steps: shortened to warmup {got[0]} + cooldown {got[1]}, half "
            f"the run")


class RunSchedule:
    """A multiplier of `lr` per step (`make_schedule`), callable as `schedule(step)`.

    Why the lengths are data: the run's step counts (its length, warmup, cooldown, a stair's
    boundaries) are an array the optimizer state carries (`scale_by_run_schedule`), not
    constants of the compiled step. Runs of one architecture with other step counts (the
    search's training, each finals fold, the retrain taken home) then compile one program,
    and the persistent compilation cache serves it to all of them."""

    def __init__(self, multiplier: Callable[[jax.Array, jax.Array], jax.Array],
                 lengths: np.ndarray) -> None:
        self.multiplier = multiplier  # (step, lengths) -> multiplier, traceable
        self.lengths = lengths  # int32: total, warmup, cooldown, span, stair boundaries

    def __call__(self, step: Any) -> jax.Array:
        return self.multiplier(step, jnp.asarray(self.lengths))


def make_schedule(
    sched: Mapping[str, Any],
    *,
    total_steps: int,
    steps_per_epoch: float = 1.0,
    global_batch_size: int | None = None,
) -> RunSchedule:
    """A multiplier of `lr` per step: linear warmup, then decay, then linear cooldown.

    decay_type: cosine (to `min_value` at the end), linear (to `linear_end`), rsqrt
    (1/sqrt(1 + t/timescale)), stair (`boundaries` in fraction of training, `mults`),
    exponential (to `end_ratio`), constant.
    """
    kw = dict(sched)
    decay = kw.pop("decay_type", "cosine")
    if decay not in DECAYS:
        raise ValueError(f"schedule: unknown decay_type {decay!r}")
    warmup, cooldown = fitted_ramps(kw, total_steps, steps_per_epoch)
    base = float(kw.get("base", 1.0))
    if kw.get("scale_with_batchsize") and global_batch_size:
        base *= global_batch_size / 256.0
    span = max(1, total_steps - warmup)
    # Boundaries become integer steps here, in Python: comparing f32 fractions put the 0.8
    # boundary of 100 steps at step 81 on a GPU.
    bounds = [warmup + int(round(b * span)) for b in kw.get("boundaries", ())] \
        if decay == "stair" else []
    mults = (1.0, *kw.get("mults", ())) if decay == "stair" else (1.0,)
    if decay == "stair" and len(mults) != len(bounds) + 1:
        raise ValueError("schedule: stair needs len(mults) == len(boundaries)")
    lengths = np.asarray([total_steps, warmup, cooldown, span, *bounds], np.int32)
    ramped_up, ramped_down = bool(warmup), bool(cooldown)

    def multiplier(step, lengths):
        step = jnp.asarray(step, jnp.float32)
        total, up, down, span_ = (lengths[i].astype(jnp.float32) for i in range(4))
        t = jnp.clip((step - up) / span_, 0.0, 1.0)
        if decay == "cosine":
            lo = kw.get("min_value", 0.0)
            mult = lo + (1.0 - lo) * 0.5 * (1.0 + jnp.cos(jnp.pi * t))
        elif decay == "linear":
            end = kw.get("linear_end", 0.0)
            mult = 1.0 + (end - 1.0) * t
        elif decay == "rsqrt":
            timescale = kw.get("timescale", 10_000)
            mult = 1.0 / jnp.sqrt(1.0 + jnp.maximum(step - up, 0.0) / timescale)
        elif decay == "stair":
            istep = jnp.floor(step).astype(jnp.int32)
            table = jnp.asarray(mults, jnp.float32)
            mult = (table[jnp.sum(istep >= lengths[4:]).astype(jnp.int32)] if bounds
                    else table[0])
        elif decay == "exponential":
            mult = jnp.exp(t * math.log(kw.get("end_ratio", 0.012)))
        else:  # constant
            mult = jnp.ones_like(step)
        # a ramp of 0 steps is no ramp (and no division by 0): whether there is one is
        # part of the program, its length is not
        if ramped_up:
            mult = mult * jnp.minimum(1.0, (step + 1.0) / up)
        if ramped_down:
            mult = mult * jnp.minimum(1.0, (total - step) / down)
        return base * mult

    return RunSchedule(multiplier, lengths)


DECAYS = ("cosine", "linear", "rsqrt", "stair", "exponential", "constant")


class RunScheduleState(NamedTuple):
    """`scale_by_run_schedule`'s state: the updates applied so far and the run's step
    counts (`RunSchedule.lengths`)."""

    count: jax.Array
    lengths: jax.Array


def scale_by_run_schedule(schedule: RunSchedule) -> optax.GradientTransformation:
    """optax's `scale_by_schedule`, with the run's step counts in the state (see
    `RunSchedule`)."""

    def init(params: Any) -> RunScheduleState:
        del params
        return RunScheduleState(jnp.zeros([], jnp.int32), jnp.asarray(schedule.lengths))

    def update(updates: Any, state: RunScheduleState, params: Any = None) -> tuple[Any, Any]:
        del params
        mult = schedule.multiplier(state.count, state.lengths)
        updates = jax.tree.map(lambda g: jnp.asarray(mult, g.dtype) * g, updates)
        return updates, RunScheduleState(optax.safe_int32_increment(state.count),
                                         state.lengths)

    return optax.GradientTransformation(init, update)


def param_labels(
    params: Any, schedules: list[tuple[str, Mapping | None]], frozen_pattern: str,
    frozen: Iterable[str],
) -> Any:
    """Each parameter's group: the index of the first matching schedule, or FROZEN."""
    frozen_ops = set(frozen)

    def label(path: str) -> str:
        op = path.rsplit("/", 1)[0]
        if op in frozen_ops or path in frozen_ops:
            return FROZEN
        if frozen_pattern and re.search(frozen_pattern, path):
            return FROZEN
        for i, (regex, sched) in enumerate(schedules):
            if re.search(regex, path):
                return FROZEN if sched is None else str(i)
        return FROZEN  # big_vision: a parameter no schedule names is not trained

    return jax.tree.map(label, param_paths(params))


def make(
    config: Any, params: Any, sched_kw: Mapping[str, Any], frozen: Iterable[str] = (),
    optimizer: Callable[[Schedule], optax.GradientTransformation] | None = None,
) -> tuple[optax.GradientTransformation, list[Schedule]]:
    """Build (tx, schedule_fns) from `config`; `sched_kw` holds total_steps etc.

    `optimizer(learning_rate_schedule)` (a user's, `nas.train.custom`) replaces the named
    optax transform, `lr`, `wd` and clipping: it gets step -> lr * schedule(step) and
    returns the whole update (optax's sign: e.g. `optax.adamw(schedule)`). Frozen
    parameters stay frozen either way."""
    sched_cfg = config.schedule
    if isinstance(sched_cfg, Mapping) or hasattr(sched_cfg, "to_dict"):
        sched_cfg = dict(sched_cfg)
        schedules: list[tuple[str, Mapping | None]] = [(".*", sched_cfg)]
    else:
        schedules = [(str(r), None if s is None else dict(s)) for r, s in sched_cfg]
    labels = param_labels(params, schedules, config.get("frozen_pattern", ""), frozen)

    try:
        named = getattr(optax, config.optax_name)
    except AttributeError:
        raise ValueError(f"config field 'optax_name': optax has no {config.optax_name!r}") from None
    optax_kw = dict(config.get("optax", {}))
    wd_pattern = config.get("wd_pattern", r"(^|/)kernel$")
    wd_mask = jax.tree.map(lambda p: bool(re.search(wd_pattern, p)), param_paths(params))

    sched_fns, groups = [], {FROZEN: optax.set_to_zero()}
    for i, (_, sched) in enumerate(schedules):
        if sched is None:
            continue
        fn = make_schedule(sched, **sched_kw)
        sched_fns.append(fn)
        if optimizer is not None:
            groups[str(i)] = user_transform(optimizer, lambda step, fn=fn: config.lr * fn(step))
            continue
        groups[str(i)] = optax.chain(
            named(**optax_kw),
            optax.scale(config.lr),
            optax.add_decayed_weights(config.wd, mask=wd_mask) if config.wd else optax.identity(),
            scale_by_run_schedule(fn),
            optax.scale(-1.0),
        )
    used = set(jax.tree.leaves(labels))
    groups = {k: v for k, v in groups.items() if k in used or k == FROZEN}
    frozen_mask = jax.tree.map(lambda lab: lab == FROZEN, labels)
    parts = [optax.masked(optax.set_to_zero(), frozen_mask)]
    if config.grad_clip_norm and optimizer is None:
        parts.append(optax.clip_by_global_norm(config.grad_clip_norm))
    parts.append(optax.multi_transform(groups, labels))
    return optax.chain(*parts), sched_fns


def user_transform(optimizer: Callable[[Schedule], Any], schedule: Schedule
                   ) -> optax.GradientTransformation:
    """The user's `optimizer(schedule)`, checked to be an optax transformation."""
    tx = optimizer(schedule)
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise ValueError(f"optimizer: expected optimizer(learning_rate_schedule) to return an "
                         f"optax.GradientTransformation, got {type(tx).__name__}")
    return tx


def on_host(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` run eagerly on the host CPU: optimizer-state init and the logged learning
    rate are a few one-op programs each, which on an accelerator would compile and run there
    (new ones for every new parameter shape) and queue behind the train steps."""
    with jax.default_device(jax.local_devices(backend="cpu")[0]):
        return jax.block_until_ready(fn(*args))


def init_state(tx: optax.GradientTransformation, params: Any) -> Any:
    """`tx.init(params)` as numpy arrays, computed without compiling anything.

    Why: run eagerly, an optimizer's init is one tiny program per new parameter shape
    (`zeros_like`), so every search child with a new shape compiled a dozen of them. The
    init of optax's optimizers only fills arrays with constants (or copies the params):
    its jaxpr is evaluated here with numpy. An init that computes anything else runs
    eagerly on the host (`on_host`)."""
    closed, shapes = jax.make_jaxpr(tx.init, return_shape=True)(params)
    values = _fills(closed.jaxpr, jax.tree.leaves(params), closed.consts)
    if values is None:
        return jax.tree.map(np.asarray, on_host(tx.init, params))
    return jax.tree.unflatten(jax.tree.structure(shapes), values)


def _fills(jaxpr: Any, inputs: list[Any], consts: Sequence[Any] = ()
           ) -> list[np.ndarray] | None:
    """The outputs of `jaxpr` when it only broadcasts, converts or copies constants (its
    literals and `consts`, such as a schedule's lengths) and its inputs; None when it does
    anything else."""
    env: dict[Any, np.ndarray] = {}
    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = np.asarray(value)

    def read(var: Any) -> np.ndarray:
        return np.asarray(var.val) if isinstance(var, jax.extend.core.Literal) else env[var]

    for var, value in zip(jaxpr.invars, inputs, strict=True):
        env[var] = np.asarray(value)
    for eqn in jaxpr.eqns:
        name, aval = eqn.primitive.name, eqn.outvars[0].aval
        if name not in ("broadcast_in_dim", "convert_element_type", "copy", "copy_p"):
            return None
        x = read(eqn.invars[0])
        if name == "broadcast_in_dim":
            kept = eqn.params["broadcast_dimensions"]
            x = np.expand_dims(x, [d for d in range(len(aval.shape)) if d not in kept])
        env[eqn.outvars[0]] = np.array(np.broadcast_to(x, aval.shape), dtype=aval.dtype)
    return [np.array(read(v), dtype=v.aval.dtype) for v in jaxpr.outvars]


def learning_rate(sched_fns: list[Callable[[Any], Any]], step: int) -> float:
    """The first schedule's multiplier after `step` steps (0 without a schedule)."""
    return float(on_host(sched_fns[0], step - 1)) if sched_fns else 0.0


def _is_run_schedule(node: Any) -> bool:
    return isinstance(node, RunScheduleState)


def _is_schedule_state(node: Any) -> bool:
    return isinstance(node, (RunScheduleState, optax.ScaleByScheduleState))


def with_run_lengths(restored: Any, current: Any) -> Any:
    """`restored` (a checkpoint's training state, its schedule states today's or a count
    alone as written before the lengths joined them) with `current`'s schedule lengths:
    the run being resumed says how long it is, as when the lengths were constants of its
    step."""
    return jax.tree.map(
        lambda old, new: RunScheduleState(old.count, new.lengths)
        if _is_run_schedule(new) else old, restored, current, is_leaf=_is_schedule_state)


def before_run_lengths(state: Any) -> tuple[Any, Callable[[Any], Any]] | None:
    """The structure of `state` as written before the schedule's lengths were in the
    optimizer state (optax's `ScaleByScheduleState`, a count alone), and how to bring a
    state of that structure back to `state`'s, its lengths `state`'s; None when `state`
    holds no run schedule (no earlier structure to try)."""
    if not any(_is_run_schedule(n) for n in jax.tree.leaves(state, is_leaf=_is_run_schedule)):
        return None
    earlier = jax.tree.map(lambda n: optax.ScaleByScheduleState(n.count)
                           if _is_run_schedule(n) else n, state, is_leaf=_is_run_schedule)
    return earlier, lambda restored: with_run_lengths(restored, state)


def step_count(opt_state: Any) -> int:
    """The number of updates applied so far, read from the first schedule's state."""
    for node in jax.tree.leaves(opt_state, is_leaf=_is_schedule_state):
        if _is_schedule_state(node):
            return int(jnp.asarray(node.count).reshape(-1)[0])
    return 0


def ema_update(ema: Any, new: Any, step: jax.Array, decay: float, warmup_steps: int) -> Any:
    """Exponential moving average of `new` (params and batch stats) after step `step`.

    The effective decay ramps up as min(decay, (1 + d) / (10 + d)), d = step - warmup, and is
    0 (copy the new values) before `warmup_steps`, so early noisy weights are forgotten.
    """
    d = jnp.asarray(step, jnp.float32) - warmup_steps
    rate = jnp.where(d >= 0, jnp.minimum(decay, (1.0 + d) / (10.0 + d)), 0.0)
    return jax.tree.map(lambda old, x: rate * old + (1.0 - rate) * x, ema, new)
