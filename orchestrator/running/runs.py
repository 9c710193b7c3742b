"""The MLflow half of the trial book: the runs of a sweep's trials.

Opens the sweep's experiment and parent run in a thread while the first trials train, then keeps
each trial's run: created with its true start time, its epochs flushed, its end logged. Turns a
store failing under the sweep into :class:`StoreBroke` (the trials are retried), and closes the
runs dead processes left RUNNING. Imports no MLflow itself: the Tracker comes opened.
"""
from __future__ import annotations

import contextlib
import functools
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..config.spec import SweepSpec
from ..core import keys, paths
from ..core.errors import CouldNotFinish, SweepError, SweepFailure, disk_full
from ..core.urls import mask
from ..stores.study import PendingTrial, SweepStudy, TrialLost
from .protocol import Done, Epoch, Failed

# a run to close: (trial number, the run id recorded on the trial or None, the reason)
Closing = tuple[int, str | None, str]
# Epochs reach MLflow at least this often (and at every trial's end): one call per flush, not per
# epoch, keeps this process's share of the CPU small when epochs take a fraction of a second.
FLUSH_SECONDS = 1.0


@dataclass
class Active:
    """A trial running on a worker."""

    pending: PendingTrial
    started: float
    settings: dict[str, Any]  # what the run logs as params
    params: dict[str, Any]  # extra params (lr_effective)
    tags: dict[str, str]
    run_id: str | None = None  # None until MLflow is attached (see TrialBook.attach_tracking)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    curve: list[float] = field(default_factory=list)  # the (first) objective's metric
    history: list[dict[str, float]] = field(default_factory=list)  # every epoch's metrics
    stopped_early: str | None = None  # why patience stopped it
    unlogged: list[tuple] = field(default_factory=list)  # (epoch, metrics, lr_steps, samples)
    flushed: float = 0.0
    warnings: list[str] = field(default_factory=list)  # from the trainer, shown on the run
    lost: str | None = None  # why another process ended it while it ran here (TrialLost)

    def warning_tags(self) -> dict[str, str]:
        return {keys.WARNINGS: "\n".join(self.warnings)} if self.warnings else {}

    def take(self, message: Epoch | Done | Failed) -> None:
        """A message's warnings, and its epoch and samples for the run (those of a trial's end
        come after its last epoch)."""
        self.warnings += message.warnings
        self.unlogged.append((message.epoch, message.metrics, message.lr_steps, message.system)
                             if isinstance(message, Epoch) else (0, {}, [], message.system))


@dataclass
class Tracking:
    """The MLflow side of a sweep, once open."""

    tracker: Any  # tracking.Tracker (imported in the thread that opens it: MLflow is slow)
    experiment_id: str
    parent_id: str
    env_tags: dict[str, str]  # the same on every trial run
    packages: str  # `name==version` lines, an artifact of every trial run


def open_tracking(tracker, spec: SweepSpec, study: SweepStudy, spec_text: str,
                  storage: str) -> Tracking:
    """Open the sweep's experiment and its parent run in the opened MLflow store ``tracker``.

    Several machines share one parent run: MLflow has no uniqueness rule to lean on, so the
    machine that created the study creates the parent run and stores its id in the study; the
    others read it from there (waiting for it when they join at the same moment). When it is
    not there in time, one process makes it, and the others find it
    (:meth:`~orchestrator.stores.machines.Machines.share_parent`).
    """
    from ..stores.tracking import environment_tags, installed_packages
    from .server import runs_view, tuning_view

    tracking_uri = tracker.uri
    experiment_id = tracker.experiment(spec.name, spec.description)
    client = tracker.client
    tag_experiment(client, experiment_id, keys.RUNS_VIEW, runs_view(spec, study.name))
    if spec.compare is not None:
        tag_experiment(client, experiment_id, keys.TUNING_VIEW, tuning_view(spec, study.name))
    elif keys.TUNING_VIEW in client.get_experiment(experiment_id).tags:  # an earlier study's
        tag_experiment(client, experiment_id, keys.TUNING_VIEW, None)
    env_tags = environment_tags()
    packages = installed_packages()
    shared, study_id = study.machines.shared_parent(), study.study_id
    if shared is None and not study.created:
        found = tracker.find_parent_run(experiment_id, study.name, study_id)
        shared = found.info.run_id if found else study.machines.wait_for_shared_parent()
    if shared is None:  # the creator, or a joiner that waited for it in vain
        created: set[str] = set()

        def make() -> str:  # the parent run a process left unrecorded, or a new one
            run_id, resumed = tracker.parent_run(
                experiment_id, study.name, spec_text, spec.raw,
                {**spec.tags, **env_tags, keys.STORAGE: mask(storage),
                 keys.FINGERPRINT: spec.fingerprint(),
                 **({keys.STUDY_ID: study_id} if study_id else {})})
            if not resumed:
                created.add(run_id)
            return run_id

        shared, made = study.machines.share_parent(make)
        if made == shared:
            return Tracking(tracker, experiment_id, shared, env_tags, packages)
        if made in created:  # another process's record stood: the one made here is not used
            client.delete_run(made)
    try:
        tracker.resume_parent(shared, study_id)
    except Exception as e:
        if getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
            raise
        raise StoreBroke(f"--tracking-uri {mask(tracking_uri)}: holds no run {shared}, the "
                         f"parent run of study {study.name!r} (the store was deleted or "
                         f"replaced since); {_store_fix(tracking_uri)}") from None
    return Tracking(tracker, experiment_id, shared, env_tags, packages)


