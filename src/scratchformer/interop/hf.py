"""Hugging Face checkpoints (of the families in :data:`~.families.FAMILIES`) in and out.

:func:`from_pretrained` reads a checkpoint directory (``config.json``, the weights in
``model.safetensors``, in the shards that ``model.safetensors.index.json`` lists, or in
``pytorch_model.bin``; ``tokenizer.json``) into our own modules: a BERT-family model (BERT,
MiniLM, ...) becomes an :class:`EncoderModel` with BERT's embedding LayerNorm and pooler;
GPT-2, Llama, Qwen2 and Mistral causal LMs a :class:`DecoderModel`; T5 (v1.0 and v1.1) a
:class:`Seq2SeqModel`. :func:`save_pretrained` writes a directory that
``transformers.AutoModel.from_pretrained`` (and, for decoders, ``AutoModelForCausalLM``,
for T5 ``AutoModelForSeq2SeqLM``) loads. ``transformers`` itself is never imported.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tokenizers
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from ..config import ModelConfig
from ..data.tokenizer import SPECIAL_TOKENS, Tokenizer
from ..io import atomic_write_json, listing, load_tensors, safe_torch_load, save_tensors
from ..models import DecoderModel, EncoderModel, Seq2SeqModel, build_model
from .families import family_of
from .hf_config import hf_config, model_config
from .hf_weights import Table

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SHARD_INDEX_FILE = "model.safetensors.index.json"
PICKLE_FILE = "pytorch_model.bin"
TOKENIZER_FILE = "tokenizer.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""A chat template on its own, as ``transformers`` saves it."""

Model = EncoderModel | DecoderModel | Seq2SeqModel


def from_pretrained(path: str | Path) -> tuple[Model, Tokenizer | None]:
    """Our model (in eval mode) and tokenizer of a Hugging Face checkpoint directory.

    ``model(input_ids, attention_mask=..., token_type_ids=...)`` of a BERT gives
    ``last_hidden_state`` and ``pooler_output`` (when the checkpoint has a pooler), a
    ``BertForMaskedLM`` (``mlm`` head) the vocabulary ``logits`` at every token too;
    ``model(input_ids).logits`` of a GPT-2 or Llama-family model works with
    ``scratchformer.inference.generate``; a T5 decodes with
    ``scratchformer.inference.greedy_decode`` and ``beam_search``, starting from the token
    its ``config.decoder_start`` names (the checkpoint's ``decoder_start_token_id``: pad).
    An unsupported ``model_type`` or setting, or weights that do not fit the config
    (missing, unexpected or misshapen tensors, all named), raise ``ValueError``. Without
    ``tokenizer.json`` the tokenizer is ``None``, with a warning.
    """
    directory = Path(path)
    hf = read_json(directory / CONFIG_FILE)
    try:
        config = model_config(hf)
    except ValueError as error:
        raise ValueError(f"{directory / CONFIG_FILE}: {error}") from None
    family = family_of(hf)
    origin, tensors = read_weights(directory)
    tensors = family.base_names(tensors, config)
    if config.tie_output and "lm_head.weight" in tensors:
        head = tensors.pop("lm_head.weight")  # a copy of the tied token embedding, or:
        if not torch.equal(head, tensors.get(tied_embedding(config, family.table(config)), head)):
            # a head of its own: transformers 5 writes tie_word_embeddings=true for every T5
            # and ties the head only when the checkpoint has none
            config = dataclasses.replace(config, tie_output=False)
            tensors["lm_head.weight"] = head
    if config.pooler and not any(name.startswith("pooler.") for name in tensors):
        config = dataclasses.replace(config, pooler=False)  # saved without its pooler
    table = family.table(config)
    with torch.device("meta"):  # sizes checked before anything is allocated
        check(tensors, to_hf(build_model(config).state_dict(), table), origin)
    model: Model = build_model(config)  # type: ignore[assignment]
    load_tensors(from_hf(tensors, table), model, origin)
    tokenizer = load_tokenizer(directory)
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"{directory / TOKENIZER_FILE} has {tokenizer.vocab_size} tokens, more than "
            f"the model's vocab_size={config.vocab_size}"
        )
    return model.eval(), tokenizer


