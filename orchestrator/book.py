"""The trial book: every trial kept in step in both stores, the Optuna study and MLflow.

Starts, epochs, ends, failures and their retries, and what a dead process left behind (orphaned
trials, stale heartbeats, runs no trial points at). Only the ``sweep run`` process keeps it.
"""
from __future__ import annotations

import contextlib
import functools
import math
import shutil
import threading
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import compare, keys, objectives, paths
from . import space as sp
from .display import config_name
from .errors import CouldNotFinish, SweepError, SweepFailure, disk_full
from .paths import mask
from .protocol import Done, Epoch, Failed, Ready
from .spec import SweepSpec
from .study import PendingTrial, SweepStudy, abandon

# Epochs reach MLflow at least this often (and at every trial's end): one call per flush, not per
# epoch, keeps this process's share of the CPU small when epochs take a fraction of a second.
FLUSH_SECONDS = 1.0
ABORT_WAIT_S = 5.0  # how long an abort waits for MLflow still opening, to record the runs' end
# a run to close: (trial number, the run id recorded on the trial or None, the reason)
Closing = tuple[int, str | None, str]


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
    others read it from there (waiting for it when they join at the same moment).
    """
    from .server import runs_view
    from .tracking import environment_tags, installed_packages

    tracking_uri = tracker.uri
    experiment_id = tracker.experiment(spec.name, spec.description)
    tracker.client.set_experiment_tag(experiment_id, keys.RUNS_VIEW, runs_view(spec))
    env_tags = environment_tags()
    packages = installed_packages()
    shared, study_id = study.shared_parent(), study.study.user_attrs.get(keys.STUDY_ID)
    if shared is None and not study.created:
        found = tracker.find_parent_run(experiment_id, study.name, study_id)
        shared = found.info.run_id if found else study.wait_for_shared_parent()
    if shared is not None:
        try:
            tracker.resume_parent(shared, study_id)
        except Exception as e:
            if getattr(e, "error_code", "") != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise StoreBroke(f"--tracking-uri {mask(tracking_uri)}: holds no run {shared}, the "
                             f"parent run of study {study.name!r} (the store was deleted or "
                             f"replaced since); {_store_fix(tracking_uri)}") from None
        return Tracking(tracker, experiment_id, shared, env_tags, packages)
    parent_id, _ = tracker.parent_run(
        experiment_id, study.name, spec_text, spec.raw,
        {**spec.tags, **env_tags, keys.STORAGE: mask(storage),
         keys.FINGERPRINT: spec.fingerprint(), **({keys.STUDY_ID: study_id} if study_id else {})})
    study.set_shared_parent(parent_id)
    return Tracking(tracker, experiment_id, parent_id, env_tags, packages)


def open_stores(spec: SweepSpec, storage: str, tracking_uri: str, new: bool):
    """The study (created if needed) and the opened MLflow store of a sweep.

    Bad input fails before anything is written: an MLflow store that cannot be used, or the
    sweep's deleted experiment, before the study is made (a new SQLite file holds neither, and
    is created only once the study showed it recorded no runs in a file now gone).
    """
    from .tracking import tracker_for

    paths.check_sqlite_folder(tracking_uri, "--tracking-uri")
    db = paths.sqlite_file(tracking_uri)
    tracker = None if db is not None and not db.exists() else tracker_for(tracking_uri, spec.name)
    study = SweepStudy.open(spec, storage, new=new)
    check_store_present(tracking_uri, study)
    return study, tracker or tracker_for(tracking_uri, spec.name)


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


def store_broke(tracking_uri: str, error: BaseException) -> StoreBroke:
    """The one line saying what broke in the MLflow store and what to do."""
    what = _root_cause(error)
    if disk_full(error) is not None:  # the CLI adds what to do about a full disk after it
        return StoreBroke(f"the MLflow store {mask(tracking_uri)} failed, the trials that were "
                          f"running are queued for retry: {what}")
    db = paths.sqlite_file(tracking_uri)
    if db is not None and not db.exists():
        what = f"{db} was deleted ({what})"
    return StoreBroke(f"the MLflow store {mask(tracking_uri)} failed: {what}; the trials that "
                      f"were running are queued for retry; {_store_fix(tracking_uri)}")


def check_store_present(tracking_uri: str, study: SweepStudy) -> None:
    """Refuse to go on, before any trial starts, with the SQLite file of a study's runs gone
    (MLflow would create an empty one, and every trial would fail to find its parent run)."""
    db, parent = paths.sqlite_file(tracking_uri), study.shared_parent()
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
    """A :class:`~orchestrator.tracking.Tracker` whose every call turns a failure of the store
    into :class:`StoreBroke` (a :class:`SweepFailure` it raises on purpose passes unchanged), and
    tells ``on_broke`` first."""

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
                from .tracking import refused_input  # MLflow: not imported before it opens

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


class Heartbeat:
    """A thread recording the heartbeat of every trial this process runs, every ``interval``
    seconds (Optuna beats only inside ``study.optimize``, which a sweep does not use)."""

    def __init__(self, study: SweepStudy, active: dict[int, Active], interval: float):
        self.study, self.active, self.interval = study, active, interval
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="sweep-heartbeat", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for a in list(self.active.values()):
                try:
                    self.study.beat(a.pending)
                except Exception:  # noqa: BLE001 - finished meanwhile, or the database blinked
                    pass

    def stop(self) -> None:
        self._stop.set()


def run_tags(study: str, slot: int, pending: PendingTrial, worker: Ready) -> dict[str, str]:
    """The tags of a trial's run: its study, repeat and seed, and where it runs."""
    tags = {keys.STUDY: study,
            keys.REPEAT: str(pending.repeat), keys.SEED: str(pending.seed),
            keys.WORKER: str(slot),
            keys.CUDA_VISIBLE_DEVICES: worker.cuda_visible_devices,
            keys.TORCH_THREADS: str(worker.torch_threads),
            keys.TORCH_VERSION: worker.torch_version,
            keys.CUDA_VERSION: worker.cuda_version,
            keys.CUDNN_VERSION: worker.cudnn_version,
            keys.DEVICE_NAME: worker.device_name}
    if pending.retry_of is not None:
        tags[keys.RETRY_OF] = str(pending.retry_of)
    if pending.phase is not None:  # a comparison's trial
        tags[keys.PHASE], tags[keys.LEVEL] = pending.phase, str(pending.level)
    return tags