def tag_experiment(client, experiment_id: str, key: str, value: str | None) -> None:
    """Set (``None``: delete) an experiment tag that every machine of the sweep sets alike.

    Machines starting together race on it: MLflow sets a tag by reading, then inserting, so a
    second insert of a new tag breaks the row's uniqueness, and a second delete finds nothing.
    Tried again once the store holds another value than ``value``; a store that already holds
    it was set by another machine.
    """
    from mlflow.exceptions import MlflowException

    for attempt in range(3):
        try:
            if value is None:
                client.delete_experiment_tag(experiment_id, key)
            else:
                client.set_experiment_tag(experiment_id, key, value)
            return
        except MlflowException:
            if client.get_experiment(experiment_id).tags.get(key) == value:
                return  # another machine set it (or deleted it) a moment ago
            if attempt == 2:
                raise


class StoreBroke(CouldNotFinish):
    """The MLflow store failed under a sweep (deleted, unreadable, full): never the fault of the
    trials it was recording, which are queued for retry, nor of the input (exit 3)."""


class StoreRefused(SweepError):
    """The MLflow store refused a name or value the sweep gave it (a user metric's name against
    MLflow's rules): the input's fault, so the trials it failed are not retried."""


def _store_fix(tracking_uri: str) -> str:
    db = paths.sqlite_file(tracking_uri)
    store = f"{db}" if db is not None else "the store"
    return (f"restore {store} (from a backup; or free disk space) and rerun the same command, "
            f"or rerun with --new to start the sweep afresh")


# what the clients say when a store's server cannot be reached (requests/urllib3 for an HTTP
# tracking server, the database drivers), as opposed to a store that answers but is damaged
UNREACHABLE = ("Max retries exceeded", "Failed to establish a new connection",
               "Connection refused", "Connection reset", "Connection aborted", "timed out",
               "Name or service not known", "Temporary failure in name resolution",
               "could not connect", "Can't connect", "server closed the connection",
               "Lost connection", "RemoteDisconnected", "Bad Gateway", "Service Unavailable",
               "Gateway Timeout")


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or one in its chain) says the store's server could not be reached:
    a fault of the network or the server, which a rerun once it is back repairs."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (ConnectionError, TimeoutError)) or \
                any(sign in str(error) for sign in UNREACHABLE):
            return True
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return False


def store_broke(tracking_uri: str, error: BaseException) -> StoreBroke:
    """The one line saying what broke in the MLflow store and what to do: a server that could
    not be reached is brought back (nothing to restore), a damaged store restored."""
    what = _root_cause(error)
    if disk_full(error) is not None:  # the CLI adds what to do about a full disk after it
        return StoreBroke(f"the MLflow store {mask(tracking_uri)} failed, the trials that were "
                          f"running are queued for retry: {what}")
    if unreachable(error):
        return StoreBroke(f"the MLflow store {mask(tracking_uri)} could not be reached: {what}; "
                          f"the trials that were running are queued for retry; once it answers "
                          f"again, rerun the same command (the sweep resumes, nothing to "
                          f"restore)")
    db = paths.sqlite_file(tracking_uri)
    if db is not None and not db.exists():
        what = f"{db} was deleted ({what})"
    return StoreBroke(f"the MLflow store {mask(tracking_uri)} failed: {what}; the trials that "
                      f"were running are queued for retry; {_store_fix(tracking_uri)}")


