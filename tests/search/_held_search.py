"""The digits search with one user cost, `hold`, for a test that kills the driver inside a
child's task at its last rung (`--config=tests/search/_held_search.py`).

Why a cost: costs are measured at a child's last rung only, after its steps and before
its result is recorded, in the process that trains it (the driver, with the inline
executor). A driver started with `HOLD` in its environment prints `HELD` there and waits
until it is killed, so the test kills it on that line, an event, never after a wait of
its own; a driver started without it measures the cost (0.0) and goes on.
"""

import os
import runpy
import threading

HOLD = "NAS_TEST_HOLD_AT_LAST_RUNG"
HELD = "held at a child's last rung"
SEARCH_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "configs", "digits_cnn_search.py")


def get_config(arg=None):
    config = runpy.run_path(SEARCH_CONFIG)["get_config"](arg)
    config.search.costs = {"hold": "tests.search._held_search:hold"}
    return config


def hold(candidate) -> float:
    """0.0, at once for the seed (no start accuracy: it starts from scratch) or without
    `HOLD`; else after the process is killed, that is never."""
    if os.environ.get(HOLD) and "start_accuracy" in candidate.metrics:
        print(HELD, flush=True)
        threading.Event().wait()
    return 0.0
