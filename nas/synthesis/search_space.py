"""The space of ops the sequential synthesizers build subgraphs from.

Two settings of kwarg values: TEST (few, cheap values used while searching for a structure
that satisfies the properties) and FULL (many values used to randomize a found structure).
Both are extended with the values the subgraph being replaced already uses, so a search
can always rebuild something close to the original.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

from nas.graph.ops import Op, OpType, new_op
from nas.graph.symbolic import split_factors

KwargSets = dict[str, set[Any]]

# Ops synthesized by default only where the replaced subgraph already had one. Softmax and
# sigmoid squash activations into (0, 1): in the middle of a network they starve what
# follows of signal. A scalar multiply (1/sqrt(channels) unless given a constant: attention's
# scaling) shrinks the signal 6-11x in CifarNet's layers, which a fine-tune of one epoch does
# not undo: in the README searches of seeds 0-2 (53 children) it was in 2 of the 2 children
# below half their parent's accuracy and in 5 of the 6 below 0.9 of it.
INHERIT_ONLY = ("SOFTMAX", "SIGMOID", "SCALAR_MUL")
# Activations added for imported models, beyond the reference's vocabulary. Synthesis uses
# them where the replaced subgraph had one, and anywhere only with `extra_activations`.
EXTRA_ACTIVATIONS = ("RELU6", "TANH", "HARD_SWISH", "LEAKY_RELU", "ELU")
DEFAULT_WIDTH_FACTORS = ("%2", "", "*2")
DEFAULT_POOL_WINDOWS = (2, 3, 4)
_FACTOR = re.compile(r"^([*%][1-9][0-9]*)?$")


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """Which ops and widths synthesis may use; part of a search's mutation config.

    op_types: names of the op types synthesis may build (None: every synthesizable type).
    inherit_only: op types built only where the replaced subgraph already had one (by
        default `INHERIT_ONLY`: a softmax between two layers collapses a child).
    width_factors: factors a synthesized DENSE/CONV width may take relative to its input
        ("%2": half, "": same, "*2": double). The last width of a chain is still whatever
        the shape property requires.
    full_window_pools: whether synthesis may build a pool whose window spans the whole
        input (`window_shape` 0) where the replaced subgraph had none. Off by default: with
        the SAME padding synthesis uses, such a pool keeps the resolution but gives every
        position nearly the same value, so the convolutions after it see no image; in the
        README digits searches 7 of 9 distinct such children ended at 0.08-0.64 (parents
        0.95-0.98) or ran out of time (a 32x32 window at every position of a 32x32 map).
    linear_outputs: whether a chain that computes a network output (the logits) must end
        with a DENSE or CONV where the chain it replaces did (`linear_output` says why).
    pool_windows: the pool window sizes synthesis may choose (a window the replaced
        subgraph used is always kept). 8 is left out by default: in nine stored digits
        studies 17 of 49 children with a new 8x8 pool ended below 0.9 of their parent's
        accuracy, against 6 of 118 with smaller windows and 17 of 218 with no new pool
        (docs/function-preservation.md).
    extra_activations: whether synthesis may insert the activations of EXTRA_ACTIVATIONS
        where the replaced subgraph had none (where it had one, that one is always
        allowed). Off by default until a search measures them: so a search of a graph
        without them, and a study stored before they existed, proposes what it did.
        Naming them in `op_types` allows them too.
    """

    op_types: tuple[str, ...] | None = None
    inherit_only: tuple[str, ...] = INHERIT_ONLY
    width_factors: tuple[str, ...] = DEFAULT_WIDTH_FACTORS
    full_window_pools: bool = False
    linear_outputs: bool = True
    pool_windows: tuple[int, ...] = DEFAULT_POOL_WINDOWS
    extra_activations: bool = False

    def __post_init__(self) -> None:
        for field in ("op_types", "inherit_only", "width_factors", "pool_windows"):
            value = getattr(self, field)
            if value is None and field == "op_types":
                continue
            if isinstance(value, str) or not isinstance(value, Sequence):
                kind = "window sizes" if field == "pool_windows" else "strings"
                raise ValueError(f"search_space.{field}: expected a list of {kind}, got "
                                 f"{value!r}")
            object.__setattr__(self, field, tuple(value))
        for field in ("op_types", "inherit_only"):
            for name in getattr(self, field) or ():
                if not isinstance(name, str) or name.upper() not in OpType.__members__:
                    raise ValueError(f"search_space.{field}: {name!r} is not an op type; "
                                     f"expected names such as 'CONV' or 'RELU'")
                if OpType[name.upper()] in SKIPPED_TYPES:
                    raise ValueError(f"search_space.{field}: {name!r} is never synthesized")
        for field in ("full_window_pools", "linear_outputs", "extra_activations"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"search_space.{field}: expected True or False, got "
                                 f"{getattr(self, field)!r}")
        if not self.pool_windows or not all(
                isinstance(w, int) and not isinstance(w, bool) and w > 0
                for w in self.pool_windows):
            raise ValueError(f"search_space.pool_windows: expected a non-empty list of window "
                             f"sizes > 0 such as (2, 3, 4), got {list(self.pool_windows)!r}")
        if not self.width_factors:
            raise ValueError("search_space.width_factors: needs at least one factor, e.g. ''")
        for factor in self.width_factors:
            if not isinstance(factor, str) or not _FACTOR.match(factor):
                raise ValueError(f"search_space.width_factors: {factor!r} is not a factor; "
                                 f"expected '', '*N' or '%N'")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | SearchSpace | None) -> SearchSpace:
        if data is None:
            return cls()
        if isinstance(data, SearchSpace):
            return data
        if hasattr(data, "to_dict"):  # an ml_collections.ConfigDict from a config file
            data = data.to_dict()
        if not isinstance(data, Mapping):
            raise ValueError(f"search_space: expected a dict, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"search_space: unknown fields {unknown}; expected a subset of "
                             f"{sorted(known)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items()}

    def allowed_types(self, replaced: Iterable[Op]) -> tuple[OpType, ...]:
        """Op types synthesis may use to replace the ops `replaced`."""
        present = {op.type for op in replaced}
        allowed = ({OpType[n.upper()] for n in self.op_types} if self.op_types is not None
                   else set(OpType))
        for name in self.inherit_only:
            if OpType[name.upper()] not in present:
                allowed.discard(OpType[name.upper()])
        if self.op_types is None and not self.extra_activations:
            allowed -= {OpType[n] for n in EXTRA_ACTIVATIONS} - present
        return tuple(t for t in OpType if t in allowed and t not in SKIPPED_TYPES)


def _factor_sets(full: bool, space: SearchSpace | None = None) -> dict[str, list[Any]]:
    """The class-level kwarg values of each setting (width factors, pool windows and whether
    pools may span the whole input from `space`; a window the replaced ops used is always
    kept)."""
    sets = _class_sets(full)
    if space is not None:
        sets["features_factor"] = list(space.width_factors)
        # FULL draws from every allowed window, TEST tries the cheap ones it allows
        windows = (list(space.pool_windows) if full else
                   [w for w in sets["window_shape"] if w in space.pool_windows]
                   or [min(space.pool_windows)])
        sets["window_shape"] = windows + ([0] if space.full_window_pools else [])
    return sets


def _class_sets(full: bool) -> dict[str, list[Any]]:
    if full:
        return {
            "features_factor": ["%4", "%2", "", "*2", "*4"],
            "features": ["S:-1"],
            "kernel_size": [1, 3, 5],
            "strides": [1, 2, 3],
            "kernel_dilation": [1, 2, 3],
            "feature_group_count": [1, 2, 4, 16, 64],
            "window_shape": [0, 2, 3, 4, 8],
        }
    return {
        "features_factor": ["", "*2", "*4", "%2", "%4"],
        "features": ["S:-1"],
        "kernel_size": [1, 3],
        "strides": [1],
        "kernel_dilation": [1],
        "feature_group_count": [1],
        "window_shape": [0, 2, 3],
    }


# Keys whose observed values are shared (a pool's window is a good stride and vice versa).
MERGE_KWARGS = (("strides", "window_shape"),)

# Op types that are never synthesized (they change rank, need two or more inputs, or own
# weights that cannot be sized from one input). Sequential synthesis builds single-input
# chains, so CONCAT is never built; graph synthesis keeps an existing CONCAT as a node and
# rebuilds the chains into it with their shapes, so the concatenation still fits.
SKIPPED_TYPES = frozenset({
    OpType.NONE, OpType.IDENTITY, OpType.DENSE_GENERAL, OpType.ADD, OpType.MUL,
    OpType.SCALAR_ADD, OpType.DOT_GENERAL, OpType.EINSUM, OpType.FLATTEN, OpType.RESHAPE,
    OpType.TRANSPOSE, OpType.PARAM, OpType.SELF_ATTENTION, OpType.STOCH_DEPTH, OpType.MEAN,
    OpType.CONCAT,
})
KWARG_FREE_TYPES = frozenset({
    OpType.SCALAR_MUL, OpType.RELU, OpType.SWISH, OpType.SIGMOID, OpType.SOFTMAX,
    OpType.BATCH_NORM, OpType.LAYER_NORM, OpType.RELU6, OpType.TANH, OpType.HARD_SWISH,
})
# Activations with one optional kwarg: built with the values the replaced subgraph used
# (an imported exact GELU stays exact), or with none (flax's default) where it used none.
INHERITED_KWARG_TYPES: dict[OpType, str] = {
    OpType.GELU: "approximate",
    OpType.LEAKY_RELU: "negative_slope",
    OpType.ELU: "alpha",
}


def hashable(value: Any) -> Any:
    """Lists become tuples so kwarg values can live in sets."""
    if isinstance(value, list | tuple):
        return tuple(hashable(v) for v in value)
    return value


def kwarg_defaults(ops: Iterable[Op], skip_int_features: bool = False) -> KwargSets:
    """Every kwarg name used by `ops` -> the set of values seen, with MERGE_KWARGS unioned.

    With several contexts (`skip_int_features`), concrete widths are dropped: a width that
    fits one instance of a block may not fit another.
    """
    seen: KwargSets = {}
    for op in ops:
        for key, value in {**op.op_kwargs, **op.input_kwargs}.items():
            if key == "name" or callable(value):
                continue
            if key == "features" and skip_int_features and isinstance(value, int):
                continue
            seen.setdefault(key, set()).add(hashable(value))
    for group in MERGE_KWARGS:
        union: set[Any] = set()
        for key in group:
            union |= seen.get(key, set())
        if union:
            for key in group:
                seen[key] = set(union)
    if "strides" in seen:  # a global-pool window of 0 is not a stride
        seen["strides"] = {s for s in seen["strides"] if s != 0}
    return seen


def make_default_kwargs(kwarg_defaults: Mapping[str, set[Any]] | None, full: bool,
                        space: SearchSpace | None = None) -> KwargSets:
    """The observed values unioned with the class values of the setting. (Argument names
    are the reference's, here and below: `kwarg_defaults` as returned by the function of
    that name.)"""
    out: KwargSets = {k: set(v) for k, v in (kwarg_defaults or {}).items()}
    for key, values in _factor_sets(full, space).items():
        out.setdefault(key, set()).update(values)
    return out


def combine_factor(base: Any, factor: str) -> Any | None:
    """Applies a factor string (`"*2"`, `"%4"`, `""`) to a width; None if it cannot apply.

    Concrete widths stay ints (and must divide exactly); symbolic widths get their factors
    combined and reduced, e.g. `"S:-1*2"` with `"%2"` is `"S:-1"`.
    """
    ratio = Fraction(1)
    if factor.startswith("*"):
        ratio = Fraction(int(factor[1:]))
    elif factor.startswith("%"):
        ratio = Fraction(1, int(factor[1:]))
    if isinstance(base, int):
        value = base * ratio
        return int(value) if value.denominator == 1 and value > 0 else None
    if not isinstance(base, str) or not base.startswith("S:"):
        return None
    ref, div, mul = split_factors(base)
    total = Fraction(mul, div) * ratio
    return symbolic_width(ref, total)


def symbolic_width(ref: str, ratio: Fraction) -> str:
    """`symbolic_width("S:-1", 1/2)` -> `"S:-1%2"`; the canonical order is `%D*M`."""
    out = ref
    if ratio.denominator > 1:
        out += f"%{ratio.denominator}"
    if ratio.numerator > 1:
        out += f"*{ratio.numerator}"
    return out


def make_features(defaults: Mapping[str, set[Any]], full: bool) -> set[Any]:
    bases = set(defaults.get("features", set())) | set(_factor_sets(full)["features"])
    factors = defaults.get("features_factor") or set(_factor_sets(full)["features_factor"])
    out = set()
    for base in bases:
        for factor in factors:
            value = combine_factor(base, factor)
            if value is not None:
                out.add(value)
    return out


def all_kwargs_for_op_type(
    kwarg_defaults: Mapping[str, set[Any]], full: bool, op_type: OpType,
    space: SearchSpace | None = None,
) -> tuple[KwargSets, KwargSets]:
    """(op_kwargs choices, input_kwargs choices) for one op type; ({}, {}) if it has none."""
    d = make_default_kwargs(kwarg_defaults, full, space)
    if op_type is OpType.DENSE:
        return {"features": make_features(d, full)}, {}
    if op_type is OpType.CONV:
        features = make_features(d, full)
        groups = set(d["feature_group_count"]) | (features if full else set())
        return {
            "features": features,
            "kernel_size": set(d["kernel_size"]),
            "strides": {s for s in d["strides"] if s != 0},
            "padding": {"SAME"},
            "feature_group_count": groups,
            "kernel_dilation": set(d["kernel_dilation"]),
        }, {}
    if op_type is OpType.GROUP_NORM:
        groups = set(d.get("num_groups", set()))
        if full:
            groups |= {"S:-1%4", "S:-1%2", "S:-1"}
        return ({"num_groups": groups} if groups else {}), {}
    if op_type is OpType.DROPOUT:
        return {"rate": set(d.get("rate", set())) | {0.2}}, {}
    if op_type in (OpType.AVG_POOL, OpType.MAX_POOL):
        return {}, {
            "window_shape": set(d["window_shape"]),
            "strides": {s for s in d["strides"] if s != 0},
            "padding": {"SAME"},
        }
    if op_type is OpType.MEAN:
        return {}, {"axis": {1, 2, 3}}
    return {}, {}


def _sorted(values: Iterable[Any]) -> list[Any]:
    """A deterministic order for a set of mixed ints/strings/tuples."""
    return sorted(values, key=lambda v: (type(v).__name__, repr(v)))


def kwargs_for_op_to_product(
    op_kwargs: Mapping[str, set[Any]], input_kwargs: Mapping[str, set[Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (op_kwargs, input_kwargs) pair of the Cartesian product, in a fixed order."""
    op_keys, in_keys = list(op_kwargs), list(input_kwargs)
    choices = [_sorted(op_kwargs[k]) for k in op_keys] + [_sorted(input_kwargs[k]) for k in in_keys]
    out = []
    for combo in itertools.product(*choices):
        out.append((dict(zip(op_keys, combo[: len(op_keys)], strict=True)),
                    dict(zip(in_keys, combo[len(op_keys):], strict=True))))
    return out


