"""The NNX face of an exported candidate: `model.py`'s `Model` as a plain `flax.nnx.Module`.

Why: a user who imported an NNX model (`nas.from_flax`) trains NNX code, and reads it as NNX
code. So `Model` is written as an NNX user writes one: every layer (and every parameter the
graph holds directly, such as a layer scale) an attribute built in `__init__` with its
sizes as literals, and `__call__` one line per IR op, named after it, with its output shape.
The layers are NNX's own (`nnx.Conv`, `nnx.Linear`, `nnx.BatchNorm`, ...), whose variables
have the names and shapes of the linen layers the interpreter runs, so `variables.msgpack`
stays the candidate's variables keyed by op name; `from_variables` puts them into the
attributes, whatever their nesting (a parameter held directly by an op, a layer's kernel,
an attention layer's sublayers, batch statistics).

Training mode is NNX's: `model.train()` / `model.eval()` switch batch statistics, dropout
and stochastic depth (an `nnx.Dropout` over whole samples) as in the candidate's training.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence

from nas.graph.model import spatial_rank
from nas.graph.ops import OpType
from nas.graph.validate import MODULE_TYPES
from nas.interop.flax_ops import GROUPED_CONV, OpCode

API = ("linen", "nnx")

# The NNX layer each module op type is written as (same variables as the linen layer).
LAYERS: dict[OpType, str] = {
    OpType.DENSE: "Linear", OpType.DENSE_GENERAL: "LinearGeneral", OpType.CONV: "Conv",
    OpType.BATCH_NORM: "BatchNorm", OpType.LAYER_NORM: "LayerNorm",
    OpType.GROUP_NORM: "GroupNorm", OpType.DROPOUT: "Dropout",
    OpType.SELF_ATTENTION: "MultiHeadAttention",
}


def check_api(api: str | None, default: str) -> str:
    """`api` ("linen" or "nnx"), or `default` for None; anything else is one line."""
    chosen = default if api is None else api
    if chosen not in API:
        raise ValueError(f"export_flax: api must be 'linen' or 'nnx', got {api!r}")
    return chosen


def reserved_names() -> frozenset[str]:
    """Names an attribute of `Model` may not take: nnx.Module's own (`train`, `eval`, ...),
    and those of the generated file."""
    from flax import nnx

    return frozenset({*dir(nnx.Module), "nnx", "rngs", "from_variables", "preprocess",
                      "OP_ATTRIBUTES", "Mapping"})


def layer(code: OpCode, attr: str) -> tuple[str, str] | None:
    """(the `__init__` expression of `self.<attr>`, the op's `__call__` expression) for an op
    that holds a layer or a parameter; None for an op that is a plain expression
    (`flax_ops.op_expression`)."""
    t = code.op.type
    if t in LAYERS:
        return _layer(code, attr)
    if t is OpType.PARAM:
        init = code.lit("init_fn", code.in_kw["init_fn"])
        shape = code.lit("shape", tuple(code.in_kw["shape"]))
        return f"nnx.Param({init}(rngs.params(), {shape}))", f"self.{attr}[...]"
    if t in (OpType.ADD, OpType.STOCH_DEPTH):
        rate = float(code.in_kw.get("layer_drop_rate", 0.0))
        if rate <= 0.0:
            return None
        # The interpreter's stochastic depth is dropout of whole samples: one draw per
        # example, kept ones scaled by 1 / (1 - rate).
        dims = tuple(range(1, len(code.shapes[0])))
        init = (f"nnx.Dropout({code.lit('layer_drop_rate', rate)}, broadcast_dims="
                f"{code.lit('broadcast_dims', dims)}, rngs=rngs)")
        call = f"self.{attr}({code.args[0]})"
        return init, (f"{call} + {code.args[1]}" if t is OpType.ADD else call)
    return None


def _axes(value: int | Sequence[int], rank: int) -> tuple[int, ...]:
    return tuple(a % rank for a in ((value,) if isinstance(value, int) else value))


def _one_axis(code: OpCode, key: str, default: int) -> int:
    """The single feature axis of a norm layer: NNX norms hold (num_features,) variables."""
    value = code.op_kw.get(key, default)
    axes = _axes(value, len(code.shapes[0]))
    if len(axes) != 1:
        raise ValueError(f"op {code.op.name!r} kwarg {key!r}: {value!r} names several axes; "
                         f"nnx.{LAYERS[code.op.type]} normalizes over features of one axis")
    return axes[0]


def _layer(code: OpCode, attr: str) -> tuple[str, str]:
    """An NNX layer for a module op: its sizes (NNX layers take their input sizes) from the
    op's input shape, every other argument the op's own resolved kwarg."""
    t, shape = code.op.type, tuple(code.shapes[0])
    kw = dict(code.op_kw)
    grouped = False
    if t in (OpType.DENSE, OpType.CONV):
        head = [shape[-1], kw.pop("features")]
        if t is OpType.CONV:
            size = kw.pop("kernel_size")
            if isinstance(size, int):
                size = (size,) * spatial_rank(t, shape, {"kernel_size": size}, "kernel_size")
            head.append(tuple(size))
            # nas' grouped convolution: the values of lax's, with faster gradients on CPU.
            grouped = int(kw.get("feature_group_count", 1)) > 1
    elif t is OpType.DENSE_GENERAL:
        axes = _axes(kw.get("axis", -1), len(shape))
        head = [shape[axes[0]] if len(axes) == 1 else tuple(shape[a] for a in axes),
                kw.pop("features")]
    elif t is OpType.BATCH_NORM:
        head = [shape[_one_axis(code, "axis", -1)]]
    elif t is OpType.LAYER_NORM:
        head = [shape[_one_axis(code, "feature_axes", -1)]]
    elif t is OpType.GROUP_NORM:
        head = [shape[-1]]
    elif t is OpType.DROPOUT:
        head = [kw.pop("rate")]
    else:  # SELF_ATTENTION
        head = [kw.pop("num_heads"), shape[-1]]
        # linen's SelfAttention does not decode by default; NNX's must be told.
        kw.setdefault("decode", False)
    # A batch norm whose op fixes its mode gets it in the call, where it overrides
    # `train()` / `eval()` as the interpreter's call kwarg does.
    fixed = ({"use_running_average": code.in_kw["use_running_average"]}
             if t is OpType.BATCH_NORM and "use_running_average" in code.in_kw else {})
    args = [code.lit("sizes", v) for v in head] + _keywords(code, kw)
    if grouped:
        code.helpers.add(GROUPED_CONV)
        args.append(f"conv_general_dilated={GROUPED_CONV}")
    init = f"nnx.{LAYERS[t]}({', '.join([*args, 'rngs=rngs'])})"
    call_args = [code.args[0], *(f"{k}={code.lit(k, v)}" for k, v in fixed.items())]
    return init, f"self.{attr}({', '.join(call_args)})"


def _keywords(code: OpCode, kw: dict) -> list[str]:
    """`key=value` for the op's remaining kwargs, each an argument of the NNX layer. A linen
    field NNX has no argument for is dropped at linen's default (NNX layers compute as
    linen's do by default: float32 reductions, no batch axes, the plain matmul) and
    refused at any other value."""
    from flax import nnx

    cls = getattr(nnx, LAYERS[code.op.type])
    accepted = inspect.signature(cls.__init__).parameters
    linen = {f.name: f.default for f in dataclasses.fields(MODULE_TYPES[code.op.type])
             if f.default is not dataclasses.MISSING}
    out = []
    order = [k for k in code.op.op_kwargs if k in kw] + sorted(set(kw) - set(code.op.op_kwargs))
    for key in order:
        value = kw[key]
        if key not in accepted or key in ("rngs", "in_features", "num_features"):
            if key in linen and _same(value, linen[key]):
                continue
            raise ValueError(f"op {code.op.name!r} kwarg {key!r}: nnx.{cls.__name__} has no "
                             f"such argument, so NNX code cannot carry {value!r}; export it "
                             f"with api='linen'")
        out.append(f"{key}={code.lit(key, value)}")
    return out


def _same(a: object, b: object) -> bool:
    """Equal, a list and a tuple of the same items alike (the IR holds JSON lists)."""
    return (tuple(a) if isinstance(a, list | tuple) else a) == (
        tuple(b) if isinstance(b, list | tuple) else b)


DOC = '''"""A candidate of a `nas` search as a `flax.nnx` module (nas.export_flax, api="nnx").

`Model` builds each layer of the candidate's graph in `__init__`, and `__call__` has one
line per op, named after it, with its output shape in a comment (B: the batch size). The
candidate was trained on inputs of shape (B, *INPUT_SHAPE), as `preprocess` makes them of
uint8 images. Its trained variables are in variables.msgpack beside this file:

    import flax.serialization
    with open("variables.msgpack", "rb") as f:
        model = from_variables(flax.serialization.msgpack_restore(f.read()))
    logits = model(preprocess(images))  # inference (from_variables returns it in eval mode)
    model.train()  # batch statistics, dropout and stochastic depth, as in training
"""'''


def model_class(inits: Sequence[tuple[str, str, str]], lines: Sequence[str], output: str,
                batch_shape: str) -> str:
    """The text of `class Model`: `inits` (attribute, expression, op name) built in
    `__init__`, `lines` the body of `__call__`, returning `output`."""
    init_lines = [wrapped(f"        self.{attr} = {expr}") for attr, expr, _ in inits]
    return "\n".join([
        "class Model(nnx.Module):",
        '    """The candidate\'s graph, op by op. It expects float32 images (B, *INPUT_SHAPE)',
        "    as `preprocess` makes them. `rngs` initializes the layers and draws dropout and",
        '    stochastic depth in training mode."""',
        "",
        "    def __init__(self, *, rngs: nnx.Rngs) -> None:",
        *(init_lines or ["        del rngs  # no layer to build"]),
        "",
        "    def __call__(self, x: jax.Array) -> jax.Array:",
        f"        # x: {batch_shape}",
        *[f"        {line}" for line in lines],
        f"        return {output}",
        "",
        "",
        "# variables.msgpack keys its variables by op name; each op's attribute of Model.",
        _op_attributes([(op, attr) for attr, _, op in inits]),
        "",
        "",
        LOADER,
    ])


