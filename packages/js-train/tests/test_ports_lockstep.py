"""The js-nn ports' 20 lockstep Adam steps against ``torch.optim.Adam``, run here.

The four ports (ResNet-18, DCGAN, the LSTM/GRU language model, the TransformerEncoder
classifier) are js-nn's test modules, ``packages/js-nn/tests/ports``. Their outputs and
gradients are checked in the js-nn suite; their optimizer runs need js-optim, which the js-nn
suite (js-nn and its declared dependencies only) does not install, so the js-nn suite skips
them and this suite, which has every js distribution, runs the same test functions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "js-nn" / "tests"))

from test_ports import (  # noqa: E402, F401  (pytest collects the imported tests and fixtures)
    dcgan_pair,
    resnet_pair,
    test_dcgan_adam_lockstep,
    test_language_model_adam_lockstep,
    test_resnet18_adam_lockstep,
    test_transformer_classifier_adam_lockstep,
)
