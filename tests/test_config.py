import dataclasses
import json
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from helpers import RECIPES, earlier_layout
from scratchformer import config, models, tasks
from scratchformer.config import (
    MOVED_KEYS,
    DataConfig,
    MaskingOptions,
    ModelConfig,
    QuestionAnsweringOptions,
    Recipe,
    SpanCorruptionOptions,
    TrainConfig,
)
from scratchformer.models import build_model, count_parameters


def test_every_architecture_and_task_named_here_is_implemented() -> None:
    assert tuple(models.MODELS) == config.ARCHITECTURES
    assert tuple(tasks.TASKS) == config.TASKS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=300, n_heads=8), "d_model=300 is not divisible by n_heads=8"),
        (dict(n_layers=0), "n_layers=0 must be positive"),
        (dict(vocab_size=-5), "vocab_size=-5 must be positive"),
        (dict(d_ff=2.5), "d_ff=2.5 must be of type int"),
        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (dict(attention_dropout=-0.1), r"attention_dropout=-0.1 must be in \[0, 1\)"),
        (dict(activation="tanh"), "activation='tanh' must be one of relu, gelu, gelu_tanh, silu"),
        (dict(arch="rnn"), "arch='rnn' must be one of"),
        (dict(positional="rope"), "positional='rope' must be one of"),
        (
            dict(arch="decoder", positional="rotary", d_model=24, n_heads=8),
            "positional='rotary' needs an even head width, got d_model / n_heads = 3",
        ),
        (dict(head="classification"), "head='classification' needs arch='encoder'"),
        (dict(arch="encoder", head="ner"), "head='ner' must be one of"),
        (dict(share_embeddings=True, tgt_vocab_size=7), "tgt_vocab_size=7 equal to vocab_size"),
        (dict(n_decoder_layers=0), "n_decoder_layers=0 must be positive"),
        (dict(norm_first="yes"), "norm_first='yes' must be of type bool"),
        (dict(tgt_vocab_size="10"), "tgt_vocab_size='10' must be of type int or None"),
        (dict(layer_norm_eps=0), "layer_norm_eps=0.0 must be > 0"),
        (dict(arch="decoder", pooler=True), "pooler=True needs arch='encoder'"),
        (dict(norm="batch"), "norm='batch' must be one of layer, rms"),
        (dict(n_kv_heads=3), "n_heads=8 is not divisible by n_kv_heads=3"),
        (dict(n_kv_heads=0), "n_kv_heads=0 must be positive"),
        (dict(rope_theta=0), "rope_theta=0.0 must be positive"),
        (dict(positional="rotary", rope_scaling="yarn"), "rope_scaling='yarn' must be one of"),
        (dict(rope_scaling="linear"), "rope_scaling='linear' needs positional='rotary'"),
        (
            dict(positional="rotary", rope_scaling="llama3", rope_low_freq_factor=4.0),
            "rope_low_freq_factor=4.0 and rope_high_freq_factor=4.0 must satisfy 0 < low < high",
        ),
        (dict(sliding_window=4), "sliding_window needs arch='decoder'"),
        (dict(arch="decoder", sliding_window=0), "sliding_window=0 must be positive"),
        (dict(qkv_bias="yes"), "qkv_bias='yes' must be of type bool or None"),
        (dict(decoder_start="eos"), "decoder_start='eos' must be one of bos, pad"),
        (dict(arch="decoder", decoder_start="pad"), "decoder_start='pad' needs arch='seq2seq'"),
        (dict(attention="latent"), "attention='latent' has no cross-attention, which arch='seq"),
        (dict(arch="decoder", attention="latent", kv_lora_rank=0), "kv_lora_rank=0 must be"),
        (dict(arch="decoder", attention="latent", q_lora_rank=0), "q_lora_rank=0 must be"),
        (dict(q_lora_rank=8), "q_lora_rank=8 needs attention='latent'"),
        (
            dict(arch="decoder", attention="latent", n_kv_heads=2),
            "n_kv_heads=2 needs attention='multi_head'",
        ),
        (
            dict(arch="decoder", attention="latent", scale_attention=False),
            "scale_attention=False needs attention='multi_head'",
        ),
        (
            dict(arch="decoder", attention="latent", positional="rotary", qk_rope_head_dim=5),
            "positional='rotary' needs an even head width, got qk_rope_head_dim = 5",
        ),
    ],
)
def test_bad_values_name_the_field(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig(**overrides)


def test_json_round_trip() -> None:
    config = ModelConfig(arch="encoder", vocab_size=99, head="regression", num_labels=1)
    assert ModelConfig.from_json(config.to_json()) == config


def test_unknown_field_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown ModelConfig field.*: d_modle"):
        ModelConfig.from_dict({"d_modle": 3})
    with pytest.raises(ValueError, match=r"field\(s\): '\\n'; valid fields") as raised:
        ModelConfig.from_dict({"\n": 1})  # a TOML key may be any string: one line still
    assert "\n" not in str(raised.value)


def test_defaults_are_the_papers_base_model() -> None:
    config = ModelConfig(vocab_size=37000, share_embeddings=True)
    assert (config.d_model, config.n_heads, config.n_layers, config.d_ff) == (512, 8, 6, 2048)
    assert (config.dropout, config.norm_first, config.activation) == (0.1, False, "relu")
    # paper, table 3: 65M parameters for the base model with a shared 37k vocabulary
    assert 60e6 < count_parameters(build_model(config)) < 66e6


def test_parameter_count_by_hand() -> None:
    d, ff, vocab = 16, 32, 30
    config = ModelConfig(
        arch="decoder", vocab_size=vocab, d_model=d, n_heads=2, n_layers=3, d_ff=ff
    )
    attention = 4 * d * d + 4 * d
    feed_forward = 2 * d * ff + ff + d
    layer = attention + feed_forward + 2 * 2 * d
    assert count_parameters(build_model(config)) == vocab * d + 3 * layer  # tied head
    untied = dataclasses.replace(config, tie_output=False)
    assert count_parameters(build_model(untied)) == 2 * vocab * d + 3 * layer


RECIPE = """
task = "translation"

[model]
d_model = 64
n_heads = 4

[data]
dataset = "multi30k"
pair = "de-en"

[train]
max_steps = 500
lr = 1
"""


def test_recipe_from_toml_with_overrides(tmp_path) -> None:
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE)
    recipe = Recipe.load(
        path,
        [
            "train.max_steps=20",
            "data.train=my.tsv",
            "model.norm_first=true",
            "train.lr=3e-4",
            "train.max_tokens=4096",
            "train.max_tokens=none",
        ],
    )
    assert recipe.train.max_tokens is None
    assert recipe.task == "translation"
    assert recipe.model.d_model == 64 and recipe.model.norm_first is True
    assert recipe.train.max_steps == 20 and recipe.train.lr == 3e-4
    assert recipe.data.train == "my.tsv" and recipe.data.pair == "de-en"
    assert isinstance(Recipe.load(path).train.lr, float)
    (tmp_path / "config.json").write_text(recipe.to_json())
    assert Recipe.load(tmp_path / "config.json") == recipe


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "train.max_step=3",
            r"\[train\] unknown TrainConfig field\(s\): max_step; valid fields: max_steps",
        ),
        ("optim.lr=3", "section one of model, data, train"),
        ("train.lr=fast", "lr='fast' must be of type float"),
        ("train.schedule=linear", "schedule='linear' must be one of noam, cosine"),
        ("data.tokenizer=spm", "tokenizer='spm' must be one of char, bpe, wordpiece"),
        ("data.tagging.tag_scheme=iob1", "tag_scheme='iob1' must be one of iob2, none"),
        ("task=poetry", "task='poetry' must be one of lm, translation"),
        ("max_steps", "must look like section.key=value"),
    ],
)
def test_recipe_errors_name_file_and_field(tmp_path, override, message) -> None:
    path = tmp_path / "recipe.toml"
    path.write_text(RECIPE)
    with pytest.raises(ValueError, match=f"^{path}: .*{message}"):
        Recipe.load(path, [override])


