"""The phases of a sweep that borrow idle workers: the preflight before the first trial, and
at the end the held-out test split and the export of the best trial (spread over the idle
workers: one trial's test evaluation, or a share of the export formats, each).

Each is a function given the trial book and the loop's :class:`Workers`; none imports the loop.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from optuna.trial import TrialState

from ..answer import compare, objectives, summary
from ..config.slots import plan_slots
from ..config.spec import SweepSpec
from ..core import keys
from ..core.errors import SweepError
from . import preflight as pf
from .book import TrialBook
from .pool import Worker, WorkerPool
from .protocol import (
    REPLY_TO,
    Export,
    Exported,
    Preflight,
    ProtocolError,
    Ready,
    Reply,
    Request,
    Test,
    Tested,
)

# Deadlines of a request to a worker, derived from the work it asks for: a preflight trains
# `overfit_steps` steps (and the lr range test as many again) after loading the data; the test
# split is one evaluation pass, an export one trace and one parity run per format, each bounded
# by a multiple of the slowest epoch the sweep measured.
PREFLIGHT_BASE_S = 300.0  # loading (or downloading) the data, the sample grid, the checks
PREFLIGHT_PER_STEP_S = 1.0  # one training step of a large model on a CPU, with room to spare
TEST_BASE_S = 120.0
# what a format's export weighs against torch_export's (the ONNX exporter translates the whole
# graph; int8 exports ONNX, then calibrates): the heaviest share goes first, to a warmed worker
EXPORT_WEIGHT = {"onnx": 3, "int8": 4}
EXPORT_PER_FORMAT_S = 300.0
EPOCHS_OF_WORK = 10  # a test pass or an export format may take this many epochs' time too


@dataclass(frozen=True)
class Lost:
    """A request its worker never answered: it died (``seconds`` None) or it ran past its
    deadline of ``seconds`` (then the loop killed and restarted it)."""

    reason: str
    seconds: float | None = None

    def line(self, phase: str) -> str:
        if self.seconds is None:
            return f"the worker died during the {phase}: {self.reason}"
        return (f"the {phase} did not finish within its deadline of {self.seconds:.0f} s "
                f"(the worker was killed and restarted): {self.reason}")


# Send requests to idle workers, as many at once as are idle, waiting for workers to start if
# need be, and wait at most `deadline_s` for each answer: per request its reply, Lost, or None
# (a signal came, or no worker can start).
AskAll = Callable[[list[Request], float], "list[Reply | Lost | None]"]


@dataclass(frozen=True)
class Workers:
    """What the loop lends a phase."""

    ask_all: AskAll
    interrupted: Callable[[], bool]  # SIGINT or SIGTERM arrived: stop
    count: int = 1  # how many workers the loop has (the most requests answered at once)
    # handle the workers' messages until done() or the seconds pass; whether done()
    wait: Callable[[Callable[[], bool], float], bool] = lambda done, seconds: done()

    def ask(self, request: Request, deadline_s: float) -> Reply | Lost | None:
        """One request to one idle worker (see :data:`AskAll`)."""
        return self.ask_all([request], deadline_s)[0]



def export_shares(formats: list[str], workers: int) -> list[tuple[str, ...]]:
    """The formats shared out among ``workers`` (each loads the model once for its share),
    the heaviest share first (it goes to the first worker free, the one warmed up)."""
    return sorted((tuple(formats[i::workers]) for i in range(min(workers, len(formats)))),
                  key=lambda share: -sum(EXPORT_WEIGHT.get(f, 1) for f in share))


class Speculation:
    """The export of the best trial so far, asked of workers left without a trial while the
    last trials still train, a share of the formats each (see :func:`export_shares`). A
    sweep's best is most often found before its last trial ends: then :func:`export_best`
    finds its export done or under way, and asks only for the shares no worker took yet. When
    the best changes, the next idle worker exports the new one; an export of a trial that is
    not the best at the end is dropped, never logged.
    """

    def __init__(self, book: TrialBook, workers: int = 1):
        self.book, self.count = book, workers
        self.number: int | None = None  # the trial whose export was asked last
        self.shares: list[tuple[str, ...]] = []
        self.asked: dict[int, Worker] = {}  # share: the worker exporting it, till it answers
        self.replies: dict[int, Exported] = {}
        self.request: Export | None = None  # the shares' request, but for formats and dir
        self.seconds = 0.0  # from the first share asked to the last answer
        self._asked = 0.0
        self._finished = -1  # finished trials when the best was last looked at

    def start(self, worker: Worker, finished: int) -> bool:
        """Ask idle ``worker`` for a share of the export of the best trial so far; False when
        there is nothing new to export (no share left, or no new finished trial and the best
        was asked already), MLflow is not attached yet, or a share could not be sent."""
        if finished != self._finished and self._new_best(finished):
            self.seconds, self._asked = 0.0, time.monotonic()
        todo = self._free()
        if not todo or not worker.lend(self._share(todo[0])):
            return False
        self.asked[todo[0]] = worker
        return True

    def _share(self, i: int) -> Export:
        """The request of share ``i``."""
        return replace(self.request, formats=self.shares[i], dir=str(self.folder() / f"part-{i}"))

    def _free(self) -> list[int]:
        """The shares of the current export no worker took yet."""
        return [i for i in range(len(self.shares)) if i not in self.asked
                and i not in self.replies] if self.request is not None else []

    def _new_best(self, finished: int) -> bool:
        """Set up the export of the best trial when it is new (its weights fetched)."""
        book, spec = self.book, self.book.spec
        if (spec.export_for != "best" or not spec.export
                or not book.attach_tracking(wait=False)):
            return False
        self._finished = finished
        best = book.study.best(1)
        if not best or best[0].number == self.number or best[0].state != TrialState.COMPLETE:
            return False
        run_id = best[0].user_attrs.get(keys.RUN_ID)
        if not run_id or book.tracker.tag(run_id, keys.EXPORTED):
            return False
        self.drop()
        weights = book.tracker.weights_path(run_id, self.folder(best[0].number) / "weights")
        if not weights:
            return False
        self.number, self.shares = best[0].number, export_shares(spec.export, self.count)
        self.request = Export(settings=book.study.trial_settings(best[0]), weights=weights,
                              formats=(), dir="")
        if "onnx" in spec.export:  # this process is mostly idle meanwhile
            from ..stores.tracking import (
                prepare_onnx_model,  # MLflow: imported in a thread till now
            )

            prepare_onnx_model()
        return True

    def answered(self, worker: Worker, reply: Exported) -> None:
        """The loop passes ``worker``'s answer to an export it did not ask for."""
        for share, asked in list(self.asked.items()):
            if asked is worker:
                del self.asked[share]
                self.replies[share] = reply
                self.seconds = time.monotonic() - self._asked

    def _pending(self) -> bool:
        """A share was asked and its worker still lives to answer it."""
        return any(w.alive and w.warming for w in self.asked.values())

    def folder(self, number: int | None = None) -> Path:
        """Where the export of trial ``number`` (by default the current one) is written."""
        number = self.number if number is None else number
        return self.book.folders.outputs / f"export-ahead-{number}"

    def drop(self) -> None:
        """Forget the last export (its files too); a pending share's answer is ignored."""
        if self.number is not None:
            shutil.rmtree(self.folder(), ignore_errors=True)
        self.number, self.request, self.shares = None, None, []
        self.asked, self.replies = {}, {}

    def take(self, number: int, workers: Workers,
             seconds: float) -> tuple[list[tuple[str, ...]], list[Exported | Lost]] | None:
        """The shares of trial ``number``'s export and their replies when it was asked ahead:
        the shares no worker took are asked now, those under way waited for (each at most
        ``seconds``); None when it was not asked ahead or a signal came."""
        if self.number != number or self.request is None:
            return None
        todo, waiting = self._free(), self._pending()
        asked = workers.ask_all([self._share(i) for i in todo], seconds) if todo else []
        if any(r is None for r in asked):
            return None
        self.replies.update(zip(todo, asked))
        if self._pending():
            workers.wait(lambda: not self._pending(), seconds)
        if todo or waiting:  # else it ended at its last answer, not now
            self.seconds = time.monotonic() - self._asked
        lost = Lost("the worker exporting it ahead died or missed its deadline", seconds)
        return self.shares, [self.replies.get(i, lost) for i in range(len(self.shares))]


