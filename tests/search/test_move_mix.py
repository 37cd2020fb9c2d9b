"""The families of moves are drawn by what paid in the study: reproducible from its counts,
each keeping its floor."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nas.search.strategy import move_mix

WEIGHTS = {"subgraph": 0.35, "net2net": 0.1, "shrink": 0.15, "prune": 0.25,
           "drop_branch": 0.15}


class FakeStudy:
    """`move_rows` and `refusals`, as a study answers them."""

    def __init__(self, rows, refusals=()):
        self.rows, self._refusals = rows, list(refusals)

    def move_rows(self, through):
        return [r for r in self.rows if r[0] <= through]

    def refusals(self):
        return self._refusals


def refusal(kind, candidate_id=None, proposal=None):
    return SimpleNamespace(kind=kind, candidate_id=candidate_id, proposal=proposal)


# (id, parent, status, accuracy, flops, kind): prune children cheaper and as good as the
# seed, deepen children larger and no better
ROWS = [(1, None, "done", 0.90, 100.0, None),
        (2, 1, "done", 0.895, 50.0, "prune"),
        (3, 1, "done", 0.89, 120.0, "deepen"),
        (4, 1, "done", 0.90, 25.0, "prune"),
        (5, 1, "failed", None, None, "subgraph"),
        (6, 1, "done", 0.85, 130.0, "widen")]


def test_counts_tries_refusals_front_entries_and_what_paid():
    study = FakeStudy(ROWS, [refusal("shrink", candidate_id=3), refusal("deepen", proposal=2),
                             refusal("prune", proposal=9), refusal("subgraph", candidate_id=9)])
    counts = move_mix.move_counts(study, through=6, proposal=5, margin_pt=1.0)
    assert counts["prune"] == move_mix.MoveCounts(tries=2, refusals=0, front=1, paid=2)
    assert counts["net2net"] == move_mix.MoveCounts(tries=3, refusals=1, front=0, paid=0)
    assert counts["shrink"] == move_mix.MoveCounts(tries=1, refusals=1, front=0, paid=0)
    assert counts["subgraph"].tries == 1  # the refusal of candidate 9 is not read yet
    line = move_mix.move_lines(counts)[0]
    assert "prune 2/0/1" in line and "net2net 3/1/0" in line and "drop_branch" not in line


def test_what_paid_is_drawn_more_and_every_family_keeps_its_floor():
    counts = move_mix.move_counts(FakeStudy(ROWS), through=6, proposal=7)
    shares = move_mix.adapted(WEIGHTS, counts, 0.05)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["prune"] > WEIGHTS["prune"] and shares["net2net"] < WEIGHTS["net2net"]
    assert min(shares.values()) >= 0.05
    # a family that never pays falls to its floor, and stays there
    many = {**counts, "net2net": move_mix.MoveCounts(tries=10_000)}
    assert move_mix.adapted(WEIGHTS, many, 0.05)["net2net"] == pytest.approx(0.05, abs=1e-3)
    only = move_mix.adapted({"prune": 1.0, "net2net": 0.0}, many, 0.05)
    assert only == {"prune": pytest.approx(1.0)}  # a family of weight 0 stays out


def test_the_mix_is_the_same_from_the_same_counts():
    study = FakeStudy(ROWS, [refusal("shrink", candidate_id=3)])
    mutation = {"moves": WEIGHTS, "input_shape": (1, 8, 8, 3)}
    first = [move_mix.for_proposal(study, mutation, through, k, 2.0)
             for k, through in enumerate(range(1, 7))]
    again = [move_mix.for_proposal(FakeStudy(list(ROWS), [refusal("shrink", candidate_id=3)]),
                                   mutation, through, k, 2.0)
             for k, through in enumerate(range(1, 7))]
    assert first == again
    assert first[0]["moves"] == pytest.approx(move_mix.adapted(
        WEIGHTS, {m: move_mix.MoveCounts() for m in WEIGHTS}, 0.05))
    off = move_mix.for_proposal(study, {**mutation, "adapt_moves": False}, 6, 7, 2.0)
    assert off["moves"] == WEIGHTS
    assert move_mix.for_proposal(study, {"net2net_p": 0.3}, 6, 7, 2.0) == {"net2net_p": 0.3}


def test_the_digits_search_weighs_the_families_and_grows_in_few_of_its_children():
    import os
    import runpy

    from nas.mutation import MutationConfig
    from nas.mutation.config import MOVES
    from nas.search.strategy.settings import validate_search

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = runpy.run_path(os.path.join(root, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    mutation = MutationConfig.from_dict(dict(validate_search(config).mutation))
    assert mutation.adapt_moves and set(mutation.moves) == set(MOVES)  # every family
    assert mutation.moves["net2net"] / sum(mutation.moves.values()) < 1 / 3
