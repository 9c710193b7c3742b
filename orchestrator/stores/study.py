"""The study of a sweep and the life of its trials: opening it (:mod:`.opening`), asking,
reporting, completing, pruning, failing and retrying.

Only the ``sweep run`` process (never a training worker) talks to the study, so a journal file or
SQLite storage has a single writer per machine; several ``sweep run`` processes may share one study
(the journal file and RDB storages lock their own writes; :mod:`orchestrator.stores.storages` opens
them, :mod:`orchestrator.stores.machines` keeps what the processes share).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from ..answer import compare, objectives
from ..config import space as sp
from ..config.spec import SweepSpec, settings_of
from ..core import compat, keys
from . import opening, readcache
from .machines import Machines, wait_for
from .retries import will_retry
from .storages import open_storage


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

    @property
    def params(self) -> dict[str, Any]:
        """The trial's parameters as the study records them (sampled, or queued fixed)."""
        return self.trial.params

    def set_attr(self, key: str, value: Any) -> None:
        """Record ``value`` on the trial under ``key`` (a user attribute)."""
        self.trial.set_user_attr(key, value)

    def state_now(self) -> TrialState:
        """The trial's state in the storage as it is now (not a cached read)."""
        return compat.storage_of(self.trial.study).get_trial(compat.trial_id(self.trial)).state

    @contextlib.contextmanager
    def writes_to(self):
        """Around this process's writes to the trial it runs: a write refused because the
        trial is no longer RUNNING in the storage (another process failed it as stale) raises
        :class:`TrialLost`; any other error passes unchanged."""
        try:
            yield
        except (RuntimeError, ValueError) as e:
            state = self.state_now()
            if state == TrialState.RUNNING:
                raise
            raise TrialLost(self.number, state.name) from e


