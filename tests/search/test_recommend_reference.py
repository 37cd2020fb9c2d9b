"""The recommendation for any seed: held to the seed while no child beats it, else to the
most accurate candidate. An untrained imported seed (the README's own-model flow) gives way
to its trained children, and `nas-search export --id=recommended` exports the same one."""

from __future__ import annotations

import os
import subprocess
import sys

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

import nas
from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.strategy import recommend

N = 360  # validation images: enough for a cheaper child to be non-inferior at 2 pt


class Net(nn.Module):
    """The README's own model, small: conv, batch norm, pool, conv, dense."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
        x = nn.max_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


@pytest.fixture(scope="module")
def untrained():
    """(graph JSON, which of N real digits the untrained import gets right): the seed."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.kron(digits.images[:N] / 16.0, np.ones((2, 2)))[..., None].repeat(3, -1)
    cand = nas.from_flax(Net(), jnp.zeros((2, 16, 16, 3), jnp.float32))
    logits = np.asarray(cand(images.astype(np.float32)))
    right = logits.argmax(-1) == digits.target[:N]
    assert right.mean() < 0.3  # untrained: near chance, as the README's import
    return graph_to_json(cand.graph, cand.constants), right


def _child(seed_right: np.ndarray, accuracy: float, rng: np.random.Generator) -> np.ndarray:
    """A trained child's results: right on `accuracy` of the images, most of the seed's
    among them."""
    right = seed_right.copy()
    wrong = np.flatnonzero(~right)
    right[rng.choice(wrong, int(accuracy * N) - int(right.sum()), replace=False)] = True
    return right


def _study(path, graph: str, seed_right: np.ndarray) -> Study:
    """Seed 1 (untrained, FLOPs 100); 2: the most accurate child (101); 3: the same
    images as 2 but one (80); 4: cheapest, better than the seed, far below 2 (30)."""
    rng = np.random.default_rng(0)
    best = _child(seed_right, 0.9, rng)
    one_less = best.copy()
    one_less[np.flatnonzero(best & ~seed_right)[0]] = False
    rows = [(None, seed_right, 100.0), (1, best, 101.0), (1, one_less, 80.0),
            (1, _child(seed_right, 0.6, rng), 30.0)]
    study = Study.create(path, {"search": {"selection": {"noninferiority_pt": 2.0}}})
    for parent, right, flops in rows:
        cid = study.add(graph, parent_id=parent)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": float(right.mean()), "flops": flops, "params": flops,
                         "val_examples": N, "val_correct": examples.to_text(right)},
                   worker="w")
    return study


def test_an_untrained_seed_gives_way_to_the_children_that_beat_it(untrained, tmp_path):
    graph, seed_right = untrained
    study = _study(tmp_path / "s", graph, seed_right)
    pairs = recommend.Comparisons.of(study)
    rec = recommend.recommend(study.candidates("done"), pairs, 2.0)
    assert rec.reference.id == 2 and rec.candidate.id == 3
    assert rec.validation.decision == "better"  # against the seed
    assert rec.versus_reference.only_a == 0 and rec.versus_reference.only_b == 1
    assert rec.versus_reference.noninferior(2.0)
    line = recommend.recommendation_lines(rec, study.workdir)[0]
    assert line.startswith("recommended: candidate 3, 0.800 of the seed's FLOPs, validation ")
    assert ("(reference: candidate 2, the most accurate on validation, as 3 of 3 done "
            "children are better than the seed there (paired); the cheapest candidate "
            "non-inferior to candidate 2 at 2 pt on validation (paired): 2 of 4 done "
            "candidates are; vs candidate 2 -0.28 pt [") in line
    # held to the seed instead (the rule before), every child would pass: the cheapest, 4
    assert all(p.decision == "better" for i, p in pairs.against(study.get(1)).items() if i > 1)


def test_the_reference_itself_when_nothing_cheaper_is_non_inferior(untrained, tmp_path):
    """At 0.1 pt nothing but the reference passes; a cheaper candidate than the reference
    (3) is recommended only when it is non-inferior to it."""
    graph, seed_right = untrained
    study = _study(tmp_path / "s", graph, seed_right)
    rec = recommend.recommend(study.candidates("done"), recommend.Comparisons.of(study), 0.1)
    assert (rec.reference.id, rec.candidate.id, rec.versus_reference) == (2, 2, None)
    assert "1 of 4 done candidates are" in rec.reason


def test_export_recommended_exports_it(untrained, tmp_path):
    graph, seed_right = untrained
    _study(tmp_path / "s", graph, seed_right).close()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-m", "nas.search.cli", "export", f"--workdir={tmp_path}/s",
         "--id=recommended", "--out=rec.zip"], cwd=tmp_path, capture_output=True, text=True,
        timeout=300, env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {tmp_path}/rec.zip: candidate 3 (recommended)")
    cand = nas.load_candidate(tmp_path / "rec.zip")
    assert cand.info["id"] == 3 and cand.metrics["vs_seed"]["validation"]["decision"] == "better"


def test_when_the_seed_wins_the_reason_names_the_cost(untrained, tmp_path):
    """Seed 1 and one child worse than it everywhere: the seed is recommended, and the line
    says in which cost no child is cheaper."""
    graph, seed_right = untrained
    study = Study.create(tmp_path / "s", {"search": {"selection": {"noninferiority_pt": 2.0}}})
    worse = seed_right.copy()
    worse[np.flatnonzero(seed_right)[:20]] = False
    for parent, right in ((None, seed_right), (1, worse)):
        cid = study.add(graph, parent_id=parent)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": float(right.mean()), "flops": 100.0, "params": 100.0,
                         "latency_ms": 2.0, "val_examples": N,
                         "val_correct": examples.to_text(right)}, worker="w")
    rec = recommend.recommend(study.candidates("done"), recommend.Comparisons.of(study), 2.0,
                              cost="params")
    assert rec.candidate.id == 1
    assert "no child is cheaper than the seed in params and non-inferior" in rec.reason
