"""``sweep run``: the coordinating loop between the study, the workers and MLflow.

This process never trains. It opens the stores, starts the workers, asks the study for trials,
hands each to an idle worker, relays every epoch (report to Optuna, answer prune or go on, log to
MLflow) and closes each trial in both stores, whatever way its worker ends.
"""
from __future__ import annotations

import math
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import paths
from . import preflight as pf
from . import space as sp
from .errors import SweepError
from .slots import plan_slots
from .spec import SweepSpec
from .study import (
    OWNER,
    RETRY_ROOT,
    RUN_ID,
    PendingTrial,
    SweepStudy,
    default_storage,
    mask,
)
from .workers import Worker, WorkerPool

EXIT_OK, EXIT_FAILED_TRIALS, EXIT_INTERRUPTED = 0, 1, 130
# Epochs reach MLflow at least this often (and at every trial's end): one call per flush, not per
# epoch, keeps this process's share of the CPU small when epochs take a fraction of a second.
FLUSH_SECONDS = 1.0
EXPORTED = "sweep.exported"  # trial run tag: its weights were exported (see tracking)
TEST_TRIALS = "sweep.test_trials"  # parent run tag: the trials whose weights saw the test split


@dataclass
class Active:
    """A trial running on a worker."""

    pending: PendingTrial
    started: float
    settings: dict[str, Any]  # what the run logs as params
    params: dict[str, Any]  # extra params (lr_effective)
    tags: dict[str, str]
    run_id: str | None = None  # None until MLflow is ready (see _Loop.mlflow)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    curve: list[float] = field(default_factory=list)
    unlogged: list[tuple[int, dict, list]] = field(default_factory=list)
    flushed: float = 0.0
    warnings: list[str] = field(default_factory=list)  # from the trainer, shown on the run


@dataclass
class Outcome:
    """How a ``sweep run`` ended; ``exit_code`` is what the CLI returns."""

    exit_code: int
    counts: dict[str, int]
    best: list[dict[str, Any]]
    experiment_id: str
    parent_run_id: str
    tracking_uri: str
    storage: str
    elapsed: float
    test: dict[str, Any] | None = None  # held-out test metrics of the best configuration


