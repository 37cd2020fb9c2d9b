"""Training recipes without their data: what a config file or `nas.run_search` starts from.

Why: the bundled digits experiment (`configs/digits_cnn.py`) and a search on a user's own
arrays train small images the same way; one recipe, so the two never drift apart.
"""

from __future__ import annotations

import ml_collections

from nas.train.config import base_config


def small_images() -> ml_collections.ConfigDict:
    """CifarNet-sized training of small images (tens of thousands at most) on a CPU or one
    accelerator: Adam at 2e-3 with decoupled weight decay, cosine decay after 20 warmup
    steps, batches of 64, the dataset's crop-and-flip augmentation. The data fields
    (`input.data.name`, `num_classes`, `input.image_size`, the eval split) are the
    caller's."""
    c = base_config()
    c.model_name = "cnn"
    c.input.batch_size = 64
    c.input.augment = True
    c.total_epochs = 5.0
    c.optax_name = "scale_by_adam"
    c.lr = 2e-3
    c.wd = 1e-4
    c.schedule = dict(decay_type="cosine", warmup_steps=20)
    c.log_training_steps = 20
    c.ckpt_steps = 100
    return c
