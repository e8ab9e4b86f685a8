"""The import-time interface check, with made-up versions (as jax's tests/version_test.py does)."""

from __future__ import annotations

import re
import sys
import types

import pytest

from js import _interface


def test_supported_interface_passes():
    _interface.check_interface("js-optim", "0.4.1", "js-core", "0.3.2", 2, (1, 2))
    _interface.check_interface("js-optim", "0.4.1", "js-core", "0.1.0", 1, (1, 2))


def test_newer_provider_interface_names_both_versions_and_the_fix():
    message = (
        "js-optim 0.4.1 supports js-core interface 1 to 2, but the installed js-core 0.5.0 "
        "offers interface 3. Fix: upgrade js-optim (pip install -U js-optim) or install an "
        "older js-core, so that both come from compatible releases."
    )
    with pytest.raises(ImportError, match=re.escape(message)):
        _interface.check_interface("js-optim", "0.4.1", "js-core", "0.5.0", 3, (1, 2))


def test_older_provider_interface_says_to_upgrade_the_provider():
    message = (
        "js-train 0.9.0 supports js-nn interface 4, but the installed js-nn 0.2.0 offers "
        "interface 2. Fix: upgrade js-nn (pip install -U js-nn), so that both come from "
        "compatible releases."
    )
    with pytest.raises(ImportError, match=re.escape(message)):
        _interface.check_interface("js-train", "0.9.0", "js-nn", "0.2.0", 2, (4, 4))


def test_require_reads_the_installed_version_record(monkeypatch):
    fake = types.ModuleType("js._fake_version")
    fake.__version__, fake.INTERFACE = "7.1.0", 5
    monkeypatch.setitem(sys.modules, "js._fake_version", fake)
    monkeypatch.setitem(_interface.VERSION_MODULES, "js-fake", "js._fake_version")
    _interface.require("js-consumer", "1.0.0", {"js-fake": (4, 5)})
    with pytest.raises(
        ImportError,
        match=r"js-consumer 1\.0\.0 supports js-fake interface 6 to 8, "
        r"but the installed js-fake 7\.1\.0 offers interface 5",
    ):
        _interface.require("js-consumer", "1.0.0", {"js-fake": (6, 8)})


def test_require_against_the_real_core_record():
    import js

    _interface.require("js-consumer", "1.0.0", {"js-core": (js.__interface__, js.__interface__)})
    with pytest.raises(ImportError, match=rf"installed js-core {re.escape(js.__version__)}"):
        _interface.require("js-consumer", "1.0.0", {"js-core": (99, 99)})