class _Signals:
    """SIGINT/SIGTERM set a flag the loop checks; a second one exits at once."""

    def __init__(self):
        self.received: str | None = None
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


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
        progress: a display with ``update(snapshot)`` and ``trial_done(line)``; optional.

    Raises:
        SweepError: a store cannot be opened, the study belongs to another sweep, workers
            cannot start, or a preflight check failed (without ``force``).
    """
    started = time.monotonic()
    tracking_uri = tracking_uri or paths.default_tracking_uri()
    storage = storage or default_storage(tracking_uri)
    gpus = gpus if gpus is not None else spec.gpus
    slots = plan_slots(workers or spec.workers, list(gpus) if gpus is not None else None,
                       workers_per_gpu=spec.workers_per_gpu,
                       devices_per_trial=spec.train.get("devices_per_trial", 1))
    # Workers never touch the stores, so they can import torch while the stores are created.
    pool = WorkerPool(slots, paths.work_dir(tracking_uri, spec.name) / "logs")
    pool.start()
    try:
        with _Signals() as signals:
            loop = _Loop(spec, spec_text, storage, tracking_uri, pool, signals, progress, new,
                         force)
            try:
                return loop.run(started)
            except KeyboardInterrupt:  # a second Ctrl-C: stop now, runs end KILLED
                loop.abort("interrupted twice", kind="interrupt")
                raise
            except BaseException as e:  # close what this process owns before it goes
                loop.abort(f"the sweep run process stopped: {type(e).__name__}: {e}")
                raise
    finally:
        pool.stop()


def check_tracking_uri(uri: str) -> None:
    """The mistakes in a tracking URI that can be caught without importing MLflow."""
    db = paths.sqlite_file(uri)
    if db is not None and not db.parent.is_dir():
        raise SweepError(f"--tracking-uri {uri}: folder {db.parent} does not exist; create it "
                         f"first")


def _open_tracking(tracking_uri, spec, study: SweepStudy, spec_text, storage):
    """The MLflow side of a sweep: (tracker, experiment id, parent run id, environment tags,
    installed packages).

    Several machines share one parent run: MLflow has no uniqueness rule to lean on, so the
    machine that created the study creates the parent run and stores its id in the study; the
    others read it from there (waiting for it when they join at the same moment).
    """
    from .tracking import Tracker, environment_tags, installed_packages

    tracker = Tracker(tracking_uri)
    experiment_id = tracker.experiment(spec.name, spec.description)
    env_tags = environment_tags()
    packages = installed_packages()
    shared = study.shared_parent()
    if shared is None and not study.created:
        shared = tracker.find_parent(experiment_id, study.name) or study.wait_for_shared_parent()
    if shared is not None:
        tracker.resume_parent(shared)
        return tracker, experiment_id, shared, env_tags, packages
    parent_id, _ = tracker.parent_run(
        experiment_id, study.name, spec_text, spec.raw,
        {**env_tags, "sweep.storage": mask(storage), "sweep.fingerprint": spec.fingerprint()})
    study.set_shared_parent(parent_id)
    return tracker, experiment_id, parent_id, env_tags, packages


class _Heartbeat:
    """A thread recording the heartbeat of every trial this process runs, every ``interval``
    seconds (Optuna beats only inside ``study.optimize``, which a sweep does not use)."""

    def __init__(self, study: SweepStudy, active: dict, interval: float):
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


class _Loop:
    def __init__(self, spec, spec_text, storage, tracking_uri, pool, signals, progress, new,
                 force=False):
        self.spec, self.pool, self.signals, self.progress = spec, pool, signals, progress
        self.force = force
        self.storage, self.tracking_uri = storage, tracking_uri
        check_tracking_uri(tracking_uri)  # bad input fails here, before anything is written
        self.study = SweepStudy.open(spec, storage, new=new)
        if new:
            self._trial_line(f"starting a fresh study {self.study.name!r} (--new)")
        # Importing MLflow and creating its store take seconds: done in a thread while the first
        # trials already train; their runs are created (with their true start times) once ready.
        self._mlflow_setup = ThreadPoolExecutor(1).submit(
            _open_tracking, tracking_uri, spec, self.study, spec_text, storage)
        self.tracker = None
        self.experiment_id = self.parent_id = None
        self.env_tags: dict[str, str] = {}
        self.packages: str | None = None  # `name==version` lines, an artifact of every trial run
        self.checkpoints = paths.work_dir(tracking_uri, self.study.name) / "checkpoints"
        self.outputs = paths.work_dir(tracking_uri, self.study.name) / "trials"
        self.test: dict[str, Any] | None = None
        self.active: dict[int, Active] = {}  # by worker slot index
        self.failed_starts = 0
        self._shown = 0.0
        self.best_value: float | None = None
        self._orphan_runs: list[tuple[str, str]] = []
        self._recover_orphans()
        self._next_stale_check = 0.0
        self._heartbeat = _Heartbeat(self.study, self.active, spec.heartbeat_seconds) \
            if self.study.heartbeat else None
        c = self.study.counts()
        if c["finished"] or c["retried"]:
            self._trial_line(f"resuming sweep {self.study.name!r}: {c['finished']} of "
                             f"{spec.trials} trials already finished, {c['waiting']} queued")

    def mlflow(self, wait: bool = True) -> bool:
        """Whether the MLflow side is ready; with ``wait``, block until it is.

        Once ready: create the runs of trials that started before, flush their epochs, and
        close the runs of orphaned trials.
        """
        if self.tracker is not None:
            return True
        if not wait and not self._mlflow_setup.done():
            return False
        self.tracker, self.experiment_id, self.parent_id, self.env_tags, self.packages = \
            self._mlflow_setup.result()
        for run_id, reason in self._orphan_runs:
            self.tracker.fail_run(run_id, reason)
        self._close_stray_runs()
        for active in self.active.values():
            self._create_run(active)
            self._flush(active)
        return True

    def _close_stray_runs(self) -> None:
        """Close trial runs left RUNNING whose trial is no longer running.

        A process killed between creating a trial's run and recording its id on the trial leaves
        a run that no trial points at; the run's ``sweep.trial_number`` tag finds it.
        """
        running = {t.number for t in self.study.trials() if t.state.name == "RUNNING"}
        for run_id, number in self.tracker.running_trial_runs(self.experiment_id, self.parent_id):
            if number not in running:
                self.tracker.fail_run(run_id, "the sweep run process that owned it was gone "
                                      "before the run was linked to its trial")

    def _recover_orphans(self) -> None:
        """Fail (and retry) the trials a dead ``sweep run`` left RUNNING; their runs are closed
        when MLflow is ready."""
        for t in self.study.orphans():
            owner = t.user_attrs.get(OWNER)
            reason = f"the sweep run process that owned it ({owner}) is gone"
            root = t.user_attrs.get(RETRY_ROOT, t.number)
            retry = self._retry_allowed("crash", root)
            if self.study.fail(t, reason, "crash", retry):
                run_id = t.user_attrs.get(RUN_ID)
                if run_id:
                    self._orphan_runs.append((run_id, reason))
                if not retry:
                    self._drop_checkpoint(root)

    # ------------------------------------------------------------------------------- loop

    def run(self, started: float) -> Outcome:
        self._preflight()
        deadline = started + self.spec.timeout_min * 60 if self.spec.timeout_min else None
        exhausted = False
        while True:
            if self.signals.received:
                return self._interrupted(started)
            launching = not exhausted and (deadline is None or time.monotonic() < deadline)
            if launching:
                exhausted = self._launch()
            if not self.active and (exhausted or not launching or self._done()):
                break
            for worker, msg in self.pool.wait(timeout=0.5):
                self._handle(worker, msg)
            self.mlflow(wait=False)
            self._enforce_trial_timeout()
            self._fail_stale_trials()
            self._show(started)
        self._show(started, force=True)
        self.mlflow()
        self._evaluate_test()
        self._export_best()
        if self.signals.received:
            return self._interrupted(started)
        if self.study.running():  # another machine's trials: the last machine ends the run
            self._trial_line(f"{self.study.running()} trial(s) still run on other machines; "
                             f"the parent run ends with the last of them")
        else:
            self.tracker.end_parent(self.parent_id, "FINISHED")
        return self._outcome(started, interrupted=False)

    def _fail_stale_trials(self) -> None:
        """With heartbeats (an RDB storage shared by machines): fail the trials of machines that
        stopped beating, retry them here, close their runs."""
        if self._heartbeat is None or time.monotonic() < self._next_stale_check:
            return
        self._next_stale_check = time.monotonic() + self.spec.heartbeat_seconds
        for t in self.study.fail_stale():
            reason = (f"no heartbeat for {2 * self.spec.heartbeat_seconds} s: the machine or "
                      f"process running it is gone")
            root = t.user_attrs.get(RETRY_ROOT, t.number)
            retry = self.study.crashes(root) <= self.spec.retries  # this failure included
            if retry:
                self.study.retry(t)
            self._trial_line(f"trial {t.number} failed: {reason}"
                             f"{' (queued for retry)' if retry else ''}")
            run_id = t.user_attrs.get(RUN_ID)
            if run_id and self.mlflow(wait=False):
                self.tracker.fail_run(run_id, reason)
            elif run_id:
                self._orphan_runs.append((run_id, reason))

    def _preflight(self) -> None:
        """Before the first trial: the trainer's checks on each dataset and model of the sweep,
        in a worker (while MLflow opens its store), logged on the parent run. A FAIL stops the
        sweep unless ``force``; a resumed sweep does not repeat them."""
        if self.spec.preflight is None or self.study.trials():
            return  # off, or checked by the run that started these trials
        worker = self._idle_worker()
        if worker is None:  # no worker could start: the loop says why
            return
        out = self.outputs.parent / "preflight"
        shutil.rmtree(out, ignore_errors=True)
        self._trial_line("preflight: checking data, devices, model and loss before the first "
                         "trial (preflight: false skips it)")

        def ask(req):
            reply = self._ask(worker, {"op": "preflight", **req})
            return reply["report"] if reply else None

        results = pf.check_all(self.spec, out, ask)
        if self.signals.received or not results:
            return
        if self.progress:
            for r in results:
                self.progress.show(pf.table(r["label"], r["report"]))
        status = pf.status_of(results)
        pf.write(out, results)
        self.mlflow()
        forced = status == "FAIL" and self.force
        self.tracker.log_preflight(self.parent_id, out, status + (" (forced)" if forced else ""))
        if status == "FAIL" and not forced:
            raise SweepError(*pf.failures(results),
                             "preflight failed: no trial was started; fix the cause above and "
                             "run again (sweep doctor SPEC checks without running), or pass "
                             "--force to run anyway")

    def _done(self) -> bool:
        return self.study.counts()["finished"] >= self.spec.trials

    def _launch(self) -> bool:
        """Give a trial to every idle ready worker; True when no trial is left to start."""
        idle = [w for w in self.pool.workers if w.ready and w.slot.index not in self.active]
        if not idle:
            return False
        # once per pass, not once per worker; trials running on other machines count too
        finished = self.study.counts()["finished"]
        running = max(self.study.running(), len(self.active))
        for worker in idle:
            if finished + running >= self.spec.trials:
                return False
            pending = self.study.next_trial()
            if pending is None:
                return True
            self._start(worker, pending)
            running += 1
        return False

    def _start(self, worker: Worker, pending: PendingTrial) -> None:
        from trainers import SettingsError, TrainSettings  # settings only: no torch import here

        tags = {"sweep.study": self.study.name,
                "sweep.repeat": str(pending.repeat), "sweep.seed": str(pending.seed),
                "sweep.worker": str(worker.slot.index),
                "sweep.cuda_visible_devices": worker.info.get("cuda_visible_devices", ""),
                "sweep.torch_threads": str(worker.info.get("torch_threads")),
                "sweep.torch_version": str(worker.info.get("torch_version")),
                "sweep.cuda_version": worker.info.get("cuda_version", ""),
                "sweep.cudnn_version": worker.info.get("cudnn_version", ""),
                "sweep.device_name": worker.info.get("device_name", "")}
        if pending.retry_of is not None:
            tags["sweep.retry_of"] = str(pending.retry_of)
        try:
            resolved = TrainSettings.from_dict(pending.settings)
        except SettingsError as e:  # a combination the spec's checks could not rule out
            active = Active(pending, time.monotonic(), pending.settings, {}, tags)
            self._fail(active, f"bad setting: {e}", "deterministic")
            return
        settings = resolved.to_dict()
        device = worker.info.get("device", "cpu") if resolved.device == "auto" else resolved.device
        active = Active(pending, time.monotonic(), settings,
                        {"lr_effective": resolved.lr_effective}, {**tags, "sweep.device": device})
        self.active[worker.slot.index] = active
        if self._heartbeat is not None:  # beat at once: the thread's first beat comes later
            self.study.beat(pending)
        output_dir = self.outputs / f"trial-{pending.number}"
        export = ({"formats": list(self.spec.export), "dir": str(output_dir / "export")}
                  if self.spec.export_for == "all" and self.spec.export else None)
        if not worker.send({"op": "trial", "number": pending.number, "settings": settings,
                            "checkpoint_dir": str(self.checkpoints / f"trial-{pending.root}"),
                            "output_dir": str(output_dir), "export": export}):
            self._worker_died(worker)
            return
        if self.mlflow(wait=False):
            self._create_run(active)

    def _create_run(self, active: Active) -> None:
        if active.run_id is None:
            active.run_id = self.tracker.start_trial(
                self.experiment_id, self.parent_id, active.pending.number, active.settings,
                active.params, {**self.env_tags, **active.tags}, start_time=active.started_ms,
                packages=self.packages)
            self.study.set_attr(active.pending, RUN_ID, active.run_id)

    def _trial_line(self, line: str) -> None:
        if self.progress:
            self.progress.trial_done(line)

    # ------------------------------------------------------------------------------- events

    def _handle(self, worker: Worker, msg: dict | None) -> None:
        if msg is None:
            return self._worker_died(worker)
        op = msg["op"]
        if op == "ready":
            worker.ready = True
            worker.info = {**msg, "device": "cuda" if msg["cuda_available"] else "cpu"}
        elif op == "epoch":
            self._epoch(worker, msg)
        elif op == "done":
            self._done_trial(worker, msg)

    def _epoch(self, worker: Worker, msg: dict) -> None:
        active = self.active[worker.slot.index]
        value = msg["metrics"][self.spec.objective.metric]
        active.curve.append(value)
        stop = False
        if math.isfinite(value):
            # an epoch restored from a checkpoint already passed the pruner: report it only
            stop = self.study.report(active.pending, msg["epoch"], value,
                                     ask_pruner=not msg["resumed"])
        worker.send({"stop": bool(stop)})  # answer first: the worker trains while we log
        active.warnings += msg.get("warnings", [])
        active.unlogged.append((msg["epoch"], msg["metrics"], msg["lr_steps"]))
        if time.monotonic() - active.flushed >= FLUSH_SECONDS:
            self._flush(active)

    def _flush(self, active: Active) -> None:
        if active.run_id is None:
            return  # MLflow is not ready yet: the epochs wait in memory
        if active.unlogged:
            self.tracker.log_epochs(active.run_id, active.unlogged)
            active.unlogged = []
        active.flushed = time.monotonic()

    def _done_trial(self, worker: Worker, msg: dict) -> None:
        active = self.active.pop(worker.slot.index)
        active.warnings += msg.get("warnings", [])
        self._close_run_first(active)
        state = msg["state"]
        metrics = {"train_seconds": msg["train_seconds"]} if "train_seconds" in msg else {}
        tags = {"sweep.resumed_from_epoch": str(msg.get("resumed_from", 0)),
                **_warning_tags(active)}
        if msg.get("weights"):  # the final state dict, for export and test evaluation
            self.tracker.log_weights(active.run_id, msg["weights"])
        if msg.get("export"):
            self.tracker.log_export(active.run_id, msg["export"])
        shutil.rmtree(self.outputs / f"trial-{active.pending.number}", ignore_errors=True)
        if state == "complete" and not all(math.isfinite(v) for v in active.curve):
            state, msg = "failed", {"reason": f"objective {self.spec.objective.metric} is not "
                                              f"finite: {active.curve[-1]}", "retryable": False}
        number = active.pending.number
        if state == "complete":
            value = self.study.complete(active.pending, active.curve)
            self.tracker.end_trial(active.run_id, "complete", metrics, tags)
            self._maybe_best(value)
            self._trial_line(f"trial {number} complete: {value:.4f}")
        elif state == "pruned":
            self.study.prune(active.pending)
            self.tracker.end_trial(active.run_id, "pruned", metrics, tags)
            self._trial_line(f"trial {number} pruned at epoch {len(active.curve)}")
        else:
            kind = "crash" if msg.get("retryable") else "deterministic"
            self._fail(active, msg["reason"], kind)
            return
        self._drop_checkpoint(active.pending.root)

    def _fail(self, active: Active, reason: str, kind: str) -> None:
        """Fail a trial in both stores; queue its retry when it crashed (within ``retries``) or
        was interrupted, else drop its checkpoint."""
        pending = active.pending
        self._close_run_first(active)
        retry = self._retry_allowed(kind, pending.root)
        self.study.fail(pending, reason, kind, retry)
        state = "interrupted" if kind == "interrupt" else "failed"
        self.tracker.end_trial(active.run_id, state, tags={"sweep.fail_reason": reason,
                                                           "sweep.fail_kind": kind,
                                                           "sweep.will_retry": str(retry).lower(),
                                                           **_warning_tags(active)})
        if not retry:
            self._drop_checkpoint(pending.root)
        then = ", will be retried" if retry else ""
        self._trial_line(f"trial {pending.number} failed{then}: {reason.splitlines()[0]}")

    def _retry_allowed(self, kind: str, root: int) -> bool:
        """Interrupts are always retried; crashes while the trial has ``retries`` left."""
        return kind == "interrupt" or (
            kind == "crash" and self.study.crashes(root) < self.spec.retries)

    def _close_run_first(self, active: Active) -> None:
        """Make sure a trial about to end has its run, with every epoch logged."""
        self.mlflow()
        self._create_run(active)
        self._flush(active)

    def _drop_checkpoint(self, root: int) -> None:
        if not self.spec.keep_checkpoints:
            shutil.rmtree(self.checkpoints / f"trial-{root}", ignore_errors=True)

    def _worker_died(self, worker: Worker) -> None:
        reason = worker.exit_reason()
        active = self.active.pop(worker.slot.index, None)
        if active is not None:
            self._fail(active, reason, "crash")
        if not worker.ready:
            self.failed_starts += 1
            if self.failed_starts >= 2 * len(self.pool.workers):
                raise SweepError(f"training workers cannot start: {reason}")
        self.pool.restart(worker)

    def _enforce_trial_timeout(self) -> None:
        if not self.spec.trial_timeout_min:
            return
        limit = self.spec.trial_timeout_min * 60
        for worker in self.pool.workers:
            active = self.active.get(worker.slot.index)
            if active and worker.kill_reason is None and time.monotonic() - active.started > limit:
                self.pool.kill_one(worker, f"trial exceeded trial_timeout_min "
                                           f"({self.spec.trial_timeout_min:g} min)")

    def _maybe_best(self, value: float) -> None:  # called after _close_run_first
        better = (self.best_value is None or
                  (value > self.best_value if self.spec.objective.direction == "maximize"
                   else value < self.best_value))
        if better:
            best = self.study.best(1)[0]
            self.best_value = best.value
            self.tracker.record_best(self.parent_id, best.value,
                                     best.user_attrs.get(RUN_ID, ""), best.number,
                                     self.study.counts()["finished"])

    # ------------------------------------------------------------------------------- ending

    def _evaluate_test(self) -> None:
        """The held-out test split, read once: by the final weights of the best configuration's
        trials (every repeat), after selection. Datasets without a test split skip it."""
        group = self.study.best_configuration()
        if not group or self.signals.received:
            return
        numbers = ",".join(str(t.number) for t in group)
        if self.tracker.tag(self.parent_id, TEST_TRIALS) == numbers:
            return  # a rerun of a finished sweep: these weights were already tested
        worker = self._idle_worker()
        if worker is None:
            return
        results = {}
        scratch = self.outputs / "test"
        try:
            for trial in group:
                if not self._test_one(worker, trial, scratch / str(trial.number), results):
                    break
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if results:
            self.test = summarize_test(results)
            self.tracker.log_final(self.parent_id, {k: v for k, v in self.test.items()
                                                    if isinstance(v, float)},
                                   {TEST_TRIALS: ",".join(map(str, results))})
            self._trial_line(f"held-out test split (not used for selection): test_acc "
                             f"{self.test['test_acc']:.4f} over trial(s) "
                             f"{', '.join(map(str, results))}")

    def _test_one(self, worker: Worker, trial, scratch, results: dict) -> bool:
        """Evaluate one trial's weights on the test split; False when there is no point in
        going on (no test split, the worker is gone, a signal came)."""
        run_id = trial.user_attrs.get(RUN_ID)
        weights = self.tracker.weights_path(run_id, scratch) if run_id else None
        if weights is None:
            return True
        reply = self._ask(worker, {"op": "test", "weights": weights,
                                   "settings": self.study.trial_settings(trial)})
        if reply is None or (reply["metrics"] is None and not reply["error"]):
            return False
        if reply["error"]:
            self.tracker.log_final(run_id, {}, {"sweep.test_error": reply["error"]})
            self._trial_line(f"trial {trial.number}: test evaluation failed: "
                             f"{reply['error'].splitlines()[0]}")
            return True
        self.tracker.log_final(run_id, reply["metrics"])
        results[trial.number] = reply["metrics"]
        return True

    def _export_best(self) -> None:
        """``export_for: best``: the best trial's weights exported in ``export`` formats, checked,
        and logged into its run (once: a rerun of a finished sweep does not export again)."""
        best = self.study.best(1)
        if self.spec.export_for != "best" or not self.spec.export or not best:
            return
        run_id = best[0].user_attrs.get(RUN_ID)
        if not run_id or self.tracker.tag(run_id, EXPORTED):
            return
        scratch = self.outputs / f"export-{best[0].number}"
        try:
            weights = self.tracker.weights_path(run_id, scratch / "weights")
            worker = self._idle_worker() if weights else None
            if worker is None:
                return
            self._trial_line(f"exporting trial {best[0].number} as "
                             f"{', '.join(self.spec.export)} and checking parity...")
            reply = self._ask(worker, {"op": "export", "weights": weights,
                                       "settings": self.study.trial_settings(best[0]),
                                       "formats": list(self.spec.export),
                                       "dir": str(scratch / "export")})
            if reply is None:
                return
            self.tracker.log_export(run_id, reply, mlflow_model=True)
            self._trial_line(f"trial {best[0].number} export: {export_line(reply)}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _idle_worker(self) -> Worker | None:
        """A ready worker, waiting for one to start if none is (a rerun of a finished sweep)."""
        while not self.signals.received:
            ready = [w for w in self.pool.workers if w.ready and w.alive]
            if ready:
                return ready[0]
            if self.failed_starts >= 2 * len(self.pool.workers):
                return None
            for worker, msg in self.pool.wait(timeout=0.5):
                self._handle(worker, msg)
        return None

    def _ask(self, worker: Worker, msg: dict) -> dict | None:
        """Send one request to an idle worker and wait for its answer (None: it died, or a
        signal arrived)."""
        if not worker.send(msg):
            return None
        while not self.signals.received:
            for w, reply in self.pool.wait(timeout=0.5):
                if w is worker:
                    return reply
        return None

    def _interrupted(self, started: float) -> Outcome:
        self.abort(f"interrupted by {self.signals.received}", kind="interrupt")
        return self._outcome(started, interrupted=True)

    def abort(self, reason: str, kind: str = "crash") -> None:
        """Stop every worker, fail its trial (queued for retry: the next run resumes it from its
        checkpoint) and end the parent run KILLED (interrupt) or FAILED. Best effort: the store
        itself may be what failed, and a later run recovers what is left RUNNING."""
        self.pool.kill()
        for active in list(self.active.values()):
            try:
                self._fail(active, reason, kind)
            except Exception:  # MLflow failed: still fail the trial in Optuna
                self.study.fail(active.pending, reason, kind, retry=kind == "interrupt")
        self.active.clear()
        try:
            self.mlflow()
            self.tracker.end_parent(self.parent_id, "KILLED" if kind == "interrupt" else "FAILED")
        except Exception:
            pass

    def _outcome(self, started: float, interrupted: bool) -> Outcome:
        self.mlflow()
        counts = self.study.counts()
        best = [{"number": t.number, "value": t.value,
                 "settings": sp.settings_for(self.spec.space, t.params),
                 "run_id": t.user_attrs.get(RUN_ID)} for t in self.study.best(5)]
        code = (EXIT_INTERRUPTED if interrupted else
                EXIT_FAILED_TRIALS if counts["fail"] else EXIT_OK)
        return Outcome(code, counts, best, self.experiment_id, self.parent_id, self.tracking_uri,
                       self.storage, time.monotonic() - started, self.test)

    def _show(self, started: float, force: bool = False) -> None:
        if self.progress is None or (not force and time.monotonic() - self._shown < 0.25):
            return
        self._shown = time.monotonic()
        best = self.study.best(1)
        self.progress.update({
            "counts": self.study.counts(), "total": self.spec.trials,
            "running": len(self.active), "elapsed": time.monotonic() - started,
            "best": ((best[0].value, sp.settings_for(self.spec.space, best[0].params))
                     if best else None)})


def _warning_tags(active: Active) -> dict[str, str]:
    return {"sweep.warnings": "\n".join(active.warnings)} if active.warnings else {}


def summarize_test(results: dict[int, dict[str, float]]) -> dict[str, Any]:
    """Mean (and, over several repeats, the sample standard deviation) of each test metric."""
    out: dict[str, Any] = {"trials": sorted(results)}
    for name in next(iter(results.values())):
        values = [r[name] for r in results.values()]
        mean = sum(values) / len(values)
        out[name] = mean
        if len(values) > 1:
            out[f"{name}_std"] = math.sqrt(sum((v - mean) ** 2 for v in values)
                                           / (len(values) - 1))
    return out


def export_line(result: dict[str, Any]) -> str:
    """One line on an export: each format passed / failed parity / could not export."""
    if result.get("error"):
        return f"failed: {result['error'].splitlines()[0]}"
    parts = []
    for fmt, r in result["report"]["formats"].items():
        state = ("passed parity" if r.get("passed") else
                 f"export failed ({r['error']})" if r.get("error") else "FAILED parity")
        parts.append(f"{fmt} {state}")
    return "; ".join(parts)
