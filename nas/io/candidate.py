"""The exported-candidate file: one archive with the graph, its weights, its training settings
and its measured metrics, readable by anyone who has `nas` (training, the search, users).

Why here: `nas-search export` writes it and `nas-train --graph` reads it; training must not
import the search, and the graph package imports no other, so the format lives in `nas.io`.

Format (version 2): a zip archive holding `candidate.json` (format, version, the serialized
graph, `input_shape`, `train_config`, `metrics`, `info` about where the candidate came from,
and the `weights` manifest) and one `.npy` member per array (`nas.io.arrays`). Nothing in it
is pickled or executed. Version 1 files (JSON naming an orbax checkpoint inside the study's
workdir) are still read; their weights load only while that checkpoint exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas.atomic import atomic_write_with
from nas.io import arrays

FORMAT = "nas-candidate"
VERSION = 2
MEMBER = "candidate.json"
MAX_JSON_BYTES = 256 * 2**20  # as nas.graph.serialize.MAX_BYTES: far above any real graph


@dataclasses.dataclass(frozen=True)
class ExportedCandidate:
    """A loaded candidate: call it on a batch, or use `model.apply(variables, batch)`.

    `variables` is {"params", "batch_stats"?} of numpy arrays, None when the candidate was
    exported without trained weights (e.g. it failed). `input_shape` is one example's shape
    (without the batch axis); `train_config` the training settings it was trained with (a
    `nas.train` config as a dict); both are None for version 1 files.
    """

    path: str
    graph: Any
    constants: dict[str, Any]
    variables: dict[str, Any] | None
    input_shape: tuple[int, ...] | None = None
    train_config: dict[str, Any] | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    version: int = VERSION

    @property
    def model(self) -> Any:
        """The flax module (`nas.graph.Model`) that interprets the graph."""
        from nas.graph import Model

        return Model(self.graph, self.constants)

    def correctness(self, split: str = "validation") -> Any:
        """Which examples of `split` ("validation" or "test") it got right in the study,
        as a boolean numpy vector in the split's order; None when not recorded (an older
        export, or a study written before per-example results were kept)."""
        from nas.io import examples

        if split not in ("validation", "test"):
            raise ValueError(f"split: expected 'validation' or 'test', got {split!r}")
        text = self.metrics.get("val_correct" if split == "validation" else "test_correct")
        return None if not text else examples.from_text(text, f"{self.path}: metrics")

    def __call__(self, batch: Any) -> Any:
        """The model's inference output (logits) on `batch`."""
        if self.variables is None:
            raise ValueError(f"{self.path}: the candidate was exported without trained weights")
        return self.model.apply(self.variables, batch, deterministic=True, training=False)


def write_candidate(
    path: str | os.PathLike,
    graph: Mapping[str, Any],
    variables: Mapping[str, Any] | None,
    *,
    input_shape: tuple[int, ...] | None = None,
    train_config: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Write one exported candidate to `path` atomically (temp file, then rename).

    `graph` is the data of `nas.graph.serialize.graph_to_dict` (graph + constants)."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "graph": dict(graph),
        "input_shape": None if input_shape is None else [int(n) for n in input_shape],
        "train_config": None if train_config is None else dict(train_config),
        "metrics": dict(metrics or {}),
        "info": dict(info or {}),
        "weights": None,
    }

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as archive:
            if variables is not None:
                doc["weights"] = arrays.write_arrays(archive, variables)
            text = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False)
            archive.writestr(MEMBER, text, compress_type=zipfile.ZIP_DEFLATED)

    return atomic_write_with(path, write)


def save_candidate(candidate: ExportedCandidate, path: str | os.PathLike) -> Path:
    """Write `candidate` (e.g. from `nas.from_flax`) as the zip `nas-search export` writes,
    so `nas.load_candidate`, `nas-train --graph` and `nas-search --seed_graph` read it.

    Its weights are checked against the graph first: nothing half-right is written."""
    from nas.graph import serialize

    if not isinstance(candidate, ExportedCandidate):
        raise ValueError(f"save_candidate: expected an ExportedCandidate (nas.from_flax, "
                         f"nas.load_candidate), got {type(candidate).__name__}")
    if candidate.variables is not None and candidate.input_shape is not None:
        check_weights(candidate)
    return write_candidate(
        path,
        serialize.graph_to_dict(candidate.graph, candidate.constants),
        candidate.variables,
        input_shape=candidate.input_shape,
        train_config=candidate.train_config,
        metrics=candidate.metrics,
        info=candidate.info,
    )


