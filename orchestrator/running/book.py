"""The trial book: every trial kept in step in both stores, the Optuna study and MLflow.

Starts, epochs, ends, failures and their retries, and what a dead process left behind (orphaned
trials, stale heartbeats, runs no trial points at). Only the ``sweep run`` process keeps it.
"""
from __future__ import annotations

import contextlib
import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..answer import compare, finding, objectives, summary
from ..config import space as sp
from ..config.spec import SweepSpec
from ..core import keys, paths
from ..report.display import config_name
from ..stores.study import PendingTrial, SweepStudy, TrialLost, state_counts
from .lines import complete_line, trial_text
from .liveness import Liveness
from .protocol import Done, Epoch, Failed, Ready
from .runs import Active, Runs, check_store_present

ABORT_WAIT_S = 5.0  # how long an abort waits for MLflow still opening, to record the runs' end


def open_stores(spec: SweepSpec, storage: str, tracking_uri: str, new: bool):
    """The study (created if needed) and the opened MLflow store of a sweep.

    Bad input fails before anything is written: an MLflow store that cannot be used, or the
    sweep's deleted experiment, before the study is made (a new SQLite file holds neither, and
    is created only once the study showed it recorded no runs in a file now gone).
    """
    from ..stores.tracking import tracker_for

    paths.check_sqlite_folder(tracking_uri, "--tracking-uri")
    db = paths.sqlite_file(tracking_uri)
    tracker = None if db is not None and not db.exists() else tracker_for(tracking_uri, spec.name)
    study = SweepStudy.open(spec, storage, new=new)
    check_store_present(tracking_uri, study)
    return study, tracker or tracker_for(tracking_uri, spec.name)


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
    if pending.replicate is not None:
        tags[keys.REPLICATE] = str(pending.replicate)
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


