"""A forward pass through a 2-layer MLP: the smallest js program (the main job is digits.py).

Uses js-core only: a model built from js.Module and js.Parameter, printed as a tree, then
called on a batch. Run it with ``hatch run demo``; ``docs/examples/digits.py`` trains a CNN
end to end.
"""

import jax
import jax.numpy as jnp

import js


class Linear(js.Module):
    """``y = x W^T + b`` with PyTorch's layout: weight [out, in], U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, *, rngs: js.Rngs):
        super().__init__()
        bound = 1.0 / in_features**0.5
        key = rngs.next("params")
        self.weight = js.Parameter(
            jax.random.uniform(key, (out_features, in_features), minval=-bound, maxval=bound)
        )
        self.bias = js.Parameter(jnp.zeros(out_features))

    def forward(self, x):  # [B, in] -> [B, out]
        return x @ self.weight.value.T + self.bias.value


class MLP(js.Module):
    def __init__(self, *, rngs: js.Rngs):
        super().__init__()
        self.hidden = Linear(64, 32, rngs=rngs)
        self.out = Linear(32, 10, rngs=rngs)

    def forward(self, x):  # [B, 64] -> [B, 10]
        return self.out(jax.nn.relu(self.hidden(x)))


def main() -> None:
    js.enable_compilation_cache()  # reused by the next run; JS_COMPILATION_CACHE=0 turns it off
    model = MLP(rngs=js.Rngs(params=0))
    print(model)
    x = jax.random.normal(jax.random.key(1), (8, 64))  # [B=8, 64]
    logits = js.jit(lambda model, x: model(x))(model, x)
    count = sum(p.value.size for p in model.parameters())
    print(f"js {js.__version__}: {count} parameters; input {x.shape} -> output {logits.shape}")


if __name__ == "__main__":
    main()