def load_candidate(path: str | os.PathLike) -> ExportedCandidate:
    """The candidate exported to `path` by `nas-search export` (either version).

    A missing, corrupt or foreign file, an unknown version, or weights that do not match the
    graph is a one-line ValueError naming the file and what was expected."""
    path = str(path)
    if not os.path.isfile(path):
        what = "a directory" if os.path.isdir(path) else "no such file"
        raise ValueError(f"{path}: cannot read an exported candidate ({what})")
    if zipfile.is_zipfile(path):
        return _read_archive(path)
    if starts_as_zip(path):
        raise ValueError(f"{path}: not a candidate archive (a truncated or damaged zip "
                         f"archive: its central directory cannot be read)")
    return _read_version_1(path)


# The first bytes of a zip archive (a local file header, or the end record of an empty one).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def read_graph_or_export(path: str | os.PathLike) -> ExportedCandidate | bytes:
    """The exported candidate in `path` (`load_candidate`), or else the file's text for
    `nas.graph.serialize.load`. Why one place: `nas-train --graph` and `search.seed_graph`
    accept both and must tell them apart alike (a truncated export is a damaged archive,
    not bad JSON). OSError: the file cannot be read; ValueError: a damaged export."""
    from nas.graph import serialize

    export = zipfile.is_zipfile(path) or starts_as_zip(path)
    text, doc = (b"", None) if export else serialize.read_json_file(path)
    if export or (isinstance(doc, dict) and doc.get("format") == "nas-candidate"):
        return load_candidate(path)
    return text


def read_graph_or_export_for(field: str, path: str | os.PathLike
                             ) -> ExportedCandidate | bytes:
    """`read_graph_or_export`, with an unreadable file or a damaged export as one
    ValueError line that starts with `field` (the flag or config field that named it)."""
    try:
        return read_graph_or_export(path)
    except OSError as e:
        raise ValueError(f"{field}: cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None


def starts_as_zip(path: str | os.PathLike) -> bool:
    """Whether the file begins like a zip archive. Why: `zipfile.is_zipfile` looks only at
    the end, so a truncated export would otherwise be read as JSON and reported as a
    JSON or UTF-8 error instead of a damaged archive."""
    try:
        with open(path, "rb") as f:
            return f.read(4) in _ZIP_MAGIC
    except OSError:
        return False


def _read_archive(path: str) -> ExportedCandidate:
    try:
        with zipfile.ZipFile(path) as archive:
            doc = _document(archive, path)
            graph, constants = _graph(doc, path)
            manifest = doc.get("weights")
            variables = None if manifest is None else arrays.read_arrays(archive, manifest, path)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as e:
        raise ValueError(
            f"{path}: not a candidate archive (damaged zip archive: {e})"
        ) from None
    input_shape = doc.get("input_shape")
    if input_shape is not None and not (
        isinstance(input_shape, list) and all(type(n) is int and n > 0 for n in input_shape)
    ):
        raise ValueError(f"{path}: field 'input_shape' must be a list of sizes > 0")
    for field in ("train_config", "metrics", "info"):
        if doc.get(field) is not None and not isinstance(doc[field], dict):
            raise ValueError(f"{path}: field {field!r} must be an object")
    candidate = ExportedCandidate(
        path=path,
        graph=graph,
        constants=constants,
        variables=variables,
        input_shape=None if input_shape is None else tuple(input_shape),
        train_config=doc.get("train_config"),
        metrics=doc.get("metrics") or {},
        info=doc.get("info") or {},
        version=VERSION,
    )
    if variables is not None and candidate.input_shape is not None:
        check_weights(candidate)
    return candidate


def _document(archive: zipfile.ZipFile, path: str) -> dict[str, Any]:
    try:
        info = archive.getinfo(MEMBER)
    except KeyError:
        raise ValueError(
            f"{path}: not an exported candidate (a zip archive without {MEMBER})"
        ) from None
    if info.file_size > MAX_JSON_BYTES:
        raise ValueError(
            f"{path}: {MEMBER} is {info.file_size:,} bytes, more than the "
            f"{MAX_JSON_BYTES:,} expected"
        )
    try:
        doc = json.loads(archive.read(MEMBER))
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path}: {MEMBER} is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not an exported candidate (expected format {FORMAT!r} in {MEMBER})"
        )
    if doc.get("version") != VERSION:
        raise ValueError(
            f"{path}: exported candidate version {doc.get('version')!r} is not "
            f"supported (expected version {VERSION}, or 1 as plain JSON)"
        )
    return doc


