"""``sweep run``: the scheduling loop between the trial book and the training workers.

This process never trains. It opens the trial book (both stores), starts the workers, asks the
study for trials, hands each to an idle worker and passes every message to the book (an epoch is
reported to Optuna, answered prune or go on, then logged to MLflow; an end closes the trial in
both stores), whatever way its worker ends. The phases (preflight, test split, export) borrow an
idle worker from it.
"""
from __future__ import annotations

import shutil
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..answer import compare, objectives, summary
from ..config import space as sp
from ..config.slots import plan_slots, thread_cap
from ..config.spec import SweepSpec, warm_up_settings
from ..core import keys, paths
from ..core.errors import ExitCode, SweepError, SweepFailure
from ..report.display import WINDOW, Snapshot, TrialRow, config_name
from ..stores.storages import default_storage
from ..stores.study import PendingTrial
from . import looks, phases
from .book import TrialBook
from .pool import Worker, WorkerPool
from .protocol import (
    REPLY_TO,
    Decision,
    Done,
    Epoch,
    Exported,
    Failed,
    Message,
    ProtocolError,
    Ready,
    Reply,
    Request,
    Train,
    Warm,
    Warmed,
)
from .runs import StoreRefused
from .signals import Signals
from .sweep_end import claim_sweep_end, close_sweep
from .timeouts import enforce_lent_deadline, enforce_trial_timeout


@dataclass
class Outcome:
    """How a ``sweep run`` ended; ``exit_code`` is what the CLI returns."""

    exit_code: ExitCode
    counts: dict[str, int]
    best: list[dict[str, Any]]
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    storage: str
    elapsed: float
    test: dict[str, Any] | None = None  # held-out test metrics of the best configuration
    # with repeats or a comparison's confirmation: per configuration, best mean first
    configurations: list[dict[str, Any]] = field(default_factory=list)
    study_name: str = ""  # the spec's name, or NAME-2... for a new study


def run_sweep(spec: SweepSpec, *, spec_text: str, storage: str | None = None,
              tracking_uri: str | None = None, workers: int | None = None,
              gpus: list[int] | None = None, new: bool = False, force: bool = False,
              progress=None) -> Outcome:
    """Run (or resume) ``spec`` until the study holds ``spec.trials`` finished trials.

    Args:
        spec: the validated sweep.
        spec_text: the YAML as the user wrote it (logged on the parent run).
        storage: Optuna storage URL or journal path; default: a journal next to the MLflow db.
        tracking_uri: MLflow tracking URI; default :func:`paths.default_tracking_uri`.
        workers: overrides ``spec.workers``.
        gpus: overrides ``spec.gpus`` (and the GPUs found on the machine).
        new: start a fresh study (and parent run) instead of resuming.
        force: run the trials even when the preflight checks FAIL.
        progress: a display with ``update(snapshot)`` (a :class:`display.Snapshot`),
            ``phase(text)``, ``trial_done(line)`` and ``show(renderable)``; optional.

    Raises:
        SweepError: a store cannot be opened, the study belongs to another sweep, workers
            cannot start, or a preflight check failed (without ``force``).
        StoreBroke: the MLflow store broke under the sweep (its running trials queued for retry).
    """
    started = time.monotonic()
    tracking_uri = tracking_uri or paths.default_tracking_uri()
    storage = storage or default_storage(tracking_uri)
    # Workers never touch the stores, so they can import torch while the stores are created.
    pool, made = start_pool(spec, tracking_uri, workers, gpus if gpus is not None else spec.gpus)
    try:
        with Signals() as signals:
            try:
                book = TrialBook.open(spec, storage, tracking_uri, spec_text=spec_text, new=new,
                                      say=progress.trial_done if progress else None)
            except (SweepFailure, KeyboardInterrupt):  # before any trial: leave no folder
                pool.stop()
                if made is not None:
                    shutil.rmtree(made, ignore_errors=True)
                raise
            loop = _Loop(book, pool, signals, progress, force)
            try:
                return loop.run(started)
            except KeyboardInterrupt:  # a second Ctrl-C: stop now, runs end KILLED
                loop.abort("interrupted twice", kind="interrupt")
                raise
            except BaseException as e:  # close what this process owns before it goes
                loop.abort(f"the sweep run process stopped: {type(e).__name__}: {e}",
                           "deterministic" if isinstance(e, StoreRefused) else "crash")
                raise
    finally:
        pool.stop()


