"""The shape of the house, read from the code: the import graph (imports inside functions
included) has no circle and no arrow up a layer, no module imports another's private name, and no
function or class outgrows what a reader takes in at once."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainers", "orchestrator")
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250

# Lowest layer first. A module may import modules of its own layer or lower ones, never higher;
# trainers sits wholly below the orchestrator. A module missing here fails the test: place it.
LAYERS: list[set[str]] = [
    # trainers: helpers without torch, then the settings every module reads
    {"trainers.system", "trainers.errors", "trainers.verdicts"},
    {"trainers.settings"},
    {"trainers.datafiles", "trainers.seams"},
    {"trainers.runtime", "trainers.augment", "trainers.checkpoint", "trainers.models",
     "trainers.optim", "trainers.activations"},
    {"trainers.datasets", "trainers.batches", "trainers.distributed"},
    {"trainers.loop"},
    {"trainers.checks", "trainers.data_checks", "trainers.model_checks", "trainers.fit_checks"},
    {"trainers.export", "trainers.preflight", "trainers.rank"},
    {"trainers"},
    # orchestrator: pure pieces, the stores, the coordinator's rooms, the loop, the commands
    {"orchestrator.errors", "orchestrator.paths", "orchestrator.keys", "orchestrator.protocol",
     "orchestrator.compat",
     "orchestrator.reach"},
    {"orchestrator.space", "orchestrator.space_reading", "orchestrator.slots",
     "orchestrator.locks", "orchestrator.stats", "orchestrator.usage", "orchestrator.objectives",
     "orchestrator.retries"},
    {"orchestrator.spec_reading", "orchestrator.samplers", "orchestrator.spec_dryrun"},
    {"orchestrator.spec_rules"},
    {"orchestrator.spec"},
    {"orchestrator.compare"},
    {"orchestrator.schema", "orchestrator.study", "orchestrator.storages", "orchestrator.machines",
     "orchestrator.tracking", "orchestrator.tracking_reads", "orchestrator.preflight",
     "orchestrator.workers", "orchestrator.display", "orchestrator.server", "orchestrator.proxy",
     "orchestrator.readcache"},
    {"orchestrator.worker", "orchestrator.runs", "orchestrator.book", "orchestrator.status",
     "orchestrator.reproduce", "orchestrator.report"},
    {"orchestrator.phases", "orchestrator.submit", "orchestrator.sweep_end",
     "orchestrator.timeouts"},
    {"orchestrator.runner"},
    {"orchestrator.api"},
    {"orchestrator.cli_parser"},
    {"orchestrator.cli_commands"},
    {"orchestrator.cli"},
    {"orchestrator"},
]


def _modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package's ``__init__`` by the package's
    name; a subpackage's modules count as the subpackage)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _unit(name: str) -> str:
    """The layer unit of a module: a subpackage of a package counts as one unit."""
    parts = name.split(".")
    return ".".join(parts[:2])


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
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


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_resolve(name, node, is_package))
        graph[name] = {e for e in edges if e != name and not name.startswith(e + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (as a path), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_circle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_the_cycle_finder_finds_a_planted_circle():
    graph = _graph()
    graph["trainers.settings"] = graph["trainers.settings"] | {"trainers.loop"}
    assert _cycle(graph) is not None


def _layer_of() -> dict[str, int]:
    return {m: i for i, layer in enumerate(LAYERS) for m in layer}


def test_every_module_has_a_layer():
    layer = _layer_of()
    assert sorted({_unit(m) for m in MODULES} - set(layer)) == []


def test_no_module_imports_a_higher_layer():
    layer = _layer_of()
    upward = [f"{m} (layer {layer[_unit(m)]}) imports {t} (layer {layer[_unit(t)]})"
              for m, targets in _graph().items() for t in targets
              if _unit(t) != _unit(m) and layer[_unit(t)] > layer[_unit(m)]]
    assert upward == []


def test_trainers_never_import_the_orchestrator():
    assert [(m, t) for m, ts in _graph().items() for t in ts
            if m.startswith("trainers") and t.startswith("orchestrator")] == []


def test_no_module_imports_a_private_name_of_another():
    private = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private += [f"{name}: from {'.' * node.level}{node.module or ''} import {a.name}"
                            for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.attr.startswith("_") and not node.attr.startswith("__") and \
                    node.value.id in {"trainers", "orchestrator"}:
                private.append(f"{name}: {node.value.id}.{node.attr}")
    assert private == []


def _sizes(kind) -> list[tuple[str, int]]:
    out = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kind):
                out.append((f"{name}.{node.name}:{node.lineno}", node.end_lineno - node.lineno + 1))
    return out


@pytest.mark.parametrize("kind,limit", [((ast.FunctionDef, ast.AsyncFunctionDef),
                                         MAX_FUNCTION_LINES), (ast.ClassDef, MAX_CLASS_LINES)],
                         ids=["functions", "classes"])
def test_no_function_or_class_outgrows_its_limit(kind, limit):
    assert [(where, n) for where, n in _sizes(kind) if n > limit] == []
