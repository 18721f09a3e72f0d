"""Recipes of every shape, with ``--set`` overrides over them: each is read into a recipe
that survives its own round trip, or refused in one line that names the file."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.strategies import assert_one_line_naming, examples, toml_document, values
from scratchformer.config import SECTIONS, TASKS, Recipe

FIELDS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}
KEYS = st.sampled_from([f for fields in FIELDS.values() for f in fields]) | st.text(max_size=6)


def section(name: str) -> st.SearchStrategy:
    """A section's table: its own fields (and others) set to anything, or not a table."""
    fields = st.sampled_from(FIELDS[name]) | st.text(max_size=6)
    return st.dictionaries(fields, values(KEYS), max_size=5) | values(KEYS)


RECIPES = st.fixed_dictionaries(
    {},
    optional={
        "task": st.sampled_from(TASKS) | values(KEYS),
        **{name: section(name) for name in SECTIONS},
        "extra": values(KEYS),
    },
)
OVERRIDES = st.lists(
    st.builds(
        "{}{}{}".format,
        st.sampled_from([f"{s}.{f}" for s in FIELDS for f in FIELDS[s]] + ["task", "model"])
        | st.text(max_size=8),
        st.sampled_from(["=", "", "=="]),
        st.sampled_from(["none", "3", "-1", "1e400", "[1, 2]", "{a = 1}", '"x"', "true"])
        | st.text(max_size=8),
    ),
    max_size=3,
)


def read_or_refuse(path: Path, overrides: list[str]) -> None:
    try:
        recipe = Recipe.load(path, overrides)
    except ValueError as error:
        assert_one_line_naming(error, str(path))
        return
    again = Recipe.from_dict(json.loads(recipe.to_json()))
    assert again.to_json() == recipe.to_json()


@settings(max_examples=examples(150), deadline=None)
@given(RECIPES, OVERRIDES)
def test_a_toml_recipe_with_overrides_is_read_or_refused_in_one_line(recipe, overrides) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "recipe.toml"
        path.write_text(toml_document(recipe), encoding="utf-8")
        read_or_refuse(path, overrides)


@settings(max_examples=examples(60), deadline=None)
@given(values(KEYS) | RECIPES, OVERRIDES)
def test_a_json_recipe_of_any_shape_is_read_or_refused_in_one_line(recipe, overrides) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "config.json"
        path.write_text(json.dumps(recipe), encoding="utf-8")
        read_or_refuse(path, overrides)


@settings(max_examples=examples(60), deadline=None)
@given(st.binary(max_size=64), st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe"]))
def test_recipe_bytes_of_any_encoding_are_read_or_refused_in_one_line(body, prefix) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "recipe.toml"
        path.write_bytes(prefix + b'task = "lm"\n' + body)
        read_or_refuse(path, [])
