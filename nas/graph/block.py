"""`Block`: a reusable, parameterised subgraph that zoo models are built from.

Instantiating a block prefixes its op names (`conv_layer0/conv`), wires its inputs to given
tensors and re-targets symbolic kwargs that name block tensors or block constants. Mutating a
model by block means editing a block's `base_graph` and rebuilding with the zoo builder.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.graph import symbolic
from nas.graph.ops import Graph, Op, canonical_name, new_graph


@dataclass
class Block:
    name: str
    graph: Graph
    constants: dict[str, Any] = field(default_factory=dict)
    base_graph: Graph | None = None
    base_constants: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.constants = dict(self.constants or {})
        if self.base_graph is None:
            self.base_graph = self.graph
        if self.base_constants is None:
            self.base_constants = dict(self.constants)

    def instantiate(
        self,
        input_names: Sequence[str],
        instance_id: int | str | None = None,
        constants: Mapping[str, Any] | None = None,
    ) -> Block:
        """A copy of the base definition named `<name><instance_id>/...` fed by `input_names`."""
        base = self.base_graph
        if len(input_names) != len(base.input_names):
            raise ValueError(f"block {self.name!r}: wrong number of inputs, expected "
                             f"{len(base.input_names)}, got {len(input_names)}")
        prefix = self.name + ("" if instance_id is None else str(instance_id))
        prefix = prefix + "/" if prefix else ""
        used = dict(self.base_constants)
        used.update(constants or {})
        inputs = {canonical_name(b): canonical_name(n)
                  for b, n in zip(base.input_names, input_names, strict=True)}

        def tensor(name: str) -> str:
            return inputs.get(canonical_name(name), prefix + canonical_name(name))

        def retarget(value: Any) -> Any:
            if isinstance(value, list | tuple):
                return type(value)(retarget(v) for v in value)
            if not isinstance(value, str) or not value.startswith(("S:", "K:")):
                return value
            ref = symbolic.parse(value)
            base_ref, div, mul = symbolic.split_factors(value)
            suffix = (f"%{div}" if div > 1 else "") + (f"*{mul}" if mul > 1 else "")
            if isinstance(ref, symbolic.ConstRef):
                key = prefix + ref.key if ref.key in used else ref.key
                return f"K:{key}{suffix}"
            if ref.tensor is None:
                return value
            return f"S:{tensor(ref.tensor)}:{ref.dim}{suffix}"

        ops = []
        for op in base.ops:
            ops.append(Op(
                name=prefix + op.name,
                type=op.type,
                input_names=[tensor(n) for n in op.input_names],
                input_kwargs={k: retarget(v) for k, v in copy.deepcopy(op.input_kwargs).items()},
                op_kwargs={k: retarget(v) for k, v in copy.deepcopy(op.op_kwargs).items()},
                num_outputs=op.num_outputs,
            ))
        outputs = [tensor(n) for n in base.output_names]
        graph = new_graph(list(input_names), outputs, ops)
        return Block(
            name=self.name,
            graph=graph,
            constants={prefix + k: v for k, v in used.items()},
            base_graph=base,
            base_constants=used,
        )