def start_pool(spec: SweepSpec, tracking_uri: str, workers: int | None,
               gpus: list[int] | None) -> tuple[WorkerPool, Path | None]:
    """Start the workers of ``spec`` (``workers`` and ``gpus`` as given, else the spec's), their
    logs in the sweep's work folder; returns the pool and the first folder it made (None when
    they all existed), for a sweep refused before any trial to leave none behind."""
    slots = plan_slots(workers or spec.workers, list(gpus) if gpus is not None else None,
                       workers_per_gpu=spec.workers_per_gpu,
                       devices_per_trial=spec.train.get("devices_per_trial", 1),
                       max_threads=thread_cap())
    logs = paths.work_dir(tracking_uri, spec.name) / "logs"
    made = next((f for f in (*reversed(logs.parents[:2]), logs) if not f.exists()), None)
    pool = WorkerPool(slots, logs, warm=warm_up_settings(spec))
    pool.start()
    return pool, made


def warm(spec: SweepSpec, workers: list[Worker], running: int,
         ahead: phases.Speculation, finished: int) -> None:
    """Workers left without a trial while other trials still run export the best trial so
    far (``ahead``), or else set up the exporters (their answers come to :meth:`_Loop.handle`);
    with none running the export itself comes next, and a warming worker would only delay it."""
    if spec.export_for != "best" or not spec.export or not running:
        return
    for worker in workers:
        if worker.warming or ahead.start(worker, finished):
            continue
        if not worker.warmed:
            worker.lend(Warm(formats=tuple(spec.export)))


