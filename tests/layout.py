"""The shape of the code as its files state it: every module of ``trainers`` and
``orchestrator``, the imports between them (imports inside functions included), and the layer
packages of ``orchestrator`` with what each may import (``MAY_IMPORT`` in its ``__init__``).
Read by ``tests/test_architecture.py``, which holds the rules, and by the docs site's build
(``docs/build.py``), whose map page shows them."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainers", "orchestrator")


def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package's ``__init__`` by the package's
    name)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = modules()


def resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    """The project modules an import statement names (``from . import x`` names ``pkg.x``)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = module.split(".")
        if node.level:
            base = base[:len(base) - node.level + (1 if is_package else 0)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        targets = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
    found = []
    for t in targets:
        while t and t not in MODULES:
            t = t.rpartition(".")[0]
        if t:
            found.append(t)
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (not itself, not its own parent packages)."""
    out: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(resolve(name, node, is_package))
        out[name] = {e for e in edges if e != name and not name.startswith(e + ".")}
    return out


def layer_packages() -> dict[str, tuple[str, ...]]:
    """Each layer package of ``orchestrator`` (a folder with an ``__init__.py``) -> the layer
    packages its modules may import besides their own, as its ``MAY_IMPORT`` says."""
    out = {}
    for init in sorted((ROOT / "orchestrator").glob("*/__init__.py")):
        may = None
        for node in ast.parse(init.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if isinstance(target, ast.Name) and target.id == "MAY_IMPORT":
                    may = tuple(ast.literal_eval(node.value))
        out[init.parent.name] = may
    return out


# public names kept where a user imports them, each module only naming what lives in its home
PUBLIC_ALIASES = {"orchestrator.stats": "orchestrator.answer.stats"}


def package_of(module: str) -> str | None:
    """The layer package of an ``orchestrator`` module (``orchestrator.stores.study`` ->
    ``stores``); None for ``orchestrator`` itself, its ``__main__``, the
    :data:`PUBLIC_ALIASES` and ``trainers``."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2 or parts[1] == "__main__" \
            or module in PUBLIC_ALIASES:
        return None
    return parts[1]


def docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def package_imports(g: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    """Layer package -> the other layer packages (and ``trainers``) its modules import."""
    g = graph() if g is None else g
    out: dict[str, set[str]] = {p: set() for p in layer_packages()}
    for m, targets in g.items():
        p = package_of(m)
        if p is None:
            continue
        for t in targets:
            q = package_of(t) or ("trainers" if t.startswith("trainers") else None)
            if q is not None and q != p:
                out[p].add(q)
    return out
