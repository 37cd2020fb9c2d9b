"""ResNet50 on ImageNet-1k (imagenet2012 in a prepared tfds data dir), big_vision recipe.

Usage: nas-train --config=configs/imagenet_resnet50.py --workdir=DIR \
           --config.input.data_dir=/data/tensorflow_datasets
"""

from nas.train.config import base_config


def get_config(arg=None):
    del arg
    c = base_config()
    c.model_name = "resnet50"
    c.num_classes = 1000
    c.input.data.name = "imagenet2012"
    c.input.data.split = "train[:99%]"
    c.input.batch_size = 1024
    c.input.image_size = 224
    c.input.augment = True  # inception crop + flip
    c.input.num_threads = 16
    c.eval.data.split = "train[99%:]"  # minival, as big_vision; "validation" for the real one
    c.eval.batch_size = 1024
    c.total_epochs = 90.0
    c.optax_name = "trace"
    c.optax = dict(decay=0.9)
    c.lr = 0.4  # 0.1 * batch / 256
    c.wd = 5e-5
    c.grad_clip_norm = 0.0
    c.schedule = dict(decay_type="cosine", warmup_epochs=5)
    c.ema_decay = 0.0
    c.ckpt_steps = 2000
    c.keep_ckpts = 3
    return c
