"""An evolution search from a RevNet on the bundled digits, trained by the reversible trainer.

    nas-search --config=configs/digits_revnet_search.py --workdir=runs/digits_revnet

`train.trainer = "auto"` with a `device_memory_budget` (64 MiB) below what the standard
step of this RevNet needs (about 220 MiB per device at batch 64, see
`nas.train.memory.standard_step_memory`): every candidate, the seed and its children (which
stay reversible, `nas.mutation.reversible`), trains with `nas.train.reversible`, whose
device footprint does not grow with depth. A child over the budget that were not
reversible would be recorded `infeasible` before any step.
"""

import os
import runpy

import ml_collections

from nas.search.strategy.settings import search_defaults


def get_config(arg=None):
    del arg
    here = os.path.dirname(os.path.abspath(__file__))
    train = runpy.run_path(os.path.join(here, "digits_cnn.py"))["get_config"]()
    train.model_name = "revnet"
    # nas.zoo.revnet.RevNet's arguments; e.g. --config.train.model.depth=32 for deeper ones.
    # A dense layer on every position ("flatten") learns the digits in the seed's 3 epochs
    # (96.7 % test accuracy); the usual global-average head stayed at 13 %.
    train.model = {"depth": 6, "width": 16, "num_stages": 2, "head": "flatten"}
    train.trainer = "auto"
    train.device_memory_budget = 64 * 2**20  # bytes per device
    train.grad_clip_norm = 0.0  # the reversible trainer clips per layer; keep both equal
    train.total_epochs = 1.0  # children start from their parent's weights
    train.schedule = dict(decay_type="cosine", warmup_steps=2)
    train.ckpt_steps = 0  # the final checkpoint holds the weights children inherit
    config = ml_collections.ConfigDict()
    config.train = train
    config.search = search_defaults()
    config.search.max_candidates = 8
    config.search.seed_epochs = 3.0
    config.search.child_lr = 1e-3
    config.search.log_every_steps = 4  # a child's epoch is ~22 steps: a curve of 6 points
    config.search.time_limit_s = 600.0
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.0,
                               "recommend_cost": "flops"}
    # nas.mutation.MutationConfig fields; a reversible parent's children are mutated
    # inside one coupling function or standard layer, or gain or lose a coupling.
    config.search.mutation = {
        "mutator": "random_subgraph",
        "max_len": 3,
        "synthesizer": "progressive",
        "depth_p": 0.5,
        "linear_p": None,
        "block_add_prob": 0.15,
        "block_delete_prob": 0.15,
        "time_limit_s": 60.0,
    }
    return config