def test_recipe_syntax_error_names_the_file(tmp_path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("task = \n")
    with pytest.raises(ValueError, match=f"^{path}: "):
        Recipe.load(path)


def test_data_and_train_validation() -> None:
    with pytest.raises(ValueError, match="warmup_steps=-1 must be >= 0"):
        TrainConfig(warmup_steps=-1)
    with pytest.raises(ValueError, match=r"label_smoothing=1.5 must be in \[0, 1\)"):
        TrainConfig(label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"token_dropout=1.0 must be in \[0, 1\)"):
        TrainConfig(token_dropout=1.0)
    with pytest.raises(ValueError, match=r"rdrop=-1.0 must be >= 0"):
        TrainConfig(rdrop=-1.0)
    for decay in (0.0, 1.2):
        with pytest.raises(ValueError, match=rf"layer_lr_decay={decay} must be in \(0, 1\]"):
            TrainConfig(layer_lr_decay=decay)
    for decay in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"ema_decay={decay} must be in \(0, 1\)"):
            TrainConfig(ema_decay=decay)
    for only, start in (([], "runs/x"), (["encoder"], None)):
        with pytest.raises(ValueError, match=r"init_only=.* must name some parts"):
            TrainConfig(init_only=only, init_from=start)
    with pytest.raises(ValueError, match=r"text_columns=.* must name one column or a pair"):
        DataConfig(text_columns=[1, 2, 3])
    assert DataConfig(text_columns=["sentence1", 7]).text_columns == ["sentence1", 7]
    for density in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"noise_density={density} must be between 0 and 1"):
            SpanCorruptionOptions(noise_density=density)
    with pytest.raises(ValueError, match=r"mean_span_length=0.5 must be at least 1"):
        SpanCorruptionOptions(mean_span_length=0.5)
    for length in (0.5, 10.0):
        with pytest.raises(ValueError, match=rf"mask_span_length={length} must be at least 1"):
            MaskingOptions(mask_span_length=length)
    with pytest.raises(ValueError, match=r"sentinels=0 must be positive"):
        SpanCorruptionOptions(sentinels=0)
    with pytest.raises(ValueError, match=r"cloze_questions=-1 must be >= 0"):
        QuestionAnsweringOptions(cloze_questions=-1)