def tied_embedding(config: ModelConfig, table: Table) -> str:
    """The checkpoint's name of the embedding that a tied LM head shares."""
    with torch.device("meta"):
        model = build_model(config)
    head = model.lm_head.weight
    state = model.state_dict(keep_vars=True)
    return next(table[name].names[0] for name in table if state[name] is head)


def save_pretrained(
    model: Model,
    path: str | Path,
    tokenizer: Tokenizer | None = None,
    chat_template: str | None = None,
) -> None:
    """Write ``model`` (and its tokenizer) as a Hugging Face checkpoint directory:
    ``config.json``, ``model.safetensors`` and, with a tokenizer, ``tokenizer.json`` with
    its special tokens and the ``chat_template`` in ``tokenizer_config.json`` (where every
    version of ``transformers`` since chat templates reads it). Models that no supported
    family can express raise ``ValueError`` naming the fields that differ, before anything
    is written."""
    config = model.config
    hf = hf_config(config, tokenizer)
    family = family_of(hf)
    table = family.table(config)
    tensors = {
        name: tensor.detach().clone(memory_format=torch.contiguous_format)
        for name, tensor in to_hf(model.state_dict(), table).items()
    }
    if config.head is not None:
        tensors = family.headed_names(tensors, config.head)
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    save_tensors(directory / SAFETENSORS_FILE, tensors, {"format": "pt"})
    if tokenizer is not None:
        with_bert_template(tokenizer).save(directory / TOKENIZER_FILE)
        tokens = {f"{role}_token": token for role, token in tokenizer.special_tokens.items()}
        atomic_write_json(directory / SPECIAL_TOKENS_FILE, tokens)
        inputs = ["input_ids", "attention_mask"]
        if config.type_vocab_size:  # BERT's tokenizer gives segment ids too
            inputs.insert(1, "token_type_ids")
        settings = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": config.max_len,
            "model_input_names": inputs,
        }
        if chat_template is not None:
            settings["chat_template"] = chat_template
        atomic_write_json(directory / TOKENIZER_CONFIG_FILE, settings | tokens)
    atomic_write_json(directory / CONFIG_FILE, hf)


