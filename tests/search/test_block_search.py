"""Block-level mutation in a real search: blocks stored per candidate, the zoo builder
passed to `propose_child`, block children recorded, trained and resumed."""

import dataclasses
import json
import logging
import os
import sqlite3

import pytest

from nas import zoo
from nas.graph.serialize import graph_to_json
from nas.search.execution.driver import Driver
from nas.search.store.study import Study
from nas.search.strategy import blocks as blocks_lib
from nas.train.checkpoint import save_variables
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables
from tests.search.conftest import TINY_IMAGE_SIZE

BLOCK_KINDS = {"block_add", "block_delete", "block_mutate"}
# With mutate_by_block every child is block-level: one draw adds a block (0.4), deletes
# one (0.3) or redefines one (the rest), whose new definition every instance then takes.
ALL_BLOCKS = {"mutate_by_block": True, "block_add_prob": 0.4, "block_delete_prob": 0.3,
              "block_mutate_prob": 1.0}


def _block_config(search_config, **search):
    config = search_config(**search)
    config.search.mutation.update(ALL_BLOCKS)
    config.search.fit = {"steps": 0}
    config.search.mutation.linear_p = None  # linear pairings compile per op kind: slow
    # Unfitted, block children start near chance (docs/function-preservation.md): an added
    # or deleted block changes the width fc/dense reads, so that layer starts fresh. The
    # preset's start bound would refuse every one; these tests check that block children
    # are recorded, trained and resumed, and what they inherit.
    config.search.max_start_drop = 0.0
    return config


def _check_inherits_what_blocks_leave(child):
    """No block edit changes the stem or the last classifier layer: the child inherits them."""
    assert {"proj", "fc/logits"} <= set(child.inheritance.inherited), child.inheritance


def _trained_seed(driver, tmp_path, accuracy=0.9):
    """The seed marked done with real (untrained) weights: proposing needs no training."""
    driver.seed_population()
    (seed,) = driver.study.candidates()
    from nas.graph.serialize import load

    graph, constants = load(seed.graph_json)
    path = save_variables(str(tmp_path / f"w{seed.id}"), parent_variables(
        graph, constants, image_size=TINY_IMAGE_SIZE))
    driver.study.claim("w", seed.id)
    driver.study.tell(seed.id, {"accuracy": accuracy, "flops": 7e7, "params": 2e6,
                                "im_sec_core_train": 100.0}, checkpoint_path=path)
    return driver.study.get(seed.id)


def _check_rebuilds(candidate):
    blocks, build, args = blocks_lib.read_blocks(candidate.blocks, f"candidate {candidate.id}")
    assert args == {"model_name": "cnn", "num_classes": 10, "image_size": TINY_IMAGE_SIZE}
    assert blocks_lib.rebuilds(build, blocks, candidate.graph_json)
    return blocks


def test_zoo_seed_stores_blocks_that_rebuild_it(tmp_path, search_config):
    driver = Driver(search_config(), str(tmp_path / "s"))
    driver.seed_population()
    (seed,) = driver.study.candidates()
    assert [b.name for b in _check_rebuilds(seed)] == ["conv_layer", "conv_layer"]


def test_block_children_are_recorded_with_their_blocks(tmp_path, search_config):
    # six proposals before any child trains: each may read only the seed's result
    driver = Driver(_block_config(search_config, pipeline_depth=6), str(tmp_path / "s"))
    seed = _trained_seed(driver, tmp_path)
    kinds = set()
    proposed = [driver.propose() for _ in range(6)]  # None: e.g. a duplicate of a sibling
    assert sum(cid is not None for cid in proposed) >= 3
    for cid in filter(None, proposed):
        child = driver.study.get(cid)
        kinds.add(child.inheritance["kind"])
        blocks = _check_rebuilds(child)
        assert child.parent_id == seed.id
        if child.inheritance["kind"] == "block_add":
            assert len(blocks) == 3
        elif child.inheritance["kind"] == "block_delete":
            assert len(blocks) == 1
        else:
            assert all("/trial" in b.name for b in blocks)  # block_mutate_prob 1.0: all
        assert child.fingerprint and child.properties is not None
    assert kinds <= BLOCK_KINDS and len(kinds) >= 2


