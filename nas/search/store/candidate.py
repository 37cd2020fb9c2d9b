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


_JSON_COLUMNS = ("spec_json", "properties_json", "inheritance_json", "metrics_json",
                 "blocks_json")
_AT = {name: i for i, name in enumerate(COLUMNS)}
_JSON_AT = tuple(_AT[name] for name in _JSON_COLUMNS)
# Candidate's fields in COLUMNS order (a JSON column gives its decoded field), the last,
# `rungs`, left at its default
_FIELDS = tuple(f.name for f in dataclasses.fields(Candidate))[:-1]
assert _FIELDS == tuple({"spec_json": "spec", "properties_json": "properties",
                         "inheritance_json": "inheritance", "metrics_json": "extra_metrics",
                         "blocks_json": "blocks"}.get(c, c) for c in COLUMNS)
_NEW = object.__new__
_SET = object.__setattr__


def candidate_from_row(row: tuple, source: object = "study") -> Candidate:
    """Build a `Candidate` from a row selected with `COLUMNS`; damaged JSON in a field is a
    ValueError naming `source` (the study file), the candidate and the field. Built
    field by field without the frozen dataclass's checks: a listing of 100,000 rows."""
    if len(row) != len(COLUMNS):
        raise ValueError(f"{source}: a candidate row of {len(row)} columns, expected "
                         f"{len(COLUMNS)}")
    values = list(row)
    for i, column in zip(_JSON_AT, _JSON_COLUMNS, strict=True):
        text = values[i]
        if text is not None:
            try:
                values[i] = json.loads(text)
            except (ValueError, RecursionError) as e:
                detail = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise ValueError(f"{source}: candidate {row[0]}: field {column!r} holds "
                                 f"damaged JSON ({detail})") from None
    values[_AT["metrics_json"]] = values[_AT["metrics_json"]] or {}
    out = _NEW(Candidate)
    for name, value in zip(_FIELDS, values, strict=True):
        _SET(out, name, value)
    _SET(out, "rungs", ())
    return out


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
