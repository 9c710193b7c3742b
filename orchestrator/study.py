"""Everything Optuna: storages, samplers, pruners, the study of a sweep and its trials.

Only the ``sweep run`` process (never a training worker) talks to the study, so a journal file or
SQLite storage has a single writer per machine; several ``sweep run`` processes may share one study
(the journal file and RDB storages lock their own writes).
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import itertools
import json
import math
import os
import shutil
import socket
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from . import compare, keys, objectives, paths, proxy, readcache
from . import space as sp
from .errors import SweepError
from .locks import store_lock
from .paths import RDB_SCHEMES, mask
from .retries import will_retry
from .spec import SweepSpec, settings_of

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# a sweep records heartbeats itself, from a thread, since it does not use Study.optimize
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")

UNOWNED_GRACE_S = 60.0  # a trial asked but not yet owned: another process recording itself
JOIN_WAIT_S = 60  # a machine joining a study waits this long for its creator's bookkeeping


def default_storage(tracking_uri: str) -> str:
    """The journal file next to a local MLflow SQLite database (else in the working directory)."""
    return str(paths.home(tracking_uri) / "optuna.journal")


def open_storage(url: str, heartbeat_s: int | None = None, on_stale=None):
    """An Optuna storage for ``url``: an RDB URL (sqlite://, postgresql://, mysql://...), a
    journal file given as a path or ``journal:PATH``, or Optuna's storage proxy in front of an
    RDB storage, ``grpc://HOST:PORT`` (``sweep server --storage-proxy``).

    With ``heartbeat_s``, an RDB storage records the heartbeats of running trials and calls
    ``on_stale(study, frozen_trial)`` for each trial :func:`optuna.storages.fail_stale_trials`
    fails after two intervals without one (a journal file has no heartbeats: there, a dead
    process's trials are found by its pid, on its own machine). Through a proxy, heartbeats are
    trial attributes (:class:`proxy.HeartbeatProxy`).
    """
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in RDB_SCHEMES:
        return _open_rdb(url, heartbeat_s, on_stale)
    if scheme == "grpc":
        return proxy.open_grpc(url, heartbeat_s, on_stale)
    path = paths.journal_file(url)
    if path is None:
        raise SweepError(f"--storage {mask(url)}: unknown storage scheme {scheme!r}; use a file "
                         f"path (journal), sqlite:///FILE, postgresql://..., mysql://... or "
                         f"grpc://HOST:PORT (a storage proxy)")
    paths.check_journal_folder(url)
    with store_lock(str(path)):  # one process repairs or creates the file at a time
        repair_journal(path)
        try:
            return JournalStorage(JournalFileBackend(str(path)))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # its replay
            raise SweepError(f"{path}: the Optuna journal holds an entry Optuna cannot read "
                             f"({type(e).__name__}: {e}); restore it from a backup or start a "
                             f"fresh sweep with --storage NEW_FILE") from None


def _open_rdb(url: str, heartbeat_s: int | None, on_stale) -> RDBStorage:
    """An RDB storage, created under the store's lock: Optuna creates a new database's tables
    and stamps its schema version without one, so machines starting together break each other."""
    paths.check_sqlite_folder(url, "--storage")
    for attempt in range(4):
        try:
            with store_lock(url):
                return RDBStorage(url, heartbeat_interval=heartbeat_s,
                                  grace_period=2 * heartbeat_s if heartbeat_s else None,
                                  heartbeat_stale_trial_callback=on_stale if heartbeat_s
                                  else None)
        except Exception as e:  # the driver's own errors are many and varied
            error = e
            if paths.missing_driver(e):  # no wait cures that
                break
            time.sleep(0.5 * (attempt + 1))  # a database server starting, a network blink
    raise SweepError(f"--storage {mask(url)}: cannot open the Optuna storage: "
                     f"{paths.missing_driver(error) or str(error).splitlines()[0]}") from None


def repair_journal(path: Path) -> Path | None:
    """Cut a torn tail (a kill or a full disk during a write) off an Optuna journal file.

    Optuna skips a torn last line when reading, but the next write would be appended to it and
    corrupt the file for good. The damaged file is kept as ``PATH.damaged-<time>`` first.
    Returns the backup's path, or None when the file was whole.

    Raises:
        SweepError: the damage is not at the end (lines after it would be lost).
    """
    if not path.exists():
        return None
    lock = JournalFileSymlinkLock(str(path))  # the lock Optuna's own writers take
    lock.acquire()
    try:
        return _cut_torn_tail(path)
    finally:
        lock.release()


def _cut_torn_tail(path: Path) -> Path | None:
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n") or not _is_json(line):
            break
        good += len(line)
    if good == len(data):
        return None
    rest = data[good:].split(b"\n", 1)
    if len(rest) > 1 and rest[1].strip():
        raise SweepError(f"{path}: the Optuna journal is damaged at byte {good} with entries "
                         f"after it; restore it from a backup or start a fresh sweep with "
                         f"--storage NEW_FILE")
    backup = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    shutil.copy2(path, backup)
    with open(path, "r+b") as f:
        f.truncate(good)
    sys.stderr.write(f"sweep: warning: {path}: cut a torn last entry ({len(data) - good} bytes) "
                     f"off the Optuna journal; the damaged file is kept as {backup.name}\n")
    return backup


def _is_json(line: bytes) -> bool:
    """Whether ``line`` is a journal entry: a JSON object with an op code."""
    try:
        entry = json.loads(line)
    except ValueError:
        return False
    return isinstance(entry, dict) and isinstance(entry.get("op_code"), int)


def make_sampler(spec: SweepSpec, seed_offset: int = 0):
    """The sampler of ``spec``, its seed offset by ``seed_offset`` (see :meth:`SweepStudy.open`);
    for a comparison, one such sampler per level (:class:`compare.LevelSampler`)."""
    if spec.compare is not None:
        return compare.LevelSampler(lambda: _one_sampler(spec, seed_offset))
    return _one_sampler(spec, seed_offset)


def _one_sampler(spec: SweepSpec, seed_offset: int):
    # numpy's seeds stop at 2**32 - 1, which a valid seed plus a joiner's offset can pass
    s, seed = spec.sampler, (spec.sampler_seed + seed_offset) % 2**32
    factories = {
        "tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
        # every grid point is enqueued, so the sampler is never asked for a value
        "grid": optuna.samplers.RandomSampler, "cmaes": optuna.samplers.CmaEsSampler,
        "gp": optuna.samplers.GPSampler, "qmc": optuna.samplers.QMCSampler,
        "nsga2": optuna.samplers.NSGAIISampler, "nsga3": optuna.samplers.NSGAIIISampler}
    return factories[s.name](seed=seed, **s.options)


def make_pruner(spec: SweepSpec):
    """The pruner of ``spec``; for a comparison, judging each level against itself."""
    pruner = _one_pruner(spec)
    return compare.LevelPruner(pruner) if spec.compare is not None else pruner


def _one_pruner(spec: SweepSpec):
    p = spec.pruner
    if p.name == "median":
        # the earliest a trial can be pruned is at step == n_warmup_steps (steps are epochs)
        return optuna.pruners.MedianPruner(n_warmup_steps=p.min_epochs, **p.options)
    if p.name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=p.min_epochs, **p.options)
    if p.name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=p.min_epochs,
                                              max_resource=spec.epochs, **p.options)
    return optuna.pruners.NopPruner()


@dataclass(frozen=True)
class Owner:
    """The ``sweep run`` process that owns a running trial: alive only if pid and start match."""

    host: str
    pid: int
    started: int

    @classmethod
    def me(cls) -> "Owner":
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()))

    def is_alive(self) -> bool:
        if self.host != socket.gethostname():
            return True  # another machine's process: not ours to judge
        return process_start(self.pid) == self.started

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "started": self.started}


def process_start(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot, or -1 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class PendingTrial:
    """A trial asked from the study, with the settings the trainer will get."""

    trial: optuna.Trial
    settings: dict[str, Any]
    repeat: int
    seed: int
    retry_of: int | None = None  # the failed trial this one retries
    root: int = 0  # the first attempt's number: its checkpoint folder is shared by the retries
    phase: str | None = None  # a comparison's phase (keys.PHASE) and level (keys.LEVEL)
    level: str | None = None

    @property
    def number(self) -> int:
        return self.trial.number


class SweepStudy:
    """The Optuna study of one sweep: asking, reporting and telling trials."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, created: bool = True,
                 stale: list | None = None, storage_url: str | None = None):
        self.spec, self.study, self.storage_url = spec, study, storage_url
        self.comparison = compare.Comparison.of(spec)
        self.created = created  # this process won the create_study race
        self.owner = Owner.me()
        self._stale = stale if stale is not None else []  # filled by the storage's callback

    @classmethod
    def open(cls, spec: SweepSpec, storage_url: str, study_name: str | None = None,
             new: bool = False) -> "SweepStudy":
        """Create the study (and enqueue a grid), or load it to resume.

        Args:
            study_name: default ``spec.name``.
            new: start a fresh study named ``NAME-2``, ``NAME-3``... (the first free one).

        The sampler's seed is offset by the number of trials the study already holds, so that a
        resumed or a second concurrent ``sweep run`` does not redraw the same start-up trials.

        Raises:
            SweepError: the study exists but was started from a different sweep.
        """
        stale: list[optuna.trial.FrozenTrial] = []
        storage = readcache.around(open_storage(
            storage_url, spec.heartbeat_seconds,
            on_stale=lambda _study, trial: stale.append(trial)))
        name = study_name or spec.name
        if new:
            taken = set(optuna.get_all_study_names(storage))
            name = next(f"{name}-{i}" for i in itertools.count(2) if f"{name}-{i}" not in taken)
        # checked before the study exists: a refused warm_start leaves no half-made study
        copies = warm_start_copies(spec, storage) if spec.warm_start is not None else []
        try:
            study = optuna.create_study(study_name=name, storage=storage,
                                        directions=spec.directions,
                                        sampler=make_sampler(spec), pruner=make_pruner(spec))
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            created = False
            existing = optuna.load_study(study_name=name, storage=storage)
            # another machine may have created it a moment ago: its attributes come next
            _wait_for(lambda: keys.FINGERPRINT in existing.user_attrs)
            _check_same_sweep(spec, name, existing)
            study = optuna.load_study(study_name=name, storage=storage,
                                      sampler=make_sampler(spec, _sampler_offset(existing)),
                                      pruner=make_pruner(spec))
        self = cls(spec, study, created, stale, storage_url)
        if created:
            _initialise(self, copies)
        elif spec.is_grid:  # the creator enqueues the grid; a joiner waits for it to be done
            _wait_for(lambda: keys.GRID_DONE in study.user_attrs)
        if spec.is_grid and not study.user_attrs.get(keys.GRID_DONE):
            _enqueue_grid(self)
        _enqueue_lost_retries(self)
        return self

    @property
    def name(self) -> str:
        return self.study.study_name

    # ------------------------------------------------------------------------------- counts

    def trials(self, states=None) -> list[optuna.trial.FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states)

    def counts(self) -> dict[str, int]:
        """Trials by state (see :func:`state_counts`)."""
        return state_counts(self.trials())

    # ------------------------------------------------------------------------------- trials

    def next_trial(self) -> PendingTrial | compare.Wait | None:
        """Ask for the next trial; None when a grid or a comparison has nothing left to run;
        :class:`compare.Wait` when a comparison must wait for running trials to end first."""
        fresh(self)  # what to run next: from the storage as it is, not as it was
        if self.comparison is not None:
            trial = ask_compared(self)
            if trial is None or isinstance(trial, compare.Wait):
                return trial
        elif self.spec.is_grid and not self.trials(states=(TrialState.WAITING,)):
            return None
        else:
            trial = self.study.ask()
        try:
            sampled = sp.sample(trial, self.spec.space)
            repeat = trial.user_attrs.get(keys.REPEAT)
            if repeat is None:
                repeat = 0
                trial.set_user_attr(keys.REPEAT, 0)
                for copy in range(1, self.spec.repeats):
                    self.study.enqueue_trial(trial.params, user_attrs={keys.REPEAT: copy})
            seed = trial.user_attrs.get(keys.SEED, self.spec.seed + repeat)
            trial.set_user_attr(keys.SEED, seed)
            trial.set_user_attr(keys.OWNER, self.owner.as_dict())
            settings = {**settings_of(self.spec, sampled), "seed": seed}
        except BaseException as e:
            abandon(self, trial, e)
            raise
        attrs = trial.user_attrs
        return PendingTrial(trial, settings, repeat, seed, retry_of=attrs.get(keys.RETRY_OF),
                            root=attrs.get(keys.RETRY_ROOT, trial.number),
                            phase=attrs.get(keys.PHASE), level=attrs.get(keys.LEVEL))

    def plan(self) -> compare.Plan | None:
        """A comparison's next step and planned trial count (:func:`compare.plan`)."""
        return None if self.comparison is None else compare.plan(self.comparison, self.trials())

    def report(self, pending: PendingTrial, epoch: int, value: float,
               ask_pruner: bool = True) -> bool:
        """Report the (first) objective's metric at ``epoch``; True when the pruner says stop.
        A study of several objectives is not told epochs: Optuna prunes one objective only."""
        if self.spec.is_multi_objective:
            return False
        pending.trial.report(value, epoch)
        return ask_pruner and pending.trial.should_prune()

    def complete(self, pending: PendingTrial, history: list[dict[str, float]]) -> list[float]:
        """Tell COMPLETE with each objective's value of the epochs' metrics ``history``, after
        recording its constraint values (samplers read them when told)."""
        values = self.values(history)
        record_end(self.spec, pending.trial, history)
        self.study.tell(pending.trial, values)
        return values

    def prune(self, pending: PendingTrial, history: list[dict[str, float]] = ()) -> None:
        record_end(self.spec, pending.trial, history)
        self.study.tell(pending.trial, state=TrialState.PRUNED)

    def fail(self, trial: PendingTrial | optuna.trial.FrozenTrial, reason: str, kind: str,
             retry: bool) -> bool:
        """Tell FAIL with ``reason``; if ``retry``, queue a new trial with the same parameters.

        ``kind`` is ``crash``, ``interrupt`` or ``deterministic``. Works for a trial another
        process left RUNNING too; only the caller whose RUNNING -> FAIL change succeeds queues the
        retry. Returns whether this call failed the trial.
        """
        t = trial.trial if isinstance(trial, PendingTrial) else trial
        storage = self.study._storage
        # Optuna has no public call to set a user attr on a trial another process left RUNNING.
        attrs = {keys.FAIL_REASON: reason[-4000:], keys.FAIL_KIND: kind}
        if retry:
            attrs[keys.WILL_RETRY] = True
        try:
            for key, value in attrs.items():
                storage.set_trial_user_attr(t._trial_id, key, value)
            self.study.tell(t.number, state=TrialState.FAIL)
        except (RuntimeError, ValueError):  # finished meanwhile by another process
            return False
        if retry:
            self._enqueue_retry(self.trials()[t.number])
        return True

    def _enqueue_retry(self, failed: optuna.trial.FrozenTrial) -> None:
        attrs = failed.user_attrs
        kept = {k: attrs[k] for k in (keys.PHASE, keys.LEVEL, keys.SEED) if k in attrs}
        # a trial failed before it sampled holds only its fixed parameters (a comparison's level)
        params = failed.params or failed.system_attrs.get("fixed_params", {})
        self.study.enqueue_trial(params, user_attrs={
            keys.REPEAT: attrs.get(keys.REPEAT, 0), keys.RETRY_OF: failed.number,
            keys.RETRY_ROOT: attrs.get(keys.RETRY_ROOT, failed.number), **kept})

    def crashes(self, root: int) -> int:
        """How many attempts of the trial started as number ``root`` crashed (a trial failed
        for a stale heartbeat has no kind: its machine died, a crash)."""
        return sum(1 for t in self.trials(states=(TrialState.FAIL,))
                   if t.user_attrs.get(keys.RETRY_ROOT, t.number) == root
                   and t.user_attrs.get(keys.FAIL_KIND, "crash") == "crash")

    # ---------------------------------------------------------------- several machines

    @property
    def heartbeat(self) -> bool:
        """Whether the storage keeps trial heartbeats (an RDB storage with heartbeat_seconds)."""
        return getattr(self.study._storage, "get_heartbeat_interval", lambda: None)() is not None

    def beat(self, pending: PendingTrial) -> None:
        """Record that ``pending`` is alive (called from a thread every heartbeat interval)."""
        self.study._storage.record_heartbeat(pending.trial._trial_id)

    def fail_stale(self) -> list[optuna.trial.FrozenTrial]:
        """Fail the trials whose heartbeat stopped (their machine died) with
        :func:`optuna.storages.fail_stale_trials`; returns those this process failed (each
        stale trial is failed by exactly one process), for the caller to retry and close."""
        if not self.heartbeat:
            return []
        optuna.storages.fail_stale_trials(self.study)
        failed, self._stale[:] = list(self._stale), []
        return failed

    def retry(self, failed: optuna.trial.FrozenTrial) -> None:
        """Queue a new attempt of ``failed`` (already FAIL, e.g. by :meth:`fail_stale`)."""
        self._enqueue_retry(failed)

    def running(self) -> int:
        """Trials RUNNING in the study, on any machine."""
        return len(self.trials(states=(TrialState.RUNNING,)))

    def shared_parent(self) -> str | None:
        return self.study.user_attrs.get(keys.PARENT_RUN)

    def set_shared_parent(self, run_id: str) -> None:
        self.study.set_user_attr(keys.PARENT_RUN, run_id)

    def wait_for_shared_parent(self) -> str | None:
        """The parent run id the creating machine stores, waiting up to :data:`JOIN_WAIT_S`."""
        found = _wait_for(lambda: self.study.user_attrs.get(keys.PARENT_RUN))
        return found or None

    def set_attr(self, pending: PendingTrial, key: str, value: Any) -> None:
        pending.trial.set_user_attr(key, value)

    def values(self, history: list[dict[str, float]]) -> list[float]:
        """Each objective's value of a trial whose epochs logged ``history``."""
        return [objectives.reduce_curve(o, [m.get(o.metric, math.nan) for m in history],
                                        self.spec.epochs)
                for o in self.spec.objectives]

    def orphans(self) -> list[optuna.trial.FrozenTrial]:
        """RUNNING trials whose ``sweep run`` process on this host is gone; one without an owner
        yet only after :data:`UNOWNED_GRACE_S` (its process may be about to record itself)."""
        now = datetime.datetime.now()
        return [t for t in self.trials(states=(TrialState.RUNNING,))
                if (not Owner(**t.user_attrs[keys.OWNER]).is_alive()
                    if keys.OWNER in t.user_attrs else
                    t.datetime_start is None or
                    (now - t.datetime_start).total_seconds() > UNOWNED_GRACE_S)]

    def trial_settings(self, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """The trainer settings a finished trial ran with (fixed, sampled, and its seed)."""
        return {**settings_of(self.spec, sp.settings_for(self.spec.space, trial.params)),
                "seed": trial.user_attrs[keys.SEED]}

    def best(self, n: int = 5) -> list[optuna.trial.FrozenTrial]:
        """The best ``n`` trials (:func:`objectives.best_trials`); a finished comparison's: its
        answer's run (:func:`compare.answer`)."""
        trials = self.trials()
        found = compare.final_answer(self.comparison, trials)
        return [found.trial] if found is not None else \
            objectives.best_trials(trials, self.spec.directions)[:n]

    def stop_reason(self) -> str | None:
        """Why ``stop_when`` ends the sweep now (:func:`objectives.stop_reason`), else None."""
        if self.spec.stop_when is None:
            return None
        return objectives.stop_reason(self.spec.stop_when, self.trials(),
                                      self.spec.objective.goal, self.spec.objective.label)


def claim_end(study: SweepStudy, ran_trials: bool) -> dict[str, Any] | None:
    """Claim the end of the sweep (held-out test, export, parent run end) for this process,
    which ``ran_trials`` or not: None when the end is this process's to do, else the claim of
    the process that does it, or did (``owner``, ``finished``, ``done``).

    Several ``sweep run`` processes of one study finish together; one of them ends the sweep.
    Optuna cannot compare-and-set a study attribute, so the claim (:data:`keys.END_CLAIM`) is
    read and written under the storage's lock (:func:`~orchestrator.locks.store_lock`: an
    advisory lock on PostgreSQL, a file lock beside a journal...). A claim is taken again when
    it was made at fewer finished trials (the sweep went on since), by this process, by a
    process gone before it was done, or, once done, by a rerun that ran no trial.
    """
    finished = study.counts()["finished"]
    me = study.owner.as_dict()
    with store_lock(study.storage_url) if study.storage_url else contextlib.nullcontext():
        held = study.study.user_attrs.get(keys.END_CLAIM)
        if held and held.get("finished") == finished and held.get("owner") != me and (
                ran_trials if held.get("done") else Owner(**held["owner"]).is_alive()):
            return held
        study.study.set_user_attr(keys.END_CLAIM, {"owner": me, "finished": finished,
                                                   "done": False})
    return None


def end_done(study: SweepStudy) -> None:
    """Mark this process's claim of the end (:func:`claim_end`) done."""
    held = dict(study.study.user_attrs.get(keys.END_CLAIM) or {})
    if held.get("owner") == study.owner.as_dict():
        study.study.set_user_attr(keys.END_CLAIM, {**held, "done": True})


def record_end(spec: SweepSpec, trial: optuna.Trial, history: list[dict[str, float]]) -> None:
    """Record on a trial that ends (complete or pruned) with epochs ``history`` what Optuna's
    tell does not: its constraint values (:func:`constrain`) and, in a study of several
    objectives (told no epoch values), how many epochs it trained."""
    constrain(spec, trial, history)
    if spec.is_multi_objective:
        trial.set_user_attr(keys.EPOCHS, len(history))


def constrain(spec: SweepSpec, trial: optuna.Trial, history: list[dict[str, float]]) -> None:
    """Record the constraint values of a trial's last epoch, as Optuna's own (which its
    samplers and best trials read) and as a user attribute; without epochs, all violated."""
    values = objectives.violations(spec.constraints, history[-1] if history else {})
    for name, value in values.items():
        trial.set_constraint(name, value)
    if values:
        trial.set_user_attr(keys.CONSTRAINTS, values)


def best_configuration(spec: SweepSpec, trials) -> list[optuna.trial.FrozenTrial]:
    """The complete feasible trials of this sweep of the configuration with the best mean
    objective over its repeats (one trial without repeats; ties go to the earliest); with
    several objectives, the Pareto front's trial best on the first objective."""
    pool = objectives.candidates(trials)
    if spec.is_multi_objective:
        return objectives.best_trials(pool, spec.directions)[:1]
    groups: dict[tuple, list[optuna.trial.FrozenTrial]] = {}
    for t in pool:
        groups.setdefault(_key(t.params), []).append(t)
    if not groups:
        return []
    sign = objectives.sign(spec.objective.goal)
    return min(groups.values(), key=lambda g: (sign * sum(t.value for t in g) / len(g),
                                               min(t.number for t in g)))


def _initialise(study: SweepStudy, copies: list) -> None:
    """What the process creating a study writes into it: who made it, the enqueued
    configurations, the trials copied by ``warm_start``, then its identity (joiners wait for
    the fingerprint, so it is written last)."""
    spec, s = study.spec, study.study
    s.set_user_attr(keys.CREATOR, study.owner.as_dict())
    if spec.compare is not None:
        s.set_user_attr(keys.COMPARE, spec.compare.model_dump_json())
    for point in spec.enqueue:
        s.enqueue_trial(point, user_attrs={keys.ENQUEUED: True})
    if copies:
        s.add_trials(copies)
    s.set_user_attr(keys.STUDY_ID, uuid.uuid4().hex)
    s.set_user_attr(keys.IDENTITY, json.dumps(spec.identity(), sort_keys=True, default=str))
    s.set_user_attr(keys.FINGERPRINT, spec.fingerprint())


def warm_start_copies(spec: SweepSpec, storage) -> list[optuna.trial.FrozenTrial]:
    """``warm_start``: copies of the finished (complete and pruned) trials of sweep
    ``spec.warm_start`` in ``storage``, each marked with where it came from, for the new
    study's history.

    Raises:
        SweepError: no such sweep, or one of another space, objectives or constraints.
    """
    name, where = spec.warm_start, f"{spec.source}: warm_start: {spec.warm_start}"
    names = optuna.get_all_study_names(storage)
    if name not in names:
        from .errors import did_you_mean
        raise SweepError(f"{where}: no sweep of that name in this study storage"
                         f"{did_you_mean(name, names)}; name a sweep `sweep status` lists")
    source = optuna.load_study(study_name=name, storage=storage)
    theirs = json.loads(source.user_attrs.get(keys.IDENTITY) or "{}")
    mine = json.loads(json.dumps(spec.identity(), sort_keys=True, default=str))
    for key, what in (("space", "space"), ("objective", "objectives"),
                      ("constraints", "constraints")):
        if theirs.get(key) != mine.get(key):
            raise SweepError(f"{where}: that sweep has another {what} ({key}: "
                             f"{json.dumps(theirs.get(key))}, here {json.dumps(mine.get(key))}); "
                             f"warm start only from a sweep with the same {what}")
    copies = [optuna.trial.create_trial(
        state=t.state, params=t.params, distributions=t.distributions,
        values=t.values if t.state == TrialState.COMPLETE else None,
        intermediate_values=t.intermediate_values,
        system_attrs={k: v for k, v in t.system_attrs.items() if k.startswith("constraints")},
        user_attrs={**{k: v for k, v in t.user_attrs.items()
                       if k in (keys.SEED, keys.REPEAT, keys.CONSTRAINTS)},
                    keys.COPIED_FROM: f"{name}#{t.number}"})
        for t in source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                           TrialState.PRUNED))]
    return copies