PARAMETERIZED_TYPES = (OpType.DENSE, OpType.CONV, OpType.GROUP_NORM, OpType.DROPOUT,
                       OpType.AVG_POOL, OpType.MAX_POOL)


def op_enumerator(
    prefix: str | None = "",
    kwarg_defaults: Mapping[str, set[Any]] | None = None,
    full: bool = True,
    op_types: Sequence[OpType] | None = None,
    space: SearchSpace | None = None,
) -> Iterator[Op]:
    """Every single-input op of the search space, in op-type definition order.

    The input name is the placeholder `"inputs"`; sequential specs rewire it. Without
    `op_types` it is the reference's vocabulary: the activations added since
    (`EXTRA_ACTIVATIONS`) come only where `op_types` (e.g. a SearchSpace's) names them.
    """
    allowed = set(op_types) if op_types is not None else None
    for op_type in OpType:
        if op_type in SKIPPED_TYPES or (allowed is not None and op_type not in allowed) or (
                allowed is None and op_type.name in EXTRA_ACTIVATIONS):
            continue
        name = (prefix or "") + op_type.name.lower()
        if op_type in KWARG_FREE_TYPES:
            yield new_op(name, op_type, ["inputs"])
            continue
        if op_type in INHERITED_KWARG_TYPES:
            key = INHERITED_KWARG_TYPES[op_type]
            values = _sorted((kwarg_defaults or {}).get(key, ()))
            for value in values or [None]:
                kwargs = None if value is None else {key: value}
                yield new_op(name, op_type, ["inputs"], input_kwargs=kwargs)
            continue
        if op_type not in PARAMETERIZED_TYPES:
            continue
        op_kw, in_kw = all_kwargs_for_op_type(kwarg_defaults or {}, full, op_type, space)
        if not op_kw and not in_kw:
            continue
        for o, i in kwargs_for_op_to_product(op_kw, in_kw):
            yield new_op(name, op_type, ["inputs"], input_kwargs=i, op_kwargs=o)


