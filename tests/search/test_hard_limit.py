"""The hard time limit, proven: a candidate stuck inside one compiled training step (no step
boundary where the soft limit could stop it) is killed at `search.hard_time_limit_s`,
recorded as failed with that cause, and the search goes on to train the next candidate.

The candidate is stuck for real: its op named by NAS_TEST_STALL_OP passes through a host
callback that sleeps inside the compiled step (`nas.graph.stall`)."""

from __future__ import annotations

import pytest

from nas.graph import OpType, new_graph, new_op
from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from nas.search.store.study import Study

HARD_LIMIT_S = 90.0  # above a normal candidate's time in a freshly started worker here


def stuck_graph_json() -> str:
    ops = [new_op("flatten", OpType.FLATTEN, ["input"]),
           new_op("stall", OpType.DENSE, ["flatten"], op_kwargs={"features": 10})]
    return graph_to_json(new_graph(["input"], ["stall"], ops), {})


@pytest.mark.slow  # a minute and a half stuck, plus two candidates in spawned workers
def test_a_candidate_stuck_inside_a_step_is_killed_at_the_hard_limit(tmp_path, search_config,
                                                                     monkeypatch):
    monkeypatch.setenv("NAS_TEST_STALL_OP", "stall")  # inherited by the spawned workers
    monkeypatch.setenv("NAS_TEST_STALL_S", "3600")
    config = search_config(max_candidates=3, executor="local", workers=1,
                           hard_time_limit_s=HARD_LIMIT_S, time_limit_s=HARD_LIMIT_S)
    workdir = str(tmp_path / "study")
    Driver(config, workdir).seed_population()  # candidate 1: the digits CifarNet
    with Study.load(workdir) as study:
        stuck = study.add(stuck_graph_json(), generation=0)  # candidate 2
    study = Driver(config, workdir).run(progress=False)
    seed, failed, child = study.candidates()
    assert seed.status == "done"
    assert failed.id == stuck and failed.status == "failed"
    assert failed.error == f"exceeded the hard time limit of {HARD_LIMIT_S:.0f} s"
    assert HARD_LIMIT_S <= failed.finished_at - failed.started_at <= HARD_LIMIT_S + 10
    assert child.parent_id == seed.id and child.status == "done"  # the search went on