def export_deadline(spec: SweepSpec, formats: int, trials=()) -> float:
    """Seconds an export of ``formats`` formats may take: ``export_timeout_s`` each when the
    spec sets it, else a fixed time and :data:`EPOCHS_OF_WORK` of the slowest epoch of
    ``trials`` each."""
    return formats * (spec.export_timeout_s or EXPORT_PER_FORMAT_S
                      + EPOCHS_OF_WORK * epoch_seconds(trials))


def started_trials(book: TrialBook) -> list:
    """The trials some run already started (a grid's enqueued WAITING trials are not)."""
    return [t for t in book.study.trials() if t.state != TrialState.WAITING]


def preflight_deadline(request: Preflight, timeout_s: float | None = None) -> float:
    """Seconds one configuration's checks may take: ``timeout_s`` when the spec sets it."""
    if timeout_s:
        return timeout_s
    steps = request.overfit_steps * (2 if request.lr_range_test else 1)
    return PREFLIGHT_BASE_S + PREFLIGHT_PER_STEP_S * steps


def epoch_seconds(trials) -> float:
    """The slowest epoch among ``trials`` (wall time of a trial over its epochs)."""
    out = 0.0
    for t in trials:
        epochs = objectives.epochs_of(t)
        if t.duration is not None and epochs:
            out = max(out, t.duration.total_seconds() / epochs)
    return out