class TrialBook:
    """Both stores of one sweep kept in step, trial by trial: the study (Optuna) and the runs
    (MLflow, see :class:`~orchestrator.running.runs.Runs`). Trials are kept by the worker slot that
    runs them.

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
        self.best_value = None  # what record() recorded last: the best, or the Pareto front
        self.liveness = Liveness(study, self.runs, self.active, self.folders.drop_checkpoint,
                                 self.say)

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
        book.liveness.recover_orphans()
        c = study.counts()
        if c["finished"] or c["retried"]:
            book.say(f"resuming sweep {study.name!r}: {c['finished']} of {spec.trials} trials "
                     f"already finished, {c['waiting']} queued")
        return book

    # ---------------------------------------------------------------------------- MLflow

    def attach_tracking(self, wait: bool = True) -> bool:
        """See :meth:`Runs.attach <orchestrator.running.runs.Runs.attach>`."""
        return self.runs.attach(wait)

    @property
    def tracker(self):
        """The MLflow :class:`~orchestrator.stores.tracking.Tracker`; only once attached."""
        return self.runs.tracker

    @property
    def parent_id(self) -> str:
        return self.runs.opened.parent_id

    # ---------------------------------------------------------------------------- trials

    def start(self, slot: int, pending: PendingTrial, worker: Ready) -> Active | None:
        """Book ``pending`` as running on worker ``slot`` (its run follows:
        :meth:`Runs.open_run <orchestrator.running.runs.Runs.open_run>`);
        None when its settings cannot be used (the trial is failed for good)."""
        try:
            return self._start(slot, pending, worker)
        except BaseException as e:  # no trial stays RUNNING that no worker trains
            if self.active.get(slot) is not None and self.active[slot].pending is pending:
                self.active.pop(slot)
            self.study.abandon(pending, e)
            raise

    def _start(self, slot: int, pending: PendingTrial, worker: Ready) -> Active | None:
        from trainers import SettingsError, TrainSettings  # settings only: no torch import here

        tags = {**self.spec.tags, **run_tags(self.study.name, slot, pending, worker)}
        tags[keys.CONFIG] = config_name(sp.settings_for(self.spec.space, pending.params))
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
        self.liveness.started(pending)
        return active

    def report_epoch(self, slot: int, epoch: Epoch) -> bool:
        """Report an epoch's objective to the study; True when the pruner says stop, or when
        ``patience`` epochs passed without improvement (the trial then completes)."""
        active = self.active[slot]
        # nan (the trial then fails) where a user's metrics did not return the objective
        value = epoch.metrics.get(self.spec.objective.metric, math.nan)
        active.curve.append(value)
        active.history.append(dict(epoch.metrics))
        if active.lost is not None:
            return True  # stop it: the study takes no more of its epochs
        if not math.isfinite(value):
            return False
        try:  # an epoch restored from a checkpoint already passed the pruner: report it only
            with active.pending.writes_to():
                if self.study.report(active.pending, epoch.epoch, value,
                                     ask_pruner=not epoch.resumed):
                    return True
        except TrialLost as e:
            self.liveness.lose(active, e)
            return True
        active.stopped_early = patience_stop(self.spec, active.curve)
        return active.stopped_early is not None

    def log_epoch(self, slot: int, epoch: Epoch) -> None:
        """Queue an epoch for the trial's run (:meth:`Runs.log_epoch`)."""
        self.runs.log_epoch(self.active[slot], epoch)

    def finish(self, slot: int, end: Done | Failed) -> None:
        """End the trial on ``slot`` in both stores as its worker reported: complete, pruned
        (a complete trial with a non-finite objective fails) or failed."""
        active = self.active[slot]  # until it ended: if a store fails first, abort() retries it
        active.take(end)
        if isinstance(end, Done) and end.state == "pruned" and active.stopped_early:
            end = replace(end, state="complete")  # stopped by patience: done, not pruned
        self.runs.complete(active, end)
        shutil.rmtree(self.folders.output(active.pending), ignore_errors=True)
        if active.lost is not None:  # known since an epoch
            self.liveness.drop_lost(active)
        else:
            try:
                self._close(active, end)
            except TrialLost as e:  # its run may have ended FINISHED already: FAILED now
                self.liveness.lose(active, e)
                self.liveness.drop_lost(active)
        self.active.pop(slot, None)

    def _close(self, active: Active, end: Done | Failed) -> None:
        if isinstance(end, Failed):
            self._fail(active, end.reason, "crash" if end.retryable else "deterministic")
        elif end.state == "complete" and not all(
                math.isfinite(v) for v in self.study.values(active.history)):
            self._fail(active, objective_problem(self.spec, active), "deterministic")
        else:
            self._end(active, end)
            self.folders.drop_checkpoint(active.pending.root)


    def _end(self, active: Active, done: Done) -> None:
        metrics, tags = end_records(self.spec, active, done)
        if done.state == "complete":  # Optuna last: see _fail
            self.tracker.end_trial(active.run_id, "complete", metrics, tags)
            # TrialLost from the trial's own end only, never from what follows it
            with active.pending.writes_to():
                values = self.study.complete(active.pending, active.history)
            self.record_best()
            self.say(complete_line(active, values, tags, self.study.comparison))
        else:
            self.tracker.end_trial(active.run_id, "pruned", metrics, tags)
            with active.pending.writes_to():
                self.study.prune(active.pending, active.history)
            self.say(f"{trial_text(active.pending, self.study.comparison)} pruned at epoch "
                     f"{len(active.curve)}")

    def fail(self, slot: int, reason: str, kind: str) -> None:
        """Fail the trial on worker ``slot``, if any (``kind``: crash, interrupt or
        deterministic); see :meth:`SweepStudy.will_retry
        <orchestrator.stores.study.SweepStudy.will_retry>`."""
        active = self.active.get(slot)
        if active is not None:
            self._fail(active, reason, kind)
            self.active.pop(slot, None)

    def _fail(self, active: Active, reason: str, kind: str) -> None:
        """Fail a trial in both stores; queue its retry when the study says it will, else drop
        its checkpoint. Optuna is told last, once MLflow holds the run's end: when MLflow fails
        first, the trial is still RUNNING for :meth:`abort` to queue as a store failure."""
        pending = active.pending
        self.runs.complete(active)
        retry = self.study.will_retry(kind, pending.root)
        self.runs.end_failed(active, reason, kind, retry)
        if not self.study.fail(pending, reason, kind, retry):  # another process ended it
            self.liveness.lose(active, TrialLost(pending.number, pending.state_now().name))
            self.liveness.drop_lost(active)
            return
        if not retry:
            self.folders.drop_checkpoint(pending.root)
            if self.study.comparison is not None:  # a failed confirmation may decide it
                self.record_best()
        then = ", will be retried" if retry else ""
        self.say(f"{trial_text(pending, self.study.comparison)} failed{then}: "
                 f"{reason.splitlines()[0]}")

    def abort(self, reason: str, kind: str = "crash") -> None:
        """Fail every running trial (an interrupt is queued for retry: the next run resumes it
        from its checkpoint) and end the parent run KILLED (interrupt) or FAILED, unless other
        machines' trials still run (their last machine ends it). A store raising for one trial
        stops none of the others. When the MLflow store broke, the trials are queued for retry in
        Optuna alone (kind ``store``): the store failing is never the trials' fault."""
        attached = self.runs.attach_within(ABORT_WAIT_S)
        for slot in list(self.active):
            active = self.active.pop(slot)
            try:
                if attached and self.runs.broken is None:
                    self._fail(active, reason, kind)
                    continue
            except Exception:  # noqa: BLE001 - before Optuna was told (see _fail): told below
                self.runs.fail_unlogged(active, reason)
            broken = self.runs.broken
            with contextlib.suppress(Exception):  # the Optuna store too: on to the next trial
                self.study.fail(active.pending, f"the MLflow store failed: {broken}" if broken
                                else reason, "store" if broken else kind, broken is not None
                                or self.study.will_retry(kind, active.pending.root))
        try:  # trials still running now are other machines' (a cancelled Slurm task's
            others = self.study.running() > 0  # must not end the parent run they share)
        except Exception:  # noqa: BLE001 - a store that fails: nothing known to wait for
            others = False
        if attached and self.runs.broken is None and not others:
            with contextlib.suppress(Exception):
                self.runs.end_parent("KILLED" if kind == "interrupt" else "FAILED")

    def record_best(self, trials: list | None = None, again: bool = False) -> None:
        """The parent run's best, recorded as :func:`record` says (what this process recorded
        last is :attr:`best_value`)."""
        self.best_value = record(self.study, self.tracker, self.parent_id, self.best_value,
                                 trials=trials, again=again)

    def stop_sweep(self, reason: str) -> None:
        """``stop_when`` holds: say why, and tag the parent run with it."""
        self.say(reason)
        self.attach_tracking()
        self.tracker.log_final(self.parent_id, {}, tags={keys.STOP_REASON: reason})


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
        active.pending.set_attr(keys.STOPPED_EARLY, active.stopped_early)
    return tags