def _enqueue_grid(study: SweepStudy) -> None:
    present = {(_key(t.params or t.system_attrs.get("fixed_params", {})),
                t.user_attrs.get(keys.REPEAT, 0)) for t in study.trials()}
    configs = study.spec.grid()
    for repeat in range(study.spec.repeats):  # seed-major: one full comparison per seed first
        for params in configs:
            if (_key(params), repeat) not in present:
                study.study.enqueue_trial(params, user_attrs={keys.REPEAT: repeat})
    study.study.set_user_attr(keys.GRID_DONE, len(configs) * study.spec.repeats)


def _enqueue_lost_retries(study: SweepStudy) -> None:
    """Queue the retry of a FAIL marked for retry whose process died before queueing it."""
    trials = study.trials()
    retried = {t.user_attrs.get(keys.RETRY_OF) for t in trials}
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get(keys.WILL_RETRY) and \
                t.number not in retried:
            study.retry(t)


def ask_compared(study: SweepStudy) -> optuna.Trial | compare.Wait | None:
    """A comparison's next trial: a queued one (a retry), else the one :func:`compare.plan`
    says to start, queued with its level's parameters fixed and asked at once; None when the
    comparison is done. Planning and queueing hold the store's lock, so that ``sweep run``
    processes sharing the study never queue the same step twice."""
    lock = store_lock(study.storage_url) if study.storage_url else contextlib.nullcontext()
    with lock:
        fresh(study)  # what another process queued while this one waited for the lock
        if not study.trials(states=(TrialState.WAITING,)):
            action = study.plan().action
            if isinstance(action, (compare.Wait, compare.Done)):
                return action if isinstance(action, compare.Wait) else None
            if isinstance(action, compare.Tune):
                params, attrs = action.level.params, {keys.PHASE: compare.TUNE,
                                                      keys.SEED: study.spec.seed}
            else:
                params, attrs = action.params, {keys.PHASE: compare.CONFIRM,
                                                keys.SEED: action.seed}
            study.study.enqueue_trial(params, user_attrs={
                keys.REPEAT: 0, keys.LEVEL: action.level.label, **attrs})
        return study.study.ask()