@dataclass(frozen=True)
class Folders:
    """Where the trials of a sweep keep files: ``.sweep/<study>`` beside the MLflow store."""

    work: Path
    keep_checkpoints: bool

    @property
    def outputs(self) -> Path:
        """Scratch space of trials and phases, emptied as each is logged."""
        return self.work / "trials"

    def checkpoint(self, pending: PendingTrial) -> Path:
        """A trial's epoch checkpoints: shared by the retries of one first attempt."""
        return self.work / "checkpoints" / f"trial-{pending.root}"

    def output(self, pending: PendingTrial) -> Path:
        """Where a trial's worker leaves its final weights (and export) for its run."""
        return self.outputs / f"trial-{pending.number}"

    def drop_checkpoint(self, root: int) -> None:
        """Delete the checkpoints of the trial first started as ``root`` (unless kept)."""
        if not self.keep_checkpoints:
            shutil.rmtree(self.work / "checkpoints" / f"trial-{root}", ignore_errors=True)


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
        """The :class:`~orchestrator.tracking.Tracker`; only once attached."""
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
        self.study.set_attr(active.pending, keys.RUN_ID, active.run_id)

    def flush(self, active: Active) -> None:
        """Log the trial's epochs not logged yet (they wait in memory until attached)."""
        if active.run_id is None:
            return
        if active.unlogged:
            self.tracker.log_epochs(active.run_id, active.unlogged)
            active.unlogged = []
        active.flushed = time.monotonic()

    def complete(self, active: Active) -> None:
        """Make sure a trial about to end has its run, with every epoch logged."""
        self.attach()
        self.open_run(active)
        self.flush(active)


