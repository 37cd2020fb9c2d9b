"""The peer a user would pick instead of our search: Optuna's NSGA-II over CifarNet's shapes.

Each trial builds a CifarNet (`nas.zoo.cnn.conv_net`) from four numbers (stem width 8-64 in
steps of 8, 1-3 conv blocks, kernel 3 or 5 in every block, classifier width 64-512) and
trains it from scratch with the seed's recipe of the README search: the seed's epochs, in
rounds while its validation accuracy rises (`candidate_train_config(..., is_seed=True)`,
`seed_rounds`, `train_in_rounds`), on the same validation split. NSGA-II maximizes the
validation accuracy and minimizes FLOPs; test accuracy is evaluated for the report only.
Trial 0 is the seed's own shape (32, 2 blocks, kernel 3, 256: the zoo's CifarNet), so the
arm's seed is trained exactly as the other arms' seed. Every distinct shape is recorded in a
real `Study` (the seed with no parent, the others as its children), so `arm_metrics` scores
the arm exactly as it scores the evolution and random arms. A shape NSGA-II proposes again
is told its first result without training again (what a careful user would do; it only
helps Optuna).

Budget. The Optuna arm gets the evolution arm's CPU minutes, not its candidate count: a
trial trained from scratch for up to 15 epochs costs many fine-tuned children. The arm
stops starting trials once its process CPU time (`time.process_time`, the measure
`compare` uses for every arm) reaches the budget. Stopping on CPU seconds rather than on a
count derived from the evolution arm's CPU per candidate, because trials differ in cost
far more than children do (a 64-wide single-block net has 8x the FLOPs of an 8-wide one),
so no per-candidate rate predicts a CPU total. CPU time moves a little with load, so the
arm prints the number of trials it ran: `--optuna-trials N` then makes the count the limit,
and with the seeded sampler (`NSGAIISampler(seed=search seed)`) the run is reproducible.

NSGA-II's population is 8 here (`--optuna-population`), not Optuna's default 50: with the
budgets of this benchmark (tens of trials) a population of 50 would never leave its
random first generation, and the arm would be random search under another name.

Needs `pip install -e '.[bench]'` (Optuna >= 4.0).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import ml_collections

from nas.graph.block import Block
from nas.graph.ops import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_json
from nas.search.store.study import Study
from nas.search.strategy.settings import SearchSettings, candidate_train_config, seed_rounds
from nas.train import TrainOptions, train_and_eval
from nas.train.config import with_defaults
from nas.train.data import with_num_classes
from nas.train.rounds import Rounds, train_in_rounds
from nas.zoo.cnn import conv_block, conv_net

INSTALL = "the optuna arm needs Optuna: pip install -e '.[bench]' (or pip install 'optuna>=4.0')"
SEED_SHAPE = {"stem": 32, "blocks": 2, "kernel": 3, "fc": 256}  # the zoo's CifarNet
KEPT = ("accuracy", "flops", "params", "val_examples", "val_correct", "test_accuracy",
        "test_examples", "test_correct", "test_loss", "loss", "steps")


def import_optuna() -> Any:
    """Optuna, or one line saying what to install."""
    try:
        import optuna
    except ImportError:
        raise SystemExit(INSTALL) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def kernel_block(kernel: int) -> Block:
    """The zoo's conv block with a `kernel`-wide convolution (the zoo's own block at 3)."""
    if kernel == 3:
        return conv_block()
    ops = [
        new_op("conv", OpType.CONV, ["input"],
               op_kwargs={"features": "S:-1*2", "kernel_size": kernel}),
        new_op("relu", OpType.RELU, ["conv"]),
        new_op("avg_pool", OpType.AVG_POOL, ["relu"],
               input_kwargs={"window_shape": 2, "strides": 2}),
    ]
    return Block("conv_layer", new_graph(["input"], ["avg_pool"], ops))


def suggest_shape(trial: Any) -> dict[str, int]:
    """The search space: the seed's shape numbers, each over a range around its value."""
    return {"stem": trial.suggest_int("stem", 8, 64, step=8),
            "blocks": trial.suggest_int("blocks", 1, 3),
            "kernel": trial.suggest_categorical("kernel", [3, 5]),
            "fc": trial.suggest_categorical("fc", [64, 128, 256, 512])}


def shape_graph(shape: dict[str, int], num_classes: int) -> tuple[Any, dict[str, Any]]:
    """(graph, constants) of the CifarNet of `shape`."""
    blocks = [kernel_block(int(shape["kernel"])) for _ in range(int(shape["blocks"]))]
    graph, constants, _ = conv_net(int(shape["stem"]), int(shape["fc"]), num_classes, blocks)
    return graph, constants


def train_from_scratch(config: ml_collections.ConfigDict, graph: Any, constants: Any
                       ) -> dict[str, Any]:
    """The seed's recipe: its epochs, its rounds while validation rises; the study's
    metric names (`Metrics.record`: accuracy on validation, test_accuracy reported only)."""
    search = SearchSettings.from_stored(config)
    train = ml_collections.ConfigDict(
        candidate_train_config(config.train.to_dict(), search, is_seed=True))
    rounds = seed_rounds(config.train.to_dict(), search)

    def run_round(index: int, variables: Any) -> tuple[dict[str, Any], int, Any, list]:
        seen: list[float] = []

        def on_eval(epoch: int, m: Any) -> bool:
            seen.append(float(m.acc))
            return True

        options = TrainOptions(graph=graph, constants=constants, init_variables=variables,
                               evaluate_start=variables is not None)
        metrics, epochs, state = train_and_eval(train, True, on_eval, options=options)
        values = metrics.record()
        return values, epochs, state, seen or [float(values["accuracy"])]

    result = train_in_rounds(run_round, Rounds(**rounds) if rounds else Rounds())
    kept = {k: v for k, v in result.metrics.items() if k in KEPT}
    return {**kept, "epochs": result.epochs, "rounds": result.rounds}


def run_optuna_arm(config: ml_collections.ConfigDict, seed: int, workdir: str,
                   cpu_budget_s: float, trials: int = 0, population: int = 8) -> Study:
    """NSGA-II for `trials` trials or, without a count, until this call's CPU time reaches
    `cpu_budget_s` (the trial in training finishes); returns the study of distinct shapes."""
    optuna = import_optuna()
    cpu_start = time.process_time()
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    num_classes = int(with_num_classes(with_defaults(config.train)).num_classes)
    study = Study.create(workdir, config)
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=population)
    peer = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    peer.enqueue_trial(dict(SEED_SHAPE))
    results: dict[tuple, tuple[float, float]] = {}
    seed_id: int | None = None
    ran = 0
    while (ran < trials) if trials else (time.process_time() - cpu_start < cpu_budget_s):
        trial = peer.ask()
        shape = suggest_shape(trial)
        key = tuple(sorted(shape.items()))
        if key not in results:
            graph, constants = shape_graph(shape, num_classes)
            cid = study.add(graph_to_json(graph, constants), parent_id=seed_id,
                            spec={"optuna_trial": trial.number, "shape": shape})
            seed_id = cid if seed_id is None else seed_id
            done = study.tell(cid, train_from_scratch(config, graph, constants))
            results[key] = (float(done.accuracy), float(done.flops))
        peer.tell(trial, list(results[key]))
        ran += 1
    study.set_state("optuna_trials", ran)
    study.set_state("optuna_cpu_s", time.process_time() - cpu_start)
    return study
