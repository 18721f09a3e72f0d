import pytest

from scratchformer import config, models, registry, tasks
from scratchformer.config import DataConfig, ModelConfig, Recipe, TrainConfig
from scratchformer.data.registry import DATASETS
from scratchformer.data.tokenizer import TOKENIZERS
from scratchformer.nn.attention import ATTENTIONS
from scratchformer.nn.feedforward import ACTIVATIONS, FEED_FORWARDS
from scratchformer.nn.norm import NORMS
from scratchformer.nn.rotary import ROPE_SCALINGS
from scratchformer.registry import Registry
from scratchformer.training.schedule import SCHEDULES

REGISTRIES = [
    models.MODELS,
    ATTENTIONS,
    ACTIVATIONS,
    FEED_FORWARDS,
    NORMS,
    ROPE_SCALINGS,
    models.POSITIONALS,
    models.HEADS,
    tasks.TASKS,
    SCHEDULES,
    TOKENIZERS,
    DATASETS,
]


def test_every_declared_name_is_registered() -> None:
    """The names a config accepts are those the package implements, no more, no less."""
    assert sorted(r.field for r in REGISTRIES) == sorted(registry.DECLARED)
    for found in REGISTRIES:
        assert tuple(found) == registry.DECLARED[found.field], found.field


def test_config_validates_against_the_declared_names() -> None:
    fields = ("arch", "attention", "activation", "norm", "positional", "rope_scaling", "head")
    for field in fields:
        with pytest.raises(ValueError, match=f"{field}='nonesuch' must be one of"):
            ModelConfig(**{field: "nonesuch"})
    assert config.NORMS is registry.NORMS
    with pytest.raises(ValueError, match="schedule='nonesuch' must be one of noam"):
        TrainConfig(schedule="nonesuch")
    with pytest.raises(ValueError, match="tokenizer='nonesuch' must be one of char"):
        DataConfig(tokenizer="nonesuch")
    with pytest.raises(ValueError, match="task='nonesuch' must be one of lm"):
        Recipe("nonesuch", ModelConfig(), DataConfig(), TrainConfig())
    assert (config.TASKS, config.SCHEDULES) == (registry.TASKS, registry.SCHEDULES)


def test_undeclared_names_cannot_be_registered() -> None:
    norms: Registry[int] = Registry("norm")
    norms.add("layer", 1)
    with pytest.raises(ValueError, match="norm='batch' is not declared"):
        norms.add("batch", 2)
    with pytest.raises(ValueError, match="registered twice"):
        norms.add("layer", 3)
    with pytest.raises(ValueError, match="no names are declared for 'colour'"):
        Registry("colour")


def test_unknown_and_unregistered_names_are_errors_naming_the_field() -> None:
    norms: Registry[int] = Registry("norm")
    norms.add("rms", 1)
    assert norms["rms"] == 1 and list(norms) == ["rms"]
    with pytest.raises(ValueError, match="norm='layer' must be one of rms"):
        norms["layer"]  # declared, not registered
    with pytest.raises(ValueError, match="positional='xpos' must be one of sinusoidal"):
        models.POSITIONALS["xpos"]