class TrialBook:
    """Both stores of one sweep kept in step, trial by trial: the study (Optuna) and the runs
    (MLflow, see :class:`Runs`). Trials are kept by the worker slot that runs them.

    Every trial started here ends here in both stores: complete, pruned or failed, a failure
    queued for retry when it crashed with ``retries`` left or was interrupted.

    Args:
        say: shows one line to the user (a trial ended, a sweep resumed...).
    """

    def __init__(self, spec: SweepSpec, study: SweepStudy, *, tracker, storage: str,
                 spec_text: str, say: Callable[[str], None] | None = None):
        self.spec, self.study = spec, study
        self.storage, self.tracking_uri = storage, tracker.uri
        self.say = say or (lambda line: None)
        self.active: dict[int, Active] = {}  # by worker slot index
        self.runs = Runs(tracker, spec, study, spec_text, storage, self.active)
        self.folders = Folders(paths.work_dir(tracker.uri, study.name), spec.keep_checkpoints)
        self.best_value: int | str | None = None  # the best trial, or the Pareto front, logged
        self._next_stale_check = 0.0
        self._heartbeat = Heartbeat(study, self.active, spec.heartbeat_seconds) \
            if study.heartbeat else None

    @classmethod
    def open(cls, spec: SweepSpec, storage: str, tracking_uri: str, *, spec_text: str,
             new: bool = False, say: Callable[[str], None] | None = None) -> TrialBook:
        """Open (or create, with ``new`` a fresh) study, start opening MLflow, and recover the
        trials a dead ``sweep run`` left RUNNING.

        Raises:
            SweepError: a store cannot be opened, or the study belongs to another sweep.
            StoreBroke: the SQLite file of the study's runs is gone.
        """
        study, tracker = open_stores(spec, storage, tracking_uri, new)
        book = cls(spec, study, tracker=tracker, storage=storage, spec_text=spec_text, say=say)
        if new:
            book.say(f"starting a fresh study {study.name!r} (--new)")
        recover_orphans(book)
        c = study.counts()
        if c["finished"] or c["retried"]:
            book.say(f"resuming sweep {study.name!r}: {c['finished']} of {spec.trials} trials "
                     f"already finished, {c['waiting']} queued")
        return book

    # ---------------------------------------------------------------------------- MLflow

    def attach_tracking(self, wait: bool = True) -> bool:
        """See :meth:`Runs.attach`."""
        return self.runs.attach(wait)

    @property
    def tracker(self):
        """The MLflow :class:`~orchestrator.tracking.Tracker`; only once attached."""
        return self.runs.tracker

    @property
    def experiment_id(self) -> str:
        return self.runs.opened.experiment_id

    @property
    def parent_id(self) -> str:
        return self.runs.opened.parent_id

    def open_run(self, active: Active) -> None:
        """Create a started trial's run now if MLflow is attached (else attaching will)."""
        self.runs.open_run(active)

    def end_parent(self, status: str) -> None:
        """End the sweep's parent run (FINISHED, KILLED or FAILED)."""
        self.attach_tracking()
        self.tracker.end_run(self.parent_id, status)

    # ---------------------------------------------------------------------------- trials

    def start(self, slot: int, pending: PendingTrial, worker: Ready) -> Active | None:
        """Book ``pending`` as running on worker ``slot`` (its run follows: :meth:`open_run`);
        None when its settings cannot be used (the trial is failed for good)."""
        try:
            return self._start(slot, pending, worker)
        except BaseException as e:  # no trial stays RUNNING that no worker trains
            if self.active.get(slot) is not None and self.active[slot].pending is pending:
                self.active.pop(slot)
            abandon(self.study, pending, e)
            raise

    def _start(self, slot: int, pending: PendingTrial, worker: Ready) -> Active | None:
        from trainers import SettingsError, TrainSettings  # settings only: no torch import here

        tags = {**self.spec.tags, **run_tags(self.study.name, slot, pending, worker)}
        tags[keys.CONFIG] = config_name(sp.settings_for(self.spec.space, pending.trial.params))
        try:
            resolved = TrainSettings.from_dict(pending.settings)
        except SettingsError as e:  # a combination the spec's checks could not rule out
            self._fail(Active(pending, time.monotonic(), pending.settings, {}, tags),
                       f"bad setting: {e}", "deterministic")
            return None
        device = worker.device if resolved.device == "auto" else resolved.device
        active = Active(pending, time.monotonic(), resolved.to_dict(),
                        {keys.LR_EFFECTIVE: resolved.lr_effective}, {**tags, keys.DEVICE: device})
        self.active[slot] = active
        if self._heartbeat is not None:  # beat at once: the thread's first beat comes later
            self.study.beat(pending)
        return active

    def report_epoch(self, slot: int, epoch: Epoch) -> bool:
        """Report an epoch's objective to the study; True when the pruner says stop, or when
        ``patience`` epochs passed without improvement (the trial then completes)."""
        active = self.active[slot]
        # nan (the trial then fails) where a user's metrics did not return the objective
        value = epoch.metrics.get(self.spec.objective.metric, math.nan)
        active.curve.append(value)
        active.history.append(dict(epoch.metrics))
        if not math.isfinite(value):
            return False
        # an epoch restored from a checkpoint already passed the pruner: report it only
        if self.study.report(active.pending, epoch.epoch, value, ask_pruner=not epoch.resumed):
            return True
        active.stopped_early = patience_stop(self.spec, active.curve)
        return active.stopped_early is not None

    def log_epoch(self, slot: int, epoch: Epoch) -> None:
        """Queue an epoch for the trial's run, logged every :data:`FLUSH_SECONDS` at most."""
        active = self.active[slot]
        active.take(epoch)
        if time.monotonic() - active.flushed >= FLUSH_SECONDS:
            self.runs.flush(active)

    def finish(self, slot: int, end: Done | Failed) -> None:
        """End the trial on ``slot`` in both stores as its worker reported: complete, pruned
        (a complete trial with a non-finite objective fails) or failed."""
        active = self.active[slot]  # until it ended: if a store fails first, abort() retries it
        active.take(end)
        if isinstance(end, Done) and end.state == "pruned" and active.stopped_early:
            end = replace(end, state="complete")  # stopped by patience: done, not pruned
        self.runs.complete(active)
        if isinstance(end, Done):
            if end.weights:  # the final state dict, for export and test evaluation
                self.tracker.log_weights(active.run_id, end.weights)
            if end.export:
                self.tracker.log_export(active.run_id, end.export.result())
        shutil.rmtree(self.folders.output(active.pending), ignore_errors=True)
        if isinstance(end, Failed):
            self._fail(active, end.reason, "crash" if end.retryable else "deterministic")
        elif end.state == "complete" and not all(
                math.isfinite(v) for v in self.study.values(active.history)):
            self._fail(active, objective_problem(self.spec, active), "deterministic")
        else:
            self._end(active, end)
            self.folders.drop_checkpoint(active.pending.root)
        self.active.pop(slot, None)

    def _end(self, active: Active, done: Done) -> None:
        metrics, tags = end_records(self.spec, active, done)
        number = active.pending.number
        if done.state == "complete":  # Optuna last: see _fail
            self.tracker.end_trial(active.run_id, "complete", metrics, tags)
            values = self.study.complete(active.pending, active.history)
            record_best(self)
            notes = [f"stopped early: {active.stopped_early}"] if active.stopped_early else []
            notes += ["infeasible"] if tags.get(keys.FEASIBLE) == "false" else []
            note = f" ({'; '.join(notes)})" if notes else ""
            self.say(f"trial {number} complete: {objectives.values_text(values)}{note}")
        else:
            self.tracker.end_trial(active.run_id, "pruned", metrics, tags)
            self.study.prune(active.pending, active.history)
            self.say(f"trial {number} pruned at epoch {len(active.curve)}")

    def fail(self, slot: int, reason: str, kind: str) -> None:
        """Fail the trial on worker ``slot``, if any (``kind``: crash, interrupt or
        deterministic); see :meth:`will_retry`."""
        active = self.active.get(slot)
        if active is not None:
            self._fail(active, reason, kind)
            self.active.pop(slot, None)

    def _fail(self, active: Active, reason: str, kind: str) -> None:
        """Fail a trial in both stores; queue its retry when :meth:`will_retry`, else drop its
        checkpoint. Optuna is told last, once MLflow holds the run's end: when MLflow fails
        first, the trial is still RUNNING for :meth:`abort` to queue as a store failure."""
        pending = active.pending
        self.runs.complete(active)
        retry = self.will_retry(kind, pending.root)
        state = "interrupted" if kind == "interrupt" else "failed"
        self.tracker.end_trial(active.run_id, state, tags={
            keys.FAIL_REASON: reason, keys.FAIL_KIND: kind, keys.WILL_RETRY: str(retry).lower(),
            **active.warning_tags()})
        self.study.fail(pending, reason, kind, retry)
        if not retry:
            self.folders.drop_checkpoint(pending.root)
        then = ", will be retried" if retry else ""
        self.say(f"trial {pending.number} failed{then}: {reason.splitlines()[0]}")

    def will_retry(self, kind: str, root: int, recorded: bool = False) -> bool:
        """The retry rule: interrupts are always retried; crashes while the trial first started
        as number ``root`` has ``retries`` left (``recorded``: this crash is already counted)."""
        return kind == "interrupt" or (
            kind == "crash" and self.study.crashes(root) - recorded < self.spec.retries)

    def abort(self, reason: str, kind: str = "crash") -> None:
        """Fail every running trial (an interrupt is queued for retry: the next run resumes it
        from its checkpoint) and end the parent run KILLED (interrupt) or FAILED, unless other
        machines' trials still run (their last machine ends it). A store raising for one trial
        stops none of the others. When the MLflow store broke, the trials are queued for retry in
        Optuna alone (kind ``store``): the store failing is never the trials' fault."""
        try:  # a store that does not answer (its client retrying) is not waited for
            attached = self.runs.attach(timeout=ABORT_WAIT_S)
        except Exception:  # noqa: BLE001 - it broke: runs.broken says how
            attached = False
        for slot in list(self.active):
            active = self.active.pop(slot)
            try:
                if attached and self.runs.broken is None:
                    self._fail(active, reason, kind)
                    continue
            except Exception:  # noqa: BLE001 - before Optuna was told (see _fail): told below
                if self.runs.broken is None and active.run_id is not None:  # the store took
                    with contextlib.suppress(Exception):  # no epochs (it refused a name): end
                        self.tracker.fail_run(active.run_id, reason)  # the run without them
            broken = self.runs.broken
            with contextlib.suppress(Exception):  # the Optuna store too: on to the next trial
                self.study.fail(active.pending, f"the MLflow store failed: {broken}" if broken
                                else reason, "store" if broken else kind,
                                broken is not None or self.will_retry(kind, active.pending.root))
        if attached and self.runs.broken is None and not others_running(self.study):
            with contextlib.suppress(Exception):
                self.end_parent("KILLED" if kind == "interrupt" else "FAILED")

    # ---------------------------------------------------------------- what others left behind

    def fail_stale_trials(self) -> None:
        """With heartbeats (an RDB storage shared by machines), at most once an interval: fail
        the trials of machines that stopped beating, retry them here, close their runs."""
        if self._heartbeat is None or time.monotonic() < self._next_stale_check:
            return
        self._next_stale_check = time.monotonic() + self.spec.heartbeat_seconds
        reason = (f"no heartbeat for {2 * self.spec.heartbeat_seconds} s: the machine or "
                  f"process running it is gone")
        closing: list[Closing] = []
        for t in self.study.fail_stale():
            root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
            retry = self.will_retry("crash", root, recorded=True)  # failed by fail_stale
            if retry:
                self.study.retry(t)
            self.say(f"trial {t.number} failed: {reason}{' (queued for retry)' if retry else ''}")
            closing.append((t.number, t.user_attrs.get(keys.RUN_ID), reason))
        self.runs.fail_runs(closing)


