"""The study of a sweep and the life of its trials: opening (create or join, same sweep, grid and
warm start), asking, reporting, completing, pruning, failing and retrying; samplers and pruners.

Only the ``sweep run`` process (never a training worker) talks to the study, so a journal file or
SQLite storage has a single writer per machine; several ``sweep run`` processes may share one study
(the journal file and RDB storages lock their own writes; :mod:`orchestrator.stores.storages` opens
them, :mod:`orchestrator.stores.machines` keeps what the processes share).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from ..answer import compare, objectives
from ..config import space as sp
from ..config.samplers import build_pruner, build_sampler
from ..config.spec import SweepSpec, settings_of
from ..core import compat, keys
from ..core.errors import SweepError
from . import levels, readcache
from .machines import Machines, sampler_offset, wait_for
from .retries import will_retry
from .storages import open_storage


def make_sampler(spec: SweepSpec, seed_offset: int = 0):
    """The sampler of ``spec``, its seed offset by ``seed_offset`` (see :meth:`SweepStudy.open`);
    for a comparison, one such sampler per level (:class:`levels.LevelSampler`)."""
    if spec.compare is not None:
        return levels.LevelSampler(  # a replicate's levels seeded alike, replicates apart
            lambda replicate: _one_sampler(spec, seed_offset + REPLICATE_STRIDE * replicate))
    return _one_sampler(spec, seed_offset)


REPLICATE_STRIDE = 2**25  # past any offset a process draws (sampler_offset: trials + < 2**24)


def _one_sampler(spec: SweepSpec, seed_offset: int):
    # numpy's seeds stop at 2**32 - 1, which a valid seed plus a joiner's offset can pass
    s, seed = spec.sampler, (spec.sampler_seed + seed_offset) % 2**32
    return build_sampler(s.name, seed, s.options)


def make_pruner(spec: SweepSpec):
    """The pruner of ``spec``; for a comparison, judging each level against itself."""
    p = spec.pruner
    pruner = build_pruner(p.name, p.min_epochs, spec.epochs, p.options)
    return levels.LevelPruner(pruner) if spec.compare is not None else pruner


class TrialLost(RuntimeError):
    """A write to a trial this process runs was refused because another ``sweep run`` process of
    the study ended the trial meanwhile: it saw no heartbeat from this process for two
    intervals (a loaded or stalled machine), failed the trial and queued its retry. Optuna then
    refuses every write to it (``UpdateFinishedTrialError``, or ``ValueError`` from ``tell``)."""

    def __init__(self, number: int, state: str):
        self.number, self.state = number, state
        super().__init__(f"trial {number} was ended ({state}) by another sweep run process "
                         f"while it ran here: that process saw no heartbeat from this one for "
                         f"two intervals")


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
    replicate: int | None = None  # a comparison's tuning trial: its replicate (keys.REPLICATE)

    @property
    def number(self) -> int:
        return self.trial.number


class SweepStudy:
    """The Optuna study of one sweep: asking, reporting and telling trials. What its processes
    share across machines (owners, heartbeats, the parent run) is :attr:`machines`."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, created: bool = True,
                 stale: list | None = None, storage_url: str | None = None):
        self.spec, self.study, self.storage_url = spec, study, storage_url
        self.comparison = compare.Comparison.of(spec)
        self.created = created  # this process won the create_study race
        self.machines = Machines(study, stale, storage_url)

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
        storage = readcache.around(open_storage(  # it writes: a torn journal is repaired
            storage_url, spec.heartbeat_seconds,
            on_stale=lambda _study, trial: stale.append(trial), repair=True))
        name = study_name or spec.name
        if new:
            taken = set(optuna.get_all_study_names(storage))
            name = next(f"{name}-{i}" for i in itertools.count(2) if f"{name}-{i}" not in taken)
        # checked before the study exists: a refused warm_start leaves no half-made study
        copies = warm_start_copies(spec, storage) if spec.warm_start is not None else []
        study, created = _create_or_join(spec, storage, name)
        self = cls(spec, study, created, stale, storage_url)
        _fill(self, copies)
        return self

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def study_id(self) -> str | None:
        """The study's identity (:data:`keys.STUDY_ID`), which its parent run carries too."""
        return self.study.user_attrs.get(keys.STUDY_ID)

    # ------------------------------------------------------------------------------- counts

    def trials(self, states=None) -> list[optuna.trial.FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states)

    def counts(self) -> dict[str, int]:
        """Trials by state (see :func:`state_counts`)."""
        return state_counts(self.trials())

    def running(self) -> int:
        """Trials RUNNING in the study, on any machine."""
        return len(self.trials(states=(TrialState.RUNNING,)))

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
            trial = ask_within_trials(self)
            if isinstance(trial, compare.Wait):
                return trial
        return _pending(self, trial)

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
        storage = compat.storage_of(self.study)
        # Optuna has no public call to set a user attr on a trial another process left RUNNING.
        attrs = {keys.FAIL_REASON: reason[-4000:], keys.FAIL_KIND: kind}
        if retry:
            attrs[keys.WILL_RETRY] = True
        try:
            for key, value in attrs.items():
                storage.set_trial_user_attr(compat.trial_id(t), key, value)
            self.study.tell(t.number, state=TrialState.FAIL)
        except (RuntimeError, ValueError):  # finished meanwhile by another process
            return False
        if retry:
            self.retry(self.trials()[t.number])
        return True

    def retry(self, failed: optuna.trial.FrozenTrial) -> None:
        """Queue a new attempt of ``failed`` (already FAIL, e.g. by :meth:`fail_stale`)."""
        attrs = failed.user_attrs
        kept = {k: attrs[k] for k in (keys.PHASE, keys.LEVEL, keys.SEED, keys.REPLICATE)
                if k in attrs}
        # a trial failed before it sampled holds only its fixed parameters (a comparison's level)
        params = failed.params or compat.fixed_params(failed)
        self.study.enqueue_trial(params, user_attrs={
            keys.REPEAT: attrs.get(keys.REPEAT, 0), keys.RETRY_OF: failed.number,
            keys.RETRY_ROOT: attrs.get(keys.RETRY_ROOT, failed.number), **kept})

    def crashes(self, root: int) -> int:
        """How many attempts of the trial started as number ``root`` crashed (a trial failed
        for a stale heartbeat has no kind: its machine died, a crash)."""
        return sum(1 for t in self.trials(states=(TrialState.FAIL,))
                   if t.user_attrs.get(keys.RETRY_ROOT, t.number) == root
                   and t.user_attrs.get(keys.FAIL_KIND, "crash") == "crash")

    def set_attr(self, pending: PendingTrial, key: str, value: Any) -> None:
        pending.trial.set_user_attr(key, value)

    @contextlib.contextmanager
    def writes_to(self, pending: PendingTrial):
        """Around this process's writes to a trial it runs: a write refused because the trial
        is no longer RUNNING in the storage (another process failed it as stale) raises
        :class:`TrialLost`; any other error passes unchanged."""
        try:
            yield
        except (RuntimeError, ValueError) as e:
            state = self.state_now(pending)
            if state == TrialState.RUNNING:
                raise
            raise TrialLost(pending.number, state.name) from e

    def state_now(self, pending: PendingTrial) -> TrialState:
        """The state of ``pending`` in the storage as it is now (not a cached read)."""
        return compat.storage_of(self.study).get_trial(compat.trial_id(pending.trial)).state

    def values(self, history: list[dict[str, float]]) -> list[float]:
        """Each objective's value of a trial whose epochs logged ``history``."""
        return [objectives.reduce_curve(o, [m.get(o.metric, math.nan) for m in history],
                                        self.spec.epochs)
                for o in self.spec.objectives]

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

    # ----------------------------------------- several machines (:class:`machines.Machines`)

    @property
    def heartbeat(self) -> bool:
        """Whether the storage keeps trial heartbeats (:attr:`Machines.heartbeat`)."""
        return self.machines.heartbeat

    def beat(self, pending: PendingTrial) -> None:
        """Record that ``pending`` is alive (:meth:`Machines.beat`)."""
        self.machines.beat(pending.trial)

    def fail_stale(self) -> list[optuna.trial.FrozenTrial]:
        """Fail the trials whose heartbeat stopped (:meth:`Machines.fail_stale`)."""
        return self.machines.fail_stale()

    def orphans(self) -> list[optuna.trial.FrozenTrial]:
        """RUNNING trials whose process on this host is gone (:meth:`Machines.orphans`), read
        from the storage as it is (a cached read shows trials that ended since as RUNNING)."""
        fresh(self)
        return self.machines.orphans()



