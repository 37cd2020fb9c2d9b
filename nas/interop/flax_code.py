"""`export_flax`: a candidate as plain Flax code, `model.py` and `variables.msgpack`.

Why: a user takes the architecture a search found into their own training pipeline, where
`nas` is not installed. `model.py` is a `flax.linen` module `Model` with one line per IR op,
named after it and commented with its output shape, that computes exactly what the
interpreter computes: every symbolic kwarg is resolved here, from the candidate's
`input_shape` and constants, and the helpers the interpreter calls for speed (grouped
convolution, max pooling, stochastic depth) are copied in from nas' own sources.
Flax layer names are the op names, so `variables.msgpack` holds the candidate's variables
as they are (`flax.serialization.msgpack_serialize`). With `api="nnx"` the same lines are
written as a plain `flax.nnx` module instead (`nas.interop.flax_nnx_code`): the ops that hold
layers or parameters become attributes built in `__init__`.
"""

from __future__ import annotations

import ast
import inspect
import keyword
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from nas.graph import grouped_conv, model, pooling
from nas.graph.ops import Graph, canonical_name
from nas.interop import flax_nnx_code, flax_ops
from nas.properties.resolved import freeze, resolve_kwargs
from nas.properties.tensor_shapes import graph_shapes

MODEL_FILE = "model.py"
VARIABLES_FILE = "variables.msgpack"
# Two batch sizes: a kwarg or a shape that differs between them depends on the batch size.
_BATCHES = (2, 3)
_BASE_IMPORTS = ("import flax.linen as nn", "import jax", "import jax.numpy as jnp",
                 "import numpy as np", "from jax import lax")


def export_flax(candidate_or_path: Any, directory: str | os.PathLike,
                api: str | None = None) -> Path:
    """Write `model.py` and `variables.msgpack` for a candidate (a `nas.load_candidate`
    result, or the path of an exported candidate) into `directory` (created; it must not
    hold anything yet). Everything is generated before anything is written, and the files
    appear together, so a refused candidate leaves nothing behind. Returns the directory.

    api: "linen" (`Model` a linen module) or "nnx" (`Model` an nnx.Module,
    `nas.interop.flax_nnx_code`); by default the API the candidate was imported from
    (`info["api"]`, set by `nas.from_flax`), else linen."""
    from flax import serialization

    from nas.io.candidate import ExportedCandidate, load_candidate

    directory = Path(directory)
    check_out_dir(directory)
    if isinstance(candidate_or_path, str | os.PathLike):
        candidate = load_candidate(candidate_or_path)
    elif isinstance(candidate_or_path, ExportedCandidate):
        candidate = candidate_or_path
    else:
        raise ValueError(f"export_flax: expected an exported candidate or its path, got "
                         f"{type(candidate_or_path).__name__}")
    where = candidate.path
    api = flax_nnx_code.check_api(api, candidate.info.get("api") or "linen")
    if candidate.input_shape is None:
        raise ValueError(f"{where}: the candidate has no input_shape (an export of an earlier "
                         f"version); Flax code needs it to resolve the graph's sizes")
    if candidate.variables is None:
        raise ValueError(f"{where}: the candidate was exported without trained weights")
    try:
        source = model_source(candidate.graph, candidate.constants, candidate.input_shape,
                              data_name=_data_name(candidate.train_config), api=api)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    variables = jax.tree.map(np.asarray, dict(candidate.variables))
    payload = serialization.msgpack_serialize(variables)
    write_files(directory, {MODEL_FILE: source.encode("utf-8"), VARIABLES_FILE: payload})
    return directory


def check_out_dir(directory: Path) -> None:
    """The output directory may not exist yet, or be empty: nothing of the user's is
    overwritten."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory}: exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()):
        raise ValueError(f"{directory}: the directory is not empty; give a new or empty one")


def write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """All files into a temp directory beside `directory`, then one rename: a reader never
    sees one file without the other."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp",
                                dir=directory.parent))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        tmp.chmod(0o777 & ~_umask())
        if directory.is_dir():
            directory.rmdir()  # empty (checked): rename needs the name free
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _data_name(train_config: Mapping[str, Any] | None) -> str:
    """The dataset name (`input.data.name`) the candidate was trained on, "" if unknown."""
    try:
        return str(train_config["input"]["data"]["name"])  # type: ignore[index]
    except (KeyError, TypeError):
        return ""