def patience_stop(spec: SweepSpec, curve: list[float]) -> str | None:
    """Why ``patience`` stops a trial whose (first) objective's metric went ``curve``; None
    while it goes on (or without patience, or at its last epoch anyway)."""
    if spec.patience is None or len(curve) >= spec.epochs:
        return None
    maximize = spec.objective.direction == "maximize"
    if not objectives.patience_spent(curve, spec.patience, maximize):
        return None
    best = objectives.best_of(curve, spec.objective.direction)
    return (f"patience: {spec.objective.metric} did not improve on {best:.4g} (epoch "
            f"{curve.index(best) + 1}) for {spec.patience} epochs")


def objective_problem(spec: SweepSpec, active: Active) -> str:
    """Why a trial that trained to its end has no usable objective value: a metric its epochs
    did not log (a user metric's name, peak_memory_mb off CUDA), or one not finite."""
    logged = active.history[-1] if active.history else {}
    for o in spec.objectives:
        if o.metric not in logged:
            return (f"objective {o.metric}: the trainer logged no such metric (it logged "
                    f"{', '.join(sorted(logged))})")
    for o, value in zip(spec.objectives, objectives_values(spec, active)):
        if not math.isfinite(value):
            bad = [f"{i}" for i, m in enumerate(active.history, start=1)
                   if not math.isfinite(m.get(o.metric, math.nan))]
            return (f"objective {o.metric} ({objectives.reduce_text(o)}) is not finite: "
                    f"{value}; epochs {', '.join(bad) or 'none'} logged a value that is not "
                    f"finite")
    return f"objective {spec.objective.metric} is not finite"


