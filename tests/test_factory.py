"""adapter_bert/model/factory.py: one factory picks the model class for every caller.

The runners (through runners/task_models.py) and `load_pretrained` build the same classes,
so a model from `run_classifier.py` and one from a notebook share weight names.
"""

import pytest

from adapter_bert.adapters.resadapter import ResAdapterClassifier, ResAdapterConfig
from adapter_bert.model.config import AdapterConfig
from adapter_bert.model.encoder import BertNetwork
from adapter_bert.adapters.models import MODELS
from adapter_bert.adapters.named import named_adapter_info
from adapter_bert.model.encoder import backbone_of
from adapter_bert.model.factory import task_model
from adapter_bert.model.heads import BertClassifierNetwork, BertSpanNetwork
from adapter_bert.model.naming import tf1_variables
from adapter_bert.adapters.task_models import ModelRecipe


@pytest.mark.parametrize("head,cls", [(None, BertNetwork), ("classifier", BertClassifierNetwork),
                                      ("span", BertSpanNetwork)])
def test_task_model_picks_the_class_of_the_head(tiny_config, head, cls):
    assert type(task_model(tiny_config, head, num_labels=3)) is cls
    with pytest.raises(ValueError, match="model/'s networks hold no adapters"):
        task_model(tiny_config, head, num_labels=3, adapter_config=AdapterConfig(size=4))
    model = task_model(tiny_config, head, num_labels=3, adapter_config=AdapterConfig(size=4),
                       classes=MODELS)
    assert type(model) is MODELS[head] and isinstance(model, cls)
    assert model.active_adapter == "adapter"
    assert named_adapter_info(backbone_of(model), "adapter").adapter_config.size == 4


def test_task_model_refuses_unknown_heads_and_classifiers_without_labels(tiny_config):
    with pytest.raises(ValueError, match="head must be one of None, 'classifier', 'span'"):
        task_model(tiny_config, "tagger")
    with pytest.raises(ValueError, match="needs num_labels"):
        task_model(tiny_config, "classifier")


def test_runners_build_the_librarys_models_with_the_task_named_adapter(tiny_config):
    from adapter_bert.adapters.models import MODELS
    from adapter_bert.model.checkpoints import build_model
    ours = ModelRecipe("classifier", 2, AdapterConfig(size=4), task="MRPC").new_model(tiny_config)
    theirs = task_model(tiny_config, "classifier", 2, AdapterConfig(size=4), classes=MODELS)
    build_model(ours)
    build_model(theirs)
    assert type(ours) is type(theirs)
    assert (ours.adapter_names, theirs.adapter_names) == (["mrpc"], ["adapter"])
    assert ours.adapter_head("mrpc") is ours.head
    assert sorted(n.replace("/mrpc/", "/") for n in tf1_variables(ours)) == \
        sorted(n.replace("/adapter/", "/") for n in tf1_variables(theirs))


def test_runners_build_a_resadapter_through_the_factory(tiny_config):
    recipe = ModelRecipe("classifier", 2, resadapter_config=ResAdapterConfig(size=4))
    assert isinstance(recipe.new_model(tiny_config), ResAdapterClassifier)
    with pytest.raises(ValueError, match="free of inner adapters"):
        ModelRecipe("classifier", 2, AdapterConfig(size=4),
                    ResAdapterConfig(size=4)).new_model(tiny_config)
    with pytest.raises(ValueError, match="head must be one of 'classifier', 'span', got None"):
        ModelRecipe(None, resadapter_config=ResAdapterConfig(size=4)).new_model(tiny_config)
    with pytest.raises(ValueError, match="head must be one of None, 'classifier', 'span', got 'x'"):
        ModelRecipe("x").new_model(tiny_config)


@pytest.mark.parametrize("task, name", [
    ("MRPC", "mrpc"), ("STS-B", "sts-b"), ("squad_v1.1", "squad_v1.1"),
    ("My tweets (2024)", "my_tweets__2024_"), ("_x", "x"), ("", "task"), ("Output", "output_task"),
])
def test_a_runs_adapter_is_named_after_its_task_as_adapter_names_allow(task, name):
    from adapter_bert.adapters.named import validate_name
    from adapter_bert.adapters.task_models import adapter_name_for
    assert adapter_name_for(task) == name
    assert validate_name(adapter_name_for(task)) == name