def test_a_recipe_with_a_byte_order_mark_loads_and_other_encodings_name_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b'\xef\xbb\xbftask = "lm"\n')
    assert Recipe.load(path).task == "lm"
    path = tmp_path / "latin1.toml"
    path.write_bytes('task = "lm"  # caf\u00e9\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.toml: not UTF-8 text .*save it as UTF-8"):
        Recipe.load(path)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["encoder", "decoder", "seq2seq"]),
    st.integers(1, 3),
    st.integers(1, 4).map(lambda h: 8 * h),
    st.booleans(),
    st.sampled_from(["sinusoidal", "learned", "rotary", "alibi", "relative"]),
    st.sampled_from([None, "classification", "token_classification", "mlm", "span"]),
    st.sampled_from([None, (None, 8), (6, 40)]),
)
def test_the_parameter_bound_holds_for_every_kind_of_model(
    arch, layers, width, gated, positional, head, latent
) -> None:
    """``parameter_bound`` (integer arithmetic, no tensor) is at least the parameters of
    the model built on the meta device, whatever the architecture, positions, head and
    attention (``latent``: multi-head latent attention's query rank and head width)."""
    fields = dict(arch=arch, vocab_size=50, d_model=width, n_heads=4, n_layers=layers)
    fields |= dict(d_ff=3 * width, gated=gated, positional=positional, num_labels=5)
    fields |= dict(head=head if arch == "encoder" else None, pooler=arch == "encoder")
    if latent is not None:
        q_lora_rank, head_width = latent
        fields |= dict(attention="latent", q_lora_rank=q_lora_rank, kv_lora_rank=head_width)
        fields |= dict(qk_rope_head_dim=4, qk_nope_head_dim=head_width, v_head_dim=head_width)
    try:
        model_config = ModelConfig(**fields)
    except ValueError:  # a combination that is refused by its own rule
        assume(False)
    with torch.device("meta"):
        model = build_model(model_config)
    assert count_parameters(model) <= model_config.parameter_bound()


