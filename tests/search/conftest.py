import os
import runpy

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEARCH_CONFIG = os.path.join(ROOT, "configs", "digits_cnn_search.py")


def tiny_search_config(**search):
    """The README's search, shrunk so a candidate trains in seconds."""
    config = runpy.run_path(SEARCH_CONFIG)["get_config"]()
    config.train.total_epochs = 0.5
    config.train.ckpt_steps = 0
    config.train.schedule = {"decay_type": "cosine", "warmup_steps": 2}
    config.train.log_training_steps = 1000
    config.search.max_candidates = 3
    config.search.seed_epochs = 0.5
    config.search.fit = {"steps": 3, "batches": 1, "batch_size": 8,  # the real path, briefly
                         "bn_batch_size": 16}
    config.search.executor = "inline"
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.0}
    config.search.mutation.time_limit_s = 600.0  # never binding: proposals stay deterministic
    config.search.fidelity = {}  # one budget per child (tests of rungs pass `fidelity`)
    config.search.pipeline_depth = 1  # each proposal reads every result (tests of the
    # pipeline pass `pipeline_depth`)
    config.search.update(search)
    return config


@pytest.fixture
def search_config():
    return tiny_search_config