def objectives_values(spec: SweepSpec, active: Active) -> list[float]:
    """Each objective's value from the trial's epochs (as the study records it)."""
    return [objectives.reduce_curve(o, [m.get(o.metric, math.nan) for m in active.history],
                                    spec.epochs) for o in spec.objectives]


def end_records(spec: SweepSpec, active: Active, done: Done) -> tuple[dict, dict[str, str]]:
    """The metrics and tags a trial's run gets when it ends complete or pruned: its training
    time, its validation split's size, where it resumed from, its warnings, a discarded
    checkpoint and :func:`end_tags`."""
    metrics = {keys.TRAIN_SECONDS: done.train_seconds}
    if done.val_items:
        metrics[keys.VAL_ITEMS] = done.val_items
    tags = {keys.RESUMED_FROM: str(done.resumed_from), **active.warning_tags()}
    if done.discarded_checkpoint:
        tags[keys.CHECKPOINT_DISCARDED] = done.discarded_checkpoint
    tags.update(end_tags(spec, active))
    return metrics, tags


def end_tags(spec: SweepSpec, active: Active) -> dict[str, str]:
    """The tags a finished trial's run gets from the study's rules: its constraint values and
    feasibility, and why patience stopped it."""
    tags = {}
    if spec.constraints:
        values = objectives.violations(spec.constraints,
                                       active.history[-1] if active.history else {})
        tags[keys.CONSTRAINTS] = ", ".join(f"{k}: {v:.4g}" for k, v in values.items())
        tags[keys.FEASIBLE] = str(all(v <= 0 for v in values.values())).lower()
    if active.stopped_early:
        tags[keys.STOPPED_EARLY] = active.stopped_early
        active.pending.trial.set_user_attr(keys.STOPPED_EARLY, active.stopped_early)
    return tags


