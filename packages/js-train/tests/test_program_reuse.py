"""A second fit with a fresh model and optimizer of the same structure compiles nothing new."""

from __future__ import annotations

import pytest

from js.training import ArrayLoader, Trainer, steps


def programs() -> dict[str, int]:
    compiled = {
        "train": steps.dropout_classification_step,
        "train, no dropout": steps.classification_step,
        "validation": steps.classification_eval_step,
    }
    return {name: len(step._programs) for name, step in compiled.items()}


@pytest.mark.parametrize("dropout", [True, False], ids=["dropout", "no-dropout"])
def test_fit_again_with_a_fresh_task_reuses_the_compiled_steps(make_task, data, dropout):
    x, y = data
    loader = ArrayLoader(x, y, batch_size=32)
    Trainer(max_epochs=1, verbose=False, compilation_cache=False).fit(
        make_task(seed=0, dropout=dropout, p=0.2 if dropout else 0.0), loader, loader
    )
    after_first = programs()
    history = Trainer(max_epochs=1, verbose=False, compilation_cache=False).fit(
        make_task(seed=1, dropout=dropout, p=0.2 if dropout else 0.0), loader, loader
    )
    assert programs() == after_first
    assert history[-1]["train/count"] == len(x) and "val/loss" in history[-1]
