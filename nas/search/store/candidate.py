"""`Candidate`: one immutable snapshot of a study row, and metric validation."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

STATUSES = ("pending", "running", "done", "failed", "infeasible", "stopped")
# stopped: a child of a multi-fidelity search not promoted from a rung (its metrics are that
# rung's); see nas.search.strategy.fidelity.
FINISHED = ("done", "failed", "infeasible", "stopped")
METRICS = (
    "accuracy",
    "loss",
    "flops",
    "params",
    "im_sec_core_train",
    "im_sec_core_infer",
    "epochs",
)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A candidate architecture and what happened to it.

    `graph_json` is the text of `nas.graph.serialize.graph_to_json` (graph + constants),
    kept verbatim. `spec`, `properties` and `inheritance` are decoded JSON values (the
    subgraph spec, mutated properties, and inherited/new parameter names; the driver adds
    the mutation's `kind` there). `blocks` is the decoded record a zoo builder rebuilds the
    architecture from (see `nas.search.strategy.blocks`), None for graphs without blocks. Metric
    fields are None until the candidate is done; `extra_metrics` holds any other reported
    values.
    Times are Unix seconds.
    """

    id: int
    parent_id: int | None
    generation: int
    status: str
    graph_json: str = dataclasses.field(repr=False)
    fingerprint: str | None
    seed: int | None
    spec: Any
    properties: Any
    inheritance: Any
    accuracy: float | None
    loss: float | None
    flops: float | None
    params: float | None
    im_sec_core_train: float | None
    im_sec_core_infer: float | None
    epochs: float | None
    extra_metrics: dict[str, Any]
    checkpoint_path: str | None
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    worker: str | None
    attempts: int
    blocks: Any = None
    rung: int = 0  # multi-fidelity: the rung it trains toward (or stopped at / finished)
    rungs: tuple[dict[str, Any], ...] = ()  # its recorded rung results, first rung first

    @property
    def metrics(self) -> dict[str, Any]:
        """All reported metrics (known ones that are set, then extras)."""
        out = {k: getattr(self, k) for k in METRICS if getattr(self, k) is not None}
        out.update(self.extra_metrics)
        return out

    @property
    def graph(self) -> Any:
        """`graph_json` decoded (the structure is `nas.graph.serialize`'s business); damaged
        JSON is a ValueError naming the candidate and the field."""
        try:
            return json.loads(self.graph_json)
        except (ValueError, TypeError, RecursionError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"candidate {self.id}: field 'graph_json' holds damaged JSON "
                             f"({detail})") from None


# Column order shared by the schema, SELECTs and `Candidate` construction.
COLUMNS = (
    "id", "parent_id", "generation", "status", "graph_json", "fingerprint", "seed",
    "spec_json", "properties_json", "inheritance_json", *METRICS, "metrics_json",
    "checkpoint_path", "error", "created_at", "started_at", "finished_at", "worker", "attempts",
    "blocks_json", "rung",
)  # fmt: skip
# Columns of the `rungs` table, as `Candidate.rungs` entries hold them.
RUNG_COLUMNS = ("candidate_id", "rung", "epochs", "steps", "accuracy", "loss", "flops",
                "params", "decision", "reason", "worker", "recorded_at")


def candidate_from_row(row: tuple, source: object = "study") -> Candidate:
    """Build a `Candidate` from a row selected with `COLUMNS`; damaged JSON in a field is a
    ValueError naming `source` (the study file), the candidate and the field."""
    r = dict(zip(COLUMNS, row, strict=True))

    def _loads(text: str | None, column: str) -> Any:
        try:
            return None if text is None else json.loads(text)
        except (ValueError, RecursionError) as e:
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"{source}: candidate {r['id']}: field {column!r} holds damaged "
                             f"JSON ({detail})") from None

    return Candidate(
        id=r["id"],
        parent_id=r["parent_id"],
        generation=r["generation"],
        status=r["status"],
        graph_json=r["graph_json"],
        fingerprint=r["fingerprint"],
        seed=r["seed"],
        spec=_loads(r["spec_json"], "spec_json"),
        properties=_loads(r["properties_json"], "properties_json"),
        inheritance=_loads(r["inheritance_json"], "inheritance_json"),
        **{k: r[k] for k in METRICS},
        extra_metrics=_loads(r["metrics_json"], "metrics_json") or {},
        checkpoint_path=r["checkpoint_path"],
        error=r["error"],
        created_at=r["created_at"],
        started_at=r["started_at"],
        finished_at=r["finished_at"],
        worker=r["worker"],
        attempts=r["attempts"],
        blocks=_loads(r["blocks_json"], "blocks_json"),
        rung=r["rung"],
    )


def dumps(value: Any, field: str) -> str | None:
    """Strict JSON (no NaN/Infinity) so every stored value reads back anywhere."""
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field}: not JSON-serializable ({e})") from e


def split_metrics(metrics: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """Validate reported metrics; return (known metric columns, extras).

    Accepts a mapping or a dataclass instance (e.g. `nas.train.Metrics`). `accuracy` is
    required; known metrics must be finite numbers (a NaN result is a failure, to be
    recorded with `Study.fail`).
    """
    if dataclasses.is_dataclass(metrics) and not isinstance(metrics, type):
        metrics = dataclasses.asdict(metrics)
    if not isinstance(metrics, Mapping):
        kind = type(metrics).__name__
        raise ValueError(f"metrics: expected a mapping or a dataclass, got {kind}")
    known: dict[str, float] = {}
    extra: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise ValueError(f"metrics: keys must be strings, got {key!r}")
        if key in METRICS:
            if value is None:
                continue
            if isinstance(value, bool):
                raise ValueError(f"metrics.{key}: expected a number, got {value!r}")
            try:
                number = float(value)
            except (TypeError, ValueError) as e:
                raise ValueError(f"metrics.{key}: expected a number, got {value!r}") from e
            if not math.isfinite(number):
                raise ValueError(f"metrics.{key}: must be finite, got {number}")
            known[key] = number
        else:
            extra[key] = value
    if "accuracy" not in known:
        raise ValueError("metrics.accuracy: required")
    dumps(extra, "metrics")  # validate now, with the field named
    return known, extra