def _op_attributes(pairs: Sequence[tuple[str, str]]) -> str:
    """`OP_ATTRIBUTES = {...}` on one line, or one entry a line where that is too long."""
    entries = [f"{op!r}: {attr!r}" for op, attr in pairs]
    line = "OP_ATTRIBUTES = {" + ", ".join(entries) + "}"
    if len(line) <= 100:
        return line
    return "\n".join(["OP_ATTRIBUTES = {", *[f"    {e}," for e in entries], "}"])


def wrapped(line: str, width: int = 100) -> str:
    """`line` (an assignment whose value is one call) broken after its arguments' commas
    into lines of at most `width` characters where it is longer, each continuation aligned
    under the call's first argument, as a person writes a long layer."""
    if len(line) <= width or "(" not in line:
        return line
    head, rest = line.split("(", 1)
    args, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(rest[:-1]):  # rest ends with the call's closing parenthesis
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(rest[start:i + 1].strip())
            start = i + 1
    args.append(rest[start:-1].strip() + ")")
    indent = " " * (len(head) + 1)
    lines, current = [], head + "("
    for arg in args:
        if current.strip() and not current.endswith("(") and \
                len(current) + 1 + len(arg) > width:
            lines.append(current)
            current = indent + arg
        else:
            current += ("" if current.endswith("(") else " ") + arg
    return "\n".join([*lines, current])


