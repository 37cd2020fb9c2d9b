"""`search.seed_graph` / `nas-search --seed_graph`: the population starts from a user's file."""

import json

import jax
import numpy as np
import pytest

from nas.graph.serialize import graph_to_dict, graph_to_json
from nas.io import write_candidate
from nas.search.execution.driver import Driver
from nas.train.checkpoint import load_variables, save_variables
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables


def _small_graph():
    graph, constants, _ = cnn.conv_net(in_features=8, out_features=32, num_classes=10)
    return graph, constants


def test_plain_graph_json_seeds_the_study(tmp_path, search_config):
    graph, constants = _small_graph()
    path = tmp_path / "graph.json"
    path.write_text(graph_to_json(graph, constants))
    driver = Driver(search_config(seed_graph=str(path)), str(tmp_path / "study"))
    driver.seed_population()
    (seed,) = driver.study.candidates()
    assert seed.parent_id is None and seed.graph_json == graph_to_json(graph, constants)
    assert not (seed.inheritance or {}).get("init_path")


@pytest.mark.parametrize("version", [1, 2])
def test_export_file_seeds_the_study_with_its_weights(tmp_path, search_config, version):
    graph, constants = _small_graph()
    variables = parent_variables(graph, constants)
    if version == 1:  # JSON naming a checkpoint
        checkpoint = save_variables(str(tmp_path / "weights"), variables)
        doc = {"format": "nas-candidate", "version": 1, "graph": json.loads(
            graph_to_json(graph, constants)), "checkpoint_path": checkpoint}
        path = tmp_path / "export.json"
        path.write_text(json.dumps(doc))
    else:  # the self-contained archive
        path = write_candidate(tmp_path / "export.zip", graph_to_dict(graph, constants),
                               variables, input_shape=(32, 32, 3))
    driver = Driver(search_config(seed_graph=str(path)), str(tmp_path / "study"))
    driver.seed_population()
    (seed,) = driver.study.candidates()
    init = load_variables(seed.inheritance["init_path"])
    same = jax.tree.map(np.array_equal, init["params"], variables["params"])
    assert all(jax.tree.leaves(same))
    task = driver.task(driver.study.claim("w").id)  # the seed trains from those weights
    assert task.init_variables is not None


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("not json", "not a graph JSON"),
    ('{"format": "nas-candidate", "graph": GRAPH, "checkpoint_path": "/nonexistent/ck"}',
     "'checkpoint_path': no saved variables"),
])
def test_bad_seed_graph_names_the_field(tmp_path, search_config, content, message):
    path = tmp_path / "seed.json"
    if content is not None:
        graph, constants = _small_graph()
        path.write_text(content.replace("GRAPH", graph_to_json(graph, constants)))
    with pytest.raises(ValueError, match=f"search.seed_graph.*{message}"):
        Driver(search_config(seed_graph=str(path)), str(tmp_path / "study"))
    assert not (tmp_path / "study").exists()  # refused before the study is created
