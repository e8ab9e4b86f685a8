"""The js-nn ports' 20 lockstep Adam steps against ``torch.optim.Adam``, run here.

The four ports (ResNet-18, DCGAN, the LSTM/GRU language model, the TransformerEncoder
classifier) are js-nn's test modules, ``packages/js-nn/tests/ports``. Their outputs and
gradients are checked in the js-nn suite; their optimizer runs need js-optim, which the js-nn
suite (js-nn and its declared dependencies only) does not install, so the js-nn suite skips
them and this suite, which has every js distribution, runs the same test functions.

The default run keeps the language model's two runs (LSTM and GRU); ResNet-18, DCGAN and the
Transformer classifier run in the full tier (``-m ''``): the same check (the same helpers, Adam
in lockstep with torch's) on ports whose step costs more to compile: most of their time is XLA
compiling the step (DCGAN 12.4 s and the classifier 5.9 s in a full run at load 1.6), so fewer
steps would not bring them under the default run's per-test budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "js-nn" / "tests"))

import test_ports  # noqa: E402
from test_ports import (  # noqa: E402, F401  (pytest collects the imported tests and fixtures)
    dcgan_pair,
    resnet_pair,
    test_language_model_adam_lockstep,
    test_resnet18_adam_lockstep,
)


@pytest.mark.slow  # ~12 s (module docstring)
def test_dcgan_adam_lockstep(dcgan_pair):  # noqa: F811  (the imported fixture)
    test_ports.test_dcgan_adam_lockstep(dcgan_pair)


@pytest.mark.slow  # ~8 s (module docstring)
def test_transformer_classifier_adam_lockstep():
    test_ports.test_transformer_classifier_adam_lockstep()