class _Loop:
    """The scheduling loop of one ``sweep run``: launches trials on idle workers, passes their
    messages to the trial book, enforces timeouts and shows progress."""

    def __init__(self, book: TrialBook, pool: WorkerPool, signals: Signals, progress,
                 force: bool = False):
        self.book, self.spec, self.study = book, book.spec, book.study
        self.pool, self.signals, self.progress, self.force = pool, signals, progress, force
        lender = _Lender(self)
        self.workers = phases.Workers(ask_all=lender.ask_all, wait=lender.wait,
                                      interrupted=lambda: bool(self.signals.received),
                                      count=len(pool.workers))
        self.test: dict[str, Any] | None = None
        self.ahead = phases.Speculation(book, len(pool.workers))  # exported ahead of the end
        self.failed_starts = 0
        self.ran_trials = False  # whether this process started a trial (see claim_end)
        self.view = _View(book, len(pool.workers))
        self._started = self._shown = 0.0

    def run(self, started: float) -> Outcome:
        self._started = started
        self._phase("preflight")
        phases.preflight(self.book, self.workers, force=self.force,
                         show=self.progress.show if self.progress else None)
        self._phase(None)
        deadline = started + self.spec.timeout_min * 60 if self.spec.timeout_min else None
        exhausted = False
        while True:
            if self.signals.received:
                return self._interrupted(started)
            launching = not exhausted and (deadline is None or time.monotonic() < deadline)
            if launching:
                exhausted = self._launch()
            if not self.book.active and (exhausted or not launching or self._done()):
                break
            for worker, msg in self.pool.wait(timeout=0.5):
                self.handle(worker, msg)
            self.book.attach_tracking(wait=False)
            enforce_trial_timeout(self.spec, self.pool, self.book.active)
            enforce_lent_deadline(self.spec, self.pool, self.study)
            self.pool.kill_unstarted(self.spec.start_timeout_s)
            self.book.liveness.fail_stale()
            self._show()
        self._show(force=True)
        self._phase("opening the MLflow store")
        self.book.attach_tracking()
        if not claim_sweep_end(self.book, self.ran_trials):
            self.ahead.drop()
            return self._outcome(started, interrupted=bool(self.signals.received))
        self._phase("held-out test split")
        self.test = phases.evaluate_test_split(self.book, self.workers)
        self._phase("export")
        phases.export_best(self.book, self.workers, self.ahead)
        self.ahead.drop()
        self._phase("closing the sweep")
        if self.signals.received:
            return self._interrupted(started)
        close_sweep(self.book)
        return self._outcome(started, interrupted=False)

    def _done(self) -> bool:
        if self.study.comparison is not None:
            return isinstance(self.study.plan().action, compare.Done)
        return self.study.counts()["finished"] >= self.spec.trials

    def _launch(self) -> bool:
        """Give a trial to every idle ready worker; True when no trial is left to start."""
        idle = [w for w in self.pool.workers
                if w.ready and not w.warming and w.slot.index not in self.book.active]
        if not idle:
            return False
        reason = self.study.stop_reason()
        if reason:  # stop_when: no new trial; the running ones finish
            self.book.stop_sweep(reason)
            return True
        # once per pass, not once per worker; trials running on other machines count too
        finished = self.study.counts()["finished"]
        running = max(self.study.running(), len(self.book.active))
        for i, worker in enumerate(idle):  # a comparison's plan counts its own trials
            if self.study.comparison is None and finished + running >= self.spec.trials:
                warm(self.spec, idle[i:], len(self.book.active), self.ahead, finished)
                return False
            pending = self.study.next_trial()
            if pending is None:
                warm(self.spec, idle[i:], len(self.book.active), self.ahead, finished)
                return True
            if isinstance(pending, compare.Wait):
                return False
            self._start(worker, pending)
            running += 1
        return False

    def _start(self, worker: Worker, pending: PendingTrial) -> None:
        active = self.book.start(worker.slot.index, pending, worker.info)
        self.ran_trials = True
        if active is None:
            return
        folder = self.book.folders.output(pending)
        formats = tuple(self.spec.export or ()) if self.spec.export_for == "all" else ()
        train = Train(number=pending.number, settings=active.settings,
                      checkpoint_dir=str(self.book.folders.checkpoint(pending)),
                      output_dir=str(folder), export_formats=formats,
                      export_dir=str(folder / "export") if formats else "")
        self.view.started(worker.slot.index, active)
        if not worker.send(train):
            self._worker_died(worker)
            return
        if self.book.attach_tracking(wait=False):
            self.book.runs.open_run(active)

    def handle(self, worker: Worker, msg: Message | None) -> None:
        slot = worker.slot.index
        if msg is None:
            self._worker_died(worker)
        elif isinstance(msg, Ready):
            worker.info = msg
        elif isinstance(msg, Epoch):
            stop = self.book.report_epoch(slot, msg)
            worker.send(Decision(stop))  # answer first: the worker trains while we log
            self.book.log_epoch(slot, msg)
            self.view.epoch(slot, msg)
            self._show()  # also while a phase waits for its workers
        elif isinstance(msg, (Done, Failed)):
            self.book.finish(slot, msg)
        elif isinstance(msg, (Warmed, Exported)) and worker.warming:
            worker.warming, worker.warmed = False, True
            if isinstance(msg, Exported):
                self.ahead.answered(worker, msg)
        else:
            raise ProtocolError(f"worker {slot} sent a {msg.op.value} message that answers "
                                f"no request")

    def _worker_died(self, worker: Worker) -> None:
        reason = worker.exit_reason()
        if worker.warming and worker.kill_reason:  # killed while lent: no trial of its own
            self.book.say(f"worker {worker.slot.index} was stopped: {worker.kill_reason}; a new "
                          f"one takes its place")
        self.book.fail(worker.slot.index, reason, "crash")
        if not worker.ready:
            self.failed_starts += 1
            if self.failed_starts >= 2 * len(self.pool.workers):
                raise SweepError(f"training workers cannot start: {reason}")
        self.pool.restart(worker)

    # ------------------------------------------------------------------------------- ending

    def _interrupted(self, started: float) -> Outcome:
        self.abort(f"interrupted by {self.signals.received}", kind="interrupt")
        return self._outcome(started, interrupted=True)

    def abort(self, reason: str, kind: str = "crash") -> None:
        """Stop every worker and let the book fail its trial and end the parent run (see
        :meth:`TrialBook.abort`)."""
        self.pool.kill()
        self.book.abort(reason, kind)

    def _outcome(self, started: float, interrupted: bool) -> Outcome:
        if not interrupted:  # an interrupt waited for MLflow in abort() already
            self.book.attach_tracking()
        opened = self.book.runs.opened
        counts = self.study.counts()
        best = [{"number": t.number, "value": t.values[0], "values": t.values,
                 "settings": sp.settings_for(self.spec.space, t.params),
                 "run_id": t.user_attrs.get(keys.RUN_ID)}  # several objectives: the front
                for t in self.study.best(None if self.spec.is_multi_objective else 5)]
        code = (self.signals.exit_code if interrupted else
                ExitCode.NEGATIVE if counts["fail"] else ExitCode.OK)
        return Outcome(code, counts, best, opened.experiment_id if opened else "",
                       opened.parent_id if opened else "",
                       self.book.tracking_uri, self.book.storage, time.monotonic() - started,
                       self.test, configuration_means(self.study), self.study.name)

    def _phase(self, text: str | None) -> None:
        if self.progress is not None:
            self.progress.phase(text)

    def _show(self, force: bool = False) -> None:
        if self.progress is None or (not force and time.monotonic() - self._shown < 0.25):
            return
        self._shown = time.monotonic()
        self.progress.update(self.view.snapshot(self._started, force))


