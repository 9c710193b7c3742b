"""Every name written to a store is declared once, in orchestrator/core/keys.py, with its meaning;
the tables of docs/records.md are made from that module."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from orchestrator.core import keys

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- keys:begin -->", "<!-- keys:end -->"
# a string that is a store key: `sweep.` or `mlflow.` then dotted words (logger names excepted)
KEY_LIKE = re.compile(r"^(sweep|mlflow)\.[A-Za-z_.<>]+$")
# a logger's name (tracking.py quiets it) and the embedded store's file name: not store keys
NOT_KEYS = {"mlflow.onnx", "mlflow.db"}
FORMATTED_KEY = re.compile(r"\b(?:sweep|mlflow)\.[a-z_.{}]+")


def test_the_records_page_tables_are_made_from_the_keys_module():
    text = (ROOT / "docs" / "records.md").read_text()
    assert BEGIN in text and END in text, "docs/records.md lacks the generated keys tables"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert block == keys.markdown(), \
        "docs/records.md's tables are stale: python -m orchestrator.core.keys"


def test_every_key_has_one_meaning_and_known_places():
    names = [k.name for k in keys.KEYS]
    assert len(names) == len(set(names))
    assert all(k.meaning and set(k.places) <= set(keys.PLACES) for k in keys.KEYS)
    assert all(any(place in k.places for k in keys.KEYS) for place in keys.PLACES)


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string tokens of a module that are not docstrings, with their line numbers."""
    src = path.read_text()
    docstrings = {node.body[0].value.lineno for node in ast.walk(ast.parse(src))
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type == tokenize.STRING and t.start[0] not in docstrings]


def literal_keys(path: Path) -> list[str]:
    """Store keys written as literals in ``path`` instead of through the keys module."""
    found = []
    for line, token in _code_strings(path):
        if token[:1] in "fF" or token[:2].lower() in ("rf", "fr"):
            found += [f"{path.name}:{line}: {m}" for m in FORMATTED_KEY.findall(token)
                      if m not in NOT_KEYS]
            continue
        try:
            value = ast.literal_eval(token)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, str) and KEY_LIKE.match(value) and value not in NOT_KEYS:
            found.append(f"{path.name}:{line}: {value}")
    return found


def test_no_store_key_is_written_as_a_literal_outside_the_keys_module():
    modules = [p for p in (ROOT / "orchestrator").rglob("*.py") if p.name != "keys.py"]
    assert [hit for p in modules for hit in literal_keys(p)] == []


def test_the_literal_finder_sees_plain_and_formatted_keys(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""Mentions sweep.role in a docstring."""\n'
                       'TAGS = {"sweep.role": "x"}\n'
                       'QUERY = f"tags.`sweep.study` = {1}"\n'
                       'LOGGER = "mlflow.onnx"\n')
    assert literal_keys(planted) == ["planted.py:2: sweep.role", "planted.py:3: sweep.study"]
