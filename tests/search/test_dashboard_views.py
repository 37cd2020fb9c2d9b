"""The dashboard's views in-process: a candidate's page compares paired with the seed as
the summary does, and the overview draws the fronts the search ranks by."""

import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.reporting.dashboard import Dashboard
from nas.search.reporting.report import summary
from nas.search.store import recommend
from nas.zoo import cnn

N = 143


def _bits(wrong):
    correct = np.ones(N, dtype=bool)
    correct[list(wrong)] = False
    return {"val_examples": N, "val_correct": examples.to_text(correct)}


def _study(workdir, paired=True):
    """A CifarNet seed and two children; with `paired`, per-example validation results."""
    graph, constants, _ = cnn.CifarNet()
    g = graph_to_json(graph, constants)
    study = Study.create(workdir, config={"train": {"input": {"image_size": 32}},
                                          "search": {"selection": {"costs": ["flops"]}}})
    rows = [(None, 7.5e7, range(10)), (1, 4.0e7, range(4)), (2, 3.0e7, range(40))]
    for parent, flops, wrong in rows:
        cid = study.add(g, parent_id=parent, generation=0 if parent is None else 1)
        study.claim("w", cid)
        result = {"accuracy": 1 - len(wrong) / N, "flops": flops, "params": flops / 30,
                  "val_examples": N}
        study.tell(cid, {**result, **(_bits(wrong) if paired else {})})
    return study


def test_a_candidate_page_compares_paired_as_the_summary_does(tmp_path):
    study = _study(tmp_path)
    page = Dashboard(study).candidate_html(3)
    seed, kid, grandkid = (study.get(i) for i in (1, 2, 3))
    pairs = recommend.Comparisons.of(study)
    want_seed = recommend.versus(grandkid, seed, pairs, "validation")
    want_parent = recommend.versus(grandkid, kid, pairs, "validation")
    assert "paired" in want_seed and "paired" in want_parent
    assert f"validation accuracy {want_seed}" in page
    assert f"validation accuracy {want_parent}" in page
    assert "Wilson" not in page.split('class="vs-seed"')[1].split("</p>")[0]
    assert want_seed in summary(study)  # the summary's "val vs seed" cell says the same


def test_without_per_example_results_the_page_says_wilson(tmp_path):
    page = Dashboard(_study(tmp_path, paired=False)).candidate_html(3)
    vs_seed = page.split('class="vs-seed"')[1].split("</p>")[0]
    assert "(Wilson)" in vs_seed and "paired" not in vs_seed


def test_a_missing_candidate_is_one_value_error(tmp_path):
    with pytest.raises(ValueError, match="^candidate_id: no candidate 9 "):
        Dashboard(_study(tmp_path)).candidate_html(9)
