"""Reading a sweep file into a mapping: its text read once in bounded memory, the YAML parsed in
bounded time (line numbers in every refusal, no key given twice, YAML 1.2 floats such as
``3e-3``), ``--set`` and ``--tag`` overrides applied, and the dumper that writes values back.
"""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import SpecError

# Bounds on what a sweep file may be, so that any input is read or refused in bounded time and
# memory (an alias bomb expands to billions of values).
MAX_FILE_BYTES = 1 << 20
MAX_YAML_VALUES = 2_000  # scalars, lists and mappings, aliases expanded
MAX_YAML_DEPTH = 32
# YAML 1.2's floats with an exponent and no dot: YAML 1.1, PyYAML's, reads them as strings
_YAML12_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")


def read_mapping(path: Path, overrides: list[str] = ()) -> tuple[str, dict[str, Any]]:
    """A sweep file's text and the mapping it holds, ``--set`` ``overrides`` applied.

    Raises:
        SpecError: the file is unreadable, not YAML, too big, or not a mapping; an override is
            malformed.
    """
    text = read_text(path)
    raw = parse_yaml(text, path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a sweep file must be a mapping of keys (name, objective, train, "
                        f"space...), got {type(raw).__name__}")
    return text, apply_overrides(raw, overrides, str(path))


class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader (libyaml's where installed), refusing a key given twice in a mapping,
    and reading ``3e-3`` as a number as YAML 1.2 does (YAML 1.1 wants ``3.0e-3``)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # `<<: *base` may be overridden; complex keys are refused later
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line "
                    f"{seen[key].line + 1}); a mapping names each key once, so remove one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


class YamlDumper(yaml.SafeDumper):
    """The safe dumper, quoting a string that :class:`_YamlLoader` would read as a number
    (``'1e-5'``): what it writes reads back as the value it was given."""


YamlDumper.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))


def read_yaml(path: Path) -> Any:
    """A YAML file's value, read in bounded time and memory (see :data:`MAX_FILE_BYTES`).

    Raises:
        SpecError: the file is unreadable, too large, not UTF-8, not YAML, too deep or too big.
    """
    return parse_yaml(read_text(path), path)


def read_text(path: Path) -> str:
    """A sweep file's text, read once and in bounded memory.

    Raises:
        SpecError: the file is unreadable, too large or not UTF-8.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the sweep file ({e.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: the file is over {MAX_FILE_BYTES >> 10} KiB; a sweep YAML "
                        f"holds settings, not data")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start} is "
                        f"{data[e.start:e.start + 1]!r}); save the file as UTF-8") from None
    return text


def parse_yaml(text: str, path: Path) -> Any:
    """The value of a sweep file's text, built in bounded time and memory.

    Raises:
        SpecError: not YAML, too deep or too big.
    """
    try:
        _check_yaml_events(text, path)
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{path}: invalid YAML{where}: {one_line(problem)}") from None
    except RecursionError:
        raise SpecError(f"{path}: the YAML nests deeper than {MAX_YAML_DEPTH} levels") from None


def _check_yaml_events(text: str, path: Path) -> None:
    """Refuse a YAML of too many values or too deep before building it (the parser's events
    are cheap; building Python values of a megabyte of them is not)."""
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_YamlLoader)):
        if count > 2 * MAX_YAML_VALUES:
            raise SpecError(f"{path}: the YAML holds over {MAX_YAML_VALUES} values; a sweep YAML "
                            f"holds settings, not data")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                raise SpecError(f"{path}: the YAML nests deeper than {MAX_YAML_DEPTH} levels at "
                                f"line {mark.line + 1}; a sweep YAML is a few levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def list_spellings(text: str, overrides: list[str] = ()) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each list of plain values in a sweep file's ``text`` (``--set`` ``overrides`` applied
    over it), by its key path (``("space", "lr")``), as its items are written: ``1e-3`` and
    ``0.001`` are one float once read, and a message about the two quotes what the user wrote.

    Call it on a text :func:`parse_yaml` read (its size and depth bounded) and overrides
    :func:`apply_overrides` applied; a walk through aliases stops past :data:`MAX_YAML_VALUES`
    nodes or :data:`MAX_YAML_DEPTH` keys (such a file is refused by :func:`check_size`).
    """
    out: dict[tuple[str, ...], tuple[str, ...]] = {}
    _spell(text, (), out)
    for item in overrides:
        key, _, value = item.partition("=")
        path = tuple(key.strip().split("."))
        for known in [p for p in out if p[:len(path)] == path]:
            del out[known]
        _spell(value, path, out)
    return out


