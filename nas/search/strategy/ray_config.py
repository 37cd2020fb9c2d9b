"""The `search.ray` section: what each Ray task asks of its node, and how data reaches it.

Why a section of its own: a cluster's nodes differ (CPUs, GPUs, TPUs, labels given as custom
resources), and a task's request decides how many candidates a node trains at once (a node
with 8 GPUs and `num_gpus` 1 trains 8). The older `search.num_cpus_per_candidate` and
`search.num_gpus_per_candidate` stay: a value of 0 here falls back on them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nas import schema

# How a task gets its dataset: "ship" puts it in Ray's object store once per study and each
# node keeps a copy in its own cache; "node" reads it where the config names it, on each
# node (a tfds dataset prepared on every node, or a disk every node mounts).
DATASET_MODES = ("ship", "node")

RAY_SCHEMA: dict[str, schema.Field] = {
    "num_cpus": schema.at_least(0, float, expected="(0: search.num_cpus_per_candidate)"),
    "num_gpus": schema.at_least(0, float, expected="(0: search.num_gpus_per_candidate)"),
    "resources": schema.Field(dict, expected="(custom resource name -> amount per task)"),
    "dataset": schema.one_of(*DATASET_MODES),
}


def ray_defaults() -> dict[str, Any]:
    return {"num_cpus": 0.0, "num_gpus": 0.0, "resources": {}, "dataset": "ship"}


@dataclass(frozen=True)
class RayConfig:
    """One Ray task's request (already resolved against the older per-candidate fields)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)
    dataset: str = "ship"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, num_cpus_per_candidate: float = 1.0,
                  num_gpus_per_candidate: float = 0.0, prefix: str = "search.ray."
                  ) -> RayConfig:
        """The section checked (ValueError naming the field under `prefix`, the section's
        path), zeros replaced by the older `search.num_*_per_candidate` values."""
        data = dict(data.to_dict() if hasattr(data, "to_dict") else (data or {}))
        schema.check(data, RAY_SCHEMA, prefix)
        values = {**ray_defaults(), **data}
        resources = dict(values["resources"].to_dict() if hasattr(values["resources"], "to_dict")
                         else values["resources"])
        for name, amount in resources.items():
            if name in ("CPU", "GPU"):
                raise ValueError(f"config field '{prefix}resources.{name}': set "
                                 f"{prefix}num_{name.lower()}s instead")
            if not isinstance(name, str) or not name or isinstance(amount, bool) \
                    or not isinstance(amount, int | float) or not math.isfinite(amount) \
                    or amount <= 0:
                raise ValueError(f"config field '{prefix}resources.{name}' must be a "
                                 f"number > 0, got {amount!r}")
        return cls(num_cpus=float(values["num_cpus"]) or float(num_cpus_per_candidate),
                   num_gpus=float(values["num_gpus"]) or float(num_gpus_per_candidate),
                   resources={str(k): float(v) for k, v in resources.items()},
                   dataset=str(values["dataset"]))

    def request(self) -> dict[str, float]:
        """Every resource one task asks for, by Ray's names (nonzero ones only)."""
        asked = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: v for k, v in asked.items() if v}