def preflight(book: TrialBook, workers: Workers, *, force: bool = False,
              show: Callable[[Any], None] | None = None) -> None:
    """Before the first trial: the trainer's checks on each dataset and model of the sweep, in a
    worker (while MLflow opens its store), logged on the parent run. A resumed sweep does not
    repeat them.

    Args:
        force: go on when a check FAILs.
        show: shows each configuration's table (a rich renderable).

    Raises:
        SweepError: a check FAILed, without ``force``.
    """
    spec = book.spec
    if spec.preflight is None or started_trials(book):
        return  # off, or checked by the run that started these trials
    out = book.folders.work / "preflight"
    shutil.rmtree(out, ignore_errors=True)
    book.say("preflight: checking data, devices, model and loss before the first trial "
             "(preflight: false skips it)")

    def check(request: Preflight) -> dict[str, Any] | None:
        seconds = preflight_deadline(request, spec.preflight.timeout_s)
        reply = workers.ask(request, seconds)
        if isinstance(reply, Lost):  # the user's model or data hung or killed the process
            book.say(f"preflight {pf.label(request.settings)}: {reply.line('preflight')}")
            return lost_report(reply)
        return reply.report if reply else None

    results = pf.check_all(spec, out, check)
    if workers.interrupted() or not results:
        return
    for r in results if show else ():
        show(pf.table(r["label"], r["report"]))
    status = pf.status_of(results)
    for line in pf.failures(results, "ERROR"):  # the checker's own fault: said, never a stop
        book.say(line)
    pf.write(out, results)
    book.attach_tracking()
    forced = status == "FAIL" and force
    book.tracker.log_preflight(book.parent_id, out, status + (" (forced)" if forced else ""))
    if status == "FAIL" and not forced:
        raise SweepError(*pf.failures(results),
                         "preflight failed: no trial was started; fix the cause above and run "
                         "again (sweep doctor SPEC checks without running), or pass --force to "
                         "run anyway")


HANG_FIX = ("make the model's forward and the dataset return for one batch of this data (try "
            "one by hand); if the checks are only slow, raise preflight.timeout_s")


def lost_report(lost: Lost) -> dict[str, Any]:
    """The report of a configuration whose checks hung or killed their worker: one FAIL."""
    report = pf.failed_report(
        "deadline" if lost.seconds else "worker", lost.line("preflight"),
        "the model or the data hangs (a forward, a dataset or a loader that never returns)"
        if lost.seconds else "the model or the data crashed the process",
        HANG_FIX if lost.seconds else "see the worker log named above")
    return {**report, "seconds": lost.seconds or 0.0}


def check_in_worker(spec: SweepSpec, out: Path, log_dir: Path,
                    max_threads: int | None = None) -> list[dict[str, Any]]:
    """``sweep doctor``'s checks in one worker process with every core (at most ``max_threads``
    torch threads: :func:`~orchestrator.config.slots.thread_cap`), each configuration under
    its deadline: a model or a dataset that hangs (or kills the process) is that
    configuration's FAIL, and the next one gets a fresh worker.

    Raises:
        SweepError: the worker cannot start.
    """
    gpus = list(spec.gpus) if spec.gpus is not None else None
    pool = WorkerPool(plan_slots(1, gpus, max_threads=max_threads), log_dir)
    pool.start()
    try:
        def check(request: Preflight) -> dict[str, Any]:
            reply = _ask_alone(pool, request, preflight_deadline(request,
                                                                 spec.preflight.timeout_s))
            return lost_report(reply) if isinstance(reply, Lost) else reply.report

        return pf.check_all(spec, out, check)
    finally:
        pool.stop()