def test_sizes_past_the_machines_memory_are_refused_naming_both_numbers(monkeypatch) -> None:
    monkeypatch.setenv(config.MAX_PARAMETERS_VARIABLE, "1000000")
    small = ModelConfig(vocab_size=100, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    with pytest.raises(ValueError, match=r"up to [\d,]+ parameters .* more than the 1,000,000"):
        ModelConfig(vocab_size=100, d_model=512, n_heads=4, n_layers=2, d_ff=64)
    monkeypatch.setenv(config.MAX_PARAMETERS_VARIABLE, "a lot")
    with pytest.raises(ValueError, match="SCRATCHFORMER_MAX_PARAMETERS='a lot' must be a whole"):
        ModelConfig(vocab_size=100, d_model=32, n_heads=4, n_layers=2, d_ff=64)
    monkeypatch.delenv(config.MAX_PARAMETERS_VARIABLE)
    assert config.max_parameters() > small.parameter_bound()


QA_RECIPE = """
task = "qa"
[data]
dataset = "squad"
doc_stride = 64
mark_shared_words = true
[model]
init_from = "runs/pretrain-encoder"
"""


def test_a_task_s_data_settings_are_a_table_of_their_own(tmp_path: Path) -> None:
    recipe = tmp_path / "qa.toml"
    recipe.write_text('task = "qa"\n[data]\ndataset = "squad"\n[data.qa]\ndoc_stride = 64\n')
    loaded = Recipe.load(recipe, ["data.qa.max_answer_len=12", "data.pairs.mark_shared_words=true"])
    values = {"task": "qa", "data": {"qa": {"doc_stride": 64}}}
    Recipe.from_dict(values, ["data.qa.max_answer_len=12"])
    assert values == {"task": "qa", "data": {"qa": {"doc_stride": 64}}}  # the caller's, as given
    assert loaded.data.qa == QuestionAnsweringOptions(doc_stride=64, max_answer_len=12)
    assert loaded.data.pairs.mark_shared_words
    assert Recipe.from_dict(json.loads(loaded.to_json())) == loaded  # the run's config.json
    with pytest.raises(ValueError, match=r"qa.toml: \[data.qa\] doc_stride=0 must be positive"):
        Recipe.load(recipe, ["data.qa.doc_stride=0"])
    with pytest.raises(ValueError, match=r"\[data.lm\] is read by task lm only, not by qa"):
        Recipe.load(recipe, ["data.lm.block_size=64"])
    with pytest.raises(ValueError, match=r"\[model.rtd\] is read by task rtd only, not by qa"):
        Recipe.load(recipe, ["model.rtd.generator_layers=2"])
    with pytest.raises(ValueError, match=r"qa must be a table of settings"):
        Recipe.load(recipe, ["data.qa=3"])


def test_the_keys_of_earlier_versions_still_load_with_one_note(tmp_path: Path) -> None:
    recipe = tmp_path / "old.toml"
    recipe.write_text(QA_RECIPE)
    with pytest.warns(FutureWarning) as notes:
        loaded = Recipe.load(recipe, ["data.max_answer_len=12"])
    assert [str(note.message) for note in notes] == [
        f"{recipe}: keys of an earlier version, read where they live now: "
        "data.mark_shared_words (now data.pairs.mark_shared_words), "
        "data.doc_stride (now data.qa.doc_stride), model.init_from (now train.init_from)",
        "--set data.max_answer_len: a key of an earlier version, read as data.qa.max_answer_len",
    ]
    assert loaded.data.qa == QuestionAnsweringOptions(doc_stride=64, max_answer_len=12)
    assert loaded.data.pairs.mark_shared_words
    assert loaded.train.init_from == "runs/pretrain-encoder"
    recipe.write_text(QA_RECIPE + "[data.qa]\ndoc_stride = 32\n")
    with pytest.raises(ValueError, match=r"data.doc_stride and data.qa.doc_stride are both set"):
        Recipe.load(recipe)


def test_every_moved_key_names_a_field_that_exists_now() -> None:
    """Each old key is gone from its section, and each new one is a field where it points."""
    recipe = Recipe("lm", ModelConfig(), DataConfig(), TrainConfig()).to_dict()
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        assert key not in recipe[section], old
        *tables, name = new.split(".")
        body = recipe
        for table in tables:
            body = body[table]
        assert name in body, new


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_recipe_reads_alike_in_the_earlier_flat_layout(path: Path) -> None:
    recipe = Recipe.load(path)
    with pytest.warns(FutureWarning, match="keys of an earlier version"):
        assert Recipe.from_dict(earlier_layout(recipe.to_dict()), source=str(path)) == recipe
