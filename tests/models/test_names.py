"""Each model class is named after its ``arch``."""

from __future__ import annotations

import pytest

from helpers import tiny_config
from scratchformer import DecoderModel, EncoderModel, Seq2SeqModel, build_model

CLASSES = {"encoder": EncoderModel, "decoder": DecoderModel, "seq2seq": Seq2SeqModel}


@pytest.mark.parametrize("arch", CLASSES)
def test_build_model_gives_the_class_named_after_the_arch(arch: str) -> None:
    model = build_model(tiny_config(arch=arch))
    assert type(model) is CLASSES[arch]
    assert repr(model).startswith(f"{CLASSES[arch].__name__}(")


@pytest.mark.parametrize("arch", CLASSES)
def test_a_model_class_refuses_another_arch_and_says_its_name(arch: str) -> None:
    other = "decoder" if arch == "encoder" else "encoder"
    with pytest.raises(ValueError, match=f"{CLASSES[arch].__name__} needs arch='{arch}'"):
        CLASSES[arch](tiny_config(arch=other))
