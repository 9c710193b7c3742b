"""The shape of the house, read from the code: the import graph (imports inside functions
included) has no circle; each layer package of ``orchestrator`` imports only the packages its
``MAY_IMPORT`` names (read from the package, so the layers live where the code lives), and those
declarations form an order; ``trainers`` never imports the orchestrator and keeps its own order;
no module imports another's private name; no function, class or module outgrows what a reader
takes in at once, nor sits within 5% of its limit without saying why."""
from __future__ import annotations

import ast

import pytest

from tests.layout import (
    MODULES,
    PUBLIC_ALIASES,
    ROOT,
    docstring,
    graph,
    layer_packages,
    package_imports,
    package_of,
)

MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 250
MAX_MODULE_LINES = 600
NEAR = 0.95  # within 5% of a limit: said why in the docstring ("near its limit because ...")

# trainers is one flat package below the orchestrator; its own order, lowest first (a module
# may import modules of its own set or lower ones). A trainers module missing here fails.
TRAINERS_LAYERS: list[set[str]] = [
    # helpers without torch, then the settings every module reads
    {"trainers.system", "trainers.errors", "trainers.verdicts"},
    {"trainers.settings"},
    {"trainers.datafiles", "trainers.seams"},
    {"trainers.runtime", "trainers.augment", "trainers.checkpoint", "trainers.models",
     "trainers.optim", "trainers.activations", "trainers.noise"},
    {"trainers.datasets", "trainers.batches", "trainers.distributed"},
    {"trainers.loop"},
    {"trainers.checks", "trainers.data_checks", "trainers.model_checks", "trainers.fit_checks"},
    {"trainers.export", "trainers.preflight", "trainers.rank"},
    {"trainers"},
]


def _cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (as a path), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(g):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_circle():
    assert _cycle(graph()) is None, " -> ".join(_cycle(graph()) or [])


def test_the_cycle_finder_finds_a_planted_circle():
    g = graph()
    g["trainers.settings"] = g["trainers.settings"] | {"trainers.loop"}
    assert _cycle(g) is not None


def test_every_orchestrator_module_lives_in_a_layer_package_that_says_what_it_may_import():
    packages = layer_packages()
    assert packages, "no layer packages found"
    assert [p for p, may in packages.items() if may is None] == []  # MAY_IMPORT missing
    assert [p for p, may in packages.items() if set(may) - set(packages)] == []  # unknown names
    loose = [m for m in MODULES if m.startswith("orchestrator.") and package_of(m) is None
             and m != "orchestrator.__main__" and m not in PUBLIC_ALIASES]
    assert loose == []  # a module directly under orchestrator/: place it in a package
    assert [p for p in packages if not docstring(ROOT / "orchestrator" / p / "__init__.py")] == []


def test_a_public_alias_only_names_what_lives_in_its_home():
    """``from orchestrator.stats import compare_paired`` (the issue's and the docs' public path)
    keeps working, and the alias holds no code of its own: its docstring, one import from its
    home and ``__all__``."""
    import importlib

    for alias, home in PUBLIC_ALIASES.items():
        tree = ast.parse(MODULES[alias].read_text())
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and n is tree.body[0])]
        imports = [n for n in body if isinstance(n, ast.ImportFrom)]
        assert [n.level * "." + (n.module or "") for n in imports] == \
            ["." + home.removeprefix("orchestrator.")], alias
        assert [type(n).__name__ for n in body if n not in imports] == ["Assign"], alias
        public, real = importlib.import_module(alias), importlib.import_module(home)
        assert public.__all__ and all(getattr(public, n) is getattr(real, n)
                                      for n in public.__all__)
    from orchestrator.stats import compare_paired  # as the docs write it
    [r] = compare_paired({"a": {1: 0.5, 2: 0.6, 3: 0.55}, "b": {1: 0.6, 2: 0.7, 3: 0.66}})
    assert r.verdict == "better" and r.winner == "b"


def test_the_layer_packages_form_an_order():
    packages = layer_packages()
    assert _cycle({p: set(may) for p, may in packages.items()}) is None


def test_no_package_imports_one_its_may_import_leaves_out():
    packages = layer_packages()
    upward = [f"{m} imports {t} ({package_of(m)} may import {', '.join(packages[package_of(m)])})"
              for m, targets in graph().items() if package_of(m) is not None
              for t in targets if package_of(t) not in (None, package_of(m))
              and package_of(t) not in packages[package_of(m)]]
    assert upward == []


def test_the_package_rule_catches_a_planted_upward_import():
    packages = layer_packages()
    lowest = next(p for p, may in packages.items() if not may)
    highest = max(packages, key=lambda p: len(packages[p]))
    planted = {**package_imports(), lowest: {highest}}
    assert [p for p, used in planted.items() if used - set(packages[p]) - {"trainers"}] == [lowest]


