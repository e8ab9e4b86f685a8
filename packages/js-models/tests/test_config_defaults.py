"""Every family's config defaults (js/models/transformers_defaults.json) are transformers 5.23's.

transformers' ``save_pretrained`` leaves out the keys that equal its class defaults, so a folder
holds only what differs: js must fill in the same values. For each model_type js implements,
js's config built with no arguments is compared with transformers' on every key js reads.
"""

import importlib
import inspect
import json
from pathlib import Path

import pytest

import js.models
from js.models._base import PretrainedConfig
from js.models._registry import MODEL_TYPES

transformers = pytest.importorskip("transformers")

TABLE = json.loads((Path(js.models.__file__).parent / "transformers_defaults.json").read_text())
# Keys whose default transformers fills in later than its constructor, or that js keeps under
# the name its blocks read: {(model_type, key): why}.
DIFFERENT = {
    ("mixtral", "head_dim"): "js writes the head_dim it computes; transformers keeps None",
    ("vit", "pooler_output_size"): "transformers writes hidden_size for None; js keeps None",
    ("siglip_text_model", "projection_size"): "the same: None means hidden_size in both",
}


def _config_classes() -> dict[str, type[PretrainedConfig]]:
    classes = {}
    for module_name in sorted(set(MODEL_TYPES.values())):
        module = importlib.import_module(f"js.models.{module_name}")
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, PretrainedConfig):
                if value.model_type in TABLE:
                    classes.setdefault(value.model_type, value)
    return classes


CLASSES = _config_classes()


def test_every_family_of_the_table_has_its_config_class():
    assert sorted(CLASSES) == sorted(TABLE)
    assert all(CLASSES[kind].defaults == TABLE[kind] for kind in TABLE)


@pytest.mark.parametrize("model_type", sorted(TABLE))
def test_defaults_are_transformers(model_type):
    ours = CLASSES[model_type]().to_dict()
    theirs = transformers.AutoConfig.for_model(model_type).to_dict()
    wrong = {
        key: (ours[key], theirs[key])
        for key in TABLE[model_type]
        if key in theirs
        and key in ours
        and ours[key] != theirs[key]
        and (model_type, key) not in DIFFERENT
    }
    assert wrong == {}
