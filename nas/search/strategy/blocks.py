"""A candidate's blocks in its study row, and the zoo builder that rebuilds it from them.

Why: block-level mutation rebuilds the model from the parent's blocks with its zoo builder,
and a resumed search may run in another process, so they are stored with the candidate as
plain JSON (no record for a graph without blocks):

    {"builder": {"model_name": "cnn", "num_classes": 10, "image_size": 32},
     "blocks": [{"name": "conv_layer", "base": <graph_to_dict of the definition>}, ...]}

plus "model" in "builder" when the config gave extra builder arguments (`train.model`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nas import zoo
from nas.graph.block import Block
from nas.graph.serialize import blocks_from_list, blocks_to_list, graph_to_json
from nas.zoo.common import ModelParts

Builder = Callable[..., ModelParts]  # `(blocks=...) -> (graph, constants, blocks)`
BUILDER_FIELDS = ("model_name", "num_classes", "image_size")
OPTIONAL_BUILDER_FIELDS = ("model",)  # `train.model`: absent from studies written before it


def builder_args(train: Any) -> dict[str, Any]:
    """The zoo builder's arguments for a `train` config."""
    model = train.get("model") or {}
    return {"model_name": str(train.model_name), "num_classes": int(train.num_classes),
            "image_size": int(train.input.image_size),
            "model": model.to_dict() if hasattr(model, "to_dict") else dict(model)}


def blocks_record(args: Mapping[str, Any], blocks: Sequence[Block]) -> dict[str, Any]:
    """The JSON-ready record of `blocks`, rebuilt by the zoo builder named by `args`."""
    fields = BUILDER_FIELDS + tuple(k for k in OPTIONAL_BUILDER_FIELDS if args.get(k))
    return {"builder": {k: args[k] for k in fields}, "blocks": blocks_to_list(blocks)}


def read_blocks(record: Any, where: str) -> tuple[list[Block], Builder, dict[str, Any]]:
    """(blocks, builder, builder arguments) from a stored record; a malformed one is a
    ValueError naming `where` (e.g. "candidate 3") and the field."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: blocks record must be an object, got "
                         f"{type(record).__name__}")
    args = record.get("builder")
    if (not isinstance(args, Mapping) or not set(BUILDER_FIELDS) <= set(args)
            or not set(args) <= set(BUILDER_FIELDS + OPTIONAL_BUILDER_FIELDS)
            or not isinstance(args.get("model", {}), Mapping)):
        raise ValueError(f"{where}: blocks record field 'builder' must be an object with "
                         f"{', '.join(BUILDER_FIELDS)} (and optionally an object 'model'), "
                         f"got {args!r}")
    try:
        build = zoo.builder(str(args["model_name"]), int(args["num_classes"]),
                            int(args["image_size"]), args.get("model"))
        blocks = blocks_from_list(record.get("blocks"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: blocks record: {e}") from None
    return blocks, build, dict(args)


def rebuilds(build: Builder, blocks: Sequence[Block], graph_json: str) -> bool:
    """Whether `build(blocks=blocks)` gives exactly the stored graph (unless the zoo
    changed since the study was written)."""
    try:
        graph, constants, _ = build(blocks=list(blocks))
    except ValueError:
        return False
    return graph_to_json(graph, constants) == graph_json
