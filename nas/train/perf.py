"""What a candidate costs: parameters, FLOPs, throughput, memory; and the `Metrics` record.

Why: the search trades accuracy against these costs, so each must be measured the same
way for every candidate and be exact where it can be.

* `num_params`: the element count of the `params` tree (batch statistics are not
  parameters).
* FLOPs per example: counted from the traced inference function on a batch of one
  (`nas.train.flops`), never from a backend's cost analysis, so the number is the same on
  CPU, GPU and TPU and needs no compilation. The rules are XLA:CPU's: a multiply-add counts
  2, and only taps that touch real input count: the zero taps a SAME-padded convolution adds
  at the border are not counted, so a 3x3 SAME conv on an HxW map costs less than
  2*9*Cin*Cout*H*W (see `conv_flops_same`); elementwise ops count 1 per element.
* images/sec/core: measured on compiled functions only (compile time is reported
  separately in `compile_seconds`); "core" is a JAX device.
* memory: `memory_analysis()` of the compiled train step: temporaries, arguments and
  outputs (on CPU, host arrays count as arguments).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass
class Metrics:
    """Result of training and evaluating one candidate (JSON-friendly)."""

    acc: float = 0.0  # top-1 accuracy on the eval split, a fraction
    loss: float = 0.0  # mean eval cross-entropy per example
    eval_examples: int = 0  # examples `acc` was measured on (its sample size)
    # eval.test_split, evaluated once after training (for reporting; -1: not measured)
    test_acc: float = -1.0
    test_loss: float = -1.0
    test_examples: int = 0
    # accuracy on the eval split before the first step (TrainOptions.evaluate_start;
    # a search's child: after fitting, before fine-tuning); -1: not measured
    start_acc: float = -1.0
    # Which eval (validation) and test examples were right, in the split's order, as
    # `nas.io.examples.to_text` ("N:base64 bits"; "": not recorded): paired comparisons.
    eval_correct: str = ""
    test_correct: str = ""
    num_params: int = 0
    flops: int = 0  # forward FLOPs per example (nas.train.flops; multiply-add = 2)
    im_sec_core_train: float = 0.0  # median over epochs, after compilation
    im_sec_core_infer: float = 0.0  # median over evals, after compilation
    compile_seconds: float = 0.0  # train step + eval step compilation
    refit_overlap_seconds: float = 0.0  # compiling while `refit` ran (TrainOptions.refit)
    train_temp_bytes: int = 0  # XLA temporaries of one train step (per device)
    train_peak_bytes: int = 0  # arguments + outputs + temporaries - aliased (per device)
    train_seconds: float = 0.0  # the step loop, without evaluation and checkpoints
    steps: int = 0
    # Where the rest of a candidate's time went (for the search's time split).
    setup_seconds: float = 0.0  # data, model init, inheritance, resume
    input_wait_seconds: float = 0.0  # inside train_seconds: waiting for the next batch
    eval_seconds: float = 0.0
    checkpoint_seconds: float = 0.0
    measure_seconds: float = 0.0  # FLOPs and parameter count
    compilations: int = 0  # XLA compilations during this candidate (cache hits excluded)
    compile_cache_hits: int = 0  # executables loaded from the persistent cache
    # The device stage (steps and evaluations) of a worker that prepares its next candidates
    # while one trains: how long this one waited for the device, and when it had it (Unix s).
    device_wait_seconds: float = 0.0
    device_started_at: float = 0.0
    device_finished_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Every field under the reference's names (`record` is what the rest reads)."""
        return dataclasses.asdict(self)

    def record(self) -> dict[str, Any]:
        """The measured fields under the names every record after training uses
        (`RECORD_NAMES`): the study, metrics.jsonl, the reports and `nas-train`'s table.
        A value that was not measured is left out, so no reader mistakes a placeholder
        (-1, 0 examples, no bits) for a measurement."""
        values = self.to_dict()
        if values["start_acc"] < 0:
            del values["start_acc"]
        if not values["test_examples"]:  # no test split was evaluated
            values = {k: v for k, v in values.items() if not k.startswith("test_")}
        for bits in ("eval_correct", "test_correct"):  # not recorded (several hosts)
            if not values.get(bits, True):
                del values[bits]
        return {RECORD_NAMES.get(k, k): v for k, v in values.items()}


