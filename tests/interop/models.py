"""Small models written in plain Flax (linen and NNX), as users write them, for the import
tests. Together they use batch norm, residual adds, depthwise convolution, squeeze-excite,
layer norm, GELU, layer scale, learned position embeddings, token mixing, group norm,
dropout, pooling and explicit padding; `LinenBranches` adds concatenation and the newer
activations (it needs the op types of the ops branch)."""

from __future__ import annotations

import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

SHAPE = (2, 16, 16, 3)


class ResBlock(nn.Module):
    features: int
    strides: int = 1

    @nn.compact
    def __call__(self, x, train: bool = False):
        y = nn.Conv(self.features, (3, 3), strides=self.strides, padding=((1, 1), (1, 1)),
                    use_bias=False)(x)
        y = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-3)(y)
        y = nn.relu(y)
        y = nn.Conv(self.features, (3, 3), use_bias=False)(y)
        y = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-3)(y)
        if x.shape != y.shape:
            x = nn.Conv(self.features, (1, 1), strides=self.strides, name="proj")(x)
        return nn.relu(x + y)


class LinenResNet(nn.Module):
    """Batch norm, residual adds, strided and explicitly padded convs, pools, dense head."""

    num_classes: int = 10
    dropout_rate: float = 0.1

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3), padding="SAME")(x)
        x = nn.BatchNorm(use_running_average=not train)(x)
        x = nn.relu(x)
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = ResBlock(8)(x, train)
        x = ResBlock(16, strides=2)(x, train)
        x = nn.avg_pool(x, (2, 2), strides=(1, 1))
        x = jnp.mean(x, axis=(1, 2))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(self.num_classes)(x)


class SqueezeExcite(nn.Module):
    reduced: int

    @nn.compact
    def __call__(self, x):
        s = jnp.mean(x, axis=(1, 2), keepdims=True)
        s = nn.relu(nn.Dense(self.reduced)(s))
        s = nn.sigmoid(nn.Dense(x.shape[-1])(s))
        return x * s


