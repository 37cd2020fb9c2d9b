"""ResNet18 (small-input variant) on CIFAR-10 from a tfds data dir the user prepared.

Usage: nas-train --config=configs/cifar10_resnet18.py --workdir=DIR \
           --config.input.data_dir=~/tensorflow_datasets
"""

from nas.train.config import base_config


def get_config(arg=None):
    del arg
    c = base_config()
    c.model_name = "resnet18"
    c.num_classes = 10
    c.input.data.name = "cifar10"
    c.input.data.split = "train"
    c.input.batch_size = 256
    c.input.image_size = 32
    c.input.augment = True  # pad-4 random crop + flip
    c.eval.data.split = "test"
    c.eval.batch_size = 1000
    c.total_epochs = 90.0
    c.optax_name = "trace"  # SGD momentum
    c.optax = dict(decay=0.9, nesterov=True)
    c.lr = 0.1
    c.wd = 5e-5  # decoupled: multiplied by the schedule, not by lr
    c.grad_clip_norm = 0.0
    c.schedule = dict(decay_type="cosine", warmup_epochs=2)
    c.ckpt_steps = 1000
    return c
