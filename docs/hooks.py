"""MkDocs hooks of the docs site: the map page (``map.md``) is written at build time from the
code itself (each layer package's docstring, what its ``MAY_IMPORT`` allows, what its modules
import, and each module's first docstring line), so it cannot drift from the code; and every
page's marked figures are written from the code by ``docs/figures.py`` (which any other build
runs first as a script)."""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

MARKER = "<!-- map: generated at build time by docs/hooks.py -->"


def _root() -> Path:
    """The repository: the folder above this file, or (a copy of the docs built elsewhere) the
    one that holds the ``orchestrator`` package this Python imports."""
    here = Path(__file__).resolve().parents[1]
    if (here / "tests" / "layout.py").is_file():
        return here
    import orchestrator

    return Path(orchestrator.__file__).resolve().parents[1]


def _layout():
    """``tests/layout.py`` of the repository, loaded from its file."""
    path = _root() / "tests" / "layout.py"
    spec = importlib.util.spec_from_file_location("sweep_layout", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look it up by name
    spec.loader.exec_module(module)
    return module


def _order(packages: dict[str, tuple[str, ...]]) -> list[str]:
    """Lowest layer first: a package after every package it may import."""
    done: list[str] = []
    while len(done) < len(packages):
        done += sorted(p for p, may in packages.items()
                       if p not in done and set(may) <= set(done))
    return done


def _first_line(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n")[0].split()) if doc else ""


def map_markdown() -> str:
    """The map: one section per layer package of ``orchestrator`` (lowest first), then
    ``trainers``."""
    layout = _layout()
    packages = layout.layer_packages()
    used = layout.package_imports()
    out = []
    for p in _order(packages):
        init = layout.ROOT / "orchestrator" / p / "__init__.py"
        may = ", ".join(f"`{q}`" for q in packages[p]) or "nothing else"
        imports = ", ".join(f"`{q}`" for q in sorted(used[p])) or "nothing else"
        out += [f"## `orchestrator.{p}`", "", _first_line(layout.docstring(init)), "",
                f"- may import: {may}", f"- imports: {imports}", "",
                "| module | lines | what it owns |", "| --- | --- | --- |"]
        for name, path in sorted(layout.MODULES.items()):
            if name.startswith(f"orchestrator.{p}.") and path.name != "__init__.py":
                lines = len(path.read_text().splitlines())
                out.append(f"| `{name}` | {lines} | {_first_line(layout.docstring(path))} |")
        out.append("")
    out += ["## `trainers`", "", _first_line(layout.docstring(layout.ROOT / "trainers" /
                                                           "__init__.py")), "",
            "- imports: nothing of `orchestrator` (checked by `tests/test_architecture.py`)", "",
            "| module | lines | what it owns |", "| --- | --- | --- |"]
    for name, path in sorted(layout.MODULES.items()):
        if name.startswith("trainers.") and path.name != "__init__.py":
            lines = len(path.read_text().splitlines())
            out.append(f"| `{name}` | {lines} | {_first_line(layout.docstring(path))} |")
    return "\n".join(out) + "\n"


@functools.lru_cache(maxsize=1)
def _figures():
    """``docs/figures.py``, loaded from its file (this folder is not a package)."""
    path = Path(__file__).resolve().parent / "figures.py"
    spec = importlib.util.spec_from_file_location("sweep_doc_figures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_path == "map.md":
        markdown = markdown.replace(MARKER, map_markdown())
    return _figures().fill(markdown) if "<!-- figure: " in markdown else markdown