def _ask_alone(pool: WorkerPool, request: Request, seconds: float) -> Reply | Lost:
    """Ask the pool's one worker, once it is ready, and wait at most ``seconds`` for its
    answer (its start-up gets as long)."""
    worker, sent = pool.workers[0], False
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if worker.ready and not sent:
            sent, until = worker.send(request), time.monotonic() + seconds
            continue
        for _, msg in pool.wait(timeout=min(0.5, left)):
            if msg is None:
                reason = worker.exit_reason()
                if not worker.ready:
                    raise SweepError(f"the preflight worker cannot start: {reason}")
                pool.restart(worker)
                return Lost(reason)
            if isinstance(msg, Ready):
                worker.info = msg
            elif isinstance(msg, REPLY_TO[type(request)]):
                return msg
            else:
                raise ProtocolError(f"the preflight worker sent a {msg.op.value} message")
    pool.kill_one(worker, f"no answer within {seconds:.0f} s")
    worker.exit_reason()
    pool.restart(worker)
    return Lost(f"worker pid {worker.proc.pid}", seconds)


def evaluate_test_split(book: TrialBook, workers: Workers) -> dict[str, Any] | None:
    """The held-out test split, read once: by the final weights of the best configuration's
    trials (every repeat, one per idle worker at a time), after selection. Datasets without a
    test split skip it.

    Returns:
        The :func:`summarize_test` of the trials evaluated, or None when none was.
    """
    group = objectives.best_configuration(book.spec, book.study.trials())
    if not group or workers.interrupted():
        return None
    book.attach_tracking()
    if book.tracker.tag(book.parent_id, keys.TEST_TRIALS) == ",".join(str(t.number) for t in group):
        return None  # a rerun of a finished sweep: these weights were already tested
    seconds = book.spec.test_timeout_s or TEST_BASE_S + EPOCHS_OF_WORK * epoch_seconds(group)
    results: dict[int, dict[str, float]] = {}
    scratch = book.folders.outputs / "test"
    try:
        asked = []  # (trial, its run) of each request
        requests = []
        for trial in group:
            run_id = trial.user_attrs.get(keys.RUN_ID)
            weights = (book.tracker.weights_path(run_id, scratch / str(trial.number))
                       if run_id else None)
            if weights is not None:
                asked.append((trial, run_id))
                requests.append(Test(settings=book.study.trial_settings(trial),
                                     weights=weights))
        replies = workers.ask_all(requests, seconds) if requests else []
        for (trial, run_id), reply in zip(asked, replies):
            if not _record_test(book, trial, run_id, reply, results):
                break
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not results:
        return None
    test = summarize_test(results)
    book.tracker.log_final(book.parent_id, {k: v for k, v in test.items()
                                            if isinstance(v, float)},
                           {keys.TEST_TRIALS: ",".join(map(str, results))})
    book.say(f"held-out test split (not used for selection): test_acc {test['test_acc']:.4f} "
             f"over trial(s) {', '.join(map(str, results))}")
    return test


def _record_test(book: TrialBook, trial, run_id: str, reply: Tested | Lost | None,
                 results: dict) -> bool:
    """One trial's test evaluation into its run and ``results``; False when there is no point
    in going on (no test split, a signal came, no worker could start)."""
    if isinstance(reply, Lost):  # reported on the run; the sweep's results stand
        error = reply.line("test split evaluation")
    elif reply is None or (reply.metrics is None and not reply.error):
        return False
    else:
        error = reply.error
    if error:
        book.tracker.log_final(run_id, {}, {keys.TEST_ERROR: error})
        book.say(f"trial {trial.number}: test evaluation failed: {error.splitlines()[0]}")
        return True
    book.tracker.log_final(run_id, reply.metrics)
    results[trial.number] = reply.metrics
    return True