def _pending(study: SweepStudy, trial: optuna.Trial) -> PendingTrial:
    """Sample an asked ``trial``'s settings and record on it its repeat (queueing the other
    repeats of a new configuration), seed and owner; a trial that raises meanwhile is
    abandoned (:func:`abandon`)."""
    spec = study.spec
    try:
        sampled = sp.sample(trial, spec.space)
        repeat = trial.user_attrs.get(keys.REPEAT)
        if repeat is None:
            repeat = 0
            trial.set_user_attr(keys.REPEAT, 0)
            for copy in range(1, spec.repeats):
                study.study.enqueue_trial(trial.params, user_attrs={keys.REPEAT: copy})
        seed = trial.user_attrs.get(keys.SEED, spec.seed + repeat)
        trial.set_user_attr(keys.SEED, seed)
        study.machines.own(trial)
        settings = {**settings_of(spec, sampled), "seed": seed}
    except BaseException as e:
        abandon(study, trial, e)
        raise
    attrs = trial.user_attrs
    return PendingTrial(trial, settings, repeat, seed, retry_of=attrs.get(keys.RETRY_OF),
                        root=attrs.get(keys.RETRY_ROOT, trial.number),
                        phase=attrs.get(keys.PHASE), level=attrs.get(keys.LEVEL),
                        replicate=attrs.get(keys.REPLICATE))