class _Lender:
    """Idle workers lent to the phases' requests (preflight, test split, export): every other
    worker's message meanwhile goes to the loop's handler, as in the loop."""

    def __init__(self, loop: _Loop):
        self.loop = loop

    def wait(self, done, seconds: float) -> bool:
        """Handle the workers' messages until ``done()`` or ``seconds`` pass (or a signal
        comes); whether ``done()``."""
        until = time.monotonic() + seconds
        while not done() and not self.loop.signals.received and time.monotonic() < until:
            for worker, msg in self.loop.pool.wait(timeout=min(0.5, until - time.monotonic())):
                self.loop.handle(worker, msg)
        return done()

    def _free(self, busy: dict[int, Any]) -> list[Worker]:
        """Ready workers holding neither a trial nor a request, those with the exporters set
        up first (a phase's first request is its heaviest)."""
        free = [w for w in self.loop.pool.workers if w.ready and w.alive and not w.warming
                and w.slot.index not in self.loop.book.active and w.slot.index not in busy]
        return sorted(free, key=lambda w: not w.warmed)

    def ask_all(self, requests: list[Request],
                deadline_s: float) -> list[Reply | phases.Lost | None]:
        """Send ``requests`` to idle workers, as many at once as are idle (the rest as workers
        free up or finish starting), and wait at most ``deadline_s`` for each answer from its
        sending.

        Every other worker's message meanwhile goes to :meth:`_Loop.handle`, as in the loop:
        a worker that finishes starting during a phase is marked ready, an epoch answered.

        Returns:
            Per request: its reply; :class:`phases.Lost` when its worker died or missed the
            deadline (then it is killed and restarted); None when a signal came or no worker
            can start.
        """
        replies: list[Reply | phases.Lost | None] = [None] * len(requests)
        todo = list(range(len(requests)))
        busy: dict[int, tuple[Worker, int, float]] = {}  # slot: worker, request, deadline
        while (todo or busy) and not self.loop.signals.received:
            for worker in self._free(busy)[:len(todo)]:
                i = todo.pop(0)
                if worker.send(requests[i]):
                    busy[worker.slot.index] = (worker, i, time.monotonic() + deadline_s)
                else:
                    replies[i] = phases.Lost(self._replace(worker))
            if not busy and self.loop.failed_starts >= 2 * len(self.loop.pool.workers):
                break  # no worker can start: the rest stay None
            self._await(requests, replies, busy, deadline_s)
        return replies

    def _await(self, requests: list[Request], replies: list, busy: dict[int, Any],
               deadline_s: float) -> None:
        """One wait of :meth:`ask_all`: the answers that came, the deadlines that passed."""
        self.loop.pool.kill_unstarted(self.loop.spec.start_timeout_s)
        now = time.monotonic()
        timeout = min([0.5] + [max(0.0, until - now) for _, _, until in busy.values()])
        for w, msg in self.loop.pool.wait(timeout=timeout):
            held = busy.get(w.slot.index)
            if held is None or held[0] is not w:
                self.loop.handle(w, msg)
                continue
            i = busy.pop(w.slot.index)[1]
            if msg is None:  # its pipe closed
                replies[i] = phases.Lost(self._replace(w))
            elif not isinstance(msg, REPLY_TO[type(requests[i])]):
                raise ProtocolError(f"worker {w.slot.index} answered a {requests[i].op.value} "
                                    f"request with a {msg.op.value} message")
            else:
                replies[i] = msg
        for slot, (w, i, until) in list(busy.items()):
            if time.monotonic() >= until:
                del busy[slot]
                self.loop.pool.kill_one(w, f"no answer to a {requests[i].op.value} request "
                                           f"within {deadline_s:.0f} s")
                self._replace(w)
                replies[i] = phases.Lost(f"worker {slot}, pid {w.proc.pid}", deadline_s)

    def _replace(self, worker: Worker) -> str:
        """Restart a worker that holds no trial; how it ended."""
        reason = worker.exit_reason()
        self.loop.pool.restart(worker)
        return reason


