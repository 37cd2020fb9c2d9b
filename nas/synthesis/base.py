"""The synthesizer protocol: from subgraphs and target properties, build new subgraphs.

A synthesizer gets one `(SubgraphModel, [property, ...])` pair per *context* (one instance of
the subgraph: a block used several times has several contexts that share its structure but
differ in constants and inputs) and returns one new `SubgraphModel` per context whose graph
contains a new subgraph satisfying every property of that context.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from nas.graph.ops import Graph
from nas.graph.subgraph import (
    SubgraphModel,
    SubgraphNode,
    replace_subgraph,
    subgraph_inputs,
    subgraph_outputs,
)
from nas.properties.tensor_shapes import GraphShapes, graph_shapes
from nas.synthesis.variables import build_variables

Context = tuple[SubgraphModel, list[Any]]


class SynthesisError(ValueError):
    """No subgraph satisfying the properties was found; the message says why."""


class SynthesisTimeout(SynthesisError):
    """The synthesizer used up its budget (steps, or the wall-clock safety net)."""


class Budget:
    """How much work one proposal may do: a count of synthesis steps (each candidate
    subgraph enumerated, extended or randomized is one step), so the same seed gives the
    same child on any machine at any load. `seconds` is only a safety net against a
    runaway search, measured with `clock`; when it fires, `safety_net_expired` is set and
    the error says so, because that outcome depends on the machine.
    """

    def __init__(self, max_steps: int | None = None, seconds: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_steps = max_steps
        self.seconds = seconds
        self.clock = clock
        self.steps = 0
        self.safety_net_expired = False
        self._deadline = None if seconds is None else clock() + seconds

    def spend(self, steps: int = 1) -> None:
        """Count `steps` of work; SynthesisTimeout when a limit is passed."""
        self.steps += steps
        if self.max_steps is not None and self.steps > self.max_steps:
            raise SynthesisTimeout(f"synthesis used its budget of {self.max_steps} steps")
        if self._deadline is not None and self.clock() > self._deadline:
            self.safety_net_expired = True
            raise SynthesisTimeout(f"wall-clock safety net of {self.seconds:g} s expired "
                                   "(machine-dependent; raise mutation.time_limit_s)")


def property_distance(prop: Any, model: SubgraphModel, shapes: GraphShapes | None = None
                      ) -> float:
    """How far `model` is from satisfying `prop` (0 when satisfied). `shapes` are the host
    graph's tensor shapes, reused instead of recomputed (the subgraph's prefix is the
    parent's, so the parent's shapes serve every candidate)."""
    return float(prop.distance_from(prop.infer(model, abstract=True, shapes=shapes)))


def verify_property(prop: Any, model: SubgraphModel, shapes: GraphShapes | None = None) -> bool:
    """True when `model` satisfies `prop`; a candidate that cannot be inferred or compared
    does not satisfy it."""
    try:
        return property_distance(prop, model, shapes) <= 0
    except (ValueError, KeyError, TypeError):
        return False


def host_shapes(model: SubgraphModel) -> GraphShapes | None:
    """Tensor shapes of a context's graph (cached by graph content), None if unknown."""
    if not model.inputs:
        return None
    try:
        return graph_shapes(model.graph, model.constants, model.inputs)
    except ValueError:
        return None


class CandidateModel(SubgraphModel):
    """A cheap SubgraphModel of a candidate spec, for abstract property checks only.

    Why: a candidate's properties depend only on its own ops, the shapes of its inputs and
    the producers of its inputs, all of which the *host* graph already has. So the host
    graph is used as is (no splice, no copies); the full views (`subg_graph`, ...) are built
    on first access from a real splice, should anything ask for them.
    """

    def __init__(self, graph: Graph, constants: Any, inputs: Any,
                 subgraph: Sequence[SubgraphNode]) -> None:
        self.graph = graph
        self.constants = dict(constants or {})
        self.state = None
        self.inputs = inputs
        self.subgraph = list(subgraph)
        self.original_outputs = list(graph.output_names)
        self.subg_inputs = None
        self.subg_outputs = None
        self.input_names = subgraph_inputs(self.subgraph)
        self.output_names = subgraph_outputs(self.subgraph)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("subg_"):
            full = SubgraphModel(replace_subgraph(self.graph, self.subgraph), self.constants,
                                 None, self.inputs, self.subgraph)
            return getattr(full, name)
        raise AttributeError(name)