# `Metrics` keeps the reference's field names; everything downstream of training reads a
# field under its name here (a field not listed keeps its own). "accuracy" and "loss" are
# the validation split's, the one the search decides on.
RECORD_NAMES = {"acc": "accuracy", "num_params": "params", "eval_examples": "val_examples",
                "test_acc": "test_accuracy", "eval_correct": "val_correct",
                "start_acc": "start_accuracy"}
# The names metrics.jsonl's epoch lines had before they took the record names: a run
# written then (a resumed one may hold both) reads the same.
_OLD_JSONL_NAMES = {"eval_acc": "accuracy", "eval_loss": "loss"}


def read_records(path: str) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl, under the record names; [] where there is no file.
    A torn last line (a run killed mid-write) is skipped."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                out.append({_OLD_JSONL_NAMES.get(k, k): v for k, v in record.items()})
    return out


def count_params(params: Any) -> int:
    return int(sum(np.size(x) for x in jax.tree.leaves(params)))


def compiled_flops(compiled: Any) -> int:
    """The 'flops' entry of a compiled executable's cost analysis (0 when not reported)."""
    cost = compiled.cost_analysis()
    if isinstance(cost, Sequence) and not isinstance(cost, dict):  # older jax: a list
        cost = cost[0] if cost else {}
    return int(round(float((cost or {}).get("flops", 0.0))))


def flops_per_example(apply_fn: Callable[..., Any], variables: Any, example_shape: tuple) -> int:
    """Forward FLOPs of `apply_fn(variables, x)` on one example: traced, never compiled."""
    from nas.train import flops

    return flops.forward_flops(apply_fn, variables, example_shape)


def memory_bytes(compiled: Any) -> tuple[int, int]:
    """(temp bytes, peak bytes) of a compiled executable; (0, 0) if not reported."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # some backends do not implement it
        return 0, 0
    if m is None:
        return 0, 0
    temp = int(m.temp_size_in_bytes)
    peak = temp + int(m.argument_size_in_bytes) + int(m.output_size_in_bytes)
    peak -= int(getattr(m, "alias_size_in_bytes", 0))
    return temp, peak


def conv_flops_same(h: int, w: int, cin: int, cout: int, k: int, stride: int = 1) -> int:
    """Analytic FLOPs of a SAME conv counting only taps inside the input (XLA's count).

    Each output position contributes 2*cin*cout per kernel tap that lands on a real pixel.
    """
    def taps(n: int) -> int:
        out = math.ceil(n / stride)
        pad_total = max((out - 1) * stride + k - n, 0)
        lo = pad_total // 2
        total = 0
        for o in range(out):
            start = o * stride - lo
            total += sum(1 for t in range(k) if 0 <= start + t < n)
        return total

    return 2 * cin * cout * taps(h) * taps(w)


def throughput(fn: Callable[[], Any], images_per_call: int, *, min_seconds: float = 1.0,
               min_calls: int = 3, devices: int = 1) -> float:
    """Images/sec/device of a warm, already compiled `fn` (median of per-call rates)."""
    jax.block_until_ready(fn())  # warm
    rates, start = [], time.perf_counter()
    while len(rates) < min_calls or time.perf_counter() - start < min_seconds:
        t = time.perf_counter()
        jax.block_until_ready(fn())
        rates.append(images_per_call / (time.perf_counter() - t) / devices)
    return statistics.median(rates)


def matmul_peak_flops(n: int = 2048, seconds: float = 2.0, dtype: str = "float32") -> float:
    """This machine's warm `dtype` matmul rate under XLA (FLOP/s), the MFU denominator: the
    best of repeated n x n products for `seconds`."""
    a = jax.random.normal(jax.random.key(0), (n, n), np.float32).astype(dtype)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    best, start = 0.0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        jax.block_until_ready(f(a))
        best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best
