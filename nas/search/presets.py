"""The search settings of the README's digits search, without its data: the default of
`nas.run_search` and of `configs/digits_cnn_search.py`, so both search the same way."""

from __future__ import annotations

import ml_collections

from nas.search.strategy.settings import search_defaults


def evolution(train: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A short evolution search around `train` (a `nas.train` config, changed in place)."""
    # Children fine-tune their parent's weights for two epochs (one left most cheap
    # children a few test images short of the seed: docs/benchmarks.md).
    train.total_epochs = 2.0
    train.schedule = dict(decay_type="cosine", warmup_steps=2)
    train.log_training_steps = 50
    config = ml_collections.ConfigDict()
    config.train = train
    config.search = search_defaults()
    config.search.max_candidates = 8
    # The seed trains in rounds of 3 epochs while a round gains more than a point, 15 at
    # most: a user's untrained model is far from done after 3; a trained one stops after one.
    config.search.seed_epochs = 3.0
    config.search.seed_max_epochs = 15.0
    config.search.seed_patience = 1
    config.search.seed_min_gain = 0.01
    config.search.child_lr = 5e-4
    # Children of users' models on small data collapsed after about 45 steps; 2 digits
    # epochs are 40, 2 epochs of 4,000 images 112: this binds only on small data.
    config.search.min_child_steps = 100
    # Every measured child starting over 30 points below its parent ended over 2 points
    # below it; children 12 points down at their start still caught up.
    config.search.max_start_drop = 0.3
    config.search.log_every_steps = 4  # a digits child's epoch is ~22 steps: 11 points
    config.search.time_limit_s = 1800.0  # a safety net only: a loaded machine never decides
    # Candidate k reads results up to k - 2, so the next child is proposed, fitted and
    # compiled while one trains (same candidates at any speed; 1 turns it off;
    # docs/benchmarks.md).
    config.search.pipeline_depth = 2
    # The recommendation's margin of 2 points is about three of the digits' 143 validation
    # images (docs/benchmarks.md, "Trusting the recommendation").
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.5,
                               "noninferiority_pt": 2.0, "recommend_cost": "flops"}
    # Limits are counts (retries, max_steps), so a proposal is the same on any machine.
    config.search.mutation = {
        "mutator": "random_subgraph",
        "max_len": 3,
        "synthesizer": "progressive",
        "depth_p": 0.5,
        "linear_p": 0.5,
        "function_preserving": False,
        # Net2Net only grows the network; shrink, prune, drop_branch, stride and separable
        # give cheap children in large steps, also where widths are coupled.
        "moves": {"subgraph": 0.3, "net2net": 0.1, "shrink": 0.1, "prune": 0.2,
                  "drop_branch": 0.1, "stride": 0.1, "separable": 0.1},
        "max_steps": 4000,
        "time_limit_s": 600.0,
        # docs/function-preservation.md and the SearchSpace docstring say why.
        "search_space": {
            "inherit_only": ("SOFTMAX", "SIGMOID", "SCALAR_MUL"),
            "width_factors": ("%2", "", "*2"),
            "full_window_pools": False,
            "linear_outputs": True,
            "pool_windows": (2, 3, 4),
        },
    }
    # Multi-fidelity is off, so the README's measured times hold (docs/multi-fidelity.md).
    config.search.fidelity = {"rungs": (), "keep": 0.5, "parent_ratio": 0.5, "cost": "flops"}
    config.search.fit = {"steps": 40, "batches": 4, "batch_size": 16, "bn_batch_size": 32,
                         "lr": 3e-3}
    return config
