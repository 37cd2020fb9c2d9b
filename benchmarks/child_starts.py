"""Where do children of a user's imported model start, and where do they end?

A user's linen model (`--model gated`: conv, GroupNorm, a sigmoid gate, a residual, a
flatten-dense head; `--model plain`: `benchmarks/first_try.py`'s CNN) is imported
untrained with `nas.from_flax` and searched with `nas.run_search`'s defaults on 4,000 small
grey images (Fashion-MNIST with `--fashion DIR`, else scikit-learn's digits). For each
child the table shows its parent's validation accuracy, its own before fine-tuning
(`start_accuracy`: inherited and fitted weights) and after, and the ops its mutation made.

    python benchmarks/child_starts.py --workdir /tmp/cs [--fashion DIR] [--candidates 8]
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil

import flax.linen as nn
import jax.numpy as jnp

import nas

HERE = os.path.dirname(os.path.abspath(__file__))


class GatedNet(nn.Module):
    """Conv, GroupNorm, a sigmoid gate and a residual, then a flatten-dense head."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.GroupNorm(num_groups=4)(nn.Conv(16, (3, 3))(x)))
        gate = nn.sigmoid(nn.Conv(16, (1, 1))(x))
        x = x + x * gate
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(10)(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--fashion", default="")
    parser.add_argument("--model", default="gated", choices=("gated", "plain"))
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[],
                        help="an override KEY=VALUE (python literal), e.g. "
                             "search.mutation.net2net_p=0.5")
    args = parser.parse_args()
    first_try = runpy.run_path(os.path.join(HERE, "first_try.py"))
    n = 4000 if args.fashion else 1797
    images, labels, name = first_try["load_images"](args.fashion, n, 14)
    cut = n * 9 // 10
    data = (images[:cut], labels[:cut], images[cut:], labels[cut:])
    module = GatedNet() if args.model == "gated" else first_try["UserCNN"]()
    seed = nas.from_flax(module, jnp.zeros((1, 14, 14, 1), jnp.float32))
    overrides = {"search.seed": args.seed}
    for item in args.set:
        key, value = item.split("=", 1)
        import ast

        overrides[key] = ast.literal_eval(value)
    shutil.rmtree(args.workdir, ignore_errors=True)
    result = nas.run_search(seed, data, workdir=args.workdir, max_candidates=args.candidates,
                            overrides=overrides, progress=False)
    study = result.study
    done = {c.id: c for c in study.candidates("done")}
    seed_row = done.get(1)
    print(f"{name}, {args.model}: seed {seed_row.accuracy:.3f} after "
          f"{seed_row.metrics.get('epochs')} epochs in {seed_row.metrics.get('rounds', 1)} "
          f"round(s) ({seed_row.metrics.get('round_accuracies')})")
    print("| child | parent | parent acc | start acc | final acc | within 2 pt | kind | "
          "new ops |")
    print("|---|---|---|---|---|---|---|---|")
    within = 0
    children = [c for c in done.values() if c.parent_id is not None]
    for c in children:
        parent = done[c.parent_id]
        start = c.metrics.get("start_accuracy")
        ok = c.accuracy >= parent.accuracy - 0.02
        within += ok
        new = [node["op"]["type"] for node in (study.get(c.id).spec or [])]
        print(f"| {c.id} | {c.parent_id} | {parent.accuracy:.3f} | "
              f"{'' if start is None else f'{start:.3f}'} | {c.accuracy:.3f} | "
              f"{'yes' if ok else 'no'} | {c.inheritance.get('kind')} | {', '.join(new)} |")
    cheap = [c for c in children if c.flops and seed_row.flops
             and c.flops <= 0.8 * seed_row.flops and c.accuracy >= seed_row.accuracy - 0.01]
    print(f"within 2 pt of their parent: {within} of {len(children)}; at <= 0.8x the seed's "
          f"FLOPs within 1 pt of it: {[c.id for c in cheap] or 'none'}; failed: "
          f"{study.counts().get('failed', 0)}")
    print(result.study.workdir)



if __name__ == "__main__":
    main()
