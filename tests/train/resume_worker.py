"""Train a tiny graph on digits in this process; save the final params to an .npz.

usage: resume_worker.py DATA_DIR WORKDIR OUT.npz [SLEEP_PER_STEP]
The optional sleep slows each step so that a test can SIGKILL the run mid-training; the
number of train batches this process consumed is printed, to prove a resume happened.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from helpers import tiny_config, tiny_graph  # noqa: E402

from nas.train import steps, train_and_eval  # noqa: E402


def main() -> None:
    data_dir, workdir, out = sys.argv[1:4]
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    shard, train_batches = steps.shard, [0]

    def counting_shard(batch, n):  # train batches have 32 examples, eval batches 128
        if len(batch["label"]) == 32:
            train_batches[0] += 1
            time.sleep(delay)
        return shard(batch, n)

    steps.shard = counting_shard
    graph, constants = tiny_graph(with_bn=True)
    config = tiny_config(data_dir, total_epochs=1.0, ckpt_steps=4, ema_decay=0.9,
                         **{"input.batch_size": 32})
    _, _, state = train_and_eval(config, eval_perf=False, graph=graph, constants=constants,
                                 workdir=workdir)
    flat = {jax.tree_util.keystr(k): np.asarray(v)
            for k, v in jax.tree_util.tree_leaves_with_path(state)}
    np.savez(out, **flat)
    print(f"train_batches={train_batches[0]}")  # 1 compile sample + the steps run here


if __name__ == "__main__":
    main()
