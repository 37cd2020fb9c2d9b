"""CifarNet on the bundled scikit-learn digits (1,437 train / 360 test, 32x32x3).

Default experiment: offline, trains to >= 95% test accuracy in 1-2 minutes on 2 CPU cores.
Usage: nas-train --config=configs/digits_cnn.py --workdir=/tmp/digits
"""

from nas.train.config import base_config


def get_config(arg=None):
    del arg
    c = base_config()
    c.model_name = "cnn"
    c.input.data.name = "digits"  # num_classes: 0 in base_config(), the data's (10)
    c.input.data.split = "train"
    c.input.batch_size = 64
    c.input.image_size = 32
    c.input.augment = True
    c.eval.data.split = "test"
    c.eval.batch_size = 360
    c.total_epochs = 5.0
    c.optax_name = "scale_by_adam"
    c.lr = 2e-3
    c.wd = 1e-4
    c.schedule = dict(decay_type="cosine", warmup_steps=20)
    c.log_training_steps = 20
    c.ckpt_steps = 100
    return c
