"""Lossless, versioned JSON for graphs and their constants.

Loading only builds plain data (no pickle, no eval), then validates the graph, so a hostile
file cannot run code; documents larger than `MAX_BYTES` or nested deeper than `MAX_DEPTH`
are refused with a ValueError before they can exhaust memory or the stack. Tuples are
tagged so that `graph_from_json(graph_to_json(g)) == g` holds exactly. Containers that wrap
a graph (e.g. a search's exported candidate) are their owners' business.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph, Op, as_op_type, new_graph

FORMAT = "nas.graph"
VERSION = 1
_TUPLE = "__tuple__"
MAX_BYTES = 256 * 2**20  # far above any real graph (ResNet50: well under 1 MiB)
MAX_DEPTH = 64  # kwargs nest a few levels; deeper is not a graph


def _check_depth(data: Any) -> None:
    """Iterative, so a hostile document cannot overflow the stack while being checked."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"serialized graph is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _encode(value: Any, where: str) -> Any:
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, where) for v in value]}
    if isinstance(value, list):
        return [_encode(v, where) for v in value]
    if isinstance(value, Mapping):
        if _TUPLE in value:
            raise ValueError(f"{where}: dict key {_TUPLE!r} is reserved")
        return {str(k): _encode(v, where) for k, v in value.items()}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float) or hasattr(value, "item"):
        number = value.item() if hasattr(value, "item") else value
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"{where}: non-finite number {number} cannot be stored")
        return number
    raise ValueError(f"{where}: value {value!r} of type {type(value).__name__} is not "
                     f"serializable; use a symbolic string such as 'I:zeros' instead")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TUPLE}:
            if not isinstance(value[_TUPLE], list):
                raise ValueError(f"serialized graph: {_TUPLE!r} must hold a list, got "
                                 f"{value[_TUPLE]!r}"[:300])
            return tuple(_decode(v) for v in value[_TUPLE])
        return {k: _decode(v) for k, v in value.items()}
    return value


def graph_to_dict(graph: Graph, constants: Mapping[str, Any] | None = None) -> dict[str, Any]:
    ops = [
        {
            "name": op.name,
            "type": op.type.name,
            "input_names": list(op.input_names),
            "input_kwargs": _encode(op.input_kwargs, f"op {op.name!r} input_kwargs"),
            "op_kwargs": _encode(op.op_kwargs, f"op {op.name!r} op_kwargs"),
            "num_outputs": op.num_outputs,
        }
        for op in graph.ops
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "input_names": list(graph.input_names),
        "output_names": list(graph.output_names),
        "ops": ops,
        "constants": _encode(dict(constants or {}), "constants"),
    }


def graph_to_json(graph: Graph, constants: Mapping[str, Any] | None = None) -> str:
    return json.dumps(graph_to_dict(graph, constants), sort_keys=True)


def _field(data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in data:
        raise ValueError(f"{where}: missing field {key!r}")
    if not isinstance(data[key], kind):
        raise ValueError(f"{where}: field {key!r} must be a {kind.__name__}")
    return data[key]


def graph_from_dict(data: Any) -> tuple[Graph, dict[str, Any]]:
    """(graph, constants) from the plain data of `graph_to_dict`; ValueError if malformed."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a serialized graph: expected format {FORMAT!r}, got {got!r}")
    _check_depth(data)
    version = data.get("version")
    if version != VERSION:
        raise ValueError(f"serialized graph version {version!r} is not supported "
                         f"(this nas reads version {VERSION})")
    ops = []
    for i, entry in enumerate(_field(data, "ops", list, "graph")):
        where = f"graph op #{i}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object")
        name = _field(entry, "name", str, where)
        ops.append(Op(
            name=name,
            type=as_op_type(_field(entry, "type", str, where), name),
            input_names=list(_field(entry, "input_names", list, where)),
            input_kwargs=_decode(_field(entry, "input_kwargs", dict, where)),
            op_kwargs=_decode(_field(entry, "op_kwargs", dict, where)),
            num_outputs=_field(entry, "num_outputs", int, where),
        ))
    graph = new_graph(
        _field(data, "input_names", list, "graph"),
        _field(data, "output_names", list, "graph"),
        ops,
    )
    return graph, _decode(_field(data, "constants", dict, "graph"))


def read_json_file(path: str | os.PathLike) -> tuple[bytes, Any]:
    """(text, its JSON document or None if it is not JSON) of a file, read up to one byte
    past `MAX_BYTES` so that `load` can refuse a huge one; OSError passes through."""
    with open(path, "rb") as f:
        text = f.read(MAX_BYTES + 1)
    try:
        return text, json.loads(text)
    except (ValueError, RecursionError):
        return text, None


def load(text: str | bytes) -> tuple[Graph, dict[str, Any]]:
    """(graph, constants) from JSON text; a malformed document is a ValueError."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"serialized graph is {len(text):,} bytes, more than the "
                         f"{MAX_BYTES:,} a graph may have")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"serialized graph is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"serialized graph is nested deeper than {MAX_DEPTH} levels") from None
    return graph_from_dict(data)


def graph_from_json(text: str | bytes) -> Graph:
    return load(text)[0]


def constants_from_json(text: str | bytes) -> dict[str, Any]:
    return load(text)[1]


# Blocks ------------------------------------------------------------------------------------
# A zoo model is rebuilt from its blocks' base definitions (`builder(blocks=...)`
# instantiates each one), so a block is stored as its name and its base graph + constants.


def blocks_to_list(blocks: Sequence[Block]) -> list[dict[str, Any]]:
    """JSON-ready data of `blocks`: enough for a zoo builder to rebuild the model."""
    return [{"name": block.name,
             "base": graph_to_dict(block.base_graph, block.base_constants)}
            for block in blocks]


def blocks_from_list(data: Any) -> list[Block]:
    """Blocks from the data of `blocks_to_list`; a malformed entry is a ValueError."""
    if not isinstance(data, list):
        raise ValueError(f"serialized blocks: expected a list, got {type(data).__name__}")
    blocks = []
    for i, entry in enumerate(data):
        where = f"serialized block #{i}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object with 'name' and 'base'")
        name = _field(entry, "name", str, where)
        try:
            graph, constants = graph_from_dict(_field(entry, "base", dict, where))
        except ValueError as e:
            raise ValueError(f"{where} ({name!r}): {e}") from None
        blocks.append(Block(name, graph, constants))
    return blocks
