"""Our wheels, installed into fresh virtual environments, as a user would get them."""

from __future__ import annotations

import re
import textwrap

import pytest
from support import PACKAGES, build_wheel, read_assignments

# Every test installs wheels into fresh virtual environments and runs Python there.
pytestmark = [pytest.mark.integration, pytest.mark.process]

CORE = read_assignments(PACKAGES / "js-core" / "src" / "js" / "_version.py")
OPTIM_RECORD = PACKAGES / "js-optim" / "src" / "js" / "optim" / "_version.py"

# A training step that needs only js-core and js-optim: the model is built from js.Module and
# js.Parameter, and js.jit compiles value_and_grad plus the optimizer's update.
CORE_OPTIM_STEP = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import js
    import js.optim

    class Linear(js.Module):
        def __init__(self, n_in, n_out, *, rngs):
            super().__init__()
            self.weight = js.Parameter(0.3 * jax.random.normal(rngs.next("params"), (n_out, n_in)))
            self.bias = js.Parameter(jnp.zeros(n_out))

        def forward(self, x):
            return x @ self.weight.value.T + self.bias.value

    class MLP(js.Module):
        def __init__(self, *, rngs):
            super().__init__()
            self.hidden = Linear(10, 16, rngs=rngs)
            self.out = Linear(16, 4, rngs=rngs)

        def forward(self, x):
            return self.out(jax.nn.relu(self.hidden(x)))

    def loss_fn(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    @js.jit
    def train_step(model, optimizer, x, y):
        loss, grads = js.value_and_grad(loss_fn)(model, x, y)
        optimizer.step(grads)
        return loss

    model = MLP(rngs=js.Rngs(params=0))
    optimizer = js.optim.Adam(model.parameters(), lr=1e-2)
    x = jax.random.normal(jax.random.key(1), (8, 10))
    y = jax.random.normal(jax.random.key(2), (8, 4))
    losses = [float(train_step(model, optimizer, x, y)) for _ in range(20)]
    assert losses[-1] < losses[0], losses
    print("optim", js.optim.__version__, "core", js.__version__, "loss", losses[0], losses[-1])
    """
)


@pytest.mark.slow
def test_core_and_nn_alone(wheelhouse, new_venv):
    """(a) js-core + js-nn (which brings js-losses, its dependency): forward pass, the spec's
    losses in js.nn.functional; the absent siblings fail naming what to install."""
    venv = new_venv()
    venv.install("js-core", "js-nn", find_links=[wheelhouse])
    script = textwrap.dedent(
        """
        import sys
        import jax.numpy as jnp
        import js
        from js import nn

        assert "orbax" not in " ".join(sys.modules) and "js.training" not in sys.modules, (
            sorted(m for m in sys.modules if m.startswith(("orbax", "js.training"))))
        model = nn.Linear(3, 2, rngs=js.Rngs(params=0))
        print("forward", model(jnp.ones((4, 3))).shape)
        import js.losses
        import js.nn.functional as F
        print("F.cross_entropy is js.losses'", F.cross_entropy is js.losses.cross_entropy)

        def fails(statement):
            try:
                exec(statement, {})
            except ModuleNotFoundError as error:
                return str(error)
            raise AssertionError(f"{statement!r} did not fail")

        for statement in ("import js.optim", "from js import optim", "import js.training",
                          "from js import training"):
            print(statement, "->", fails(statement))
        """
    )
    output = venv.python_code(script).stdout
    assert "forward (4, 2)" in output
    assert "F.cross_entropy is js.losses' True" in output, output
    for statement, subpackage, distribution in [
        ("import js.optim", "js.optim", "js-optim"),
        ("from js import optim", "js.optim", "js-optim"),
        ("import js.training", "js.training", "js-train"),
        ("from js import training", "js.training", "js-train"),
    ]:
        assert (
            f"{statement} -> {subpackage} is provided by the {distribution} distribution, which "
            f"is not installed. Fix: pip install {distribution}"
        ) in output, output


def test_metapackage_installs_everything_and_trains(wheelhouse, new_venv, write_constraints):
    """(b) the js metapackage brings all six; a compiled step with nn, losses and optim runs."""
    venv = new_venv()
    venv.install("js", find_links=[wheelhouse])
    script = textwrap.dedent(
        """
        from importlib.metadata import version
        import jax
        import js
        from js import losses, nn, optim, training

        print({d: version(d) for d in ("js", "js-core", "js-nn", "js-losses", "js-optim",
                                       "js-train", "js-models")})

        class Net(nn.Module):
            def __init__(self, *, rngs):
                super().__init__()
                self.hidden = nn.Linear(10, 16, rngs=rngs)
                self.out = nn.Linear(16, 4, rngs=rngs)

            def forward(self, x):
                return self.out(jax.nn.relu(self.hidden(x)))

        def loss_fn(model, x, y):
            return losses.mse_loss(model(x), y)

        @js.jit
        def train_step(model, optimizer, x, y):
            loss, grads = js.value_and_grad(loss_fn)(model, x, y)
            optimizer.step(grads)
            return loss

        model = Net(rngs=js.Rngs(params=0))
        optimizer = optim.Adam(model.parameters(), lr=1e-2)
        x = jax.random.normal(jax.random.key(1), (8, 10))
        y = jax.random.normal(jax.random.key(2), (8, 4))
        first = float(train_step(model, optimizer, x, y))
        for _ in range(20):
            last = float(train_step(model, optimizer, x, y))
        assert last < first, (first, last)
        print("trained", first, "->", last)
        """
    )
    output = venv.python_code(script).stdout
    assert "trained" in output
    for distribution in ("js-core", "js-nn", "js-losses", "js-optim", "js-train", "js-models"):
        assert f"'{distribution}': " in output
    write_constraints(venv)


@pytest.mark.slow
def test_optim_needing_an_interface_core_does_not_offer_fails_at_import(
    wheelhouse, new_venv, copy_package, tmp_path
):
    """(c) a js-optim supporting only a future js-core interface: clear ImportError at import."""
    source = copy_package("js-optim")
    record = source / "src" / "js" / "optim" / "_version.py"
    future = CORE["INTERFACE"] + 1
    text = re.sub(
        r"(?m)^REQUIRES = .*$",
        f'REQUIRES = {{"js-core": ({future}, {future})}}',
        record.read_text(),
    )
    record.write_text(text)
    variant = tmp_path / "variant-wheels"
    variant.mkdir()
    build_wheel(source, variant)
    optim_version = read_assignments(record)["__version__"]

    venv = new_venv()
    venv.install("js-core", "js-optim", find_links=[variant, wheelhouse])
    result = venv.python_code("import js.optim", check=False)
    assert result.returncode == 1
    message = (
        f"ImportError: js-optim {optim_version} supports js-core interface {future}, but the "
        f"installed js-core {CORE['__version__']} offers interface {CORE['INTERFACE']}. Fix: "
        f"upgrade js-core (pip install -U js-core), so that both come from compatible releases."
    )
    assert message in result.stderr, result.stderr


@pytest.mark.slow
def test_older_optim_of_the_same_interface_trains_with_current_core(
    wheelhouse, new_venv, copy_package, tmp_path
):
    """(issue 4) js-optim pinned at an earlier version beside the current js-core still trains."""
    source = copy_package("js-optim")
    record = source / "src" / "js" / "optim" / "_version.py"
    text = re.sub(r'(?m)^__version__ = ".*"$', '__version__ = "0.0.9"', record.read_text())
    record.write_text(text)
    older = tmp_path / "older-wheels"
    older.mkdir()
    build_wheel(source, older)

    venv = new_venv()
    venv.install("js-core", "js-optim==0.0.9", find_links=[older, wheelhouse])
    output = venv.python_code(CORE_OPTIM_STEP).stdout
    assert f"optim 0.0.9 core {CORE['__version__']} loss" in output, output
