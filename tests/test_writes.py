"""Only ``io.py`` writes files: every other module of the package goes through its atomic
helpers. Read from the source with ``ast`` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "scratchformer"
WRITER = ROOT / "io.py"
WRITING_CALLS = {
    "torch.save",
    "np.save",
    "np.savez",
    "np.savez_compressed",
    "np.savetxt",
    "numpy.save",
    "json.dump",
    "pickle.dump",
    "os.fdopen",
    "os.write",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "shutil.copyfileobj",
    "shutil.copytree",
    "shutil.move",
    "tempfile.mkstemp",
    "tempfile.NamedTemporaryFile",
}
"""Functions that write a file, as the package calls them."""
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "tofile", "save_file", "save_model"}
"""Methods (and safetensors' functions) that write a file, whether called or passed on."""
WRITING_IMPORTS = {("safetensors.torch", "save_file"), ("safetensors.torch", "save_model")}
WRITE_MODES = set("wax+")
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call, position: int) -> str:
    """The mode given to an ``open`` call, positionally or by keyword ("" if none; "?" if
    not a constant)."""
    given = [k.value for k in call.keywords if k.arg == "mode"] or call.args[position:][:1]
    if not given:
        return ""
    return given[0].value if isinstance(given[0], ast.Constant) else "?"


def _writes(call: ast.Call) -> bool:
    name = ast.unparse(call.func)
    if name in WRITING_CALLS:
        return True
    if name == "open":  # open(file, mode): a mode not spelled out may write
        return bool(set(_mode(call, 1)) & (WRITE_MODES | {"?"}))
    if name == "os.open":
        return any(
            isinstance(node, ast.Attribute) and node.attr in WRITE_FLAGS
            for arg in call.args[1:]
            for node in ast.walk(arg)
        )
    if isinstance(call.func, ast.Attribute) and call.func.attr == "open":
        # path.open(mode); other classes' open methods take other arguments: only a mode
        # spelled out, or passed as mode=, counts
        keyword = any(k.arg == "mode" for k in call.keywords)
        return bool(set(_mode(call, 0)) & (WRITE_MODES | ({"?"} if keyword else set())))
    return False


def _is_write(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        return _writes(node)
    if isinstance(node, ast.Attribute):
        return node.attr in WRITING_METHODS
    if isinstance(node, ast.ImportFrom):
        return any((node.module, alias.name) in WRITING_IMPORTS for alias in node.names)
    return False


def file_writes(source: str) -> list[str]:
    """``line: code`` of each place in ``source`` that writes a file."""
    found = [node for node in ast.walk(ast.parse(source)) if _is_write(node)]
    return sorted({f"{node.lineno}: {ast.unparse(node)}" for node in found})


SAMPLE = """
import os, json, shutil, torch
import numpy as np
from safetensors.torch import save_file
open(path, "w").write("x")
open(path, mode="ab")
path.open("x")
path.open(mode=chosen)
os.open(path, os.O_RDWR | os.O_CREAT)
os.fdopen(fd, "wb")
path.write_text("x")
write(path, array.tofile)
torch.save(state, path)
np.save(path, array)
json.dump(obj, file)
shutil.copy2(a, b)
figure.savefig(path)
"""
HARMLESS = """
open(path).read()
open(path, "rb")
path.open(encoding="utf-8")
os.open(path, os.O_RDONLY)
json.dumps(obj)
values.copy()
torch.load(path, weights_only=True)
"""


def test_the_detector_finds_each_kind_of_write() -> None:
    lines = {int(found.split(":")[0]) for found in file_writes(SAMPLE)}
    assert lines == set(range(4, 18))
    assert file_writes(HARMLESS) == []


@pytest.mark.parametrize(
    "path",
    [path for path in sorted(ROOT.rglob("*.py")) if path != WRITER],
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_only_io_writes_files(path: Path) -> None:
    assert file_writes(path.read_text(encoding="utf-8")) == []


def test_io_is_seen_writing() -> None:
    assert file_writes(WRITER.read_text(encoding="utf-8"))
