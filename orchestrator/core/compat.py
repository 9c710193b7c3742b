"""Every private name of Optuna and CPython that sweep relies on, behind one small adapter.

Each has a reason no public name serves, and a test in ``tests/orchestrator/test_compat.py``
that fails loudly, naming it, on an upgrade that removes or changes it (tested: Optuna 5.1,
CPython 3.10 to 3.13). The rest of the code calls the functions here, never the names: a test
there reads every module of ``orchestrator`` for Optuna's private names and finds them here alone.
"""
from __future__ import annotations

import abc
import atexit
import threading
from typing import Any

import optuna
from optuna.storages import BaseStorage

# The heartbeat protocol of a storage (record a beat, find stale trials, what to do with them):
# Optuna's RDB and gRPC storages implement it and ``Study`` calls it; it has no public home.
from optuna.storages._heartbeat import BaseHeartbeat  # noqa: F401 - re-exported

# The method of :class:`BaseHeartbeat` that Optuna calls to find the stale trials of a study: a
# storage of sweep's that implements heartbeats (the gRPC proxy's) defines it under this name.
STALE_TRIAL_IDS = "_get_stale_trial_ids"
# The trials read ``Study`` itself and its samplers use (``use_cache``): a view of a study that
# shows a sampler some trials only (a comparison's level) answers it under this name too.
STUDY_TRIALS = "_get_trials"
# The system attribute in which ``Study.enqueue_trial`` keeps a queued trial's parameters until
# it is asked (``params`` is empty until then).
FIXED_PARAMS = "fixed_params"


def mlflow_tracking_uri() -> str | None:
    """The tracking URI this process set for MLflow's fluent API (``mlflow.set_tracking_uri``),
    None when it set none: ``mlflow.get_tracking_uri()`` cannot tell "unset" from a URI set to
    the default, and sweep puts back exactly what a user's own code had."""
    from mlflow.tracking._tracking_service import utils

    return utils._tracking_uri


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage a study reads and writes (``Study._storage``): sweep sets the attributes of
    a trial another process left RUNNING (no public call may) and records heartbeats through
    it."""
    return study._storage


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """A trial's id in its storage (``_trial_id``), which storage calls take; the public
    ``number`` counts within one study only."""
    return trial._trial_id


def fixed_params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The parameters a trial was queued with (:data:`FIXED_PARAMS`; empty when it was not
    queued): a retry of a trial failed before it sampled has only these, its level's."""
    return trial.system_attrs.get(FIXED_PARAMS, {})


def study_trials(study: optuna.Study, deepcopy: bool = True, states=None,
                 use_cache: bool = False) -> list[optuna.trial.FrozenTrial]:
    """``Study._get_trials``: the trials read a sampler makes (see :data:`STUDY_TRIALS`)."""
    return getattr(study, STUDY_TRIALS)(deepcopy=deepcopy, states=states, use_cache=use_cache)


def implement(cls: type, name: str, method: Any) -> None:
    """Give ``cls`` ``method`` under the private ``name`` Optuna calls (one of the names above),
    which may be one of its abstract methods."""
    setattr(cls, name, method)
    abc.update_abstractmethods(cls)


def end_threads() -> None:
    """What the interpreter's exit does first (``threading._shutdown``): join the non-daemon
    threads and run the thread pools' exit hooks; for an exit that then skips the rest of the
    teardown (``os._exit``)."""
    threading._shutdown()


def run_exit_hooks() -> None:
    """Run the ``atexit`` hooks now (``atexit._run_exitfuncs``: logging's flush among them),
    before an exit that skips the interpreter's teardown."""
    atexit._run_exitfuncs()
