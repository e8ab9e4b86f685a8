"""The distribution itself: its version record and its namespace."""

import js.models


def test_version_record():
    assert js.models.__version__ == "0.1.0"
    assert js.models.__interface__ == 1


def test_base_classes_exported():
    assert issubclass(js.models.PreTrainedModel, js.Module)
    config = js.models.PretrainedConfig(hidden_size=4)
    assert config.hidden_size == 4 and config.to_dict() == {"hidden_size": 4}
