"""`Candidate`: one immutable snapshot of a study row, its `Status` and `Inheritance`
record, and metric validation."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
from collections.abc import Iterator, Mapping
from typing import Any


class Status(enum.StrEnum):
    """What has happened to a candidate. A `str`, so that SQLite rows, JSON and
    comparisons with the plain names (`c.status == "done"`) all see its name."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INFEASIBLE = "infeasible"  # it can never run (e.g. out of memory)
    STOPPED = "stopped"  # not promoted from a multi-fidelity rung: its metrics are that rung's


STATUSES = tuple(Status)
FINISHED = (Status.DONE, Status.FAILED, Status.INFEASIBLE, Status.STOPPED)
_STATUS_OF = {s.value: s for s in Status}


def status_of(value: Any, source: object = "status") -> Status:
    """The `Status` named `value`; anything else is one ValueError line naming `source`."""
    status = _STATUS_OF.get(value) if isinstance(value, str) else None
    if status is None:
        raise ValueError(f"{source}: unknown status {value!r}; expected one of "
                         f"{', '.join(STATUSES)}")
    return status


_NO_EXTRA: Mapping[str, Any] = types.MappingProxyType({})


@dataclasses.dataclass(frozen=True, eq=False)
class Inheritance(Mapping[str, Any]):
    """How a candidate came to be, as its study row's `inheritance_json` holds it.

    kind: the move that made a child (`nas.mutation`); inherited / new: the child's op
    names that took their parent's weights / start fresh; init_path: the starting weights
    saved before the candidate existed; fit_pairs: (child tensor, parent tensor) pairs its
    worker fits first; fit: the fit's errors where the driver fitted the child (older
    studies); hparams: its training hyperparameters (`search.hparams`); proposal: the
    driver's proposal counter that made it; slot_refusals: how many proposals its slot had
    refused before it; enqueued: a user's architecture (`Study.enqueue`); extra: any other
    key of the stored object, written back unchanged.

    None (False for `enqueued`) is a key the row does not have, which `to_json` leaves
    out. The record also reads as that JSON object (`inh["kind"]`, falsy when empty).
    """

    kind: str | None = None
    inherited: tuple[str, ...] | None = None
    new: tuple[str, ...] | None = None
    init_path: str | None = None
    fit_pairs: tuple[tuple[str, str], ...] | None = None
    fit: Mapping[str, Any] | None = None
    hparams: Mapping[str, Any] | None = None
    proposal: int | None = None
    slot_refusals: int | None = None
    enqueued: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=lambda: _NO_EXTRA)

    @classmethod
    def from_json(cls, value: Any) -> Inheritance:
        """The record of a decoded `inheritance_json` (None: the empty one; a missing key:
        its default); anything but an object, or a key of the wrong type, is one
        ValueError line naming it."""
        if value is None:
            return EMPTY_INHERITANCE
        if isinstance(value, Inheritance):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"inheritance: expected a JSON object or null, got "
                             f"{type(value).__name__}")
        get = value.get
        return cls(
            kind=_typed(get("kind"), str, "kind"),
            inherited=_names(get("inherited"), "inherited"),
            new=_names(get("new"), "new"),
            init_path=_typed(get("init_path"), str, "init_path"),
            fit_pairs=_pairs(get("fit_pairs")),
            fit=_typed(get("fit"), Mapping, "fit"),
            hparams=_typed(get("hparams"), Mapping, "hparams"),
            proposal=_typed(get("proposal"), int, "proposal"),
            slot_refusals=_typed(get("slot_refusals"), int, "slot_refusals"),
            enqueued=bool(get("enqueued", False)),
            extra={k: v for k, v in value.items() if k not in _KEYS} or _NO_EXTRA,
        )

    def to_json(self) -> dict[str, Any] | None:
        """The JSON object stored for this record (None for the empty one)."""
        out: dict[str, Any] = dict(self.extra)
        for key in _KEYS:
            value = getattr(self, key)
            if value is None or (key == "enqueued" and not value):
                continue
            if key in ("inherited", "new"):
                value = list(value)
            elif key == "fit_pairs":
                value = [list(pair) for pair in value]
            elif key in ("fit", "hparams"):
                value = dict(value)
            out[key] = value
        return out or None

    def __getitem__(self, key: str) -> Any:
        return (self.to_json() or {})[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json() or {})

    def __len__(self) -> int:
        return len(self.to_json() or {})


_KEYS = tuple(f.name for f in dataclasses.fields(Inheritance) if f.name != "extra")
EMPTY_INHERITANCE = Inheritance()


def _typed(value: Any, kind: type, key: str) -> Any:
    if value is not None and (not isinstance(value, kind) or
                              (kind is int and isinstance(value, bool))):
        raise ValueError(f"inheritance.{key}: expected {kind.__name__}, got {value!r}")
    return value


def _names(value: Any, key: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"inheritance.{key}: expected a list of op names, got {value!r}")
    return tuple(value)


def _pairs(value: Any) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not all(
            isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(t, str) for t in p)
            for p in value):
        raise ValueError(f"inheritance.fit_pairs: expected a list of (child tensor, parent "
                         f"tensor) pairs, got {value!r}")
    return tuple((str(a), str(b)) for a, b in value)

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

    `graph_json`: the text of `nas.graph.serialize.graph_to_json`, verbatim. `spec`,
    `properties`, `blocks`: decoded JSON (the subgraph spec, mutated properties, what a zoo
    builder rebuilds it from: `nas.search.strategy.blocks`). Metric fields are None until
    it is done; `extra_metrics` holds any other reported values. Times are Unix seconds.
    """

    id: int
    parent_id: int | None
    generation: int
    status: Status
    graph_json: str = dataclasses.field(repr=False)
    fingerprint: str | None
    seed: int | None
    spec: Any
    properties: Any
    inheritance: Inheritance
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
        known = {k: getattr(self, k) for k in METRICS if getattr(self, k) is not None}
        return {**known, **self.extra_metrics}

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
    without the frozen dataclass's checks, for listings of 100,000 rows."""
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
    try:
        values[_AT["status"]] = status_of(values[_AT["status"]], "status")
        values[_AT["inheritance_json"]] = Inheritance.from_json(values[_AT["inheritance_json"]])
    except ValueError as e:
        raise ValueError(f"{source}: candidate {row[0]}: {e}") from None
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
    """(known metric columns, extras) of reported metrics: a mapping or a dataclass
    instance (`nas.train.Metrics`). `accuracy` is required; known metrics must be finite
    numbers (a NaN result is a failure, for `Study.fail`)."""
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
