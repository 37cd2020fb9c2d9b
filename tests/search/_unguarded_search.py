"""A user's script without the `__main__` guard (run by test_worker_death.py):

    python tests/search/_unguarded_search.py WORKDIR

Its worker process imports it again and would run the search again; the candidate's error
must say so, and name the guard."""

import sys

import numpy as np

import nas

rng = np.random.default_rng(0)
x = rng.integers(0, 256, (100, 8, 8, 3), dtype=np.uint8)
y = np.arange(100) % 10
nas.run_search("cnn", (x, y, x[:10], y[:10]), workdir=sys.argv[1], max_candidates=1,
               progress=False, overrides={"search.workers": 1, "search.executor": "local",
                                          "train.total_epochs": 0.5, "train.input.batch_size": 16,
                                          "search.seed_epochs": 0.5})
