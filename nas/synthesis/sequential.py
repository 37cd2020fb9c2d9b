"""Sequential synthesis: replace a single-input, single-output chain of ops by another chain.

The base class checks that every context has such a subgraph, works out how the chain must
scale its channel count (`output_features_mul` / `_div`, or a constant width), and turns a
list of ops into a chained subgraph spec.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from nas.graph.ops import Op, OpType
from nas.graph.subgraph import SubgraphModel, SubgraphNode
from nas.graph.symbolic import split_factors
from nas.synthesis.base import AbstractSynthesizer
from nas.synthesis.search_space import KwargSets, SearchSpace, kwarg_defaults, symbolic_width

_WIDTH_TYPES = (OpType.DENSE, OpType.CONV)
_WIDTH_BASES = ("S:-1", "S:0:-1")


def is_shape_property(prop: Any) -> bool:
    """Exactly a ShapeProperty (LinopProperty may subclass it but constrains no shapes)."""
    return type(prop).__name__ == "ShapeProperty"


def exported_outputs(model: SubgraphModel) -> list[str]:
    """Host-graph tensors the subgraph's outputs replace (canonical names)."""
    return [old for node in model.subgraph for old in node.output_names if old is not None]


class AbstractSequentialSynthesizer(AbstractSynthesizer):
    """Base of the synthesizers that build one chain per context.

    Every context must have exactly one input and one exported output, with the same names
    and length in every context.
    """

    def __init__(self, *args: Any, max_len: int = -1, max_delta: int = -1, min_len: int = 0,
                 min_delta: int = -1, space: SearchSpace | dict | None = None,
                 **kwargs: Any) -> None:
        """`args`, `kwargs`: `AbstractSynthesizer`'s (subgraphs_and_props, generation,
        abstract, rng, budget), the one constructor every synthesizer shares. The chain's
        length bounds (`max_len` / `min_len` absolute, or `max_delta` / `min_delta`
        relative to the replaced chain's length) and its op `space` (None: the
        reference's, every op type with factors up to 4x) are for the subclasses that
        build chains."""
        super().__init__(*args, **kwargs)
        first = self.subgraphs_and_props[0][0]
        for model, _ in self.subgraphs_and_props:
            if not model.subgraph:
                raise ValueError("sequential synthesis needs a subgraph spec in every context")
            if len(model.input_names) != 1:
                raise ValueError(f"a sequential subgraph needs exactly one input, but found "
                                 f"{len(model.input_names)}: {model.input_names}")
            outputs = exported_outputs(model)
            if len(outputs) != 1:
                raise ValueError(f"a sequential subgraph needs exactly one output, but found "
                                 f"{len(outputs)}: {outputs}")
            if len(model.subgraph) != len(first.subgraph):
                raise ValueError("subgraphs have different lengths in different contexts")
            if (model.input_names != first.input_names
                    or outputs != exported_outputs(first)):
                raise ValueError("subgraphs are not identical across contexts (input or output "
                                 "names differ)")
        self.input_name: str = first.input_names[0]
        self.output_name: str = exported_outputs(first)[0]
        self.num_ops: int = len(first.subgraph)
        self.output_features_mul: int | None = None
        self.output_features_div: int | None = None
        self.output_features_const: int | None = None
        self.init_output_features()
        self.max_len, self.max_delta = max_len, max_delta
        self.min_len, self.min_delta = min_len, min_delta
        ops = [node.op for node in first.subgraph]
        self.kwarg_defaults: KwargSets = kwarg_defaults(
            ops, skip_int_features=len(self.subgraphs_and_props) > 1)
        self.space = None if space is None else SearchSpace.from_dict(space)
        self.op_types = None if self.space is None else self.space.allowed_types(ops)

    def init_output_features(self) -> None:
        """Reads the required channel scaling from the shape properties of every context."""
        found: tuple[str, int] | None = None
        for _, props in self.subgraphs_and_props:
            for prop in props:
                if not is_shape_property(prop) or not prop.output_shapes:
                    continue
                in_features = int(next(iter(prop.input_shapes.values()))[-1])
                out_shape = prop.output_shapes.get(self.output_name)
                if out_shape is None:
                    out_shape = next(iter(prop.output_shapes.values()))
                out_features = int(out_shape[-1])
                if out_features >= in_features and out_features % in_features == 0:
                    this = ("mul", out_features // in_features)
                elif out_features < in_features and in_features % out_features == 0:
                    this = ("div", in_features // out_features)
                elif len(self.subgraphs_and_props) == 1:
                    this = ("const", out_features)
                else:
                    raise ValueError(f"output features {out_features} are not an integer "
                                     f"multiple or divisor of input features {in_features}, "
                                     f"and a constant width cannot fit several contexts")
                if found is not None and found != this:
                    raise ValueError(f"contexts disagree on the output width: {found} vs {this}")
                found = this
        if found is None:
            return
        kind, value = found
        if kind == "const":
            self.output_features_const = value
        elif kind == "mul":
            self.output_features_mul, self.output_features_div = value, 1
        else:
            self.output_features_mul, self.output_features_div = 1, value

    def get_output_features(self, ops: Sequence[Op]) -> Any:
        """The width the last DENSE/CONV of `ops` needs so the chain ends at the right width.

        None when no width is required or the chain's widths are not all relative (`S:-1`).
        Unlike the reference, the last op's own factor is not counted twice.
        """
        if self.output_features_const is not None:
            return self.output_features_const
        if self.output_features_mul is None:
            return None
        width_ops = [op for op in ops if op.type in _WIDTH_TYPES]
        if not width_ops:
            return None
        ratio = Fraction(1)
        for op in width_ops[:-1]:
            features = op.op_kwargs.get("features")
            if not isinstance(features, str):
                return None
            base, div, mul = split_factors(features)
            if base not in _WIDTH_BASES:
                return None
            ratio *= Fraction(mul, div)
        target = Fraction(self.output_features_mul, self.output_features_div or 1)
        required = target / ratio
        g = math.gcd(required.numerator, required.denominator)
        return symbolic_width("S:-1", Fraction(required.numerator // g,
                                               required.denominator // g))

    def make_subgraph_spec(self, ops: Sequence[Op], adjust_features: bool = False
                           ) -> list[SubgraphNode]:
        """Chains copies of `ops` from the input to the output tensor.

        Names are kept when their last `/` components are distinct integers, else
        `/<position>` is appended so every name is unique.
        """
        ops = [copy.deepcopy(op) for op in ops]
        tails = [op.name.rsplit("/", 1)[-1] for op in ops]
        if not (all(t.isdigit() for t in tails) and len(set(tails)) == len(tails)):
            for i, op in enumerate(ops):
                op.name = f"{op.name}/{i}"
        if adjust_features:
            width_ops = [op for op in ops if op.type in _WIDTH_TYPES]
            features = self.get_output_features(ops)
            if width_ops and features is not None:
                width_ops[-1].op_kwargs["features"] = features
        spec = []
        previous = self.input_name
        for i, op in enumerate(ops):
            op.input_names = [previous]
            last = i == len(ops) - 1
            spec.append(SubgraphNode(op, [self.output_name] if last else []))
            previous = f"{op.name}:0"
        return spec
