"""`propose_child`: the one call the search driver makes to get a child of a parent.

The child is a valid graph (shape-checked, different fingerprint from its parent) whose
variables are the parent's arrays wherever name, shape and dtype match and fresh values
elsewhere. Everything random comes from `seed`, so the same seed gives the same child.
The returned `Child` is the complete record a study stores: its fingerprint is computed
once (while the child is checked) and its spec, properties and blocks have JSON forms.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nas.graph.block import Block
from nas.graph.ops import Graph
from nas.graph.reversible import is_reversible
from nas.graph.serialize import blocks_to_list, graph_to_dict, graph_to_json
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.mutation.config import MutationConfig
from nas.mutation.model_mutator import Builder, ModelMutator, NoChildFound, probe_inputs
from nas.mutation.move_errors import MoveFailed, raised_as
from nas.mutation.reversible import propose_reversible
from nas.mutation.warm_start import copy_replaced
from nas.properties.tensor_shapes import graph_shapes
from nas.synthesis.base import verify_property
from nas.synthesis.variables import build_variables

__all__ = ["Child", "MoveFailed", "NoChildFound", "propose_child"]


@dataclass
class Child:
    """A proposed child and how it relates to its parent.

    `inherited` / `new` are the op names of the child's params taken from the parent /
    freshly initialized (an inherited op named otherwise in the parent: `renamed`).
    `properties` are the mutated target properties the new subgraph satisfies; they refer
    to `spec` spliced into `host_graph` (the child graph itself, or for a block-level
    mutation the mutated block's definition). `fingerprint` identifies what the child
    computes (resolved at the probe input shape), so equal networks match.
    `kind` says what changed: "subgraph", "block_add", "block_delete", "block_mutate"
    (one block redefined), "widen", "deepen", "shrink", "prune" (coupled channels
    narrowed), "drop_branch" (a residual branch removed), "stride" (a stride moved to an
    earlier conv), "separable" (a conv made depthwise-separable), or for reversible parents
    "coupling_add", "coupling_delete", "reversible_block". `blocks` are the child's
    blocks when it was built from blocks.
    """

    graph: Graph
    constants: dict[str, Any]
    variables: dict[str, dict[str, Any]]
    inherited: set[str]
    new: set[str]
    fingerprint: str = ""
    properties: list[Any] = field(default_factory=list)
    spec: list[SubgraphNode] = field(default_factory=list)
    blocks: list[Block] | None = None
    kind: str = "subgraph"
    function_preserving: bool = False
    host_graph: Graph | None = None
    host_constants: dict[str, Any] = field(default_factory=dict)
    host_inputs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    attempts: int = 1
    seconds: float = 0.0
    # the ops whose outputs a fit matches to the parent's ops of the same names, where that
    # is not the new ops (a moved stride: the strided op's output, which kept its shape)
    fit_to: list[str] = field(default_factory=list)
    # inherited ops whose parent op has another name: child op -> parent op (the ops of a
    # redefined block, renamed with it)
    renamed: dict[str, str] = field(default_factory=dict)

    def spec_json(self) -> list[dict[str, Any]]:
        """The subgraph spec as JSON-ready data: each op as in `graph_to_dict`, plus the
        tensors its outputs replace."""
        out = []
        for node in self.spec:
            op = graph_to_dict(Graph([], [], [node.op]))["ops"][0]
            out.append({"op": op, "output_names": list(node.output_names)})
        return out

    def graph_json(self) -> str:
        """The child graph and constants as `nas.graph.serialize` JSON text."""
        return graph_to_json(self.graph, self.constants)

    def properties_json(self) -> list[dict[str, Any]]:
        """The target properties as JSON-ready data: the type and each property's maps."""
        out = []
        for prop in self.properties:
            entry: dict[str, Any] = {"type": type(prop).__name__}
            for name in ("depth_map", "input_shapes", "output_shapes", "pairings"):
                value = getattr(prop, name, None)
                if value is not None:
                    entry[name] = json.loads(json.dumps(value, default=repr))
            out.append(entry)
        return out

    def blocks_json(self) -> list[dict[str, Any]] | None:
        """The child's blocks as JSON-ready data (`nas.graph.serialize.blocks_from_list`
        reads them back for the zoo builder), or None for a child without blocks."""
        return None if self.blocks is None else blocks_to_list(self.blocks)

    def subgraph_model(self) -> SubgraphModel:
        """The new subgraph inside its host graph (abstract), to re-check `properties`."""
        return SubgraphModel(self.host_graph, self.host_constants, None, self.host_inputs,
                             self.spec)

    def satisfies_properties(self) -> bool:
        if not self.properties:
            return True
        model = self.subgraph_model()
        shapes = graph_shapes(model.graph, model.constants, model.inputs)
        return all(verify_property(p, model, shapes) for p in self.properties)


def _check_variables(variables: Any) -> None:
    """Parent variables are flax collections (`Model.init`'s result). A bare params dict
    keyed by op name looks plausible but would silently give a child that inherits nothing."""
    if not variables:
        return
    if not isinstance(variables, Mapping) or not isinstance(variables.get("params"), Mapping):
        keys = sorted(map(str, variables))[:5] if isinstance(variables, Mapping) else None
        raise ValueError(f"variables must be flax variables such as {{'params': {{op name: "
                         f"...}}, 'batch_stats': ...}} (what Model.init returns), got "
                         f"{type(variables).__name__} with keys {keys}")


# The seed of each family's own numpy draws (`_graph_move`): one stream per family, so adding
# a family changes no other family's children for the same seed.
_STREAMS = {"net2net": 2, "shrink": 3, "prune": 4, "drop_branch": 5, "stride": 6,
            "separable": 7}


def _net2net_child(graph: Graph, constants: Any, variables: Any, cfg: MutationConfig,
                   seed: int, child_id: int, start: float, shrink: bool = False
                   ) -> Child | None:
    """A Net2Net child (`nas.mutation.net2net`; with `shrink`, a narrowed one), or None
    where no move applies (the proposal then mutates a subgraph as usual)."""
    return _graph_move("shrink" if shrink else "net2net", graph, constants, variables, cfg,
                       seed, child_id, start)


def _graph_move(move: str, graph: Graph, constants: Any, variables: Any,
                cfg: MutationConfig, seed: int, child_id: int, start: float) -> Child | None:
    """A child of the move family `move` other than "subgraph" (`nas.mutation.net2net`,
    `nas.mutation.prune`), or None where it does not apply to this parent."""
    import numpy as np

    from nas.mutation import net2net, prune, separable, stride
    from nas.mutation.model_mutator import fingerprint_at

    rng = np.random.default_rng([seed, _STREAMS[move]])
    consts = dict(constants or {})
    refit: list[str] = []
    try:
        if move == "shrink":
            kind, child, consts, values = net2net.propose_shrink(
                graph, consts, variables, rng, cfg.input_shape)
        elif move == "net2net":
            kind, child, consts, values = net2net.propose(
                graph, consts, variables, rng, f"c{child_id}/", cfg.input_shape)
        elif move == "prune":
            kind, child, consts, values = prune.propose_prune(
                graph, consts, variables, rng, cfg.input_shape)
        elif move == "stride":
            kind, child, consts, values, refit = stride.propose_stride(
                graph, consts, variables, rng, cfg.input_shape)
        elif move == "separable":
            kind, child, consts, values, refit = separable.propose_separable(
                graph, consts, variables, rng, f"c{child_id}/", cfg.input_shape)
        else:
            kind, child, consts, values, refit = prune.propose_drop_branch(
                graph, consts, variables, rng, cfg.input_shape)
    except net2net.NotApplicable:
        return None
    parent = variables["params"]
    with raised_as(kind):
        # a removed branch or a moved stride changes no shape: the ops it names are the
        # ones to fit
        same = {k for k, v in values["params"].items()
                if k in parent and _shapes(v) == _shapes(parent[k]) and k not in refit}
        fingerprint = fingerprint_at(child, consts, cfg.input_shape)
    return Child(graph=child, constants=consts, variables=values, inherited=same,
                 new=set(values["params"]) - same, fit_to=refit, fingerprint=fingerprint,
                 kind=kind,
                 function_preserving=move == "net2net", host_graph=child,
                 host_constants=consts, seed=seed, seconds=time.monotonic() - start)


def _drawn_move(graph: Graph, constants: Any, variables: Any, cfg: MutationConfig,
                rng: random.Random, seed: int, child_id: int, start: float) -> Child | None:
    """The child of the first family drawn (`cfg.moves`, else net2net_p then shrink_p)
    that applies, None where that is "subgraph" or none applies."""
    if cfg.drawn_moves is not None:
        for move in draw_moves(cfg.drawn_moves, rng):
            if move == "subgraph":
                return None
            moved = _graph_move(move, graph, constants, variables, cfg, seed, child_id,
                                start)
            if moved is not None:
                return moved
        return None
    for chance, shrink in ((cfg.net2net_p, False), (cfg.shrink_p, True)):
        if chance and rng.random() < chance:
            moved = _net2net_child(graph, constants, variables, cfg, seed, child_id, start,
                                   shrink)
            if moved is not None:
                return moved
    return None


def _with_renamed(variables: Mapping[str, Any] | None, renamed: Mapping[str, str]
                  ) -> Mapping[str, Any] | None:
    """The parent's variables, each renamed op's also under its child name (`renamed`:
    child op -> parent op), so `build_variables` inherits them by name and shape."""
    if not variables or not renamed:
        return variables
    out = {}
    for collection, entries in variables.items():
        entries = dict(entries)
        for mine, theirs in renamed.items():
            if theirs in entries and mine not in entries:
                entries[mine] = entries[theirs]
        out[collection] = entries
    return out


def draw_moves(weights: Mapping[str, float], rng: random.Random) -> list[str]:
    """The families of `weights` in the order drawn, each by its weight among those not
    drawn yet (those of weight 0 never): the first that applies to the parent makes the
    child."""
    left = {k: float(w) for k, w in weights.items() if w > 0}
    order = []
    while left:
        u, total = rng.random() * sum(left.values()), 0.0
        pick = list(left)[-1]
        for name, w in left.items():
            total += w
            if u < total:
                pick = name
                break
        order.append(pick)
        del left[pick]
    return order


def _shapes(entry: Any) -> Any:
    """The shapes of an op's params: {name: shape} of its mapping, or the shape of the
    array it holds directly (a PARAM op)."""
    import numpy as np

    if isinstance(entry, Mapping):
        return {n: np.shape(a) for n, a in entry.items()}
    return np.shape(entry)


def propose_child(
    graph: Graph,
    constants: Mapping[str, Any] | None,
    variables: Mapping[str, Any] | None,
    *,
    seed: int,
    config: MutationConfig | Mapping[str, Any] | None = None,
    blocks: list[Block] | None = None,
    builder: Builder | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Child:
    """A child of (graph, constants) with variables inherited from `variables`.

    `variables` holds the parent's `params` (and `batch_stats` if any); None or {} gives a
    child with only fresh variables. Pass the parent's `blocks` and its zoo `builder` (see
    `nas.zoo.builder`) for block-level mutation (`config.mutate_by_block`); without them
    a subgraph of the whole graph is mutated. A reversible parent is always mutated
    through its reversible spec (its own block-level edits, see `nas.mutation.reversible`),
    whatever `blocks` says. Raises NoChildFound (a ValueError) with
    the reasons when no child is found within `config.retries` attempts and
    `config.max_steps` synthesis steps (counts: the same seed gives the same child on any
    machine). `clock` serves only the wall-clock safety net `config.time_limit_s`.
    Any other exception a move raises (a bug, a graph it was not written for) is raised as
    `MoveFailed`, naming the move, the exception and where it was raised.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    _check_variables(variables)
    cfg = MutationConfig.from_dict(config)
    start = time.monotonic()
    rng = random.Random(seed)
    child_id = cfg.child_id if cfg.child_id is not None else seed
    # Net2Net and shrink moves edit the graph, not its blocks: not where every child must
    # be a block edit its builder rebuilds (mutate_by_block), nor for a reversible parent
    by_block = bool(blocks) and builder is not None and cfg.mutate_by_block
    if bool(variables) and not by_block and not is_reversible(constants):
        moved = _drawn_move(graph, constants, variables, cfg, rng, seed, child_id, start)
        if moved is not None:
            return moved
    if is_reversible(constants):  # the child must stay reversible
        with raised_as("reversible", NoChildFound):
            proposal = propose_reversible(graph, constants, cfg, rng, child_id)
    else:
        with raised_as("block" if by_block else "subgraph", NoChildFound):
            proposal = ModelMutator(cfg, rng, clock).propose(graph, constants, blocks,
                                                             builder, child_id)
    with raised_as(proposal.kind):
        inputs = probe_inputs(proposal.graph, cfg.input_shape)
        built = build_variables(proposal.graph, proposal.constants, inputs,
                                _with_renamed(variables, proposal.renamed), seed=seed)
        if variables and proposal.kind == "subgraph" and not proposal.preserving:
            copy_replaced(graph, proposal.spec, variables, built.variables)
    return Child(
        graph=proposal.graph,
        constants=proposal.constants,
        variables=built.variables,
        inherited=built.inherited,
        new=built.new,
        fingerprint=proposal.fingerprint,
        properties=proposal.properties,
        spec=proposal.spec,
        blocks=proposal.blocks,
        kind=proposal.kind,
        function_preserving=proposal.preserving,
        host_graph=proposal.host_graph,
        host_constants=proposal.host_constants,
        host_inputs=proposal.host_inputs,
        seed=seed,
        attempts=proposal.attempts,
        renamed={k: v for k, v in proposal.renamed.items() if k in built.inherited},
        seconds=time.monotonic() - start,
    )