def fresh(study: SweepStudy) -> None:
    """The next look at the study's trials reads the storage (see :mod:`readcache`)."""
    getattr(study.study._storage, "forget", lambda: None)()


def abandon(study: SweepStudy, trial: PendingTrial | optuna.Trial,
            error: BaseException) -> None:
    """Fail a trial that raised ``error`` before it could start (asked, not yet training),
    so no trial is left RUNNING; it is queued again when interrupted, or when it crashed
    with ``retries`` left. Best effort: the store may be what raised."""
    t = trial.trial if isinstance(trial, PendingTrial) else trial
    kind = "interrupt" if isinstance(error, KeyboardInterrupt) else "crash"
    root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
    try:
        retry = will_retry(kind, study.spec.retries, lambda: study.crashes(root))
        study.fail(t, f"could not be started: {type(error).__name__}: {error}", kind, retry)
    except Exception:  # noqa: BLE001 - the original error is the one to report
        pass


def state_counts(trials: list[optuna.trial.FrozenTrial]) -> dict[str, int]:
    """Trials by state, lower-case (``complete``, ``running``, ``fail``...); ``fail`` counts only
    failures for good (a FAIL whose retry is queued counts as ``retried``), trials copied from
    another sweep by ``warm_start`` count as ``copied`` only, and ``finished`` is what a sweep's
    ``trials`` target counts."""
    out = {s.name.lower(): 0 for s in TrialState}
    out["retried"] = out["copied"] = 0
    retried = retried_numbers(trials)
    for t in trials:
        out["copied" if objectives.is_copied(t) else
            "retried" if t.number in retried else t.state.name.lower()] += 1
    out["finished"] = out["complete"] + out["pruned"] + out["fail"]
    return out