def export_best(book: TrialBook, workers: Workers, ahead: Speculation | None = None) -> None:
    """``export_for: best``: the best trial's weights exported in ``export`` formats (shared out
    among the idle workers), checked, and logged into its run (once: a rerun of a finished
    sweep does not export again). When ``ahead`` exported that trial already while the last
    trials trained, its result is logged instead."""
    spec, best = book.spec, book.study.best(1)
    if spec.export_for != "best" or not spec.export or not best:
        return
    book.attach_tracking()
    run_id = best[0].user_attrs.get(keys.RUN_ID)
    if not run_id or book.tracker.tag(run_id, keys.EXPORTED):
        return
    scratch = book.folders.outputs / f"export-{best[0].number}"
    try:
        weights = book.tracker.weights_path(run_id, scratch / "weights")
        if not weights:
            return
        # a comparison's: its level's typical confirmation run
        found = compare.final_answer(book.study.comparison, book.study.trials())
        whose = "" if not found else export_whose(book.study.comparison, found)
        book.say(f"exporting trial {best[0].number}{whose} as {', '.join(spec.export)} and "
                 f"checking parity...")
        shares = export_shares(spec.export, workers.count)
        seconds = export_deadline(spec, max(len(f) for f in shares), best)
        done = ahead.take(best[0].number, workers, seconds) if ahead else None
        if done is not None:
            result = merge_exports(*done, scratch / "export", tuple(spec.export))
            result["metrics"] = {**result["metrics"], keys.EXPORT_SECONDS: ahead.seconds}
            book.tracker.log_export(run_id, result, mlflow_model=True)
            book.say(f"trial {best[0].number} export (begun while the last trials trained): "
                     f"{export_line(result)}")
            return
        settings = book.study.trial_settings(best[0])
        if "onnx" in spec.export:  # this process waits meanwhile: the MLflow model's set-up
            from ..stores.tracking import prepare_onnx_model

            prepare_onnx_model()
        started = time.monotonic()
        replies = workers.ask_all([Export(settings=settings, weights=weights, formats=formats,
                                          dir=str(scratch / f"part-{i}"))
                                   for i, formats in enumerate(shares)], seconds)
        if any(r is None for r in replies):
            return
        result = merge_exports(shares, replies, scratch / "export", tuple(spec.export))
        result["metrics"] = {**result["metrics"], keys.EXPORT_SECONDS: time.monotonic() - started}
        book.tracker.log_export(run_id, result, mlflow_model=True)
        book.say(f"trial {best[0].number} export: {export_line(result)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def export_whose(c: compare.Comparison, found: compare.Answer) -> str:
    """Whose weights a comparison's export is, in the words of its answer: `` ((0, 1.0)'s
    confirmation run closest to its mean)``, and when levels are not separated from it, that
    it is one of theirs, the one the answer names."""
    name = summary.words_of(c).name
    peers = f"; one of {len(found.peers) + 1} levels no evidence separates, the one the " \
        f"answer names" if found.peers else ""
    return f" ({name(found.level)}'s confirmation run closest to its mean{peers})"


def merge_exports(shares: list[tuple[str, ...]], replies: list[Exported | Lost],
                  folder: Path, order: tuple[str, ...] = ()) -> dict[str, Any]:
    """One export result (as :meth:`Exported.result`) from the shares of the formats that
    several workers exported: their files moved into ``folder`` with one ``export.json``, the
    formats in ``order`` (the sweep's), whatever order the shares ran in. A share that failed
    as a whole (its worker lost, the weights unreadable) becomes that error on each of its
    formats; the result is an error only when every share failed."""
    parts = [Exported.failed(r.line("export"), "") if isinstance(r, Lost) else r
             for r in replies]
    if all(p.error for p in parts):
        return Exported.failed(parts[0].error, str(folder)).result()
    folder.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"files": {}, "formats": {}, "eager_latency": {}, "meta": {}}
    metrics: dict[str, float] = {}
    for formats, part in zip(shares, parts):
        if part.error or not part.report:
            report["formats"].update({f: {"passed": False, "error": part.error}
                                      for f in formats})
            continue
        for path in Path(part.dir).iterdir():  # every share writes the same example input
            shutil.move(str(path), str(folder / path.name))
        report["files"].update({f: Path(p).name  # relative to the export's folder
                                for f, p in part.report.get("files", {}).items()})
        report["formats"].update(part.report.get("formats", {}))
        for key in ("eager_latency", "meta"):  # the same model: the first share's figures
            report[key] = report[key] or part.report.get(key, {})
        metrics = {**part.metrics, **metrics}
    rank = {f: i for i, f in enumerate(order)}
    for key in ("files", "formats"):
        report[key] = dict(sorted(report[key].items(), key=lambda kv: rank.get(kv[0], len(rank))))
    (folder / "export.json").write_text(json.dumps(report, indent=2, default=str))
    return Exported(report=report, metrics=metrics, error=None, dir=str(folder)).result()


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
