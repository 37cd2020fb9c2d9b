"""A seed below `search.selection.min_acc` does not end the search with the seed alone:
one line says so and what to set, and its children are proposed."""

from __future__ import annotations

from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from tests.train.helpers import tiny_graph


def test_a_seed_below_min_acc_still_has_children_and_one_line_says_why(
        tmp_path, search_config, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(graph_to_json(*tiny_graph()))
    config = search_config(max_candidates=2, seed_epochs=0.1, seed_graph=str(path))
    config.train.total_epochs = 0.1
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.999}
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    seed = study.get(1)
    assert seed.accuracy < 0.999
    children = [c for c in study.candidates() if c.parent_id is not None]
    assert children and all(c.parent_id == 1 for c in children)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "min_acc" in ln]
    assert len(lines) == 1, lines
    assert "search.selection.min_acc=0.999" in lines[0] and "seed_max_epochs" in lines[0]
