"""Joining a run over several processes (hosts): `jax.distributed.initialize`, once,
before anything touches a JAX device.

Why: a candidate too large for one host trains over every host's devices as one program
(`nas.train.mesh`), and JAX learns of the other processes only from
`jax.distributed.initialize`, which must run before the first device is touched. The
settings come from the training config's `distributed` section or, field by field where
the config leaves the default, from environment variables a launcher sets per process:

    NAS_COORDINATOR_ADDRESS   distributed.coordinator_address  "HOST:PORT" of process 0
    NAS_NUM_PROCESSES         distributed.num_processes        how many processes in all
    NAS_PROCESS_ID            distributed.process_id           this one, 0 .. n-1
    NAS_LOCAL_DEVICE_IDS      distributed.local_device_ids     "0,1": this process's devices
    NAS_CLUSTER_DETECTION     distributed.cluster_detection    "auto" or a jax method

They are ours (NAS_*) because jax itself reads none for the process count or id; once
initialization is on, jax still reads its own JAX_COORDINATOR_ADDRESS,
JAX_LOCAL_DEVICE_IDS and JAX_COORDINATOR_PORT for what is left unset. Cluster detection
(SLURM, Open MPI, Cloud TPU, Kubernetes: jax finds the peers by itself) is opt-in: under
SLURM with one task it would otherwise restrict a single-process run to one GPU. Nothing
set means nothing done, so a single-process run does not change.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

from nas import schema
from nas.cli_messages import first_line

ENV = {"coordinator_address": "NAS_COORDINATOR_ADDRESS",
       "num_processes": "NAS_NUM_PROCESSES",
       "process_id": "NAS_PROCESS_ID",
       "local_device_ids": "NAS_LOCAL_DEVICE_IDS",
       "cluster_detection": "NAS_CLUSTER_DETECTION"}
# jax 0.10's named detection methods (`cluster_detection_method`); "auto" lets jax try each
# environment it knows (Kubernetes has no name of its own: "auto" only).
DETECTION_METHODS = ("ompi", "slurm", "mpi4py", "gcetpu", "gketpu")
DETECTION = ("", "auto", *DETECTION_METHODS)
_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[^\s:\[\]]+):(\d{1,5})$")
_IDS = re.compile(r"^\d+(,\d+)*$")


def valid_address(value: Any) -> bool:
    """"" (off) or "HOST:PORT" with a port in 1..65535 (an IPv6 host in brackets)."""
    if not isinstance(value, str):
        return False
    if value == "":
        return True
    m = _ADDRESS.match(value)
    return bool(m) and 1 <= int(m.group(2)) <= 65535


def valid_device_ids(value: Any) -> bool:
    """"" (every local device) or comma-separated device ids, e.g. "0,1"."""
    return isinstance(value, str) and (value == "" or bool(_IDS.match(value.replace(" ", ""))))


# Each field's type and range (the training config's `RULES` take these too).
FIELDS: dict[str, schema.Field] = {
    "coordinator_address": schema.Field(str, check=valid_address, expected=(
        "('' off, or 'HOST:PORT' of process 0, port 1..65535)")),
    "num_processes": schema.at_least(0, expected="(0: unset)"),
    "process_id": schema.at_least(-1, expected="(-1: unset)"),
    "local_device_ids": schema.Field(str, check=valid_device_ids, expected=(
        "('' every local device, or device ids like '0,1')")),
    "cluster_detection": schema.one_of(*DETECTION),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """How this process joins a run: the `distributed` config section, resolved."""

    coordinator_address: str = ""
    num_processes: int = 0
    process_id: int = -1
    local_device_ids: str = ""
    cluster_detection: str = ""

    @property
    def enabled(self) -> bool:
        """Whether `jax.distributed` is to be initialized at all."""
        return bool(self.coordinator_address or self.cluster_detection)

    def device_ids(self) -> list[int] | None:
        ids = self.local_device_ids.replace(" ", "")
        return [int(i) for i in ids.split(",")] if ids else None


DEFAULTS = Settings()


def check_field(name: str, value: Any, where: str) -> Any:
    """`value` if it is a valid `distributed.<name>`, else a one-line ValueError naming
    `where` it came from (a config field, an environment variable) and what was expected."""
    if name not in FIELDS:
        raise ValueError(f"{where} is unknown; expected one of {', '.join(sorted(FIELDS))}")
    if not FIELDS[name].ok(value):
        shown = " ".join(repr(value).split())[:60]
        raise ValueError(f"{where} must be {FIELDS[name].describe()}, got {shown}")
    return value


def _from_env(name: str, environ: Mapping[str, str]) -> Any:
    var = ENV[name]
    text = environ.get(var, "").strip()
    default = getattr(DEFAULTS, name)
    if not text:
        return default
    if isinstance(default, int):
        try:
            value: Any = int(text)
        except ValueError:
            value = text
    else:
        value = text
    return check_field(name, value, f"environment variable {var} (distributed.{name})")


def settings(section: Any = None, environ: Mapping[str, str] | None = None,
             prefix: str = "") -> Settings:
    """The settings of `section` (a config's `distributed` dict, or None), each field left
    at its default taken from `environ` (default `os.environ`), checked on their own and
    together. `prefix` names where the section sits (e.g. "train." in a search config)."""
    environ = os.environ if environ is None else environ
    given = dict(section.to_dict() if hasattr(section, "to_dict") else section or {})
    where = f"config field '{prefix}distributed."
    values = {}
    for name in given:
        check_field(name, given[name], f"{where}{name}'")
    for field in dataclasses.fields(Settings):
        value = given.get(field.name, field.default)
        values[field.name] = value if value != field.default else _from_env(field.name,
                                                                             environ)
    s = Settings(**values)
    if not s.enabled:
        stray = [n for n in ("num_processes", "process_id", "local_device_ids")
                 if getattr(s, n) != getattr(DEFAULTS, n)]
        if stray:
            raise ValueError(f"{where}coordinator_address' (or ${ENV['coordinator_address']}) "
                             f"must be 'HOST:PORT' of process 0, or cluster_detection set, "
                             f"when distributed.{stray[0]} is set; got ''")
        return s
    if not s.cluster_detection:  # explicit: every field jax cannot find by itself
        if s.num_processes < 1:
            raise ValueError(f"{where}num_processes' (or ${ENV['num_processes']}) must be an "
                             f"int >= 1 with coordinator_address set, got {s.num_processes}")
        if not 0 <= s.process_id < s.num_processes:
            raise ValueError(f"{where}process_id' (or ${ENV['process_id']}) must be an int "
                             f"in 0..{s.num_processes - 1} (num_processes "
                             f"{s.num_processes}), got {s.process_id}")
    elif s.num_processes and s.process_id >= s.num_processes:
        raise ValueError(f"{where}process_id' must be < num_processes "
                         f"({s.num_processes}), got {s.process_id}")
    return s


def section_of(config: Any) -> Any:
    """The `distributed` section of a training config (None: none, or no config)."""
    return None if config is None or "distributed" not in config else config["distributed"]


def initialize(config: Any = None, environ: Mapping[str, str] | None = None,
               prefix: str = "") -> bool:
    """Initialize `jax.distributed` from `config` (a training config, or None: the
    environment alone) and the environment, unless it already is or nothing asks for it.
    Returns whether `jax.distributed` is initialized now.

    Call it before anything touches a JAX device: jax refuses afterwards (a RuntimeError
    here, naming the cause). A bad setting is a one-line ValueError naming its field."""
    s = settings(section_of(config), environ, prefix)
    import jax

    if jax.distributed.is_initialized():  # a second call, or a script that did it itself
        return True
    if not s.enabled:
        return False
    kwargs: dict[str, Any] = {
        "coordinator_address": s.coordinator_address or None,
        "num_processes": s.num_processes or None,
        "process_id": s.process_id if s.process_id >= 0 else None,
        "local_device_ids": s.device_ids(),
        # explicit settings mean exactly what they say: no detection fills in the rest
        "cluster_detection_method": {"": "deactivate", "auto": None}.get(
            s.cluster_detection, s.cluster_detection),
    }
    try:
        jax.distributed.initialize(**kwargs)
    except (ValueError, TypeError) as e:  # jax found too little (a cluster not detected)
        raise ValueError(f"jax.distributed.initialize({_shown(kwargs)}): {first_line(e)}"
                         ) from None
    except RuntimeError as e:  # a device touched first, or the coordinator not reached
        raise RuntimeError(f"jax.distributed.initialize({_shown(kwargs)}): "
                           f"{first_line(e)}") from None
    return True


def check_joined(config: Any) -> None:
    """A ValueError when `config` (a training config) asks for a run over several
    processes that this process has not joined: training would go on alone, on this
    host's devices, unnoticed. The environment is not read here: `nas-train` reads it."""
    s = settings(section_of(config), environ={})
    import jax

    if s.enabled and not jax.distributed.is_initialized():
        raise ValueError("config field 'distributed' asks for a run over several processes, "
                         "but jax.distributed is not initialized: call "
                         "nas.train.distributed.initialize(config) before anything touches "
                         "a JAX device (nas-train does)")


def _shown(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v is not None)