def _create_or_join(spec: SweepSpec, storage, name: str) -> tuple[optuna.Study, bool]:
    """Study ``name`` in ``storage``, and whether this process created it. One another process
    created first is loaded once its creator has written its identity, checked to be this
    sweep, and given a sampler seeded for this joiner (:func:`machines.sampler_offset`)."""
    try:
        return optuna.create_study(study_name=name, storage=storage,
                                   directions=spec.directions,
                                   sampler=make_sampler(spec), pruner=make_pruner(spec)), True
    except optuna.exceptions.DuplicatedStudyError:
        existing = optuna.load_study(study_name=name, storage=storage)
        # another machine may have created it a moment ago: its attributes come next
        wait_for(lambda: keys.FINGERPRINT in existing.user_attrs)
        _check_same_sweep(spec, name, existing)
        return optuna.load_study(study_name=name, storage=storage,
                                 sampler=make_sampler(spec, sampler_offset(existing)),
                                 pruner=make_pruner(spec)), False


def _fill(study: SweepStudy, copies: list) -> None:
    """Bring an opened study's queue up to date: its creator's bookkeeping (:func:`_initialise`
    with the ``warm_start`` ``copies``), the grid, and the retries a dead process did not
    queue."""
    spec, s = study.spec, study.study
    if study.created:
        _initialise(study, copies)
    elif spec.is_grid:  # the creator enqueues the grid; a joiner waits for it to be done
        wait_for(lambda: keys.GRID_DONE in s.user_attrs)
    if spec.is_grid and not s.user_attrs.get(keys.GRID_DONE):
        _enqueue_grid(study)
    for t in objectives.lost_retries(study.trials()):  # their process died before queueing
        study.retry(t)


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