class StudyView:
    """The study of a sweep as read: its trials and their counts, a comparison's plan, the best
    trials or the answer, and what a trial ran with. :class:`SweepStudy` asks and tells too; the
    Python API's results read through a view alone."""

    def __init__(self, spec: SweepSpec, study: optuna.Study):
        self.spec, self.study = spec, study
        self.comparison = compare.Comparison.of(spec)

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def study_id(self) -> str | None:
        """The study's identity (:data:`keys.STUDY_ID`), which its parent run carries too."""
        return self.study.user_attrs.get(keys.STUDY_ID)

    def trials(self, states=None) -> list[optuna.trial.FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=states)

    def fresh(self) -> None:
        """The next look at the study's trials reads the storage (see :mod:`readcache`)."""
        getattr(compat.storage_of(self.study), "forget", lambda: None)()

    def counts(self) -> dict[str, int]:
        """Trials by state (see :func:`state_counts`)."""
        return state_counts(self.trials())

    def running(self) -> int:
        """Trials RUNNING in the study, on any machine."""
        return len(self.trials(states=(TrialState.RUNNING,)))

    def plan(self) -> compare.Plan | None:
        """A comparison's next step and planned trial count (:func:`compare.plan`)."""
        return None if self.comparison is None else compare.plan(self.comparison, self.trials())

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

    def answer_recorded(self) -> bool:
        """Whether the study holds a comparison's answer (:data:`keys.ANSWER`)."""
        return keys.ANSWER in self.study.user_attrs

    def trial_settings(self, trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
        """The trainer settings a finished trial ran with (fixed, sampled, and its seed)."""
        return {**settings_of(self.spec, sp.settings_for(self.spec.space, trial.params)),
                "seed": trial.user_attrs[keys.SEED]}

    def values(self, history: list[dict[str, float]]) -> list[float]:
        """Each objective's value of a trial whose epochs logged ``history``."""
        return [objectives.reduce_curve(o, [m.get(o.metric, math.nan) for m in history],
                                        self.spec.epochs)
                for o in self.spec.objectives]


class SweepStudy(StudyView):
    """The Optuna study of one sweep: opening, asking, reporting and telling trials. What its
    processes share across machines (owners, heartbeats, the parent run, the end) is
    :attr:`machines`."""

    def __init__(self, spec: SweepSpec, study: optuna.Study, created: bool = True,
                 stale: list | None = None, storage_url: str | None = None):
        super().__init__(spec, study)
        self.storage_url = storage_url
        self.created = created  # this process won the create_study race
        self.machines = Machines(study, stale, storage_url)

    @classmethod
    def open(cls, spec: SweepSpec, storage_url: str, study_name: str | None = None,
             new: bool = False) -> "SweepStudy":
        """Create the study (and enqueue a grid), or join it to resume
        (:func:`opening.create_or_join`).

        Args:
            study_name: default ``spec.name``.
            new: start a fresh study named ``NAME-2``, ``NAME-3``... (the first free one).

        Raises:
            SweepError: the study exists but was started from a different sweep.
        """
        stale: list[optuna.trial.FrozenTrial] = []
        storage = readcache.around(open_storage(  # it writes: a torn journal is repaired
            storage_url, spec.heartbeat_seconds,
            on_stale=lambda _study, trial: stale.append(trial), repair=True))
        name = study_name or spec.name
        name = opening.free_name(storage, name) if new else name
        # checked before the study exists: a refused warm_start leaves no half-made study
        copies = opening.warm_start_copies(spec, storage) if spec.warm_start is not None else []
        self = cls(spec, *opening.create_or_join(spec, storage, name), stale, storage_url)
        self._fill(copies)
        return self

    def _fill(self, copies: list[optuna.trial.FrozenTrial]) -> None:
        """Bring an opened study's queue up to date: its creator's bookkeeping
        (:func:`opening.initialise` with the ``warm_start`` ``copies``), the grid, and the
        retries a dead process did not queue."""
        if self.created:
            opening.initialise(self.spec, self.study, self.machines.owner, copies)
        elif self.spec.is_grid:  # the creator enqueues the grid; a joiner waits for it to be done
            wait_for(lambda: keys.GRID_DONE in self.study.user_attrs)
        if self.spec.is_grid and not self.study.user_attrs.get(keys.GRID_DONE):
            opening.enqueue_grid(self.spec, self.study)
        for t in objectives.lost_retries(self.trials()):  # their process died before queueing
            self.retry(t)

    def mark_submitted(self) -> None:
        """Record that ``sweep submit`` made the study (:func:`machines.sampler_offset`)."""
        self.study.set_user_attr(keys.SUBMITTED, True)

    def record_answer(self, record: dict[str, Any]) -> None:
        """Record a decided comparison's answer on the study (:data:`keys.ANSWER`)."""
        self.study.set_user_attr(keys.ANSWER, record)

    # ------------------------------------------------------------------------------- asking

    def next_trial(self) -> PendingTrial | compare.Wait | None:
        """Ask for the next trial; None when a grid or a comparison has nothing left to run;
        :class:`compare.Wait` when a comparison must wait for running trials to end first."""
        self.fresh()  # what to run next: from the storage as it is, not as it was
        if self.comparison is not None:
            trial = self.ask_compared()
            if trial is None or isinstance(trial, compare.Wait):
                return trial
        elif self.spec.is_grid and not self.trials(states=(TrialState.WAITING,)):
            return None
        else:
            trial = self.ask_within_trials()
            if isinstance(trial, compare.Wait):
                return trial
        return self._pending(trial)

    def ask_compared(self) -> optuna.Trial | compare.Wait | None:
        """A comparison's next trial: a queued one (a retry), else the one :func:`compare.plan`
        says to start, queued with its level's parameters fixed and asked at once; None when
        the comparison is done. Planning and queueing hold the store's lock, so that ``sweep
        run`` processes sharing the study never queue the same step twice."""
        with self.machines.lock():
            self.fresh()  # what another process queued while this one waited for the lock
            if not self.trials(states=(TrialState.WAITING,)):
                action = self.plan().action
                if isinstance(action, (compare.Wait, compare.Done)):
                    return action if isinstance(action, compare.Wait) else None
                if isinstance(action, compare.Tune):
                    params, attrs = action.level.params, {
                        keys.PHASE: compare.TUNE, keys.REPLICATE: action.replicate,
                        keys.SEED: self.comparison.tuning_seed(action.replicate)}
                else:
                    params, attrs = action.params, {keys.PHASE: compare.CONFIRM,
                                                    keys.SEED: action.seed}
                self.study.enqueue_trial(params, user_attrs={
                    keys.REPEAT: 0, keys.LEVEL: action.level.label, **attrs})
            return self.study.ask()

    def ask_within_trials(self) -> optuna.Trial | compare.Wait:
        """A sweep's next trial: a queued one (a retry, a repeat), else a new one while the
        trials finished and running on every machine are fewer than ``trials``; else
        :class:`compare.Wait` (the running trials may yet fail and be retried). Counting and
        asking hold the store's lock, on a fresh read: two processes that both saw one trial
        left never both start it."""
        with self.machines.lock():
            self.fresh()
            if not self.trials(states=(TrialState.WAITING,)):
                counts = self.counts()
                if counts["finished"] + counts["running"] >= self.spec.trials:
                    return compare.Wait()
            return self.study.ask()

    def _pending(self, trial: optuna.Trial) -> PendingTrial:
        """Sample an asked ``trial``'s settings and record on it its repeat (queueing the other
        repeats of a new configuration), seed and owner; a trial that raises meanwhile is
        abandoned (:meth:`abandon`)."""
        spec = self.spec
        try:
            sampled = sp.sample(trial, spec.space)
            repeat = trial.user_attrs.get(keys.REPEAT)
            if repeat is None:
                repeat = 0
                trial.set_user_attr(keys.REPEAT, 0)
                for copy in range(1, spec.repeats):
                    self.study.enqueue_trial(trial.params, user_attrs={keys.REPEAT: copy})
            seed = trial.user_attrs.get(keys.SEED, spec.seed + repeat)
            trial.set_user_attr(keys.SEED, seed)
            self.machines.own(trial)
            settings = {**settings_of(spec, sampled), "seed": seed}
        except BaseException as e:
            self.abandon(trial, e)
            raise
        attrs = trial.user_attrs
        return PendingTrial(trial, settings, repeat, seed, retry_of=attrs.get(keys.RETRY_OF),
                            root=attrs.get(keys.RETRY_ROOT, trial.number),
                            phase=attrs.get(keys.PHASE), level=attrs.get(keys.LEVEL),
                            replicate=attrs.get(keys.REPLICATE))

    # ------------------------------------------------------------------------------- telling

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

    def will_retry(self, kind: str, root: int, recorded: bool = False) -> bool:
        """:func:`~orchestrator.stores.retries.will_retry` for the trial first started as number
        ``root`` (``recorded``: this crash is already counted)."""
        return will_retry(kind, self.spec.retries, lambda: self.crashes(root) - recorded)

    def crashes(self, root: int) -> int:
        """How many attempts of the trial started as number ``root`` crashed (a trial failed
        for a stale heartbeat has no kind: its machine died, a crash)."""
        return sum(1 for t in self.trials(states=(TrialState.FAIL,))
                   if t.user_attrs.get(keys.RETRY_ROOT, t.number) == root
                   and t.user_attrs.get(keys.FAIL_KIND, "crash") == "crash")

    def abandon(self, trial: PendingTrial | optuna.Trial, error: BaseException) -> None:
        """Fail a trial that raised ``error`` before it could start (asked, not yet training),
        so no trial is left RUNNING; it is queued again when interrupted, or when it crashed
        with ``retries`` left. Best effort: the store may be what raised."""
        t = trial.trial if isinstance(trial, PendingTrial) else trial
        kind = "interrupt" if isinstance(error, KeyboardInterrupt) else "crash"
        root = t.user_attrs.get(keys.RETRY_ROOT, t.number)
        try:
            retry = self.will_retry(kind, root)
            self.fail(t, f"could not be started: {type(error).__name__}: {error}", kind, retry)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass

    # ----------------------------------------- several machines (:class:`machines.Machines`)

    def beat(self, pending: PendingTrial) -> None:
        """Record that ``pending`` is alive (:meth:`Machines.beat`)."""
        self.machines.beat(pending.trial)

    def orphans(self) -> list[optuna.trial.FrozenTrial]:
        """RUNNING trials whose process on this host is gone (:meth:`Machines.orphans`), read
        from the storage as it is (a cached read shows trials that ended since as RUNNING)."""
        self.fresh()
        return self.machines.orphans()


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