def stop_sweep(book: TrialBook, reason: str) -> None:
    """``stop_when`` holds: say why, and tag the parent run with it."""
    book.say(reason)
    book.attach_tracking()
    book.tracker.log_final(book.parent_id, {}, tags={keys.STOP_REASON: reason})


def record_best(book: TrialBook) -> None:
    """After a trial completed (its run exists): the parent run's best so far, when it
    changed: a single objective's best value, trial and run; several objectives' Pareto front
    as the numbers of its trials."""
    best = book.study.best(1 if not book.spec.is_multi_objective else 10_000)
    if not best:
        return
    if book.spec.is_multi_objective:
        front = ",".join(str(t.number) for t in sorted(best, key=lambda t: t.number))
        if front != book.best_value:
            book.best_value = front
            book.tracker.log_final(book.parent_id, {}, tags={keys.PARETO_FRONT: front})
        return
    if best[0].number != book.best_value:
        book.best_value = best[0].number
        # a finished comparison: its level's confirmed mean
        found = compare.final_answer(book.study.comparison, book.study.trials())
        book.tracker.record_best(book.parent_id, found.mean if found else best[0].value,
                                 best[0].user_attrs.get(keys.RUN_ID, ""), best[0].number,
                                 book.study.counts()["finished"])
        if found is not None:
            book.tracker.log_final(book.parent_id, {}, tags={keys.ANSWER: found.why})
            book.study.study.set_user_attr(keys.ANSWER, {
                "level": found.level, "mean": found.mean, "seeds": found.seeds,
                "trial": found.trial.number, "text": found.why})


def others_running(study: SweepStudy) -> bool:
    """Whether trials still run once this machine failed its own: other machines' (a Slurm task
    cancelled while the others train must not end their shared parent run)."""
    try:
        return study.running() > 0
    except Exception:  # noqa: BLE001 - a store that fails: nothing known to wait for
        return False


def recover_orphans(book: TrialBook) -> None:
    """Fail (and retry, within ``retries``) the trials a dead ``sweep run`` on this host left
    RUNNING; their runs are closed FAILED once MLflow is attached."""
    closing: list[Closing] = []
    for t in book.study.orphans():
        reason = f"the sweep run process that owned it ({t.user_attrs.get(keys.OWNER)}) is gone"
        root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
        retry = book.will_retry("crash", root)
        if book.study.fail(t, reason, "crash", retry):
            closing.append((t.number, t.user_attrs.get(keys.RUN_ID), reason))
            if not retry:
                book.folders.drop_checkpoint(root)
    book.runs.fail_runs(closing)
