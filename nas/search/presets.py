"""The search settings of the README's digits search, without its data.

Why: `configs/digits_cnn_search.py` and `nas.run_search` (whose default config this is)
must search the same way; a user's arrays or folder bring only the data fields.
"""

from __future__ import annotations

import ml_collections

from nas.search.strategy.settings import search_defaults


def evolution(train: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """A short evolution search around `train` (a `nas.train` config, changed in place):
    the seed trains 3 epochs a round while it improves, children inherit their parent's
    weights, are fitted, then fine-tune 2 epochs (at least `min_child_steps` steps)."""
    # Children start from their parent's weights: two epochs of fine-tuning (one left most
    # cheap children a few test images short of the seed: docs/benchmarks.md).
    train.total_epochs = 2.0
    train.schedule = dict(decay_type="cosine", warmup_steps=2)
    train.log_training_steps = 50
    config = ml_collections.ConfigDict()
    config.train = train
    config.search = search_defaults()
    config.search.max_candidates = 8
    config.search.seed_epochs = 3.0
    # The seed trains on in rounds of 3 epochs while a round gains more than a point of
    # validation accuracy, 15 epochs at most (nas.train.rounds): an untrained model of a
    # user's is far from what it reaches after 3; a trained one stops after one.
    config.search.seed_max_epochs = 15.0
    config.search.seed_patience = 1
    config.search.seed_min_gain = 0.01
    config.search.child_lr = 5e-4  # children fine-tune from inherited weights
    # ... for at least 100 steps: 2 epochs of the digits are 40, and children of users'
    # models on small data collapsed after about 45; on 4,000 images 2 epochs
    # are already 112 steps, so this binds only on small data
    config.search.min_child_steps = 100
    # A child starting more than 30 points below its parent is not trained: every such
    # child of the measured searches ended more than 2 points below it, while
    # children 12 points down at their start still caught up
    config.search.max_start_drop = 0.3
    config.search.log_every_steps = 4  # a digits child's epoch is ~22 steps: 11 points
    config.search.time_limit_s = 1800.0  # a safety net only: a loaded machine never decides
    # Candidate k reads the results of candidates up to k - 2, so while one child trains the
    # driver proposes the next and a second worker process sets it up, fits and compiles
    # it (search.propose_ahead, search.prepare_ahead): the device no longer waits between
    # children (on 2 CPU cores a wash in candidates/hour, the stages share the cores:
    # docs/benchmarks.md). Same candidates at any speed; 1 turns it off.
    config.search.pipeline_depth = 2
    # The recommendation's margin: 2 points, about three of the digits' 143 validation
    # images (docs/benchmarks.md, "Trusting the recommendation"; docs/guide.md says what
    # it asks of a child with Tango's paired interval).
    config.search.selection = {"costs": ("flops", "params"), "min_acc": 0.5,
                               "noninferiority_pt": 2.0, "recommend_cost": "flops"}
    # nas.mutation.MutationConfig fields. Limits are counts (retries, max_steps), so a proposal
    # is the same for its seed on any machine; time_limit_s is only a safety net.
    config.search.mutation = {
        "mutator": "random_subgraph",
        "max_len": 3,
        "synthesizer": "progressive",
        "depth_p": 0.5,
        "linear_p": 0.5,
        "function_preserving": False,
        # Shares of the families of moves, adapted to what paid (MutationConfig.moves):
        # Net2Net moves only grow the network; shrink, prune, drop_branch, stride and
        # separable give cheap children in large steps, also where widths are coupled
        # (docs/benchmarks.md)
        "moves": {"subgraph": 0.3, "net2net": 0.1, "shrink": 0.1, "prune": 0.2,
                  "drop_branch": 0.1, "stride": 0.1, "separable": 0.1},
        "max_steps": 4000,
        "time_limit_s": 600.0,
        # What synthesis may build: softmax/sigmoid, scalar multiplies and whole-input pool
        # windows only where the replaced subgraph had them, widths changed by at most 2x,
        # logits computed by a DENSE or CONV, pool windows up to 4 (docs/function-
        # preservation.md and the SearchSpace docstring say why).
        "search_space": {
            "inherit_only": ("SOFTMAX", "SIGMOID", "SCALAR_MUL"),
            "width_factors": ("%2", "", "*2"),
            "full_window_pools": False,
            "linear_outputs": True,
            "pool_windows": (2, 3, 4),
        },
    }
    # Multi-fidelity (asynchronous successive halving) is off here, so the README's measured
    # times hold; turn it on with search.fidelity.rungs=(0.25,): a child trains a quarter
    # epoch first and goes on only if it ranks in the best `keep` fraction of its rung and
    # keeps `parent_ratio` of its parent's accuracy (docs/multi-fidelity.md).
    config.search.fidelity = {"rungs": (), "keep": 0.5, "parent_ratio": 0.5, "cost": "flops"}
    # Before a child trains, its new ops are fitted to the parent's tensors they replace.
    config.search.fit = {"steps": 40, "batches": 4, "batch_size": 16, "bn_batch_size": 32,
                         "lr": 3e-3}
    return config