def record(study: SweepStudy, tracker, parent_id: str, last=None, *, trials: list | None = None,
           again: bool = False):
    """Record on the parent run what ``trials`` (default: the study's, read now) stand for,
    when it is not ``last`` (what this process recorded before; ``again``: whatever it was).
    Returns what is recorded now.

    Several objectives: the Pareto front's trial numbers. One (:func:`compare.standing`): the
    best trial so far, its value, run and number; once a comparison is decided, its answer:
    the study's attribute first, then the parent run's best (the confirmed mean, the answer's
    run) and ``sweep.answer``, whichever trial ended last. Several processes: a best that is no
    answer is never written once the study holds the answer, and when the answer came while
    it was written, the answer is written again from the storage as it is (its writer wrote
    the study first: so the answer's write comes last either way).
    """
    trials = study.trials() if trials is None else trials
    if study.spec.is_multi_objective:
        best = objectives.best_trials(trials, study.spec.directions)
        front = ",".join(str(t.number) for t in sorted(best, key=lambda t: t.number))
        if best and (front != last or again):
            tracker.log_final(parent_id, {}, tags={keys.PARETO_FRONT: front})
            return front
        return last
    now = compare.standing(study.comparison, trials, study.spec.directions)
    if now is None or (now.key == last and not again):
        return last
    found, finished = now.answer, state_counts(trials)["finished"]
    if found is None and study.answer_recorded():
        return last  # decided, in a read newer than ``trials``
    if found is not None:
        c = study.comparison
        edges = finding.edge_note(summary.words_of(c), found.edges)
        study.record_answer({
            "level": found.level, "values": list(c.cells()[found.level]), "mean": found.mean,
            "half": None if math.isnan(found.half) else found.half, "seeds": found.seeds,
            "trial": found.trial.number, "text": found.why,
            **({"edges": edges} if edges else {})})
    tracker.record_best(parent_id, now.value, now.trial.user_attrs.get(keys.RUN_ID, ""),
                        now.trial.number, finished,
                        tags={keys.ANSWER: found.why} if found is not None else None)
    if found is None and study.answer_recorded():  # decided meanwhile
        study.fresh()
        return record(study, tracker, parent_id, again=True)
    return now.key

