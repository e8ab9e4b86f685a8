"""Values and gradients against torch.nn.functional, to 1e-6, for every shared option."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import js.losses as L

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.torch

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(6, 5)).astype(np.float32) * 3
PRED = RNG.normal(size=(6, 5)).astype(np.float32)
REAL = RNG.normal(size=(6, 5)).astype(np.float32)
PROBS = RNG.uniform(size=(6, 5)).astype(np.float32)
LABELS = np.array([0, 3, 4, 1, 1, 2])
WEIGHT = np.array([0.5, 2.0, 1.0, 3.0, 0.1], np.float32)
REDUCTIONS = ["none", "sum", "mean"]


def compare(js_fn, torch_fn, x, tol=1e-6):
    """Largest |difference| of the value and of the gradient of sum(loss) w.r.t. ``x``."""
    value, grad = jax.value_and_grad(lambda a: js_fn(a).sum())(jnp.asarray(x))
    tx = torch.tensor(x, requires_grad=True)
    t_out = torch_fn(tx)
    t_out.sum().backward()
    np.testing.assert_allclose(js_fn(jnp.asarray(x)), t_out.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(value, t_out.sum().item(), rtol=tol, atol=tol)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=tol, atol=tol)


CE_OPTIONS = [
    {},
    {"label_smoothing": 0.2},
    {"weight": WEIGHT},
    {"weight": WEIGHT, "label_smoothing": 0.3},
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("options", CE_OPTIONS, ids=lambda o: "-".join(o) or "plain")
def test_cross_entropy(reduction, options):
    t_options = {k: torch.tensor(v) if k == "weight" else v for k, v in options.items()}
    compare(
        lambda x: L.cross_entropy(x, jnp.asarray(LABELS), reduction=reduction, **options),
        lambda x: F.cross_entropy(x, torch.tensor(LABELS), reduction=reduction, **t_options),
        LOGITS,
    )


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("options", CE_OPTIONS, ids=lambda o: "-".join(o) or "plain")
def test_cross_entropy_mask_is_ignore_index(reduction, options):
    labels = np.where(np.arange(6) % 3 == 0, -100, LABELS)
    t_options = {k: torch.tensor(v) if k == "weight" else v for k, v in options.items()}
    compare(
        lambda x: L.cross_entropy(
            x, jnp.asarray(labels), mask=jnp.asarray(labels != -100), reduction=reduction, **options
        ),
        lambda x: F.cross_entropy(x, torch.tensor(labels), reduction=reduction, **t_options),
        LOGITS,
    )


@pytest.mark.parametrize("bad", [-1, 5])
def test_cross_entropy_out_of_range_label_is_nan_where_torch_raises(bad):
    labels = LABELS.copy()
    labels[2] = bad  # C = 5
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        F.cross_entropy(torch.tensor(LOGITS), torch.tensor(labels))
    ours = np.asarray(L.cross_entropy(jnp.asarray(LOGITS), jnp.asarray(labels), reduction="none"))
    assert np.isnan(ours[2])
    kept = np.arange(6) != 2
    theirs = F.cross_entropy(
        torch.tensor(LOGITS[kept]), torch.tensor(labels[kept]), reduction="none"
    ).numpy()
    np.testing.assert_allclose(ours[kept], theirs, rtol=1e-6, atol=1e-6)


def test_cross_entropy_class_axis_one_is_torch_layout():
    logits = RNG.normal(size=(2, 5, 3)).astype(np.float32)
    labels = RNG.integers(0, 5, size=(2, 3))
    compare(
        lambda x: L.cross_entropy(x, jnp.asarray(labels), axis=1, label_smoothing=0.1),
        lambda x: F.cross_entropy(x, torch.tensor(labels), label_smoothing=0.1),
        logits,
    )


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos_weight", [None, np.linspace(0.5, 3, 5, dtype=np.float32)])
def test_bce_with_logits(reduction, pos_weight):
    pw = None if pos_weight is None else torch.tensor(pos_weight)
    compare(
        lambda x: L.binary_cross_entropy_with_logits(
            x, jnp.asarray(PROBS), reduction=reduction, pos_weight=pos_weight
        ),
        lambda x: F.binary_cross_entropy_with_logits(
            x, torch.tensor(PROBS), reduction=reduction, pos_weight=pw
        ),
        LOGITS,
    )


def test_bce_with_logits_at_huge_logits():
    logits = np.array([1e4, -1e4, 1e4, -1e4, 3.0], np.float32)
    target = np.array([1.0, 0.0, 0.0, 1.0, 0.5], np.float32)
    compare(
        lambda x: L.binary_cross_entropy_with_logits(x, jnp.asarray(target), reduction="none"),
        lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(target), reduction="none"),
        logits,
    )


REGRESSION = [
    ("mse_loss", {}),
    ("l1_loss", {}),
    ("smooth_l1_loss", {}),
    ("smooth_l1_loss", {"beta": 0.5}),
    ("smooth_l1_loss", {"beta": 0.0}),
]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, options", REGRESSION, ids=[f"{n}{o}" for n, o in REGRESSION])
def test_regression(name, options, reduction):
    target = REAL.copy()
    target[0, :2] = PRED[0, :2]  # equal input and target: L1's gradient there is 0 in both
    compare(
        lambda x: getattr(L, name)(x, jnp.asarray(target), reduction=reduction, **options),
        lambda x: getattr(F, name)(x, torch.tensor(target), reduction=reduction, **options),
        PRED,
    )


def test_torch_computes_on_one_thread_in_the_suites():
    # tools/pytest_torch.py, which pytest.ini loads: torch's second thread spun beside XLA's
    assert torch.get_num_threads() == 1
    # and torch's lazily imported shape module (sympy, ~3 s) was imported at collection
    assert "torch.fx.experimental.symbolic_shapes" in sys.modules


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("ignore_index", [-100, -1, 2])
def test_cross_entropy_ignore_index_is_torchs(reduction, ignore_index):
    labels = np.where(np.arange(6) % 3 == 0, ignore_index, LABELS)
    keyword = {} if ignore_index == -100 else {"ignore_index": ignore_index}  # -100: the default
    for options in CE_OPTIONS:
        t_options = {k: torch.tensor(v) if k == "weight" else v for k, v in options.items()}
        compare(
            lambda x, o=options: L.cross_entropy(
                x, jnp.asarray(labels), reduction=reduction, **keyword, **o
            ),
            lambda x, o=t_options: F.cross_entropy(
                x, torch.tensor(labels), reduction=reduction, **keyword, **o
            ),
            LOGITS,
        )


def test_cross_entropy_ignore_index_beside_a_mask_and_none():
    labels = jnp.asarray(np.where(np.arange(6) % 3 == 0, -1, LABELS))
    mask = jnp.asarray(np.arange(6) != 1)
    both = L.cross_entropy(LOGITS, labels, ignore_index=-1, mask=mask, reduction="none")
    kept = (np.arange(6) % 3 != 0) & (np.arange(6) != 1)
    assert np.all(np.asarray(both)[~kept] == 0)
    alone = L.cross_entropy(LOGITS[kept], labels[kept], reduction="none")
    np.testing.assert_allclose(np.asarray(both)[kept], alone, rtol=1e-6)
    # None: -1 is an out-of-range label again (NaN, where torch raises)
    assert np.isnan(float(L.cross_entropy(LOGITS, labels, ignore_index=None)))
    with pytest.raises(TypeError, match="cross_entropy: ignore_index must be an int, got 1.5"):
        L.cross_entropy(LOGITS, labels, ignore_index=1.5)