class _View:
    """What the live view shows, kept from the messages the loop handles: a row per running
    trial and the measured epoch times. The study's counts and best trial are read again only
    when a trial starts or ends (or every :data:`REREAD_S`, for other machines' trials), never
    on every refresh."""

    REREAD_S = 30.0

    def __init__(self, book: TrialBook, workers: int):
        self.book, self.workers = book, workers
        self.rows: dict[int, TrialRow] = {}  # by worker slot
        self.times: deque[float] = deque(maxlen=WINDOW)
        self.measured = 0
        self._key: tuple = ()
        self._read_at, self._looks = 0.0, None  # a comparison's looks said (looks.py)
        self._cached: tuple = ({}, 0, None)
        self._front: int | None = None  # several objectives: the Pareto front's size

    def started(self, slot: int, active) -> None:
        config = active.tags.get(keys.CONFIG, "")
        self.rows[slot] = TrialRow(active.pending.number, config,
                                   int(active.settings.get("epochs", 1)), time.monotonic())

    def epoch(self, slot: int, msg: Epoch) -> None:
        row = self.rows.get(slot)
        if row is None:
            return
        now = time.monotonic()
        if not msg.resumed:  # an epoch restored from a checkpoint took no time
            self.times.append(now - (row.last_epoch_at or row.started))
            self.measured += 1
        objective = self.book.spec.objective
        value = msg.metrics.get(objective.metric)
        row.epoch, row.value, row.last_epoch_at = msg.epoch, value, now
        row.best = objectives.best_of([row.best, value], objective.direction)
        row.samples_per_second = msg.metrics.get("samples_per_second")

    def snapshot(self, started: float, force: bool = False) -> Snapshot:
        active = self.book.active
        for slot in [s for s in self.rows if s not in active]:  # its trial ended
            del self.rows[slot]
        key = tuple(sorted(a.pending.number for a in active.values()))
        if force or key != self._key or time.monotonic() - self._read_at > self.REREAD_S:
            self._key, self._read_at = key, time.monotonic()
            self._cached = self._read()
        counts, total, best = self._cached
        rows = [r for s, r in sorted(self.rows.items())]
        return Snapshot(counts, total, started, self.book.spec.objective.metric, best, rows,
                        self.workers, tuple(self.times), self.measured,
                        tracking=self.book.runs.opened is not None, front=self._front)

    def _read(self) -> tuple:
        study, spec = self.book.study, self.book.spec
        best = study.best(None if spec.is_multi_objective else 1)
        plan, self._looks = looks.say_looks(self.book, study.plan(), self._looks)
        shown = None
        if spec.is_multi_objective:
            self._front, best = len(best), []
        if best:
            shown = (best[0].value, best[0].number,
                     config_name(sp.settings_for(spec.space, best[0].params)))
        return study.counts(), plan.total if plan else spec.trials, shown


def configuration_means(study) -> list[dict[str, Any]]:
    """With repeats (or a comparison's confirmation trials): the complete trials grouped by
    configuration, each with its mean and standard deviation over seeds, best mean first.
    Empty otherwise."""
    trials = objectives.candidates(study.trials())  # this sweep's, complete and feasible
    if study.comparison is not None:
        trials = [t for t in trials if t.user_attrs.get(keys.PHASE) == compare.CONFIRM]
    elif study.spec.repeats < 2:
        return []
    rows = []
    # a comparison's confirmations by level: with tuning each_seed, one configuration a seed
    level = (lambda t: t.user_attrs.get(keys.LEVEL)) if study.comparison is not None else None
    for group in objectives.by_configuration(trials, study.spec.objective.goal, level):
        values = [t.value for t in group]
        name = config_name(sp.settings_for(study.spec.space, group[0].params))
        if len({objectives.config_key(t.params) for t in group}) > 1:
            shown = summary.words_of(study.comparison).name(group[0].user_attrs.get(keys.LEVEL))
            name = f"{shown} (tuned anew at each seed)"
        rows.append({"name": name, "mean": statistics.fmean(values), "n": len(values),
                     "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                     "run_ids": [t.user_attrs.get(keys.RUN_ID) or "" for t in group],
                     "trials": [t.number for t in group]})
    found = compare.final_answer(study.comparison, study.trials())
    named = found.trial.number if found else None  # the comparison's answer first
    return sorted(rows, key=lambda r: named not in r["trials"])  # stable: best mean next