class LinenMobile(nn.Module):
    """Depthwise (dilated) convolution, squeeze-excite, swish, group norm, layer scale."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(16, (3, 3), strides=(2, 2), padding="VALID")(x)
        x = nn.swish(nn.GroupNorm(num_groups=4)(x))
        y = nn.Conv(16, (3, 3), feature_group_count=16, kernel_dilation=(2, 2))(x)
        y = SqueezeExcite(4)(nn.swish(y))
        y = nn.Conv(16, (1, 1))(y)
        gamma = self.param("layer_scale", nn.initializers.constant(0.5), (16,))
        x = x + gamma * y
        x = x.reshape((x.shape[0], -1))
        return nn.DenseGeneral(self.num_classes)(x)


class NnxViT(nnx.Module):
    """Patch embedding, learned position embedding, layer norm, GELU MLP, layer scale."""

    def __init__(self, num_classes: int = 10, width: int = 16, patch: int = 4, *,
                 rngs: nnx.Rngs):
        tokens = (SHAPE[1] // patch) ** 2
        self.embed = nnx.Conv(3, width, (patch, patch), strides=(patch, patch),
                              padding="VALID", rngs=rngs)
        self.pos = nnx.Param(jax.random.normal(rngs.params(), (1, tokens, width)) * 0.02)
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.fc1 = nnx.Linear(width, 2 * width, rngs=rngs)
        self.fc2 = nnx.Linear(2 * width, width, rngs=rngs)
        self.scale = nnx.Param(jnp.full((width,), 0.1))
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, num_classes, rngs=rngs)

    def __call__(self, x):
        x = self.embed(x)
        x = x.reshape(x.shape[0], -1, x.shape[-1]) + self.pos
        y = self.fc2(nnx.gelu(self.fc1(self.norm1(x))))
        x = x + self.scale * y
        return self.head(self.norm2(x).mean(axis=1))


class NnxMixer(nnx.Module):
    """Token mixing: reshape to tokens, swapaxes, a dense over tokens, and back."""

    def __init__(self, num_classes: int = 10, width: int = 12, patch: int = 4, *,
                 rngs: nnx.Rngs):
        tokens = (SHAPE[1] // patch) ** 2
        self.patch = patch
        self.embed = nnx.Linear(patch * patch * 3, width, rngs=rngs)
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.token1 = nnx.Linear(tokens, 2 * tokens, rngs=rngs)
        self.token2 = nnx.Linear(2 * tokens, tokens, rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.channel = nnx.Linear(width, width, rngs=rngs)
        self.head = nnx.Linear(width, num_classes, rngs=rngs)

    def __call__(self, x):
        b, h, w, c = x.shape
        p = self.patch
        x = x.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
        x = self.embed(x.reshape(b, (h // p) * (w // p), p * p * c))
        y = jnp.swapaxes(self.norm1(x), 1, 2)
        y = self.token2(nnx.gelu(self.token1(y)))
        x = x + jnp.swapaxes(y, 1, 2)
        x = x + self.channel(nnx.relu(self.norm2(x)))
        return self.head(jnp.mean(x, axis=1))


class NnxCNN(nnx.Module):
    """Batch norm and dropout in eval mode, group norm, strides, flatten."""

    def __init__(self, num_classes: int = 10, image: int = SHAPE[1], *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(3, 8, (3, 3), strides=(2, 2), rngs=rngs)
        self.bn = nnx.BatchNorm(8, momentum=0.95, rngs=rngs)
        self.conv2 = nnx.Conv(8, 8, (3, 3), padding=((2, 0), (0, 2)), use_bias=False,
                              rngs=rngs)
        self.gn = nnx.GroupNorm(8, num_groups=2, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.head = nnx.Linear(8 * (image // 4) ** 2, num_classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv1(x)))
        x = nnx.sigmoid(self.gn(self.conv2(x))) * x
        x = nnx.avg_pool(x, (2, 2), strides=(2, 2))
        x = self.drop(x.reshape(x.shape[0], -1))
        return self.head(x)


class NnxConvNeXt(nnx.Module):
    """A ConvNeXt-style block: a depthwise 7x7 conv, layer norm, an inverted GELU MLP and a
    layer scale held directly by the module (an `nnx.Param`, not inside a layer), added
    back to the block's input."""

    def __init__(self, num_classes: int = 10, width: int = 8, *, rngs: nnx.Rngs):
        self.stem = nnx.Conv(3, width, (4, 4), strides=(4, 4), padding="VALID", rngs=rngs)
        self.dw = nnx.Conv(width, width, (7, 7), feature_group_count=width, rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.up = nnx.Linear(width, 4 * width, rngs=rngs)
        self.down = nnx.Linear(4 * width, width, rngs=rngs)
        self.gamma = nnx.Param(jnp.full((width,), 0.5))
        self.head = nnx.Linear(width, num_classes, rngs=rngs)

    def __call__(self, x):
        x = self.stem(x)
        y = self.down(nnx.gelu(self.up(self.norm(self.dw(x)))))
        x = x + self.gamma * y
        return self.head(jnp.mean(nnx.relu(x), axis=(1, 2)))


class LinenBranches(nn.Module):
    """Concatenation and the activations the ops branch adds (relu6, hard swish, tanh,
    leaky relu, elu, exact gelu)."""

    num_classes: int = 10

    @nn.compact
    def __call__(self, x):
        a = nn.relu6(nn.Conv(4, (3, 3))(x))
        b = nn.hard_swish(nn.Conv(4, (1, 1))(x))
        x = jnp.concatenate([a, b, x], axis=-1)
        x = nn.leaky_relu(nn.Conv(8, (3, 3))(x), 0.1)
        x = nn.elu(nn.Conv(8, (3, 3))(x), 0.5)
        x = jnp.tanh(x.mean(axis=(1, 2)))
        return nn.Dense(self.num_classes)(nn.gelu(x, approximate=False))


class SortsFeatures(nn.Module):
    """A model with a primitive the IR has no op for."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(4, (3, 3), name="stem")(x)
        return nn.Dense(10)(jnp.sort(x, axis=-1).mean(axis=(1, 2)))


def linen_resnet():
    return LinenResNet()


def nnx_cnn():
    """A factory for `nas-search import` (32x32 images, as the digits search uses)."""
    model = NnxCNN(image=32, rngs=nnx.Rngs(0))
    model.eval()
    return model


def not_a_module():
    return "model"


def raises():
    raise RuntimeError("no weights here")


def quarter_rounded_dot(x, kernel, *args, **kwargs):
    """A fake-quantized matmul (inputs rounded to quarters), as quantization libraries
    inject into `nn.Dense(dot_general=...)`."""
    return jax.lax.dot_general(jnp.round(x * 4) / 4, kernel, *args, **kwargs)


class CountsItsCalls(nn.Module):
    """Adds how often it was called before: a graph traced from one call computes another
    call's output, what `nas.check_import` (and so `nas-search import`) must catch."""

    calls = itertools.count()

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2))) + float(next(CountsItsCalls.calls))


LINEN = {"resnet": LinenResNet, "mobile": LinenMobile, "branches": LinenBranches}
NNX = {"vit": NnxViT, "mixer": NnxMixer, "cnn": NnxCNN, "convnext": NnxConvNeXt}


def build(name: str):
    """(module, variables or None, call kwargs) of a test model by name."""
    x = jnp.ones(SHAPE)
    if name in LINEN:
        model = LINEN[name]()
        variables = model.init({"params": jax.random.PRNGKey(1)}, x)
        variables = jax.tree.map(
            lambda a: a + 0.1 * jax.random.normal(jax.random.PRNGKey(2), a.shape), variables)
        return model, variables, {}
    model = NNX[name](rngs=nnx.Rngs(0))
    model.eval()
    return model, None, {}


def example(seed: int = 3) -> jax.Array:
    return jax.random.normal(jax.random.PRNGKey(seed), SHAPE)


def infer_and_mutate(cand, x):
    """An imported candidate's shape and depth properties infer, and a forced mutation
    (a few seeds) gives a child; returns the child (None if none was found)."""
    from nas.graph.subgraph import SubgraphModel
    from nas.mutation import NoChildFound, propose_child
    from nas.properties import depth, shape

    sm = SubgraphModel(cand.graph, {}, None, {"input": x})
    shapes = shape.ShapeProperty().infer(sm)
    assert list(shapes.output_shapes.values())[0][-1] == 10
    assert depth.DepthProperty().infer(sm).depth_map
    for seed in range(8):
        try:
            return propose_child(cand.graph, {}, cand.variables, seed=seed,
                                 config={"linear_p": None, "input_shape": (1, 16, 16, 3)})
        except NoChildFound:
            continue
    return None

