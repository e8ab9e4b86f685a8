"""Compiled reference steps: how to write a training step with js.

Each step is a ``js.jit`` function. It takes the model, the optimizer(s), a batch and, where
it samples, a ``js.Rngs``; it updates them in place (state is passed, never read from scope)
and returns a dict of metrics that stay on the device: ``loss`` (the batch mean), ``count``
(the examples it averaged over) and, for classification, ``correct``. ``Trainer`` sums these
per epoch. They are examples, not a required abstraction: copy one and change the loss.

Mixed precision: the classification, regression and autoencoder steps take a static
``compute_dtype=`` (default None, float32): ``compute_dtype=jnp.bfloat16`` runs the forward and
backward passes in bfloat16 under :func:`js.training.autocast` (inputs cast, parameters cast at
use) while the loss, the gradients, the parameters and the optimizer state stay float32.

Clipping: the same four steps take static ``clip_grad_norm=`` (the gradients scaled to that
global L2 norm, as torch's ``clip_grad_norm_``) or ``clip_grad_value=`` (each element clamped
to ``[-v, v]``, as ``clip_grad_value_``), applied between the gradient and the update.

Batches are tuples ``(x, y)`` / ``(x, y, mask)`` or dicts ``{'x':, 'y':, 'mask':}``; for the
autoencoder and the GAN a batch is ``x`` or ``(x,)``. A ``mask[B]`` (bool) drops examples.

Example:
    >>> metrics = classification_step(model, optimizer, (x, y))  # doctest: +SKIP
    >>> float(metrics["loss"])  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

import js
import js.losses as losses
import js.optim

from ._precision import autocast


def unpack(batch: Any) -> tuple[Any, Any, Any]:
    """``(x, y, mask)`` from a tuple ``(x, y[, mask])`` or a dict with ``x``, ``y``[, ``mask``]."""
    if isinstance(batch, Mapping):
        return batch["x"], batch["y"], batch.get("mask")
    if isinstance(batch, (tuple, list)) and len(batch) in (2, 3):
        return batch[0], batch[1], (batch[2] if len(batch) == 3 else None)
    raise ValueError(
        "a supervised batch is (x, y), (x, y, mask) or a dict with 'x' and 'y'; got a "
        f"{type(batch).__name__} of length {len(batch)}"
    )


def inputs(batch: Any) -> Any:
    """``x`` from an unsupervised batch: ``x``, ``(x,)`` or a dict with ``x``."""
    if isinstance(batch, Mapping):
        return batch["x"]
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _forward(model, x, compute_dtype, **kwargs):
    """``model(x, **kwargs)``, in ``compute_dtype`` when given (a floating ``x`` cast to it,
    parameters cast at use), returned as float32 so the loss is computed in float32."""
    if compute_dtype is None:
        return model(x, **kwargs)
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(compute_dtype)
    with autocast(model, compute_dtype):
        out = model(x, **kwargs)
    return out.astype(jnp.float32)


def check_clipping(owner: str, clip_grad_norm: float | None, clip_grad_value: float | None) -> None:
    """Refuse both clippings at once (which first would be a guess) and bad values."""
    if clip_grad_norm is not None and clip_grad_value is not None:
        raise ValueError(
            f"{owner}: clip_grad_norm={clip_grad_norm!r} and clip_grad_value={clip_grad_value!r} "
            "were both given; Lightning's gradient_clip_algorithm is one of them. Fix: pass one."
        )
    for name, value in (("clip_grad_norm", clip_grad_norm), ("clip_grad_value", clip_grad_value)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0
        ):
            raise ValueError(f"{owner}: {name} must be a number >= 0 or None, got {value!r}")


def clip(
    grads: Any, clip_grad_norm: float | None = None, clip_grad_value: float | None = None
) -> Any:
    """``grads`` clipped to the global norm ``clip_grad_norm`` or elementwise to
    ``[-clip_grad_value, clip_grad_value]`` (at most one of them; neither: unchanged)."""
    check_clipping("clip", clip_grad_norm, clip_grad_value)
    if clip_grad_norm is not None:
        return js.optim.clip_grad_norm(grads, clip_grad_norm)[0]
    if clip_grad_value is not None:
        return js.optim.clip_grad_value(grads, clip_grad_value)
    return grads


def _count(y, mask):
    if mask is None:
        return jnp.asarray(y.shape[0], jnp.int32)
    return jnp.sum(mask.astype(jnp.int32))


def _classification_metrics(loss, logits, y, mask) -> dict:
    hit = jnp.argmax(logits, axis=-1) == y  # [B]
    if mask is not None:
        hit = hit & mask.astype(bool)
    return {"loss": loss, "count": _count(y, mask), "correct": jnp.sum(hit.astype(jnp.int32))}


# -- classification -------------------------------------------------------------------------


@js.jit(static_argnames=("compute_dtype", "clip_grad_norm", "clip_grad_value"))
def classification_step(
    model: js.Module,
    optimizer: Any,
    batch: Any,
    *,
    compute_dtype: DTypeLike | None = None,
    clip_grad_norm: float | None = None,
    clip_grad_value: float | None = None,
) -> dict[str, jax.Array]:
    """One optimizer step of cross-entropy on ``logits = model(x)`` [B, C], labels ``y`` [B]."""
    x, y, mask = unpack(batch)

    def loss_fn(model):
        logits = _forward(model, x, compute_dtype)  # [B, C]
        return losses.cross_entropy(logits, y, mask=mask), logits

    (loss, logits), grads = js.value_and_grad(loss_fn, has_aux=True)(model)
    optimizer.step(clip(grads, clip_grad_norm, clip_grad_value))
    return _classification_metrics(loss, logits, y, mask)


@js.jit(static_argnames=("compute_dtype", "clip_grad_norm", "clip_grad_value"))
def dropout_classification_step(
    model: js.Module,
    optimizer: Any,
    batch: Any,
    rngs: js.Rngs,
    *,
    compute_dtype: DTypeLike | None = None,
    clip_grad_norm: float | None = None,
    clip_grad_value: float | None = None,
) -> dict[str, jax.Array]:
    """As :func:`classification_step` for a model with dropout: ``model(x, rngs=rngs)``.

    ``rngs`` (with a ``dropout`` stream) is passed through the gradient so its counter
    advances in place: the next step draws new masks, and a checkpoint replays them.
    """
    x, y, mask = unpack(batch)

    def loss_fn(model, rngs):
        logits = _forward(model, x, compute_dtype, rngs=rngs)  # [B, C]
        return losses.cross_entropy(logits, y, mask=mask), logits

    (loss, logits), grads = js.value_and_grad(loss_fn, has_aux=True)(model, rngs)
    optimizer.step(clip(grads, clip_grad_norm, clip_grad_value))
    return _classification_metrics(loss, logits, y, mask)


@js.jit(static_argnames=("compute_dtype",))
def classification_eval_step(
    model: js.Module, batch: Any, *, compute_dtype: DTypeLike | None = None
) -> dict[str, jax.Array]:
    """Loss, count and correct of ``model(x)`` without an update (call ``model.eval()`` first)."""
    x, y, mask = unpack(batch)
    logits = _forward(model, x, compute_dtype)
    return _classification_metrics(losses.cross_entropy(logits, y, mask=mask), logits, y, mask)


# -- forecasting (regression) and autoencoding ----------------------------------------------


def _masked_mse(prediction, y, mask):
    """Mean squared error over the rows ``mask[B]`` keeps (every row without a mask)."""
    if mask is None:
        return losses.mse_loss(prediction, y)
    rows = mask.astype(bool).reshape(mask.shape + (1,) * (y.ndim - 1))  # [B, 1, ...]
    return losses.mse_loss(prediction, y, mask=jnp.broadcast_to(rows, y.shape))


@js.jit(static_argnames=("compute_dtype", "clip_grad_norm", "clip_grad_value"))
def regression_step(
    model: js.Module,
    optimizer: Any,
    batch: Any,
    *,
    compute_dtype: DTypeLike | None = None,
    clip_grad_norm: float | None = None,
    clip_grad_value: float | None = None,
) -> dict[str, jax.Array]:
    """One step of mean squared error between ``model(x)`` and ``y`` (same shape), e.g. an
    LSTM forecaster mapping a window ``[B, T, F]`` to the next values ``[B, F]``. A
    ``mask[B]`` keeps only its rows: the loss is their mean and ``count`` their number."""
    x, y, mask = unpack(batch)

    def loss_fn(model):
        return _masked_mse(_forward(model, x, compute_dtype), y, mask)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(clip(grads, clip_grad_norm, clip_grad_value))
    return {"loss": loss, "count": _count(y, mask)}


@js.jit(static_argnames=("compute_dtype",))
def regression_eval_step(
    model: js.Module, batch: Any, *, compute_dtype: DTypeLike | None = None
) -> dict[str, jax.Array]:
    """Mean squared error of ``model(x)`` against ``y`` (over the rows ``mask`` keeps) without
    an update."""
    x, y, mask = unpack(batch)
    prediction = _forward(model, x, compute_dtype)
    return {"loss": _masked_mse(prediction, y, mask), "count": _count(y, mask)}


@js.jit(static_argnames=("compute_dtype", "clip_grad_norm", "clip_grad_value"))
def autoencoder_step(
    model: js.Module,
    optimizer: Any,
    batch: Any,
    *,
    compute_dtype: DTypeLike | None = None,
    clip_grad_norm: float | None = None,
    clip_grad_value: float | None = None,
) -> dict[str, jax.Array]:
    """One step of reconstruction error: mean squared error between ``model(x)`` and ``x``."""
    x = inputs(batch)

    def loss_fn(model):
        return losses.mse_loss(_forward(model, x, compute_dtype), x)

    loss, grads = js.value_and_grad(loss_fn)(model)
    optimizer.step(clip(grads, clip_grad_norm, clip_grad_value))
    return {"loss": loss, "count": _count(x, None)}


@js.jit(static_argnames=("compute_dtype",))
def autoencoder_eval_step(
    model: js.Module, batch: Any, *, compute_dtype: DTypeLike | None = None
) -> dict[str, jax.Array]:
    """Reconstruction error of ``model(x)`` without an update."""
    x = inputs(batch)
    return {"loss": losses.mse_loss(_forward(model, x, compute_dtype), x), "count": _count(x, None)}


# -- GAN: two disjoint modules, two optimizers, each step differentiates only its own -------


def _noise(rngs, batch, latent_dim: int):
    return jax.random.normal(rngs.next("noise"), (inputs(batch).shape[0], latent_dim))  # [B, Z]


@js.jit(static_argnames=("latent_dim",))
def discriminator_step(
    discriminator: js.Module,
    generator: js.Module,
    d_optimizer: Any,
    batch: Any,
    rngs: js.Rngs,
    *,
    latent_dim: int,
) -> dict[str, jax.Array]:
    """Update the discriminator (logits ``[B, 1]``) to tell real ``x`` from ``generator(z)``.

    ``z ~ N(0, 1)`` ``[B, latent_dim]`` is drawn from the ``noise`` stream of ``rngs``. Only
    the discriminator is differentiated; the generator's output enters as a constant.
    """
    real = inputs(batch)
    fake = js.stop_gradient(generator(_noise(rngs, batch, latent_dim)))

    def loss_fn(discriminator):
        real_logits, fake_logits = discriminator(real), discriminator(fake)
        bce = losses.binary_cross_entropy_with_logits
        return bce(real_logits, jnp.ones_like(real_logits)) + bce(
            fake_logits, jnp.zeros_like(fake_logits)
        )

    loss, grads = js.value_and_grad(loss_fn)(discriminator)
    d_optimizer.step(grads)
    return {"loss": loss, "count": _count(real, None)}


@js.jit(static_argnames=("latent_dim",))
def generator_step(
    generator: js.Module,
    discriminator: js.Module,
    g_optimizer: Any,
    batch: Any,
    rngs: js.Rngs,
    *,
    latent_dim: int,
) -> dict[str, jax.Array]:
    """Update the generator so the discriminator calls ``generator(z)`` real (non-saturating
    loss). ``batch`` only sets the batch size; the discriminator is not differentiated."""
    z = _noise(rngs, batch, latent_dim)

    def loss_fn(generator, discriminator):
        logits = discriminator(generator(z))  # [B, 1]
        return losses.binary_cross_entropy_with_logits(logits, jnp.ones_like(logits))

    loss, grads = js.value_and_grad(loss_fn)(generator, discriminator)
    g_optimizer.step(grads)
    return {"loss": loss, "count": _count(z, None)}