def check_store_present(tracking_uri: str, study: SweepStudy) -> None:
    """Refuse to go on, before any trial starts, with the SQLite file of a study's runs gone
    (MLflow would create an empty one, and every trial would fail to find its parent run)."""
    db, parent = paths.sqlite_file(tracking_uri), study.machines.shared_parent()
    if db is not None and parent is not None and not db.exists():
        raise StoreBroke(f"--tracking-uri {tracking_uri}: {db} is missing, but study "
                         f"{study.name!r} recorded its runs there (parent run {parent}); "
                         f"{_store_fix(tracking_uri)}")


def _root_cause(error: BaseException) -> str:
    """The first line of the innermost error of a chain: the driver's (``attempt to write a
    readonly database``), not MLflow's or SQLAlchemy's wrapping of it."""
    text = type(error).__name__
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        lines = [line for line in str(error).strip().splitlines()
                 if line and not line.startswith("(raised as a result of")]
        if lines:
            text = lines[0]
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return text


class Guarded:
    """A :class:`~orchestrator.stores.tracking.Tracker` whose every call turns a failure of the
    store into :class:`StoreBroke` (a :class:`SweepFailure` it raises on purpose passes unchanged),
    and tells ``on_broke`` first."""

    def __init__(self, tracker, on_broke: Callable[[StoreBroke], None]):
        self._tracker, self._on_broke = tracker, on_broke

    def __getattr__(self, name: str):
        value = getattr(self._tracker, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            except SweepFailure:
                raise
            except Exception as e:
                from ..stores.tracking import refused_input  # MLflow: not imported before it opens

                if refused_input(e):  # the sweep's input, not the store: no retry helps
                    raise StoreRefused(f"the MLflow store refused what the sweep logged: "
                                       f"{_root_cause(e)}; the trial failed (not retried): "
                                       f"fix that name or value in the sweep or its code"
                                       ) from e
                # the driver's, MLflow's and the file system's errors
                error = store_broke(self._tracker.uri, e)
                self._on_broke(error)
                raise error from e
        return call


class Runs:
    """The MLflow side of the book: its experiment and parent run made in a thread (the store
    ``tracker`` was opened before the study: a store that cannot be used creates nothing), while
    the first trials already train. Until it is attached, trials live in Optuna only; their runs
    are created then, with their true start times."""

    def __init__(self, tracker, spec: SweepSpec, study: SweepStudy, spec_text: str,
                 storage: str, active: dict[int, Active]):
        self.study, self.active = study, active
        self._setup = ThreadPoolExecutor(1).submit(
            open_tracking, tracker, spec, study, spec_text, storage)
        self.opened: Tracking | None = None
        self.tracking_uri = tracker.uri
        self.broken: SweepFailure | None = None  # why the MLflow side cannot be used, once it broke
        # (trial number, run id, reason) of runs to close once attached
        self._unclosed: list[Closing] = []

    @property
    def tracker(self):
        """The :class:`~orchestrator.stores.tracking.Tracker`; only once attached."""
        assert self.opened is not None, "attach() first"
        return self.opened.tracker

    def attach(self, wait: bool = True, timeout: float | None = None) -> bool:
        """Take the MLflow side once its thread opened it (with ``wait``, block until then, or
        for ``timeout`` s at most): create the runs of the trials that started before, log their
        epochs, and close the runs that dead processes left RUNNING. Returns whether MLflow is
        attached.

        Raises:
            SweepError: the MLflow store cannot be opened (:attr:`broken` says so too).
            StoreBroke: it holds no parent run the study recorded, or it failed.
        """
        if self.opened is not None:
            return True
        futures.wait([self._setup], timeout=timeout if wait else 0)
        if not self._setup.done():
            return False
        try:
            opened = self._setup.result()
        except SweepFailure as e:  # the store cannot be opened, or holds no such parent run
            self.broken = e
            raise
        except Exception as e:
            self.broken = store_broke(self.tracking_uri, e)
            raise self.broken from e
        self.opened = replace(opened, tracker=Guarded(opened.tracker, self._broke))
        if self._unclosed:
            self._close_runs(self._unclosed)
        self._close_stray_runs()
        for active in self.active.values():
            self.open_run(active)
            self.flush(active)
        return True

    def attach_within(self, seconds: float) -> bool:
        """:meth:`attach`, waiting ``seconds`` at most: a store that does not answer (its
        client retrying) is not waited for. False too when it broke (:attr:`broken` says how)."""
        try:
            return self.attach(timeout=seconds)
        except Exception:  # noqa: BLE001 - it broke: broken says how
            return False

    def _broke(self, error: StoreBroke) -> None:
        self.broken = self.broken or error

    def _close_stray_runs(self) -> None:
        """Close trial runs left RUNNING whose trial is no longer running.

        A process killed between creating a trial's run and recording its id on the trial leaves
        a run that no trial points at; the run's ``sweep.trial_number`` tag finds it.
        """
        # the runs first: a trial is RUNNING before its run is created, so each run found here
        # has its trial in the read below (read the other way round, a trial another process
        # starts between the two reads looks stray, and its live run was closed under it)
        runs = self.tracker.running_trial_runs(self.opened.experiment_id, self.opened.parent_id)
        if not runs:
            return
        self.study.fresh()  # as the storage is now: a cached read older than the runs' misses
        # a trial started since, and its live run looked stray (and was closed under it)
        running = {t.number for t in self.study.trials() if t.state.name == "RUNNING"}
        for run_id, number in runs:
            if number not in running:
                self.tracker.fail_run(run_id, "the sweep run process that owned it was gone "
                                      "before the run was linked to its trial")

    def fail_runs(self, closing: list[Closing]) -> None:
        """Close the runs of trials another process left RUNNING, given as ``(trial number,
        recorded run id, reason)``: now if attached, else once attached."""
        if not closing:
            return
        if self.attach(wait=False):
            self._close_runs(closing)
        else:
            self._unclosed += closing

    def _close_runs(self, closing: list[Closing]) -> None:
        """Close each trial's recorded run, and any run of it still RUNNING that it never
        recorded (a process killed between creating the run and recording its id leaves one):
        one search of the store for them all."""
        found: dict[int, set[str]] = {}
        for run_id, number in self.tracker.running_trial_runs(self.opened.experiment_id,
                                                              self.opened.parent_id):
            found.setdefault(number, set()).add(run_id)
        for number, run_id, reason in closing:
            for run in found.get(number, set()) | ({run_id} if run_id else set()):
                self.tracker.fail_run(run, reason)

    def open_run(self, active: Active) -> None:
        """Create the trial's run now if MLflow is attached (else :meth:`attach` will), and
        record its id on the trial."""
        if active.run_id is not None or self.opened is None:
            return
        t = self.opened
        active.run_id = t.tracker.start_trial(
            t.experiment_id, t.parent_id, active.pending.number, active.settings, active.params,
            {**t.env_tags, **active.tags}, start_time=active.started_ms, packages=t.packages,
            run_name=f"{active.tags[keys.CONFIG]} s{active.pending.seed}")
        try:
            with active.pending.writes_to():
                active.pending.set_attr(keys.RUN_ID, active.run_id)
        except TrialLost:  # the book learns it at the trial's next epoch or end, and ends the run
            pass

    def log_epoch(self, active: Active, epoch: Epoch) -> None:
        """Queue an epoch for the trial's run, logged every :data:`FLUSH_SECONDS` at most."""
        active.take(epoch)
        if time.monotonic() - active.flushed >= FLUSH_SECONDS:
            self.flush(active)

    def flush(self, active: Active) -> None:
        """Log the trial's epochs not logged yet (they wait in memory until attached)."""
        if active.run_id is None:
            return
        if active.unlogged:
            self.tracker.log_epochs(active.run_id, active.unlogged)
            active.unlogged = []
        active.flushed = time.monotonic()

    def end_parent(self, status: str) -> None:
        """End the sweep's parent run (FINISHED, KILLED or FAILED), once attached."""
        self.attach()
        self.tracker.end_run(self.opened.parent_id, status)

    def complete(self, active: Active, end: Done | Failed | None = None) -> None:
        """Make sure a trial about to end has its run, with every epoch logged, and what its
        worker's ``end`` left for it: the final state dict (for export and test evaluation)
        and the export's files."""
        self.attach()
        self.open_run(active)
        self.flush(active)
        if isinstance(end, Done):
            if end.weights:
                self.tracker.log_weights(active.run_id, end.weights)
            if end.export:
                self.tracker.log_export(active.run_id, end.export.result())

    def end_failed(self, active: Active, reason: str, kind: str, retry: bool) -> None:
        """End a failed trial's run (KILLED when interrupted, else FAILED) with why, the kind
        of failure and whether a retry is queued."""
        state = "interrupted" if kind == "interrupt" else "failed"
        self.tracker.end_trial(active.run_id, state, tags={
            keys.FAIL_REASON: reason, keys.FAIL_KIND: kind, keys.WILL_RETRY: str(retry).lower(),
            **active.warning_tags()})

    def fail_unlogged(self, active: Active, reason: str) -> None:
        """End a trial's run FAILED, best effort, after logging its end raised with the store
        unbroken (the store took no epochs: it refused a name): the run ends without them."""
        if self.broken is None and active.run_id is not None:
            with contextlib.suppress(Exception):
                self.tracker.fail_run(active.run_id, reason)