def _initialise(study: SweepStudy, copies: list) -> None:
    """What the process creating a study writes into it: who made it, the enqueued
    configurations, the trials copied by ``warm_start``, then its identity (joiners wait for
    the fingerprint, so it is written last)."""
    spec, s = study.spec, study.study
    s.set_user_attr(keys.CREATOR, study.machines.owner.as_dict())
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
        from ..core.errors import did_you_mean
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
        intermediate_values=t.intermediate_values, constraints=t.constraints,
        user_attrs={**{k: v for k, v in t.user_attrs.items()
                       if k in (keys.SEED, keys.REPEAT, keys.CONSTRAINTS)},
                    keys.COPIED_FROM: f"{name}#{t.number}"})
        for t in source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                           TrialState.PRUNED))]
    return copies


def _enqueue_grid(study: SweepStudy) -> None:
    present = {(objectives.config_key(t.params or compat.fixed_params(t)),
                t.user_attrs.get(keys.REPEAT, 0)) for t in study.trials()}
    configs = study.spec.grid()
    for repeat in range(study.spec.repeats):  # seed-major: one full comparison per seed first
        for params in configs:
            if (objectives.config_key(params), repeat) not in present:
                study.study.enqueue_trial(params, user_attrs={keys.REPEAT: repeat})
    study.study.set_user_attr(keys.GRID_DONE, len(configs) * study.spec.repeats)


def ask_compared(study: SweepStudy) -> optuna.Trial | compare.Wait | None:
    """A comparison's next trial: a queued one (a retry), else the one :func:`compare.plan`
    says to start, queued with its level's parameters fixed and asked at once; None when the
    comparison is done. Planning and queueing hold the store's lock, so that ``sweep run``
    processes sharing the study never queue the same step twice."""
    with study.machines.lock():
        fresh(study)  # what another process queued while this one waited for the lock
        if not study.trials(states=(TrialState.WAITING,)):
            action = study.plan().action
            if isinstance(action, (compare.Wait, compare.Done)):
                return action if isinstance(action, compare.Wait) else None
            if isinstance(action, compare.Tune):
                params, attrs = action.level.params, {
                    keys.PHASE: compare.TUNE, keys.REPLICATE: action.replicate,
                    keys.SEED: study.comparison.tuning_seed(action.replicate)}
            else:
                params, attrs = action.params, {keys.PHASE: compare.CONFIRM,
                                                keys.SEED: action.seed}
            study.study.enqueue_trial(params, user_attrs={
                keys.REPEAT: 0, keys.LEVEL: action.level.label, **attrs})
        return study.study.ask()


def ask_within_trials(study: SweepStudy) -> optuna.Trial | compare.Wait:
    """A sweep's next trial: a queued one (a retry, a repeat), else a new one while the trials
    finished and running on every machine are fewer than ``trials``; else :class:`compare.Wait`
    (the running trials may yet fail and be retried). Counting and asking hold the store's
    lock, on a fresh read: two processes that both saw one trial left never both start it."""
    with study.machines.lock():
        fresh(study)
        if not study.trials(states=(TrialState.WAITING,)):
            counts = study.counts()
            if counts["finished"] + counts["running"] >= study.spec.trials:
                return compare.Wait()
        return study.study.ask()


def fresh(study: SweepStudy) -> None:
    """The next look at the study's trials reads the storage (see :mod:`readcache`)."""
    getattr(compat.storage_of(study.study), "forget", lambda: None)()


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
    retried = objectives.retried_numbers(trials)
    for t in trials:
        out["copied" if objectives.is_copied(t) else
            "retried" if t.number in retried else t.state.name.lower()] += 1
    out["finished"] = out["complete"] + out["pruned"] + out["fail"]
    return out


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