def retried_numbers(trials: list[optuna.trial.FrozenTrial]) -> set[int]:
    """The numbers of the FAIL trials (of a whole study) whose retry is queued or has run."""
    retry_of = {t.user_attrs.get(keys.RETRY_OF) for t in trials}
    return {t.number for t in trials if t.state == TrialState.FAIL and
            (t.user_attrs.get(keys.WILL_RETRY) or t.number in retry_of)}


def _sampler_offset(existing: optuna.Study) -> int:
    """The sampler seed offset of a process loading a study: the trials it already holds, plus,
    while it holds none and its creator is alive, or always for a study ``sweep submit`` created
    (its tasks start together), a number drawn from this host and pid (machines joining at the
    same moment each draw their own trials)."""
    offset = len(existing.get_trials(deepcopy=False))
    creator = existing.user_attrs.get(keys.CREATOR)
    if existing.user_attrs.get(keys.SUBMITTED) or (
            not offset and creator and Owner(**creator).is_alive()):
        offset += 1 + int.from_bytes(
            hashlib.sha256(f"{socket.gethostname()}:{os.getpid()}".encode()).digest()[:3], "big")
    return offset


def _wait_for(ready, timeout: float = JOIN_WAIT_S):
    """Poll ``ready()`` until it is truthy or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    value = ready()
    while not value and time.monotonic() < deadline:
        time.sleep(0.2)
        value = ready()
    return value


def _check_same_sweep(spec: SweepSpec, name: str, study: optuna.Study) -> None:
    directions = [d.name.lower() for d in study.directions]
    if directions != spec.directions:
        raise SweepError(f"{spec.source}: study {name!r} was started to "
                         f"{', '.join(directions)}, not {', '.join(spec.directions)}; "
                         f"rerun with --new to start a fresh study")
    stored = study.user_attrs.get(keys.IDENTITY)
    if stored is not None and study.user_attrs.get(keys.FINGERPRINT) != spec.fingerprint():
        before = json.loads(stored)
        now = json.loads(json.dumps(spec.identity(), sort_keys=True, default=str))
        changes = _diff(before, now)
        raise SweepError(f"{spec.source}: study {name!r} was started from a different sweep "
                         f"({'; '.join(changes[:4])}); restore the file, or rerun with --new to "
                         f"start a fresh study")
    _check_param_names(spec, name, study)


def _check_param_names(spec: SweepSpec, name: str, study: optuna.Study) -> None:
    """Refuse, at open, a study whose trials carry a parameter name this sweep's space does not
    produce (one made before nested options were named by their whole path): its trials could
    not be replayed into settings, and the sweep would stop mid-way."""
    names = {n.name for _, n in sp.walk(spec.space) if not isinstance(n, sp.Fixed)}
    for t in study.get_trials(deepcopy=False):
        unknown = sorted(set(t.params or t.system_attrs.get("fixed_params", {})) - names)
        if unknown:
            raise SweepError(f"{spec.source}: study {name!r} has trials with the parameter "
                             f"{unknown[0]!r}, which this sweep's space does not name (it names "
                             f"{', '.join(sorted(names)) or 'none'}): the study was made with "
                             f"other parameter names; rerun with --new to start a fresh study")


def _diff(before: Any, now: Any, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for key in list(before) + [k for k in now if k not in before]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in now:
                out.append(f"{sub} was {before[key]!r}, now unset")
            elif key not in before:
                out.append(f"{sub} was unset, now {now[key]!r}")
            else:
                out += _diff(before[key], now[key], sub)
        return out
    return [] if before == now else [f"{path} was {before!r}, now {now!r}"]


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))
