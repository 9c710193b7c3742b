"""The private names of Optuna and CPython behind ``orchestrator.core.compat``: one test each, so an
upgrade that removes or changes one fails here, by name, before anything subtler breaks; and the
versions README.md says were tested, against the ones installed."""
from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from importlib.metadata import version

import optuna
import pytest
from optuna.storages import BaseStorage, GrpcStorageProxy, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from orchestrator.core import compat
from tests.conftest import ROOT


@pytest.fixture
def study(tmp_path):
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "j.journal")))
    # another study's trials first: a trial's id in the storage is then not its number
    optuna.create_study(storage=storage, study_name="other").optimize(lambda t: 0.0, n_trials=2)
    s = optuna.create_study(storage=storage, study_name="s")
    for x in (1.0, 2.0):
        s.enqueue_trial({"x": x})
        s.optimize(lambda t: t.suggest_float("x", 0, 3), n_trials=1)
    return s


def test_base_heartbeat_is_the_protocol_rdb_storages_implement_with_the_stale_trials_method():
    assert issubclass(RDBStorage, compat.BaseHeartbeat)
    assert compat.STALE_TRIAL_IDS in compat.BaseHeartbeat.__abstractmethods__
    params = list(inspect.signature(getattr(RDBStorage, compat.STALE_TRIAL_IDS)).parameters)
    assert params == ["self", "study_id"]


def test_implement_gives_an_abstract_private_method_so_the_class_can_be_made():
    class Beats(compat.BaseHeartbeat):
        def record_heartbeat(self, trial_id): ...
        def get_heartbeat_interval(self): return 1
        def get_heartbeat_stale_trial_callback(self): return None

    with pytest.raises(TypeError):
        Beats()
    compat.implement(Beats, compat.STALE_TRIAL_IDS, lambda self, study_id: [study_id])
    assert getattr(Beats(), compat.STALE_TRIAL_IDS)(7) == [7]


def test_study_trials_is_the_read_with_a_cache_flag_that_samplers_make(study):
    params = inspect.signature(getattr(optuna.Study, compat.STUDY_TRIALS)).parameters
    assert {"deepcopy", "states", "use_cache"} <= set(params)
    read = compat.study_trials(study, deepcopy=False, use_cache=True)
    assert [t.params for t in read] == [t.params for t in study.get_trials()]


def test_fixed_params_are_a_queued_trials_parameters_until_it_is_asked(study):
    study.enqueue_trial({"x": 0.5})
    waiting = study.trials[-1]
    assert (waiting.params, compat.fixed_params(waiting)) == ({}, {"x": 0.5})
    assert compat.fixed_params(study.trials[0]) == {"x": 1.0}  # kept once it ran
    assert compat.fixed_params(study.get_trials()[0]) == study.trials[0].params
    never_queued = optuna.create_study()
    never_queued.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert compat.fixed_params(never_queued.trials[0]) == {}


def test_storage_of_writes_an_attr_of_a_trial_no_trial_object_of_this_process_holds(study):
    running = study.ask()  # as another process left it RUNNING: only its number is known here
    frozen = next(t for t in study.trials if t.number == running.number)
    compat.storage_of(study).set_trial_user_attr(compat.trial_id(frozen), "note", "kept")
    assert study.trials[running.number].user_attrs["note"] == "kept"


def test_trial_id_of_a_live_and_a_frozen_trial_names_that_trial_in_its_storage(study):
    storage = compat.storage_of(study)
    live = study.ask()
    assert storage.get_trial(compat.trial_id(live)).number == live.number
    frozen = study.trials[1]
    assert storage.get_trial(compat.trial_id(frozen)).number == frozen.number


def optuna_private_names() -> set[str]:
    """The private names of Optuna's study, trials, storages, samplers and pruners (their
    classes' and a live study's, trial's and finished trial's own attributes), with the system
    attribute keys Optuna keeps for itself."""
    study = optuna.create_study()
    study.enqueue_trial({"x": 1.0})
    trial = study.ask()
    trial.suggest_float("x", 0, 2)
    study.tell(trial, 1.0)
    classes = [optuna.Study, optuna.Trial, optuna.trial.FrozenTrial, BaseStorage, RDBStorage,
               JournalStorage, GrpcStorageProxy, compat.BaseHeartbeat,
               optuna.samplers.BaseSampler, optuna.pruners.BasePruner]
    names = {n for o in (study, trial, study.trials[0]) for n in vars(o)} | \
        {n for c in classes for n in dir(c)}
    return {n for n in names if n.startswith("_") and not n.startswith("__")} | \
        {compat.FIXED_PARAMS}


