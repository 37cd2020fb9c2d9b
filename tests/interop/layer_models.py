"""Small Flax models (linen and NNX) built around the layers with no IR op of their own:
Einsum, NNX LinearGeneral, ConvTranspose (imported whole as DENSE_GENERAL / CONV) and Embed
(refused). Input: `models.SHAPE` images."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from tests.interop.models import SHAPE, quarter_rounded_dot

PATCH = 4
TOKENS = (SHAPE[1] // PATCH) ** 2  # 16 tokens of 4x4 patches
DIM = PATCH * PATCH * SHAPE[3]  # 48


def _tokens(x):
    b, h, w, c = x.shape
    x = x.reshape(b, h // PATCH, PATCH, w // PATCH, PATCH, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, TOKENS, DIM)


class LinenEinsums(nn.Module):
    """Attention-style projections: heads out, heads in with the kernel's contracted axes in
    another order than the input's, and one einsum that is no DenseGeneral (a per-token
    weight: a label in the input, the kernel and the output)."""

    @nn.compact
    def __call__(self, x):
        t = _tokens(x)
        q = nn.Einsum((DIM, 4, 8), "btd,dnh->btnh")(t)
        q = nn.gelu(q)
        t = nn.Einsum((8, 4, 12), "btnh,hnd->btd", use_bias=False)(q)
        t = nn.Einsum((TOKENS, 12), "btd,td->btd", name="per_token")(t)
        return nn.Dense(10)(jnp.mean(t, axis=1))


class NnxGeneral(nnx.Module):
    """LinearGeneral over two axes and over one, an Einsum given its equation at call time
    and one that is no DenseGeneral (a per-row weight: traced through)."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.mix = nnx.LinearGeneral((TOKENS, DIM), (6, 5), axis=(-2, -1), rngs=rngs)
        self.rows = nnx.LinearGeneral(5, 7, rngs=rngs)
        self.scale = nnx.Einsum("bnf,nf->bnf", (6, 7), (6, 7), rngs=rngs)
        self.head = nnx.Einsum("bnf,fnk->bk", (7, 6, 10), (10,), rngs=rngs)

    def __call__(self, x):
        y = nnx.relu(self.mix(_tokens(x)))
        return self.head(self.scale(nnx.tanh(self.rows(y))), "bnf,fnk->bk")


class LinenConvTranspose(nn.Module):
    """Strided transposed convolutions: SAME with a bias, VALID with a flipped kernel."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3), strides=(2, 2))(x))
        x = nn.relu(nn.ConvTranspose(6, (3, 3), strides=(2, 2))(x))
        x = nn.ConvTranspose(4, (2, 2), strides=(2, 2), padding="VALID", transpose_kernel=True,
                             use_bias=False)(x)
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


class NnxConvTranspose(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.down = nnx.Conv(3, 8, (3, 3), strides=2, rngs=rngs)
        self.up = nnx.ConvTranspose(8, 5, (4, 4), strides=2, kernel_dilation=1, rngs=rngs)
        self.head = nnx.Linear(5, 10, rngs=rngs)

    def __call__(self, x):
        return self.head(jnp.mean(nnx.silu(self.up(self.down(x))), axis=(1, 2)))


class LinenEmbed(nn.Module):
    @nn.compact
    def __call__(self, x):
        ids = jnp.clip(x[..., 0] * 4, 0, 7).astype(jnp.int32)
        return nn.Dense(10)(nn.Embed(8, 4)(ids).reshape(x.shape[0], -1))


class WeightNormed(nn.Module):
    """A conv whose kernel is computed from other parameters each call (no stored weight)."""

    @nn.compact
    def __call__(self, x):
        x = nn.WeightNorm(nn.Conv(8, (3, 3)))(x)
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


class NnxEmbed(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(8, 4, rngs=rngs)

    def __call__(self, x):
        return jnp.mean(self.embed(x[..., 0].astype(jnp.int32)), axis=(1, 2))


class CircularConvTranspose(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.mean(nn.ConvTranspose(4, (3, 3), padding="CIRCULAR")(x), axis=(1, 2))


def _halved_dot(x, kernel, *args, **kwargs):
    return jax.lax.dot_general(x * 0.5, kernel, *args, **kwargs)


class InjectedDots(nn.Module):
    """Layers given their own matmul (`dot_general=`): traced through, not read as plain
    Dense layers. `rounded` rounds, which the IR cannot: refused."""

    rounded: bool = False

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        dot = quarter_rounded_dot if self.rounded else _halved_dot
        return nn.Dense(10, dot_general=dot)(jnp.mean(x, axis=(1, 2)))