def _graph(doc: Mapping[str, Any], path: str) -> tuple[Any, dict[str, Any]]:
    from nas.graph import serialize

    try:
        graph, constants = serialize.graph_from_dict(doc.get("graph"))
    except ValueError as e:
        raise ValueError(f"{path}: field 'graph': {e}") from None
    return graph, dict(constants or {})


def _read_version_1(path: str) -> ExportedCandidate:
    """The JSON export of earlier releases: graph + metrics + a checkpoint path."""
    from nas.graph import serialize

    try:
        _, doc = serialize.read_json_file(path)
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror})") from None
    if not (isinstance(doc, dict) and doc.get("format") == FORMAT):
        raise ValueError(
            f"{path}: not an exported candidate (expected a zip archive, or JSON "
            f"with format {FORMAT!r})"
        )
    if doc.get("version", 1) != 1:
        raise ValueError(
            f"{path}: a JSON exported candidate must be version 1, got {doc.get('version')!r}"
        )
    graph, constants = _graph(doc, path)
    checkpoint = doc.get("checkpoint_path")
    if checkpoint is not None and not isinstance(checkpoint, str):
        raise ValueError(f"{path}: field 'checkpoint_path' must be a string")
    variables = None
    if checkpoint:
        from nas.io.variables import load_variables

        try:
            variables = load_variables(checkpoint)
        except ValueError as e:  # e.g. the study's checkpoint was deleted since the export
            raise ValueError(f"{path}: field 'checkpoint_path': {e}") from None
    metrics = doc.get("metrics")
    info = {
        k: doc[k]
        for k in ("study", "id", "parent_id", "generation", "status", "fingerprint")
        if k in doc
    }
    return ExportedCandidate(
        path=path,
        graph=graph,
        constants=constants,
        variables=variables,
        metrics=metrics if isinstance(metrics, dict) else {},
        info=info,
        version=1,
    )


def check_weights(candidate: ExportedCandidate) -> None:
    """The stored arrays must be exactly the variables the graph creates (names, shapes and
    dtypes), else training would silently start some ops from fresh weights."""
    import jax
    import jax.numpy as jnp

    from nas.graph import Model

    model = Model(candidate.graph, candidate.constants)
    rng = jax.random.PRNGKey(0)
    batch = jnp.zeros((1, *candidate.input_shape), jnp.float32)
    try:
        expected = jax.eval_shape(lambda x: model.init({"params": rng, "dropout": rng}, x), batch)
    except ValueError as e:
        raise ValueError(
            f"{candidate.path}: the graph does not run on its input_shape "
            f"{list(candidate.input_shape)}: {str(e).splitlines()[0] if str(e) else e!r}"
        ) from None
    want = {path: (tuple(a.shape), a.dtype) for path, a in arrays.flatten(expected)}
    got = {path: (a.shape, a.dtype) for path, a in arrays.flatten(candidate.variables or {})}
    for path in sorted(want.keys() | got.keys()):
        shape, dtype = want.get(path, (None, None))
        if path not in got:
            raise ValueError(
                f"{candidate.path}: weights lack {'/'.join(path)} "
                f"({dtype}{list(shape)}), which the graph needs"
            )
        if path not in want:
            raise ValueError(
                f"{candidate.path}: weights hold {'/'.join(path)}, which the graph does not have"
            )
        if got[path] != (shape, dtype):
            raise ValueError(
                f"{candidate.path}: weights {'/'.join(path)} are "
                f"{got[path][1]}{list(got[path][0])}, the graph expects "
                f"{dtype}{list(shape)}"
            )
