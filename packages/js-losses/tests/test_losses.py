"""Behaviour of js.losses without PyTorch: reductions, masks, stability, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from js.losses import (
    binary_cross_entropy_with_logits,
    cross_entropy,
    l1_loss,
    mse_loss,
    smooth_l1_loss,
)

KEY = jax.random.key(0)
X = jax.random.normal(KEY, (4, 5))
Y = jax.random.normal(jax.random.key(1), (4, 5))
LABELS = jnp.array([0, 3, 4, 1])
PROBS = jax.random.uniform(jax.random.key(2), (4, 5))

# One table drives the shared checks: name, call(input, **options), the input and its target.
ELEMENTWISE = [
    ("mse_loss", mse_loss, Y),
    ("l1_loss", l1_loss, Y),
    ("smooth_l1_loss", smooth_l1_loss, Y),
    ("binary_cross_entropy_with_logits", binary_cross_entropy_with_logits, PROBS),
]
ALL = [*ELEMENTWISE, ("cross_entropy", cross_entropy, LABELS)]


@pytest.mark.parametrize("name, loss, target", ALL, ids=[row[0] for row in ALL])
def test_reductions_agree(name, loss, target):
    per_element = loss(X, target, reduction="none")
    assert per_element.shape == target.shape
    np.testing.assert_allclose(loss(X, target, reduction="sum"), per_element.sum(), rtol=1e-6)
    np.testing.assert_allclose(loss(X, target), per_element.mean(), rtol=1e-6)


@pytest.mark.parametrize("name, loss, target", ALL, ids=[row[0] for row in ALL])
def test_masked_mean_divides_by_the_valid_count(name, loss, target):
    mask = jnp.zeros(target.shape, bool).at[1].set(True).at[2].set(True)
    per_element = loss(X, target, reduction="none")
    expected = per_element[1:3].sum() / mask.sum()
    np.testing.assert_allclose(loss(X, target, mask=mask), expected, rtol=1e-6)
    np.testing.assert_array_equal(loss(X, target, mask=mask, reduction="none")[0], 0.0)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("name, loss, target", ALL, ids=[row[0] for row in ALL])
def test_all_masked_batch_is_zero_with_zero_gradient(name, loss, target, reduction):
    mask = jnp.zeros(target.shape, bool)
    value, grad = jax.value_and_grad(lambda x: loss(x, target, mask=mask, reduction=reduction))(X)
    assert float(value) == 0.0
    np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("name, loss, target", ALL, ids=[row[0] for row in ALL])
def test_masked_nan_and_inf_poison_neither_value_nor_gradient(name, loss, target, reduction):
    """Rows 1 and 3 are masked and hold NaN / inf inputs (and targets, or out-of-range labels)."""
    mask = jnp.ones(target.shape, bool).at[1].set(False).at[3].set(False)
    x = X.at[1].set(jnp.nan).at[3].set(jnp.inf)
    if name == "cross_entropy":
        t, argnums = target.at[1].set(-1).at[3].set(5), 0  # C = 5
    else:
        t, argnums = target.at[1].set(jnp.inf).at[3].set(jnp.nan), (0, 1)

    def total(x, t):
        return loss(x, t, mask=mask, reduction=reduction).sum()

    value, grads = jax.value_and_grad(total, argnums)(x, t)
    clean_value, clean_grads = jax.value_and_grad(total, argnums)(X, target)
    np.testing.assert_allclose(value, clean_value, rtol=1e-6)
    for grad, clean in zip(jax.tree.leaves(grads), jax.tree.leaves(clean_grads), strict=True):
        assert np.isfinite(grad).all()
        np.testing.assert_array_equal(grad[1], 0.0)
        np.testing.assert_array_equal(grad[3], 0.0)
        np.testing.assert_allclose(grad, clean, rtol=1e-6)


def test_masked_cross_entropy_ignores_out_of_range_labels():
    labels = jnp.array([0, -100, 4, -100])
    mask = labels != -100
    loss, grad = jax.value_and_grad(lambda x: cross_entropy(x, labels, mask=mask))(X)
    expected = cross_entropy(X[::2], labels[::2])
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    assert np.isfinite(grad).all() and (grad[1] == 0).all()


CE_OPTIONS = [{}, {"weight": jnp.arange(1.0, 6.0), "label_smoothing": 0.2}]


@pytest.mark.parametrize("options", CE_OPTIONS, ids=["plain", "weight-smoothing"])
def test_cross_entropy_out_of_range_labels_give_nan_and_never_wrap(options):
    labels = jnp.array([0, -1, 4, 5])  # C = 5: -1 must not read class 4, 5 is past the end
    per_element = cross_entropy(X, labels, reduction="none", **options)
    assert np.isnan(per_element[1]) and np.isnan(per_element[3])
    expected = cross_entropy(X[::2], labels[::2], reduction="none", **options)
    np.testing.assert_allclose(per_element[::2], expected, rtol=1e-6)
    for reduction in ("sum", "mean"):
        assert np.isnan(cross_entropy(X, labels, reduction=reduction, **options))
    grad = jax.grad(lambda x: cross_entropy(x, labels, reduction="sum", **options))(X)
    assert np.isnan(grad[1]).all() and np.isnan(grad[3]).all()
    assert np.isfinite(grad[::2]).all()
    compiled = jax.jit(lambda x, t: cross_entropy(x, t, reduction="none", **options))
    assert np.isnan(np.asarray(compiled(X, labels))[[1, 3]]).all()


@pytest.mark.parametrize(
    "dtype, classes, labels, readable",
    [
        (jnp.int32, 5, [0, -1, 4, 5, -5, -(2**31)], [1, 0, 1, 0, 0, 0]),
        (jnp.int8, 5, [0, -1, 4, 5, 127, -128], [1, 0, 1, 0, 0, 0]),
        (jnp.int8, 200, [0, -1, 127, -128], [1, 0, 1, 0]),  # more classes than int8 holds
        (jnp.uint8, 5, [0, 4, 5, 255], [1, 1, 0, 0]),
    ],
    ids=["int32", "int8", "int8-many-classes", "uint8"],
)
def test_the_label_range_check_holds_for_every_integer_dtype(dtype, classes, labels, readable):
    logits = jnp.zeros((len(labels), classes))
    loss = cross_entropy(logits, jnp.array(labels, dtype), reduction="none")
    np.testing.assert_array_equal(~np.isnan(loss), np.array(readable, bool))


@pytest.mark.parametrize("options", CE_OPTIONS, ids=["plain", "weight-smoothing"])
def test_masked_out_of_range_labels_do_not_poison_the_rest(options):
    labels = jnp.array([0, -1, 4, 5])
    mask = jnp.array([True, False, True, False])
    loss = cross_entropy(X, labels, mask=mask, **options)
    np.testing.assert_allclose(loss, cross_entropy(X[::2], labels[::2], **options), rtol=1e-6)


def test_cross_entropy_axis_moves_the_class_axis():
    logits = jax.random.normal(KEY, (2, 5, 3))  # [N, C, T] (PyTorch's layout)
    labels = jnp.array([[0, 4, 2], [1, 1, 3]])  # [N, T]
    expected = cross_entropy(jnp.moveaxis(logits, 1, -1), labels, reduction="none")
    np.testing.assert_allclose(
        cross_entropy(logits, labels, axis=1, reduction="none"), expected, rtol=1e-6
    )


def test_bce_is_stable_at_huge_logits():
    logits = jnp.array([1e4, -1e4, 1e4, -1e4])
    target = jnp.array([1.0, 0.0, 0.0, 1.0])
    loss, grad = jax.value_and_grad(
        lambda x: binary_cross_entropy_with_logits(x, target, reduction="sum")
    )(logits)
    np.testing.assert_allclose(loss, 2e4, rtol=1e-6)
    np.testing.assert_allclose(grad, [0.0, 0.0, 1.0, -1.0], atol=1e-6)


def test_l1_gradient_is_zero_where_input_equals_target():
    grad = jax.grad(lambda x: l1_loss(x, jnp.zeros(2), reduction="sum"))(jnp.array([0.0, 2.0]))
    np.testing.assert_array_equal(grad, [0.0, 1.0])


def test_smooth_l1_with_beta_zero_is_l1():
    np.testing.assert_allclose(smooth_l1_loss(X, Y, beta=0.0), l1_loss(X, Y), rtol=1e-6)


def test_losses_compile():
    compiled = jax.jit(lambda x, t, m: cross_entropy(x, t, mask=m, label_smoothing=0.1))
    assert np.isfinite(compiled(X, LABELS, LABELS > 0))


# -- errors: every raise, matched by its message ---------------------------------------------


@pytest.mark.parametrize("name, loss, target", ALL, ids=[row[0] for row in ALL])
def test_bad_reduction_names_the_options(name, loss, target):
    message = r"reduction must be one of \['none', 'sum', 'mean'\], got 'avg'"
    with pytest.raises(ValueError, match=message):
        loss(X, target, reduction="avg")


@pytest.mark.parametrize("name, loss, target", ELEMENTWISE, ids=[row[0] for row in ELEMENTWISE])
def test_shape_mismatch_names_both_shapes(name, loss, target):
    with pytest.raises(ValueError, match=r"input shape \[4, 5\] and target shape \[5, 4\] differ"):
        loss(X, target.T)


def test_cross_entropy_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"target shape \[5\] must be the logits shape \[4, 5\]"):
        cross_entropy(X, jnp.zeros(5, jnp.int32))


def test_cross_entropy_refuses_float_targets():
    with pytest.raises(TypeError, match="must hold integer class indices, got dtype float32"):
        cross_entropy(X, jnp.zeros(4))


def test_cross_entropy_axis_out_of_range():
    with pytest.raises(ValueError, match=r"axis 2 is out of range for logits of shape \[4, 5\]"):
        cross_entropy(X, LABELS, axis=2)


def test_cross_entropy_weight_shape():
    message = r"weight must have shape \[5\] \(one per class\), got \[4\]"
    with pytest.raises(ValueError, match=message):
        cross_entropy(X, LABELS, weight=jnp.ones(4))


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_cross_entropy_label_smoothing_range(value):
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\]"):
        cross_entropy(X, LABELS, label_smoothing=value)


def test_mask_must_be_boolean():
    with pytest.raises(TypeError, match="mask must be a boolean array .* got dtype int32"):
        mse_loss(X, Y, mask=jnp.ones((4, 5), jnp.int32))


def test_mask_shape():
    with pytest.raises(ValueError, match=r"mask shape \[4\] must equal the per-element loss shape"):
        mse_loss(X, Y, mask=jnp.ones(4, bool))


def test_pos_weight_must_broadcast():
    message = r"pos_weight shape \[3\] does not broadcast to the logits shape \[4, 5\]"
    with pytest.raises(ValueError, match=message):
        binary_cross_entropy_with_logits(X, PROBS, pos_weight=jnp.ones(3))


def test_smooth_l1_beta_must_be_non_negative():
    with pytest.raises(ValueError, match="beta must be >= 0, got -1.0"):
        smooth_l1_loss(X, Y, beta=-1.0)