class AbstractSynthesizer:
    """Holds the contexts and builds, verifies and measures candidate subgraphs.

    `generation` makes new op names unique (`gen<generation>/...`). With `abstract=True`
    candidates carry no state; otherwise each is initialized and inherits its context's
    parent variables (`params` and `batch_stats`, kept under their collection names).
    `rng` is the only source of randomness, so a seeded synthesizer is deterministic;
    `budget` (a `Budget`, shared by every synthesizer of one proposal) bounds the search.
    """

    def __init__(
        self,
        subgraphs_and_props: Sequence[Context],
        generation: int | str,
        abstract: bool = True,
        rng: random.Random | None = None,
        budget: Budget | None = None,
    ) -> None:
        if not subgraphs_and_props:
            raise ValueError("a synthesizer needs at least one (subgraph model, properties) pair")
        self.subgraphs_and_props = [(m, list(props)) for m, props in subgraphs_and_props]
        self.generation = generation
        self.abstract = abstract
        self.rng = rng if rng is not None else random.Random(0)
        self.budget = budget  # None: no limit
        self.shapes: list[GraphShapes | None] = [host_shapes(m) for m, _ in
                                                 self.subgraphs_and_props]

    def check_deadline(self) -> None:
        """One step of work against the budget (the name predates counted budgets)."""
        if self.budget is not None:
            self.budget.spend()

    @property
    def prefix(self) -> str:
        return f"gen{self.generation}/"

    def synthesize(self) -> list[SubgraphModel]:
        raise NotImplementedError

    def make_subgraph_models(
        self, subgraph_spec: Sequence[SubgraphNode], graphs: Sequence[Graph | None] | None = None
    ) -> list[SubgraphModel]:
        """Splices `subgraph_spec` into every context's graph (or into `graphs`, to build a
        subgraph in several steps). Raises ValueError when the spec does not fit a graph."""
        graphs = list(graphs) if graphs else [None] * len(self.subgraphs_and_props)
        out = []
        for graph, (model, _) in zip(graphs, self.subgraphs_and_props, strict=True):
            new_graph = replace_subgraph(graph or model.graph, subgraph_spec)
            state = None
            if not self.abstract:
                try:
                    state = build_variables(new_graph, model.constants, model.inputs,
                                            model.state).variables
                except Exception as e:  # any failure means the subgraph is malformed
                    raise ValueError(f"could not initialize the synthesized subgraph "
                                     f"({type(e).__name__}: {e})") from e
            out.append(SubgraphModel(new_graph, model.constants, state, model.inputs,
                                     list(subgraph_spec)))
        return out

    def candidate_models(self, subgraph_spec: Sequence[SubgraphNode]) -> list[SubgraphModel]:
        """Light models of a candidate spec in every context, for property checks."""
        return [CandidateModel(model.graph, model.constants, model.inputs, subgraph_spec)
                for model, _ in self.subgraphs_and_props]

    def verify(self, subgraph_models: Sequence[SubgraphModel]) -> bool:
        """True when every context's model satisfies every property of that context."""
        if len(subgraph_models) != len(self.subgraphs_and_props):
            raise ValueError(f"expected {len(self.subgraphs_and_props)} subgraph models, got "
                             f"{len(subgraph_models)}")
        return all(verify_property(prop, model, shapes)
                   for model, (_, props), shapes in zip(subgraph_models, self.subgraphs_and_props,
                                                        self.shapes, strict=True)
                   for prop in props)

    def subg_distance(self, subgraph_models: Sequence[SubgraphModel]) -> float:
        """Sum over property types of the distance, taken as the worst over contexts.

        (The reference asserts that contexts agree; taking the maximum keeps the search
        honest when they do not.)
        """
        per_type: dict[str, float] = {}
        for model, (_, props), shapes in zip(subgraph_models, self.subgraphs_and_props,
                                             self.shapes, strict=True):
            for prop in props:
                key = type(prop).__name__
                per_type[key] = max(per_type.get(key, 0.0),
                                    property_distance(prop, model, shapes))
        return float(sum(per_type.values()))

    def get_subg_distance(self, subg_models: Sequence[SubgraphModel]) -> float:
        """The reference's name for `subg_distance`."""
        return self.subg_distance(subg_models)