def test_each_package_declares_no_more_than_it_uses():
    """A MAY_IMPORT that names a package never imported states a layer the code does not have."""
    used = package_imports()
    packages = layer_packages()
    # transitively: a package may list a lower one it reaches only through another
    assert [(p, q) for p, may in packages.items() for q in may
            if q not in used[p] and not any(q in packages[r] for r in used[p])] == []


# what the answer layer may import of Optuna: its record of a trial, read as data (each layer
# below stores may know more: config builds the samplers, core holds the adapter to its private
# names); the study, samplers, pruners and storages are the stores' alone
ANSWER_READS_OF_OPTUNA = {"optuna.trial": {"FrozenTrial", "TrialState"},
                          "optuna.distributions": {"FloatDistribution", "IntDistribution"}}


def _optuna_imports(path) -> list[str]:
    """What a module imports of Optuna (inside functions too) and of the adapter to its private
    names, as ``module: name``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [f"{a.name}: *" for a in node.names if a.name.split(".")[0] == "optuna"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            found += [f"{node.module}: {a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and "compat" in \
                [*(node.module or "").split("."), *(a.name for a in node.names)]:
            found.append("orchestrator.core.compat: *")
    return found


def test_the_answer_layer_reads_optunas_record_of_a_trial_and_nothing_else_of_optuna():
    """Pure rules on numbers: the answer reads trials (their state, values, parameters and
    attributes) and never asks, tells or samples, so no Optuna study, sampler or private name."""
    read = [(m, i) for m, path in MODULES.items() if package_of(m) == "answer"
            for i in _optuna_imports(path)]
    assert read, "the answer layer reads no trial: the rule below checks nothing"
    assert [(m, i) for m, i in read if i.split(": ")[1] not in
            ANSWER_READS_OF_OPTUNA.get(i.split(": ")[0], ())] == []


def test_the_optuna_import_rule_catches_a_sampler_and_the_adapter(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import optuna\nfrom optuna.samplers import TPESampler\n"
                       "from optuna.trial import FrozenTrial\nfrom ..core import compat\n")
    found = _optuna_imports(planted)
    assert [i for i in found if i.split(": ")[1] not in
            ANSWER_READS_OF_OPTUNA.get(i.split(": ")[0], ())] == \
        ["optuna: *", "optuna.samplers: TPESampler", "orchestrator.core.compat: *"]


def _trainers_layer() -> dict[str, int]:
    return {m: i for i, layer in enumerate(TRAINERS_LAYERS) for m in layer}


def test_every_trainers_module_has_a_layer():
    layer = _trainers_layer()
    assert sorted(m for m in MODULES if m.startswith("trainers") and m not in layer) == []


def test_no_trainers_module_imports_a_higher_one():
    layer = _trainers_layer()
    upward = [f"{m} (layer {layer[m]}) imports {t} (layer {layer[t]})"
              for m, targets in graph().items() if m in layer for t in targets
              if t in layer and layer[t] > layer[m]]
    assert upward == []


def test_trainers_never_import_the_orchestrator():
    assert [(m, t) for m, ts in graph().items() for t in ts
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


def _sizes(kind) -> list[tuple[str, int, str]]:
    """(where, lines, docstring) of every node of ``kind``; a module's size is its file's."""
    out = []
    for name, path in MODULES.items():
        text = path.read_text()
        tree = ast.parse(text)
        if kind is ast.Module:
            out.append((name, len(text.splitlines()), ast.get_docstring(tree) or ""))
            continue
        for node in ast.walk(tree):
            if isinstance(node, kind):
                out.append((f"{name}.{node.name}:{node.lineno}",
                            node.end_lineno - node.lineno + 1, ast.get_docstring(node) or ""))
    return out


LIMITS = [((ast.FunctionDef, ast.AsyncFunctionDef), MAX_FUNCTION_LINES),
          (ast.ClassDef, MAX_CLASS_LINES), (ast.Module, MAX_MODULE_LINES)]


@pytest.mark.parametrize("kind,limit", LIMITS, ids=["functions", "classes", "modules"])
def test_nothing_outgrows_its_limit(kind, limit):
    assert [(where, n) for where, n, _ in _sizes(kind) if n > limit] == []


@pytest.mark.parametrize("kind,limit", LIMITS[1:], ids=["classes", "modules"])
def test_nothing_sits_near_its_limit_without_saying_why(kind, limit):
    """Trimmed to pass rather than divided: a class or module within 5% of its limit says in its
    docstring why it is one piece ("near its limit because ...")."""
    assert [(where, n) for where, n, doc in _sizes(kind)
            if NEAR * limit < n <= limit and "near its limit because" not in doc] == []
