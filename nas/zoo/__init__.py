"""Model zoo: builders returning `(graph, constants, blocks)`, rebuildable from `blocks=`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from nas.zoo import cnn, efficientnet, resnetv1, vit
from nas.zoo.common import ModelParts

__all__ = ["build", "builder", "cnn", "efficientnet", "resnetv1", "vit"]

_RESNETS = {f"resnet{d}": getattr(resnetv1, f"ResNet{d}") for d in (18, 34, 50, 101, 152, 200)}
_VITS = {"ti/16": vit.ViT_Ti16, "s/16": vit.ViT_S16, "b/16": vit.ViT_B16, "l/16": vit.ViT_L16}
_EFFICIENTNETS = {"b0": efficientnet.EfficientNetB0, "b1": efficientnet.EfficientNetB1}
MODEL_NAMES = ("cnn", *_RESNETS, *_VITS, *_EFFICIENTNETS, "revnet")


def builder(model_name: str, num_classes: int, image_size: int,
            model: Mapping[str, Any] | None = None) -> Callable[..., ModelParts]:
    """A callable `(blocks=None) -> (graph, constants, blocks)` for a named zoo model.

    The search rebuilds mutated models through it, so every argument but `blocks` is bound.
    `model`: the config's extra builder arguments (`train.model`, e.g. a RevNet's `depth`
    and `width`); one the builder does not take, or a value it refuses, is a ValueError
    naming `train.model`.
    """
    build = _named(model_name, num_classes, image_size)
    if not model:
        return build
    build = functools.partial(build, **dict(model))
    try:
        build()  # builds the graph once (no weights): a bad argument fails here, named
    except (TypeError, ValueError) as e:
        raise ValueError(f"train.model {dict(model)!r} for model {model_name!r}: {e}") from None
    return build


def _named(model_name: str, num_classes: int, image_size: int) -> Callable[..., ModelParts]:
    name = model_name.lower()
    if name == "cnn":
        return functools.partial(cnn.CifarNet, num_classes=num_classes)
    if name in _RESNETS:
        resolution = "small" if image_size <= 64 else "large"
        return functools.partial(_RESNETS[name], num_classes=num_classes,
                                 input_resolution=resolution)
    if name in _VITS:
        return functools.partial(_VITS[name], num_classes=num_classes, image_size=image_size)
    if name in _EFFICIENTNETS:
        return functools.partial(_EFFICIENTNETS[name], num_classes=num_classes)
    if name == "revnet":
        from nas.zoo import revnet

        return functools.partial(revnet.RevNet, num_classes=num_classes)
    raise ValueError(f"unknown model_name {model_name!r}; expected one of {', '.join(MODEL_NAMES)}")


def build(model_name: str, num_classes: int, image_size: int,
          model: Mapping[str, Any] | None = None) -> ModelParts:
    return builder(model_name, num_classes, image_size, model)()