def private_uses(source: str, private: set[str]) -> list[str]:
    """Where ``source`` uses a private name of Optuna: an import of a private module or name of
    it, an attribute of one (not on ``self`` or ``cls``: a class's own names), the name as a
    string (``getattr(study, "_storage")``), or Optuna's system attributes read with a key that
    is not one of sweep's (``keys.X``)."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{where}: imports {m}" for m in modules if m.split(".")[0] == "optuna"
                      and any(part.startswith("_") for part in m.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr in private and \
                node.attr.startswith("_") and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{where}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in private:
            found.append(f"{where}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr == "system_attrs":
            up = parent.get(node)
            key = parent[up].args[0] if isinstance(up, ast.Attribute) and up.attr == "get" \
                and isinstance(parent.get(up), ast.Call) and parent[up].args else \
                up.slice if isinstance(up, ast.Subscript) else None
            if not (isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name)
                    and key.value.id == "keys"):
                found.append(f"{where}: system_attrs read with no key of sweep's")
    return found


def test_optunas_private_names_are_used_in_compat_alone():
    private = optuna_private_names()
    assert {"_storage", "_study_id", "_trial_id", "_get_trials", "_cached_frozen_trial",
            compat.STUDY_TRIALS, compat.STALE_TRIAL_IDS} <= private
    used = {str(path.relative_to(ROOT)): private_uses(path.read_text(), private)
            for path in sorted((ROOT / "orchestrator").rglob("*.py"))}
    assert used.pop("orchestrator/core/compat.py")  # where they live
    assert {path: uses for path, uses in used.items() if uses} == {}


@pytest.mark.parametrize("planted", [
    "from optuna.storages._heartbeat import BaseHeartbeat",
    "import optuna.study._constrained_optimization",
    "from optuna.samplers import _base",
    "storage = study._storage",
    "storage = getattr(study, '_storage')",
    "trial._cached_frozen_trial.params",
    "params = trial.system_attrs.get('fixed_params', {})",
    "constraints = {k: v for k, v in t.system_attrs.items()}",
    "attrs = trial.system_attrs",
])
def test_the_private_name_finder_finds_a_planted_use(planted):
    assert private_uses(planted, optuna_private_names()) != []


@pytest.mark.parametrize("allowed", [
    "self._storage = storage",
    "beat = trial.system_attrs.get(keys.HEARTBEAT)",
    "beat = trial.system_attrs[keys.HEARTBEAT]",
    "from optuna.storages import RDBStorage",
    "value = spec._raw",
])
def test_the_private_name_finder_passes_a_class_own_names_and_sweeps_own_keys(allowed):
    assert private_uses(allowed, optuna_private_names()) == []


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_end_threads_joins_the_running_threads_before_an_exit_that_skips_teardown():
    out = _python("import os, threading, time\n"
                  "from orchestrator.core.compat import end_threads\n"
                  "def work():\n    time.sleep(0.3); print('thread done', flush=True)\n"
                  "threading.Thread(target=work).start()\n"
                  "end_threads()\nos._exit(0)\n")
    assert out.returncode == 0 and "thread done" in out.stdout, out.stderr


def test_run_exit_hooks_runs_the_atexit_hooks_now():
    out = _python("import atexit, os\n"
                  "from orchestrator.core.compat import run_exit_hooks\n"
                  "atexit.register(lambda: print('hook ran', flush=True))\n"
                  "run_exit_hooks()\nos._exit(0)\n")
    assert out.returncode == 0 and "hook ran" in out.stdout, out.stderr


def test_mlflow_tracking_uri_is_what_this_process_set_and_none_when_unset(tmp_path):
    import mlflow

    before = compat.mlflow_tracking_uri()
    try:
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'x.db'}")
        assert compat.mlflow_tracking_uri() == f"sqlite:///{tmp_path / 'x.db'}"
        mlflow.set_tracking_uri(None)  # how a setting is taken back: unset again
        assert compat.mlflow_tracking_uri() is None
    finally:
        mlflow.set_tracking_uri(before)


# README's install section: "Tested with torch X.Y, optuna X.Y and mlflow X.Y"
TESTED = re.compile(r"Tested with torch (\d+\.\d+), optuna (\d+\.\d+) and mlflow (\d+\.\d+)")


def _minor(name: str) -> str:
    """The installed ``name``'s major.minor version (a local tag such as torch's +cpu dropped)."""
    return ".".join(re.match(r"(\d+)\.(\d+)", version(name)).groups())


def test_the_stack_installed_is_the_one_readme_says_was_tested():
    """CI runs the README's test command on a fresh clone, so this holds what a fresh install
    resolves today: a new minor release within pyproject.toml's bounds (mlflow 3.18 once
    changed the UI the docs show) fails here until it is tested and README names it."""
    found = TESTED.search(" ".join((ROOT / "README.md").read_text().split()))
    assert found, f"README.md has no sentence matching {TESTED.pattern!r}"
    claimed = dict(zip(("torch", "optuna", "mlflow"), found.groups()))
    assert {name: _minor(name) for name in claimed} == claimed


def test_pyproject_notes_the_tested_versions_readme_names():
    found = TESTED.search(" ".join((ROOT / "README.md").read_text().split()))
    noted = dict(re.findall(r'^\s*"(optuna|mlflow)[^"]*",\s*# tested: (\d+\.\d+)',
                            (ROOT / "pyproject.toml").read_text(), re.M))
    assert noted == {"optuna": found.group(2), "mlflow": found.group(3)}
