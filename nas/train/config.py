"""Training configs in big_vision style, and their validation.

Why: a config is a Python file whose `get_config(arg=None)` returns an
`ml_collections.ConfigDict`, overridable from the command line with `--config.f=v`.
`base_config()` lists every field `train_and_eval` reads, with its default; a config file
starts from it and changes what it needs. `validate` rejects unknown fields and wrong types
with a ValueError naming the field, before a single step is spent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import ml_collections
import optax

from nas import schema
from nas.train import custom
from nas.train import distributed as distributed_lib
from nas.train import mesh as mesh_lib

TRAINERS = ("standard", "reversible", "auto")
DECAY_TYPES = ("cosine", "linear", "rsqrt", "stair", "constant", "exponential")


def base_config() -> ml_collections.ConfigDict:
    """Every field the trainer knows, with defaults (digits + CifarNet sized)."""
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model_name = "cnn"
    c.model = ml_collections.ConfigDict()  # extra model kwargs, free-form
    # 0: the number of classes of the data (nas.train.data.check_num_classes); a number
    # set here must agree with the data
    c.num_classes = 0
    # A user's own functions (nas.train.custom): "package.module:function", or built in
    c.loss = "softmax_xent"  # loss(logits, labels) -> scalar
    c.optimizer = ""  # optimizer(learning_rate_schedule) -> optax transform ("": optax_name)
    c.augment = ""  # augment(key, images) -> images, inside the step ("": none)

    c.input = ml_collections.ConfigDict()
    c.input.data = ml_collections.ConfigDict()
    c.input.data.name = "digits"
    c.input.data.split = "train"
    # This fraction of `split` (stratified by label, fixed examples) is never trained on;
    # eval split "holdout" evaluates on it (a search decides on it). 0: nothing held out.
    c.input.data.validation_fraction = 0.0
    # k-fold cross-validation (a search's finals): with folds = k > 1, fold `fold` of
    # `split` (stratified by label, drawn with `fold_seed`) is never trained on and eval
    # split "fold" evaluates on it. 0: off.
    c.input.data.folds = 0
    c.input.data.fold = 0
    c.input.data.fold_seed = 0
    c.input.data_dir = ""  # "" -> $NAS_DATA_DIR or ~/.cache/nas/tensorflow_datasets
    c.input.batch_size = 128  # global, over all hosts and devices
    c.input.shuffle_buffer_size = 50_000  # 0 disables shuffling; >0 is a full permutation
    c.input.image_size = 32
    c.input.channels = 3  # 3: RGB (grey images repeated); 1: grey (RGB by luminance)
    c.input.augment = True  # dataset-specific train augmentation (crop/flip)
    c.input.num_threads = 2  # grain reader threads (this host)
    c.input.prefetch = 4  # batches prepared ahead
    # A training split (preprocessed, float32) up to this many bytes is kept on the devices
    # and augmented inside the compiled step (digits, CIFAR); 0 always uses grain.
    c.input.device_data_bytes = 2**30

    c.eval = ml_collections.ConfigDict()
    c.eval.data = ml_collections.ConfigDict()
    c.eval.data.split = "test"
    c.eval.test_split = ""  # evaluated once after training, reported as test_acc ("": none)
    c.eval.batch_size = 512  # global; the last batch is padded and masked
    c.eval.every_epochs = 1

    c.total_epochs = 10.0
    # At least this many optimizer steps, whatever `total_epochs` makes of a small dataset
    # (the schedule spans them): a search's children fine-tune for `search.min_child_steps`
    # (0: total_epochs alone decides)
    c.min_steps = 0
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
    # Batch-norm statistics evaluated (and returned) are recomputed from the final weights on
    # this many training batches (precise BN; nas.train.precise_bn says why); 0: the running
    # averages of training.
    c.precise_bn_batches = 8

    c.log_training_steps = 50
    c.ckpt_steps = 500  # 0 disables periodic checkpoints (a final one is still written)
    c.keep_ckpts = 2

    _add_device_fields(c)
    return c


def _add_device_fields(c: ml_collections.ConfigDict) -> None:
    """The fields of what a run computes on: the trainer, the dtype, the devices and
    processes, the compilation cache and the memory budget."""
    c.trainer = "standard"
    c.compute_dtype = "float32"  # or "bfloat16": activations/matmuls; params, loss stay f32
    # The data-parallel mesh (nas.train.mesh): (data,), the devices the batch is split
    # over; -1: every device of every process (jax.distributed), else the first `data`.
    c.mesh_shape = (-1,)
    # One run over several processes (hosts), nas.train.distributed: `nas-train` joins it
    # with jax.distributed before touching a device. Each field left at its default is
    # read from $NAS_<FIELD> (e.g. NAS_PROCESS_ID); nothing set: one process, as always.
    c.distributed = ml_collections.ConfigDict()
    c.distributed.coordinator_address = ""  # "HOST:PORT" of process 0; "": off
    c.distributed.num_processes = 0  # every process of the run (0: unset)
    c.distributed.process_id = -1  # this process, 0 .. num_processes - 1 (-1: unset)
    c.distributed.local_device_ids = ""  # "0,1": this process's devices ("": all of them)
    # "auto": jax finds the peers itself (SLURM, Open MPI, Cloud TPU, Kubernetes), or one
    # of its methods ("slurm", "ompi", "mpi4py", "gcetpu", "gketpu"); "": off
    c.distributed.cluster_detection = ""
    # JAX's persistent compilation cache, shared by every worker of a search: "" means
    # $NAS_COMPILATION_CACHE or ~/.cache/nas/jax_compilation_cache; "none" turns it off.
    c.compilation_cache_dir = ""
    c.device_memory_budget = 0  # bytes; 0 means "the device's own limit"


def image_shape(config: Any) -> tuple[int, int, int]:
    """One example's (H, W, C) as the model sees it: `input.image_size` square, with
    `input.channels` (3 unless set). `config` is a training config or its dict."""
    inp = config["input"]
    return (int(inp["image_size"]), int(inp["image_size"]), int(inp.get("channels", 3)))


def total_steps(config: Any, steps_per_epoch: float) -> int:
    """The run's optimizer steps: `total_epochs` of `steps_per_epoch`, at least
    `min_steps` (and 1). `config` is a training config or its dict."""
    steps = int(steps_per_epoch * float(config["total_epochs"]))
    return max(1, steps, int(config.get("min_steps", 0) or 0))


def _function_field(key: str) -> schema.Field:
    built_in = custom.BUILT_IN[key]
    return schema.Field(str, check=lambda v: custom.is_function_name(v, key),
                        expected=f"({built_in!r} or 'package.module:function')")


def _is_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


# Ranges and allowed values. Types come from `base_config()`, so a new field there is
# checked for its type with no entry here; add one line here to bound it.
RULES: dict[str, schema.Field] = {
    "seed": schema.at_least(0),
    "model_name": schema.Field(str, check=bool, expected="(non-empty)"),
    "model": schema.Field(dict),  # free-form kwargs, checked by the model builder
    "optax": schema.Field(dict),  # free-form kwargs of the optax transform
    "num_classes": schema.Field(int, low=0, check=lambda n: n != 1,
                                expected="(0: the data's number of classes; else >= 2)"),
    "loss": _function_field("loss"),
    "optimizer": _function_field("optimizer"),
    "augment": _function_field("augment"),
    "input.data.name": schema.Field(str, check=bool, expected="(a tfds dataset name, "
                                                                "'folder:DIR' or 'npz:FILE')"),
    "input.data.split": schema.Field(str, check=bool, expected="(non-empty)"),
    "input.batch_size": schema.positive(),
    "input.shuffle_buffer_size": schema.at_least(0),
    "input.image_size": schema.positive(),
    "input.channels": schema.one_of(3, 1),
    "input.num_threads": schema.positive(),
    "input.prefetch": schema.at_least(0),
    "eval.data.split": schema.Field(str, check=bool, expected="(non-empty)"),
    "input.data.validation_fraction": schema.Field(float, low=0.0, high=0.5),
    "input.data.folds": schema.Field(int, check=lambda k: k == 0 or k > 1,
                                     expected="(0: off, else at least 2)"),
    "input.data.fold": schema.at_least(0),
    "input.data.fold_seed": schema.at_least(0),
    "eval.batch_size": schema.positive(),
    "eval.every_epochs": schema.positive(),
    "total_epochs": schema.positive(float),
    "min_steps": schema.at_least(0, expected="(0: total_epochs alone decides)"),
    "optax_name": schema.Field(str, check=lambda n: not n.startswith("_") and callable(
        getattr(optax, n, None)), expected="(an optax transform, e.g. 'scale_by_adam')"),
    "lr": schema.at_least(0, float),
    "wd": schema.at_least(0, float),
    "wd_pattern": schema.Field(str, check=_is_regex, expected="(a regex)"),
    "frozen_pattern": schema.Field(str, check=_is_regex, expected="(a regex)"),
    "grad_clip_norm": schema.at_least(0, float),
    "schedule": schema.Field(object),  # dict or (regex, dict) pairs: `_check_schedule`
    "ema_decay": schema.Field(float, low=0, check=lambda v: v < 1, expected="and < 1"),
    "ema_warmup_steps": schema.at_least(0),
    "precise_bn_batches": schema.at_least(0),
    "log_training_steps": schema.positive(),
    "ckpt_steps": schema.at_least(0),
    "keep_ckpts": schema.positive(),
    "trainer": schema.one_of(*TRAINERS),
    "device_memory_budget": schema.at_least(0),
    "input.device_data_bytes": schema.at_least(0),
    "compute_dtype": schema.one_of("float32", "bfloat16"),
    "mesh_shape": schema.Field(list, check=mesh_lib.valid_shape,
                               expected="of one entry (data,): -1 (every device) or >= 1"),
    **{f"distributed.{k}": v for k, v in distributed_lib.FIELDS.items()},
}


def _check_optax(name: str, kwargs: Mapping[str, Any], prefix: str) -> None:
    """`optax.<optax_name>(**optax)` must build a gradient transformation: `callable` alone
    also lets through a loss (softmax_cross_entropy) or a factory missing an argument
    (adam without learning_rate), which failed only once the data was loaded."""
    factory = getattr(optax, name)
    expected = ("must name an optax transform that takes the 'optax' arguments, e.g. "
                "'scale_by_adam'")
    try:
        tx = factory(**kwargs)
    except Exception as e:  # noqa: BLE001 - any failure is the config's
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        raise ValueError(f"config field '{prefix}optax_name' {expected}; "
                         f"optax.{name}(**{kwargs!r}) raised {type(e).__name__}: "
                         f"{reason}") from None
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"config field '{prefix}optax_name' {expected}; optax.{name} "
                         f"returned {type(tx).__name__}")


def config_schema() -> dict[str, Any]:
    """The nested schema of a training config: `base_config()`'s fields and types, with
    the ranges of `RULES`."""

    def build(section: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, default in section.items():
            path = prefix + key
            if path in RULES:
                out[key] = RULES[path]
            elif isinstance(default, Mapping):
                out[key] = build(default, path + ".")
            else:
                kind = type(default) if default is not None else object
                out[key] = schema.Field(kind, nullable=default is None)
        return out

    return build(base_config().to_dict(), "")


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _check_one_schedule(sched: Any, path: str) -> None:
    if sched is None:
        return
    if not isinstance(sched, Mapping):
        raise ValueError(f"config field {path!r} must be a dict or None, got {_kind(sched)}")
    decay = sched.get("decay_type", "cosine")
    if decay not in DECAY_TYPES:
        raise ValueError(f"config field '{path}.decay_type' must be one of {DECAY_TYPES}, "
                         f"got {decay!r}")


def _check_schedule(value: Any, prefix: str) -> None:
    """`schedule` is one dict, or a list of (regex, dict-or-None) pairs (None freezes)."""
    path = f"{prefix}schedule"
    if isinstance(value, Mapping):
        _check_one_schedule(value, path)
        return
    if not isinstance(value, list | tuple):
        raise ValueError(f"config field '{path}' must be a dict or a list of (regex, dict) "
                         f"pairs, got {_kind(value)}")
    for i, pair in enumerate(value):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and _is_regex(pair[0])):
            raise ValueError(f"config field '{path}[{i}]' must be a (regex, dict) pair")
        _check_one_schedule(pair[1], f"{path}[{i}]")


def validate(config: ml_collections.ConfigDict, prefix: str = "") -> ml_collections.ConfigDict:
    """Check `config` against `config_schema()`; return it unchanged, or raise ValueError
    naming the first bad field and what was expected. `prefix`: the config's path in a
    larger one ("train." in a search's), which every field's path starts with."""
    if not isinstance(config, Mapping | ml_collections.ConfigDict):
        raise ValueError(f"config must be a ConfigDict, got {type(config).__name__}")
    cfg = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    schema.check(cfg, config_schema(), prefix)
    if "schedule" in cfg:
        _check_schedule(cfg["schedule"], prefix)
    if "optax_name" in cfg:
        _check_optax(cfg["optax_name"], cfg.get("optax") or {}, prefix)
    return config


def with_defaults(config: ml_collections.ConfigDict, prefix: str = ""
                  ) -> ml_collections.ConfigDict:
    """Fill fields the user's config left out from `base_config()`, then validate; a bad
    field is named under `prefix` (`validate`)."""
    merged = base_config()
    user = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    schema.check(user, config_schema(), prefix)  # unknown or bad fields fail before merging
    merged.unlock()
    for key, value in user.items():
        if key in ("optax", "model", "schedule", "mesh_shape"):  # a list read from JSON
            with merged.ignore_type():  # a schedule may be a list of (regex, dict) pairs
                merged[key] = value
        elif isinstance(value, Mapping):
            merged[key].update(value)
        else:
            merged[key] = value
    return validate(merged, prefix)
