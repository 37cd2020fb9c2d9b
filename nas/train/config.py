"""Training configs in big_vision style, and their validation.

Why: a config is a Python file whose `get_config(arg=None)` returns an
`ml_collections.ConfigDict`, overridable from the command line with `--config.f=v`.
`base_config()` lists every field `train_and_eval` reads, with its default; a config file
starts from it and changes what it needs. `validate` rejects unknown fields and wrong types
with a ValueError naming the field, before a single step is spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

TRAINERS = ("standard", "reversible", "auto")
DECAY_TYPES = ("cosine", "linear", "rsqrt", "stair", "constant", "exponential")

# Fields whose value is a free-form mapping of keyword arguments (checked by their users).
_FREE_FORM = ("optax", "model")


def base_config() -> ml_collections.ConfigDict:
    """Every field the trainer knows, with defaults (digits + CifarNet sized)."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model_name = "cnn"
    c.model = ml_collections.ConfigDict()  # extra model kwargs, free-form
    c.num_classes = 10
    c.loss = "softmax_xent"

    c.input = ml_collections.ConfigDict()
    c.input.data = ml_collections.ConfigDict()
    c.input.data.name = "digits"
    c.input.data.split = "train"
    c.input.data_dir = ""  # "" -> $NAS_DATA_DIR or ~/.cache/nas/tensorflow_datasets
    c.input.batch_size = 128  # global, over all hosts and devices
    c.input.shuffle_buffer_size = 50_000  # 0 disables shuffling; >0 is a full permutation
    c.input.image_size = 32
    c.input.augment = True  # dataset-specific train augmentation (crop/flip)
    c.input.num_threads = 2  # grain reader threads (this host)
    c.input.prefetch = 4  # batches prepared ahead

    c.eval = ml_collections.ConfigDict()
    c.eval.data = ml_collections.ConfigDict()
    c.eval.data.split = "test"
    c.eval.batch_size = 512  # global; the last batch is padded and masked
    c.eval.every_epochs = 1

    c.total_epochs = 10.0
    c.optax_name = "scale_by_adam"
    c.optax = ml_collections.ConfigDict()  # kwargs of the named optax transform
    c.lr = 1e-3
    c.wd = 0.0  # decoupled, multiplied by the schedule (not by lr), big_vision style
    c.wd_pattern = r"(^|/)kernel$"  # regex on "op/param" paths that get weight decay
    c.grad_clip_norm = 1.0  # 0 disables clipping
    c.schedule = ml_collections.ConfigDict({"decay_type": "cosine", "warmup_steps": 0})
    c.frozen_pattern = ""  # regex on "op/param" paths that get zero updates
    c.ema_decay = 0.0  # 0 disables the parameter EMA
    c.ema_warmup_steps = 0

    c.log_training_steps = 50
    c.ckpt_steps = 500  # 0 disables periodic checkpoints (a final one is still written)
    c.keep_ckpts = 2

    c.trainer = "standard"
    c.device_memory_budget = 0  # bytes; 0 means "the device's own limit"
    return c


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, list | tuple):
        return "list"
    if value is None:
        return "none"
    return type(value).__name__


def _compatible(expected: str, got: str) -> bool:
    return expected == got or (expected == "float" and got == "int")


def _check_tree(ref: Mapping, cfg: Mapping, prefix: str) -> None:
    for key in cfg:
        path = f"{prefix}{key}"
        if key not in ref:
            raise ValueError(f"config field {path!r} is unknown")
        value, want = cfg[key], ref[key]
        if key in _FREE_FORM and not prefix:
            if not isinstance(value, Mapping):
                raise ValueError(f"config field {path!r} must be a dict, got {_kind(value)}")
            continue
        if key == "schedule" and not prefix:
            _check_schedule(value)
            continue
        if isinstance(want, Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"config field {path!r} must be a dict, got {_kind(value)}")
            _check_tree(want, value, f"{path}.")
        elif not _compatible(_kind(want), _kind(value)):
            raise ValueError(
                f"config field {path!r} must be {_kind(want)}, got {_kind(value)} ({value!r})"
            )


def _check_one_schedule(sched: Any, path: str) -> None:
    if sched is None:
        return
    if not isinstance(sched, Mapping):
        raise ValueError(f"config field {path!r} must be a dict or None, got {_kind(sched)}")
    decay = sched.get("decay_type", "cosine")
    if decay not in DECAY_TYPES:
        raise ValueError(f"config field '{path}.decay_type' must be one of {DECAY_TYPES}, "
                         f"got {decay!r}")


def _check_schedule(value: Any) -> None:
    """`schedule` is one dict, or a list of (regex, dict-or-None) pairs (None freezes)."""
    if isinstance(value, Mapping):
        _check_one_schedule(value, "schedule")
        return
    if not isinstance(value, list | tuple):
        raise ValueError(f"config field 'schedule' must be a dict or a list of (regex, dict) "
                         f"pairs, got {_kind(value)}")
    for i, pair in enumerate(value):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"config field 'schedule[{i}]' must be a (regex, dict) pair")
        _check_one_schedule(pair[1], f"schedule[{i}]")


def validate(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Check `config` against `base_config()`; return it unchanged, or raise ValueError."""
    if not isinstance(config, Mapping | ml_collections.ConfigDict):
        raise ValueError(f"config must be a ConfigDict, got {type(config).__name__}")
    cfg = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    _check_tree(base_config().to_dict(), cfg, "")
    checks = [
        ("trainer", cfg.get("trainer", "standard") in TRAINERS, f"one of {TRAINERS}"),
        ("input.batch_size", cfg["input"]["batch_size"] > 0, "positive"),
        ("eval.batch_size", cfg["eval"]["batch_size"] > 0, "positive"),
        ("num_classes", cfg["num_classes"] > 1, "at least 2"),
        ("total_epochs", cfg["total_epochs"] > 0, "positive"),
        ("lr", cfg["lr"] >= 0, "non-negative"),
        ("ema_decay", 0.0 <= cfg["ema_decay"] < 1.0, "in [0, 1)"),
        ("loss", cfg["loss"] == "softmax_xent", "'softmax_xent'"),
        ("device_memory_budget", cfg["device_memory_budget"] >= 0, "non-negative"),
        ("input.image_size", cfg["input"]["image_size"] > 0, "positive"),
    ]
    for field, ok, expected in checks:
        if not ok:
            raise ValueError(f"config field {field!r} must be {expected}")
    return config


def with_defaults(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Fill fields the user's config left out from `base_config()`, then validate."""
    merged = base_config()
    user = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    _check_tree(merged.to_dict(), user, "")  # unknown fields fail before merging
    merged.unlock()
    for key, value in user.items():
        if key in ("optax", "model", "schedule"):
            with merged.ignore_type():  # a schedule may be a list of (regex, dict) pairs
                merged[key] = value
        elif isinstance(value, Mapping):
            merged[key].update(value)
        else:
            merged[key] = value
    return validate(merged)