def with_bert_template(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` with BERT's post-processor, so that ``transformers`` encodes a text as
    our encoder tasks do, ``[CLS] text [SEP]``, and a pair as :meth:`Tokenizer.encode_pair`
    does (segment 1 from the second text); unchanged without both roles, or with a
    post-processor of its own (an imported tokenizer's)."""
    roles = tokenizer.special_tokens
    if "cls" not in roles or "sep" not in roles or tokenizer.backend.post_processor is not None:
        return tokenizer
    cls, sep = roles["cls"], roles["sep"]
    backend = tokenizers.Tokenizer.from_str(tokenizer.backend.to_str())
    backend.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.cls_id), (sep, tokenizer.sep_id)],
    )
    return Tokenizer(backend, roles)


def read_json(path: Path) -> dict[str, Any]:
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: not a Hugging Face checkpoint") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path} holds no JSON object")
    return values


def read_weights(directory: Path) -> tuple[str, dict[str, Tensor]]:
    """The checkpoint's tensors by name, and the file they come from (the shard index for
    sharded weights); a pickled ``pytorch_model.bin`` is loaded with ``weights_only=True``,
    so it cannot run code."""
    path = directory / SAFETENSORS_FILE
    if path.is_file():
        return str(path), read_safetensors(path)
    path = directory / SHARD_INDEX_FILE
    if path.is_file():
        return str(path), read_shards(path)
    path = directory / PICKLE_FILE
    if path.is_file():
        try:
            tensors = safe_torch_load(path)
        except (pickle.UnpicklingError, RuntimeError, EOFError):
            raise ValueError(
                f"{path} is not a file of plain tensors (other pickled objects are never loaded)"
            ) from None
        if not isinstance(tensors, dict) or not all(
            isinstance(t, Tensor) for t in tensors.values()
        ):
            raise ValueError(f"{path} holds no state dict of tensors")
        return str(path), tensors
    sharded = (
        f" (of sharded checkpoints only {SHARD_INDEX_FILE} is read)"
        if any(directory.glob("*.index.json"))
        else ""
    )
    raise FileNotFoundError(
        f"{directory} holds no {SAFETENSORS_FILE}, {SHARD_INDEX_FILE} or {PICKLE_FILE}{sharded}"
    )


def read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    except SafetensorError as error:
        raise ValueError(f"{path} is not a safetensors file: {error}") from None


def read_shards(index: Path) -> dict[str, Tensor]:
    """The tensors of a sharded checkpoint: each listed in the index's ``weight_map``
    (tensor name -> shard file in the same directory), taken from its shard."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(shard, str) and "/" not in shard and shard not in ("", ".", "..")
        for shard in weight_map.values()
    ):
        raise ValueError(f"{index} has no weight_map of tensor names to file names beside it")
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        found = read_safetensors(index.parent / shard)
        names = [name for name, file in weight_map.items() if file == shard]
        missing = [name for name in names if name not in found]
        if missing:
            raise ValueError(
                f"{index.parent / shard} lacks {listing(missing)}, which {index.name} lists there"
            )
        tensors |= {name: found[name] for name in names}
    return tensors


def load_tokenizer(directory: Path) -> Tokenizer | None:
    """The checkpoint's ``tokenizer.json`` with the special-token roles it declares."""
    path = directory / TOKENIZER_FILE
    if not path.is_file():
        warnings.warn(f"{directory} has no {TOKENIZER_FILE}: the tokenizer is None", stacklevel=3)
        return None
    return Tokenizer.load(path, declared_roles(directory))


def chat_template(directory: Path) -> str | None:
    """The checkpoint's chat template (``chat_template.jinja``, else the ``chat_template``
    of ``tokenizer_config.json``: a string, or the one named ``default`` of a list), if it
    has one."""
    if (directory / CHAT_TEMPLATE_FILE).is_file():
        return (directory / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    if not (directory / TOKENIZER_CONFIG_FILE).is_file():
        return None
    template = read_json(directory / TOKENIZER_CONFIG_FILE).get("chat_template")
    if isinstance(template, list):
        named = {
            entry.get("name"): entry.get("template")
            for entry in template
            if isinstance(entry, dict)
        }
        template = named.get("default")
    return template if isinstance(template, str) else None


def declared_roles(directory: Path) -> dict[str, str] | None:
    """Role -> token as ``tokenizer_config.json`` and ``special_tokens_map.json`` declare
    them (``pad_token``, ``cls_token``, ...; the latter file wins); ``None`` when neither
    declares any, so that the tokens are recognised by their strings."""
    roles = {}
    for name in (TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_FILE):
        if not (directory / name).is_file():
            continue
        values = read_json(directory / name)
        for role in SPECIAL_TOKENS:
            token = values.get(f"{role}_token")
            if isinstance(token, dict):  # an AddedToken written out
                token = token.get("content")
            if isinstance(token, str):
                roles[role] = token
    return roles or None


def from_hf(tensors: Mapping[str, Tensor], table: Table) -> dict[str, Tensor]:
    """Our tensors from a checkpoint's (which :func:`check` found complete)."""
    ours = {}
    for name, source in table.items():
        parts = [tensors[n].T if source.transposed else tensors[n] for n in source.names]
        ours[name] = parts[0] if source.copies else torch.cat(parts)
    return ours


def to_hf(state: Mapping[str, Tensor], table: Table) -> dict[str, Tensor]:
    """A checkpoint's tensors from ours (views: clone before saving)."""
    tensors = {}
    for ours, source in table.items():
        for name, part in zip(source.names, source.split(state[ours]), strict=True):
            tensors[name] = part.T if source.transposed else part
    return tensors


def check(found: Mapping[str, Tensor], expected: Mapping[str, Tensor], origin: str) -> None:
    """``ValueError`` naming every missing, unexpected or misshapen tensor of ``found``."""
    missing = sorted(expected.keys() - found.keys())
    unexpected = sorted(found.keys() - expected.keys())
    problems = [
        f"{name} is {tuple(found[name].shape)}, the config needs {tuple(expected[name].shape)}"
        for name in sorted(expected.keys() & found.keys())
        if found[name].shape != expected[name].shape
    ]
    if missing:
        problems.append(f"missing: {listing(missing)}")
    if unexpected:
        problems.append(f"unexpected: {listing(unexpected)}")
    if problems:
        raise ValueError(f"{origin} does not fit its config.json: {'; '.join(problems)}")
