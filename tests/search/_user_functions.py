"""A user's own functions in an importable module, as a command line names them
(`--config.train.loss=tests.search._user_functions:offset_loss`)."""

import optax

OFFSET = 100.0


def offset_loss(logits, labels):
    """Cross-entropy plus a constant: the gradient is the built-in loss's, and every
    reported loss shows whose loss it is."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean() + OFFSET


def offset_from_the_batch(logits, labels, batch):
    """Cross-entropy plus the mean of the batch's `offset` extra: named on a command line
    (`--config.loss=tests.search._user_functions:offset_from_the_batch`) with an npz whose
    array `offset` is the extra."""
    import jax.numpy as jnp

    return (optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            + jnp.mean(batch["offset"]))