LOADER = '''def from_variables(variables: Mapping[str, Any], *,
                   rngs: nnx.Rngs | None = None) -> Model:
    """`Model` holding `variables` (variables.msgpack's: each collection, "params" and with
    batch norm "batch_stats", keyed by op name), in evaluation mode: call `model.train()`
    before training it. Every variable of Model must be given, at its shape."""
    # Model's initial weights would all be replaced: only their shapes are made. What else
    # its layers hold (the random streams of dropout) comes from one jitted construction
    # that returns nothing but that, so XLA drops the initializers; `rngs` advances as if
    # Model had been built with it.
    kept = nnx.Not((nnx.Param, nnx.BatchStat))
    rest = nnx.jit(lambda r: nnx.state(Model(rngs=r), kept))(rngs or nnx.Rngs(0))
    model = nnx.eval_shape(lambda: Model(rngs=nnx.Rngs(0)))
    nnx.update(model, rest)
    loaded = set()
    for collection, ops in variables.items():
        for op, value in ops.items():
            if op not in OP_ATTRIBUTES:
                raise ValueError(f"variables[{collection!r}][{op!r}]: Model has no op {op!r}")
            path = (OP_ATTRIBUTES[op],)
            _load(getattr(model, path[0]), value, path, f"{collection}/{op}", loaded)
    every = nnx.to_flat_state(nnx.state(model, (nnx.Param, nnx.BatchStat)))
    missing = [path for path, _ in every if tuple(path) not in loaded]
    if missing:
        raise ValueError(f"variables: no value for {'.'.join(map(str, missing[0]))} (and "
                         f"{len(missing) - 1} more of Model's variables)")
    model.eval()
    return model


def _load(target: Any, value: Any, path: tuple, where: str, loaded: set) -> None:
    """Sets one variable from an array (a parameter held directly by an op, a layer's kernel,
    a batch statistic), or each of a dict's entries into the attribute of its name (a
    layer's variables, a layer's sublayers)."""
    if isinstance(value, Mapping):
        for key, sub in value.items():
            if not hasattr(target, key):
                raise ValueError(f"variables {where}/{key}: Model has no such variable")
            _load(getattr(target, key), sub, (*path, key), f"{where}/{key}", loaded)
        return
    if not isinstance(target, nnx.Variable):
        raise ValueError(f"variables {where}: an array where Model has a "
                         f"{type(target).__name__}")
    if tuple(target.shape) != np.shape(value):
        raise ValueError(f"variables {where}: shape {np.shape(value)}, Model's is "
                         f"{tuple(target.shape)}")
    target.set_value(jnp.asarray(value, target.dtype))
    loaded.add(path)'''