def preprocess_source(data_name: str) -> str:
    """The text of `model.py`'s `preprocess`: what the model saw of uint8 images at
    evaluation (`nas.train.data.preprocess`; CIFAR's mean and std for CIFAR by name)."""
    from nas.train import data as data_lib

    base = data_name.split("/")[0].split(":")[0]
    doc = ['def preprocess(images: np.ndarray) -> np.ndarray:',
           '    """uint8 images (N, *INPUT_SHAPE), values 0..255, as `Model` expects them:']
    if base in ("cifar10", "cifar100"):
        mean = ", ".join(repr(float(v)) for v in data_lib.CIFAR_MEAN)
        std = ", ".join(repr(float(v)) for v in data_lib.CIFAR_STD)
        return "\n".join([
            *doc, f"    float32, divided by 255, normalized by {base}'s mean and std (the",
            '    channels are RGB), as nas evaluated it (numpy: the same float32 values)."""',
            "    x = np.asarray(images).astype(np.float32) / 255.0",
            f"    return (x - np.array([{mean}], np.float32)) / np.array([{std}], np.float32)"])
    resize = ("    Resize them to INPUT_SHAPE first (nas resized bilinearly)."
              if base in ("", "digits", "folder", "npz") else
              "    Resize them first as nas did: the short side to INPUT_SHAPE[0] * 256 / 224,"
              "\n    then a center crop to INPUT_SHAPE.")
    return "\n".join([
        *doc, "    float32 in [-1, 1], x / 127.5 - 1, as nas evaluated it (`nas.preprocess`).",
        resize, "    In numpy, so that the values are nas' own to the bit.", '    """',
        "    return np.asarray(images).astype(np.float32) / 127.5 - 1.0"])


def model_source(graph: Graph, constants: Mapping[str, Any] | None,
                 input_shape: Sequence[int], data_name: str = "", api: str = "linen") -> str:
    """The text of `model.py` for `graph` on inputs of shape (batch, *input_shape), with
    `preprocess` for images of the dataset `data_name` (its training data), its `Model` a
    linen module or (`api="nnx"`) an nnx.Module."""
    constants = dict(constants or {})
    if len(graph.input_names) != 1 or len(graph.output_names) != 1:
        raise ValueError(f"the graph has inputs {graph.input_names} and outputs "
                         f"{graph.output_names}; Flax code is written for exactly one of each")
    input_name = canonical_name(graph.input_names[0])
    shapes = [graph_shapes(graph, constants, {input_name: (b, *input_shape)})
              for b in _BATCHES]
    names = python_names(graph, input_name,
                         flax_nnx_code.reserved_names() if api == "nnx" else frozenset())
    lines, helpers = [], set()
    inits: list[tuple[str, str, str]] = []  # NNX: (attribute, its layer, op name)
    for op in graph.ops:
        if op.num_outputs != 1:
            raise ValueError(f"op {op.name!r}: {op.num_outputs} outputs cannot be exported")
        resolved = []
        for s in shapes:
            ins = [s.shape(n) for n in op.input_names]
            resolved.append(resolve_kwargs(op, ins, s.tensors, constants))
        _check_batch_free(op, resolved)
        code = flax_ops.OpCode(op, *resolved[0], [names[n] for n in op.input_names],
                               [shapes[0].shape(n) for n in op.input_names],
                               ns="nnx" if api == "nnx" else "nn")
        out = op.output_names[0]
        held = flax_nnx_code.layer(code, names[out]) if api == "nnx" else None
        if held is None:
            expression = flax_ops.op_expression(code)
        else:
            inits.append((names[out], held[0], op.name))
            expression = held[1]
        helpers |= code.helpers
        shape = shape_text(shapes[0].shape(out), shapes[1].shape(out))
        lines.append(f"{names[out]} = {expression}  # {shape}")
    output = names[canonical_name(graph.output_names[0])]
    source = _render(lines, output, helpers, tuple(input_shape), shapes[0], input_name,
                     preprocess_source(data_name), api, inits)
    compile(source, MODEL_FILE, "exec")  # a bug here, not a broken file for the user
    return source


def _check_batch_free(op: Any, resolved: Sequence[tuple[dict[str, Any], dict[str, Any]]]
                      ) -> None:
    """ValueError naming the first kwarg whose value differs between the two batch sizes
    (e.g. `S:0`): written as a literal, it would tie the code to one batch size."""
    for which, raw in enumerate((op.op_kwargs, op.input_kwargs)):
        first, second = resolved[0][which], resolved[1][which]
        for key in first:
            if freeze(first[key]) != freeze(second[key]):
                raise ValueError(
                    f"op {op.name!r} kwarg {key!r}: {raw[key]!r} depends on the batch size "
                    f"({first[key]!r} at batch {_BATCHES[0]}, {second[key]!r} at batch "
                    f"{_BATCHES[1]}); Flax code is written for any batch size")


def shape_text(a: Sequence[int], b: Sequence[int]) -> str:
    """`(B, 16, 16, 64)`: dims that change with the batch size are `B`."""
    dims = ["B" if x != y else str(x) for x, y in zip(a, b, strict=True)]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


# Names the generated method itself uses; an op's variable never shadows one.
_TAKEN = frozenset({"self", "x", "train", "nn", "jax", "jnp", "lax", "np", "functools",
                    "string", "Sequence", "Any", "Model", "INPUT_SHAPE"})