def test_block_children_fit_the_layer_a_block_resizes(tmp_path, search_config):
    """A block added or deleted changes the width fc/dense reads: it starts fresh under its
    old name, so it is fitted to the parent's fc/dense output (with the new block's ops)."""
    config = _block_config(search_config, pipeline_depth=6)
    config.search.fit = {"steps": 3, "batches": 1, "batch_size": 8}
    driver = Driver(config, str(tmp_path / "s"))
    _trained_seed(driver, tmp_path)
    resized = 0
    for cid in filter(None, [driver.propose() for _ in range(6)]):
        inheritance = driver.study.get(cid).inheritance
        if inheritance.kind in ("block_add", "block_delete"):
            assert "fc/dense" in inheritance.new
            assert inheritance.fit_pairs == (("fc/dense:0", "fc/dense:0"),)
            resized += 1
    assert resized


def test_whole_graph_mutation_by_default_drops_blocks(tmp_path, search_config):
    config = search_config()
    config.search.fit = {"steps": 0}
    config.search.mutation.linear_p = None
    config.search.mutation.moves = {"subgraph": 1.0}  # the whole-graph rewrite alone
    driver = Driver(config, str(tmp_path / "s"))
    _trained_seed(driver, tmp_path)
    child = driver.study.get(driver.propose())
    assert child.inheritance["kind"] == "subgraph" and child.blocks is None


def test_seed_graph_without_blocks_logs_and_mutates_by_subgraph(tmp_path, search_config,
                                                                caplog):
    graph, constants, _ = cnn.conv_net(in_features=8, out_features=32, num_classes=10)
    path = tmp_path / "graph.json"
    path.write_text(graph_to_json(graph, constants))
    config = _block_config(search_config, seed_graph=str(path))
    config.search.mutation.moves = {"subgraph": 1.0}  # the subgraph rewrite alone
    driver = Driver(config, str(tmp_path / "s"))
    with caplog.at_level(logging.INFO):
        seed = _trained_seed(driver, tmp_path)
        cid = driver.propose()
    assert seed.blocks is None
    assert "has no blocks, so block-level mutation" in caplog.text
    assert cid is not None and driver.study.get(cid).inheritance["kind"] == "subgraph"


@pytest.mark.parametrize("mutation, message", [
    ({"block_add_prob": 1.5}, "search.mutation.block_add_prob' must be a number >= 0 and <= 1"),
    ({"block_delete_prob": -0.1}, "search.mutation.block_delete_prob' must be"),
    ({"block_mutate_prob": "high"}, "search.mutation.block_mutate_prob' must be a number"),
    ({"mutate_by_block": "yes"}, "search.mutation.mutate_by_block' must be a bool"),
    ({"block_add_prob": 0.7, "block_delete_prob": 0.6},
     "'search.mutation.block_add_prob' \\+ 'search.mutation.block_delete_prob' must be <= 1 "
     ".*, got 0.7 \\+ 0.6"),
])
def test_bad_block_config_is_one_value_error(tmp_path, search_config, mutation, message):
    config = search_config()
    config.search.mutation.update(mutation)
    with pytest.raises(ValueError, match=message):
        Driver(config, str(tmp_path / "s"))
    assert not os.path.exists(tmp_path / "s")  # refused before a study exists


def test_damaged_blocks_record_names_the_candidate(tmp_path, search_config):
    driver = Driver(_block_config(search_config), str(tmp_path / "s"))
    driver.seed_population()
    study = driver.study
    cid = study.add(graph_to_json(*cnn.CifarNet()[:2]), generation=0, allow_duplicate=True,
                    blocks={"builder": {"model_name": "cnn"}, "blocks": []})
    with pytest.raises(ValueError, match=f"candidate {cid}: blocks record field 'builder'"):
        driver.parent_blocks(study.get(cid))
    bad = study.add("{}", generation=0, blocks={
        "builder": {"model_name": "cnn", "num_classes": 10, "image_size": TINY_IMAGE_SIZE},
        "blocks": [{"name": "conv_layer", "base": {"format": "nope"}}]})
    with pytest.raises(ValueError, match=f"candidate {bad}: blocks record: serialized block #0"):
        driver.parent_blocks(study.get(bad))


