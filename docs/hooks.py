"""MkDocs hooks of the docs site: the map page (``map.md``) is written at build time from the
code itself (each layer package's docstring, what its ``MAY_IMPORT`` allows, what its modules
import, and each module's first docstring line), so it cannot drift from the code."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- map: generated at build time by docs/hooks.py -->"


def _layout():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import layout

    return layout


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


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_path == "map.md":
        return markdown.replace(MARKER, map_markdown())
    return markdown
