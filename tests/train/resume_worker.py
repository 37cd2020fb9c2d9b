"""Train a tiny graph on digits in this process; save the final params to an .npz.

usage: resume_worker.py DATA_DIR WORKDIR OUT.npz FEED [SLEEP_PER_STEP]
FEED is "grain" (host pipeline) or "device" (device-resident dataset). The optional sleep
slows each step so that a test can SIGKILL the run mid-training; the number of train
batches this process drew is printed, to prove a resume happened.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from helpers import tiny_config, tiny_graph  # noqa: E402

from nas.train import TrainOptions, train_and_eval  # noqa: E402
from nas.train import train as train_lib  # noqa: E402


def main() -> None:
    data_dir, workdir, out, feed = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    train_batches = [0]
    for cls in (train_lib.HostFeed, train_lib.DeviceFeed):
        def counting_next(self, step, _next=cls.next):
            train_batches[0] += 1
            time.sleep(delay)
            return _next(self, step)

        cls.next = counting_next
    graph, constants = tiny_graph(with_bn=True)
    config = tiny_config(data_dir, total_epochs=1.0, ckpt_steps=4, ema_decay=0.9,
                         **{"input.batch_size": 32,
                            "input.device_data_bytes": 2**30 if feed == "device" else 0})
    _, _, state = train_and_eval(config, eval_perf=False,
                                 options=TrainOptions(graph=graph, constants=constants,
                                                      workdir=workdir))
    flat = {jax.tree_util.keystr(k): np.asarray(v)
            for k, v in jax.tree_util.tree_leaves_with_path(state)}
    np.savez(out, **flat)
    print(f"train_batches={train_batches[0]}")  # the steps run here


if __name__ == "__main__":
    main()
