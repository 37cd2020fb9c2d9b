"""`from_flax`: a user's Flax module (linen or NNX) with its weights, as an IR candidate.

Why: researchers arrive with a model already written (often trained) in Flax; importing it
into the IR lets the search mutate it and lets children start from its weights. The import
only traces and translates (a ResNet-50 in well under 2 s); comparing the IR model's
outputs with the module's compiles both, so it is `nas.interop.check.check_import`, which
`nas-search import` and the tests run (and `from_flax` inside `checked_imports()`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nas.cli_messages import first_line
from nas.interop import layers
from nas.interop.calling import example, init_variables, is_nnx
from nas.interop.trace import trace
from nas.interop.translate import INPUT, Translator, translate

PREFIX = "nas.from_flax"


def from_flax(model: Any, example_input: Any, *, variables: Mapping[str, Any] | None = None,
              **call_kwargs: Any) -> Any:
    """`model` (a `flax.linen.Module` or a `flax.nnx.Module`) as an `ExportedCandidate`.

    linen: called as `model.apply(variables, x, **call_kwargs)` (e.g. `train=False`);
    without `variables` it is initialised from `jax.random.PRNGKey(0)`. NNX: called as
    `model(x, **call_kwargs)` with its own state, in the mode it is in (`model.eval()`).
    `example_input` is one batch (batch axis first). Anything the IR cannot express is one
    ValueError line naming the primitive or layer and its module path.

    The outputs are not compared here (that compiles the model twice): call
    `nas.check_import(candidate, model, example_input, variables=..., **call_kwargs)`, or
    import inside `nas.interop.check.checked_imports()`, as `nas-search import` does."""
    from nas.graph import new_graph
    from nas.interop import check
    from nas.io.candidate import ExportedCandidate

    x = example(example_input, PREFIX)
    if layers.is_linen(model):
        if variables is None:
            variables = init_variables(model, x, call_kwargs, PREFIX)
        variables = jax.tree.map(jnp.asarray, dict(variables))
    elif not is_nnx(model):
        raise ValueError(f"{PREFIX}: expected a flax.linen or flax.nnx Module, got "
                         f"{type(model).__name__}")
    elif variables is not None:
        raise ValueError(f"{PREFIX}: an NNX module holds its own state; pass no variables")
    root = type(model).__name__
    try:
        traced = trace(model, x, variables, call_kwargs)
        translator = Translator(traced, tuple(x.shape), root)
        out = translate(translator)
        graph = new_graph([INPUT], [out.name], translator.ops)
    except ValueError as e:
        raise ValueError(f"{PREFIX}: {first_line(e)}") from None
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError,
            jax.errors.TracerArrayConversionError) as e:
        raise ValueError(f"{PREFIX}: {root}: the model's Python code depends on the values "
                         f"of its input (data-dependent control flow or shapes): "
                         f"{first_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - flax and jax raise many types for a bad call
        raise ValueError(f"{PREFIX}: {root}: calling the module on the example input "
                         f"{x.dtype}{list(x.shape)} failed: {first_line(e)}") from None
    if len(traced.output_ids) != 1:
        raise ValueError(f"{PREFIX}: {root} returns {len(traced.output_ids)} arrays; the IR "
                         f"imports a model with one output")
    out_vars: dict[str, Any] = {"params": translator.params}
    if translator.batch_stats:
        out_vars["batch_stats"] = translator.batch_stats
    out_vars = jax.tree.map(lambda a: np.asarray(a), out_vars)
    candidate = ExportedCandidate(path=f"<{PREFIX}({root})>", graph=graph, constants={},
                                  variables=out_vars, input_shape=tuple(x.shape[1:]),
                                  info={"imported_from": f"{type(model).__module__}.{root}",
                                        "api": "linen" if layers.is_linen(model) else "nnx"})
    if check.checking():
        check.check_import(candidate, model, x, variables=variables, **call_kwargs)
    return candidate