def sequence_generator(
    gen: Callable[[], Iterable[Any]], max_len: int, min_len: int = 0
) -> Iterator[list[Any]]:
    """All sequences over `gen()`, shortest first, lexicographic within a length.

    `max_len < 0` means unbounded. Each yielded list holds fresh deep copies.
    """
    length = max(min_len, 1)
    while max_len < 0 or length <= max_len:
        for combo in itertools.product(list(gen()), repeat=length):
            yield [copy.deepcopy(x) for x in combo]
        length += 1


def num_in_base(number: int, base: int) -> list[int]:
    """Big-endian digits: `num_in_base(14, 2) == [1, 1, 1, 0]`, `num_in_base(0, b) == [0]`."""
    digits = []
    while True:
        number, digit = divmod(number, base)
        digits.append(digit)
        if number == 0:
            return digits[::-1]


def _permutation(size: int, rng) -> Iterator[int]:
    """A seeded pseudo-random permutation of range(size) in O(1) memory (affine map)."""
    if size <= 4096:
        order = list(range(size))
        rng.shuffle(order)
        yield from order
        return
    while True:
        a = rng.randrange(1, size)
        if math.gcd(a, size) == 1:
            break
    b = rng.randrange(size)
    for i in range(size):
        yield (a * i + b) % size


def random_sequence_generator(
    gen: Callable[[], Iterable[Any]], max_len: int, rng, min_len: int = 0
) -> Iterator[list[Any]]:
    """All sequences, shortest length first, each length's sequences in a random order.

    Unlike the reference, length 0 yields nothing and `max_len < 0` means unbounded.
    """
    items = list(gen())
    n = len(items)
    if n == 0:
        return
    length = max(min_len, 1)
    while max_len < 0 or length <= max_len:
        for index in _permutation(n**length, rng):
            digits = num_in_base(index, n)
            digits = [0] * (length - len(digits)) + digits
            yield [copy.deepcopy(items[d]) for d in digits]
        length += 1