def test_study_without_blocks_column_is_migrated(tmp_path):
    study = Study.create(tmp_path)
    a = study.add("{}")
    study.close()
    conn = sqlite3.connect(tmp_path / "study.db")
    conn.execute("ALTER TABLE candidates DROP COLUMN blocks_json")
    conn.commit()
    conn.close()
    study = Study.load(tmp_path)
    assert study.get(a).blocks is None
    b = study.add("{}", blocks={"builder": {}, "blocks": []})
    assert study.get(b).blocks == {"builder": {}, "blocks": []}


def test_blocks_survive_a_new_driver(tmp_path, search_config):
    """A resumed search (a new Driver on the same study) mutates the stored blocks of a
    block-level child: grandchildren are block-level too."""
    workdir = str(tmp_path / "s")
    driver = Driver(_block_config(search_config), workdir)
    _trained_seed(driver, tmp_path, accuracy=0.5)
    child = driver.study.get(driver.propose())
    path = save_variables(str(tmp_path / "child"), parent_variables(
        *blocks_lib.read_blocks(child.blocks, "child")[1](
            blocks=blocks_lib.read_blocks(child.blocks, "child")[0])[:2],
        image_size=TINY_IMAGE_SIZE))
    driver.study.claim("w", child.id)
    driver.study.tell(child.id, {"accuracy": 0.99, "flops": 1.0, "params": 1.0},
                      checkpoint_path=path)
    driver.study.close()

    again = Driver(_block_config(search_config), workdir)  # as after a kill
    again.selection = dataclasses.replace(again.selection, min_acc=0.9)  # the child only
    grandchild = again.study.get(again.propose())
    assert grandchild.parent_id == child.id
    assert grandchild.inheritance["kind"] in BLOCK_KINDS
    _check_rebuilds(grandchild)


# A real search: 20-40 s on 2 busy cores (two small candidates train).
@pytest.mark.slow
def test_block_search_trains_block_children(tmp_path, search_config):
    config = _block_config(search_config, max_candidates=2, seed_epochs=0.0)
    # images/s/core is a selection cost beside FLOPs (higher is better)
    config.search.selection = {"costs": ("flops", "im_sec_core_train"), "min_acc": 0.0}
    study = Driver(config, str(tmp_path / "blocks")).run(progress=False)
    seed, child = sorted(study.candidates(), key=lambda c: c.id)
    for c in (seed, child):
        assert c.status == "done", c.error  # a block-level child trains
        assert 0.0 <= c.accuracy <= 1.0 and c.im_sec_core_train > 0
        _check_rebuilds(c)
    assert child.parent_id == seed.id and child.inheritance["kind"] in BLOCK_KINDS
    _check_inherits_what_blocks_leave(child)


@pytest.mark.slow  # three candidates train, then a resumed driver trains one more: 1-2 min
def test_block_search_resumes_after_stopping(tmp_path, search_config):
    workdir = str(tmp_path / "blocks")
    config = _block_config(search_config, max_candidates=3, seed_epochs=0.0)
    study = Driver(config, workdir).run(progress=False)
    first = {c.id for c in study.candidates()}
    assert all(c.status == "done" for c in study.candidates())
    study = Driver(_block_config(search_config, max_candidates=4, seed_epochs=0.0),
                   workdir).run(progress=False)
    (last,) = [c for c in study.candidates() if c.id not in first]
    assert last.status == "done" and last.inheritance["kind"] in BLOCK_KINDS
    _check_inherits_what_blocks_leave(last)
    for c in study.candidates():
        _check_rebuilds(c)


def test_blocks_record_keeps_the_extra_builder_arguments_and_reads_old_ones():
    args = {"model_name": "revnet", "num_classes": 10, "image_size": 32, "model": {"depth": 4}}
    graph, _, built = zoo.builder(**args)()
    record = json.loads(json.dumps(blocks_lib.blocks_record(args, built)))
    assert record["builder"]["model"] == {"depth": 4}
    _, build, read_args = blocks_lib.read_blocks(record, "candidate 1")
    assert read_args == args and build(blocks=built)[0].ops == graph.ops
    old = {"builder": {k: v for k, v in args.items() if k != "model"}, "blocks": []}
    assert blocks_lib.read_blocks(old, "candidate 2")[2]["model_name"] == "revnet"
    with pytest.raises(ValueError, match="candidate 3: blocks record field 'builder'"):
        blocks_lib.read_blocks({"builder": {**args, "model": 4}, "blocks": []}, "candidate 3")