def _spell(text: str, path: tuple[str, ...], out: dict) -> None:
    """Add the spellings of the lists in the YAML ``text``, found at ``path``, to ``out``."""
    loader = _YamlLoader(text)
    budget = [MAX_YAML_VALUES]

    def walk(node, at: tuple[str, ...]) -> None:
        budget[0] -= 1
        if budget[0] < 0 or len(at) > MAX_YAML_DEPTH:  # aliases repeat (or contain) a node
            return
        if isinstance(node, yaml.SequenceNode):
            if all(isinstance(item, yaml.ScalarNode) for item in node.value):
                out[at] = tuple(f"{item.style}{item.value}{item.style}"
                                if item.style in ("'", '"') else item.value
                                for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            loader.flatten_mapping(node)  # `<<: *base` merged, as the loader builds it
            for key, value in node.value:  # a key given twice: refused when it was read
                if isinstance(key, yaml.ScalarNode):
                    walk(value, (*at, key.value))

    try:
        node = loader.get_single_node()
        if node is not None:
            walk(node, path)
    except yaml.YAMLError:  # read once already: a bad text was refused there
        pass
    finally:
        loader.dispose()


def check_size(raw: Any, source: str) -> None:
    """Refuse a mapping that expands (aliases repeat shared values) past
    :data:`MAX_YAML_VALUES` values or nests past :data:`MAX_YAML_DEPTH`, before anything
    formats, copies or hashes it; counted once per shared value, so an alias bomb costs little."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values, height) of each list or mapping
    too_deep = SpecError(f"{source}: the YAML nests deeper than {MAX_YAML_DEPTH} levels (or "
                         f"contains itself through an alias)")

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if not isinstance(value, (dict, list)):
            return 1, 0
        if depth >= MAX_YAML_DEPTH:  # also where a value that contains itself ends
            raise too_deep
        if id(value) in sizes:
            size, height = sizes[id(value)]
            if depth + height > MAX_YAML_DEPTH:
                raise too_deep
            return size, height
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        size, height = 1, 1
        for item in items:
            item_size, item_height = measure(item, depth + 1)
            size, height = size + item_size, max(height, item_height + 1)
            if size > MAX_YAML_VALUES:
                raise SpecError(f"{source}: the YAML expands to over {MAX_YAML_VALUES} values "
                                f"(aliases repeat what they name); write the sweep out plainly")
        sizes[id(value)] = (size, height)
        return size, height

    measure(raw, 0)


def apply_overrides(raw: dict, overrides, source: str) -> dict:
    """Apply ``KEY=VALUE`` overrides (dotted keys, YAML values) to a copy of ``raw``."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.epochs=1")
        try:
            value = yaml.load(text, Loader=_YamlLoader) if text.strip() else None  # noqa: S506
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None)
            raise SpecError(one_line(f"--set {item!r}: the value is not valid YAML"
                                     f"{f' ({problem})' if problem else ''}; quote it"
                                     )) from None
        node = out
        parts = key.strip().split(".")
        if not all(p.strip() for p in parts):
            raise SpecError(f"--set {item!r}: the key path {key.strip()!r} is malformed (an "
                            f"empty part between dots); write it as dotted names, e.g. "
                            f"--set train.epochs=3")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise SpecError(f"--set {item!r}: {'.'.join(parts[:i + 1])} is {child!r}, not a "
                                f"mapping, so it has no key {parts[i + 1]!r}")
            node = child
        node[parts[-1]] = value
    return out


def tag_overrides(path: str | os.PathLike, tags: list[str]) -> list[str]:
    """``--tag KEY=VALUE`` (the value a string as written), as one ``--set`` override of
    ``tags``: the YAML file's tags with these added (a tag name may hold dots, which a dotted
    ``--set`` key cannot name). The spec validates the names."""
    if not tags:
        return []
    raw = read_yaml(Path(path))
    given = raw.get("tags") if isinstance(raw, dict) else None
    merged = dict(given) if isinstance(given, dict) else {}
    for item in tags:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(one_line(f"--tag {item!r}: expected KEY=VALUE, e.g. --tag "
                                     f"team=vision"))
        merged[key] = value
    return ["tags=" + json.dumps(merged)]


def one_line(text: str, limit: int = 400) -> str:
    """Messages quote user values: keep each on one line and of readable length."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 3] + "..."
