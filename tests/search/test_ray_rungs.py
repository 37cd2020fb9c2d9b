"""Multi-fidelity on Ray: a rung's checkpoint goes back to the driver with the task's result,
and the next rung's task gets it from the driver (the task trains in a folder of its node,
never in the driver's workdir)."""

import json
import os

import pytest

from nas.search.execution.driver import Driver

RUNGS = {"rungs": (0.25,), "keep": 0.5, "parent_ratio": 0.0}
RUNG_STEPS, FULL_STEPS = 5, 10  # digits, batch 64: see tests/search/test_fidelity_search.py


def records(workdir, cid):
    path = os.path.join(workdir, "candidates", str(cid), "train", "metrics.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.slow  # a local Ray and two candidates, one trained in two tasks: 2-4 minutes
def test_a_promoted_child_resumes_from_the_checkpoint_its_rung_sent_back(tmp_path,
                                                                        search_config,
                                                                        monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    workdir = str(tmp_path / "s")
    config = search_config(executor="ray", max_candidates=2, seed_epochs=0.5, fidelity=RUNGS,
                           fit={"steps": 0})
    config.search.mutation.linear_p = 0.0
    try:
        study = Driver(config, workdir).run(progress=False)
    finally:
        ray.shutdown()
    seed, child = study.candidates()
    assert child.status == "done", child.error
    assert [(r["rung"], r["steps"], r["decision"]) for r in child.rungs] == [
        (0, RUNG_STEPS, "promoted"), (1, FULL_STEPS, "final")]
    rows = records(workdir, child.id)
    assert [r["step"] for r in rows if "accuracy" in r] == [RUNG_STEPS, FULL_STEPS]
    steps = [r["step"] for r in rows if "accuracy" not in r and "final" not in r]
    assert steps == sorted(set(steps)), steps  # resumed after step 5: nothing trained twice
    # the rung's checkpoint came back and went out again; once final, none is kept there
    assert not os.path.exists(os.path.join(workdir, "candidates", str(child.id), "train",
                                           "checkpoints"))
    assert child.metrics["ray_retries"] == 0 and seed.metrics["ray_retries"] == 0
