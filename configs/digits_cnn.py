"""CifarNet on the bundled scikit-learn digits (1,437 train / 360 test, 32x32x3).

Default experiment: offline, trains to >= 95% test accuracy in 1-2 minutes on 2 CPU cores.
Usage: nas-train --config=configs/digits_cnn.py --workdir=/tmp/digits
"""

from nas.train.recipes import small_images


def get_config(arg=None):
    del arg
    c = small_images()  # CifarNet, Adam 2e-3, cosine after 20 warmup steps, batches of 64
    c.input.data.name = "digits"  # num_classes: 0 in small_images(), the data's (10)
    c.input.data.split = "train"
    c.input.image_size = 32
    c.eval.data.split = "test"
    c.eval.batch_size = 360
    return c