def python_names(graph: Graph, input_name: str,
                 reserved: frozenset[str] = frozenset()) -> dict[str, str]:
    """A distinct Python identifier for every tensor: the graph input is `x`, an op's output
    its name with every other character than letters, digits and `_` made `_`, none of
    `reserved` (NNX code: the names its layers' attributes may not take)."""
    taken = set(_TAKEN) | set(_helper_names()) | set(reserved)
    out = {input_name: "x"}
    for op in graph.ops:
        base = re.sub(r"\W", "_", op.name, flags=re.ASCII)
        if base[0].isdigit() or keyword.iskeyword(base):
            base = f"op_{base}"
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        out[op.output_names[0]] = name
    return out


_DOC = '''"""A candidate of a `nas` search as a plain `flax.linen` module (nas.export_flax).

Each line of `Model.__call__` is one op of the candidate's graph, named after it; the comment
gives its output shape (B: the batch size). The candidate was trained on inputs of shape
(B, *INPUT_SHAPE). Its trained variables are in variables.msgpack beside this file:

    import flax.serialization
    with open("variables.msgpack", "rb") as f:
        variables = flax.serialization.msgpack_restore(f.read())
    logits = Model().apply(variables, preprocess(images))  # inference on uint8 images
    logits, updates = Model().apply(variables, batch, train=True, mutable=["batch_stats"],
                                    rngs={"dropout": key})  # a training step\'s forward pass
"""'''


def _render(lines: list[str], output: str, helpers: set[str], input_shape: tuple[int, ...],
            shapes: Any, input_name: str, preprocess: str, api: str = "linen",
            inits: Sequence[tuple[str, str, str]] = ()) -> str:
    sources = [_helper_source(name) for name in sorted(helpers)]
    imports = set(_BASE_IMPORTS) if api == "linen" else (
        set(_BASE_IMPORTS) - {"import flax.linen as nn"}
        | {"from flax import nnx", "from collections.abc import Mapping",
           "from typing import Any"})
    bodies = []
    for imported, body in sources:
        imports |= imported
        bodies.append(body)
    imports = _merged(imports)
    stdlib = sorted((i for i in imports if i.split()[1].split(".")[0] not in ("jax", "flax",
                                                                                "numpy")),
                    key=_import_order)
    third = sorted((i for i in imports if i not in stdlib), key=_import_order)
    doc = flax_nnx_code.DOC if api == "nnx" else _DOC
    header = [doc, "", "from __future__ import annotations", ""]
    header += ([*stdlib, ""] if stdlib else []) + third
    batch_shape = shape_text(shapes.shape(input_name), (-1, *input_shape))
    body = ["", "", f"INPUT_SHAPE = {input_shape!r}", "", "", preprocess, "", ""]
    if api == "nnx":
        body.append(flax_nnx_code.model_class(inits, lines, output, batch_shape))
    else:
        body += _linen_class(lines, output, batch_shape)
    if bodies:
        body += ["", "", "# Helpers copied from nas: the same values as plain flax/jax, with "
                 "gradients that", "# run faster on CPU.", ""]
        body += ["\n\n".join(b.strip("\n") for b in bodies)]
    return "\n".join(header + body) + "\n"


def _linen_class(lines: list[str], output: str, batch_shape: str) -> list[str]:
    return [
        "class Model(nn.Module):",
        '    """The candidate\'s graph, op by op: `train` turns on batch statistics, dropout',
        '    and stochastic depth, as in the candidate\'s training. It expects float32',
        '    images (B, *INPUT_SHAPE) as `preprocess` makes them of uint8 ones."""',
        "",
        "    @nn.compact",
        "    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:",
        f"        # x: {batch_shape}",
        *[f"        {line}" for line in lines],
        f"        return {output}",
    ]


def _merged(imports: set[str]) -> set[str]:
    """`from m import a` and `from m import b` as one `from m import a, b`."""
    names: dict[str, set[str]] = {}
    out = set()
    for line in imports:
        if line.startswith("from ") and " as " not in line:
            module, _, listed = line[len("from "):].partition(" import ")
            names.setdefault(module, set()).update(n.strip() for n in listed.split(","))
        else:
            out.add(line)
    return out | {f"from {m} import {', '.join(sorted(n))}" for m, n in names.items()}


def _import_order(line: str) -> tuple[bool, str]:
    """`import x` lines before `from x import y`, each by module name (as isort does)."""
    return line.startswith("from "), line.split()[1]


def _helper_names() -> list[str]:
    """Every top-level name a helper defines, so that no op variable shadows one."""
    names = []
    for module in (grouped_conv, pooling):
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [*names, flax_ops.STOCH_DEPTH]


def _helper_source(name: str) -> tuple[set[str], str]:
    """(import lines, code) of one helper: the interpreter's own stochastic depth, or the
    whole of nas' max pooling or grouped convolution module past its imports."""
    if name == flax_ops.STOCH_DEPTH:
        return set(), inspect.getsource(model._stochastic_depth)
    module = {flax_ops.MAX_POOL: pooling, flax_ops.GROUPED_CONV: grouped_conv}[name]
    text = inspect.getsource(module)
    tree = ast.parse(text)
    imports, last = set(), 0
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            last = node.end_lineno
            if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                imports.add(ast.get_source_segment(text, node))
    body = "\n".join(text.splitlines()[last:])
    return imports, body
