"""A training worker process: imports torch once, then trains the trials its parent sends.

Started by :mod:`orchestrator.running.pool` as ``python -m orchestrator.running.worker FD THREADS``
(or forked by :mod:`orchestrator.running.spawner`, which has imported torch already);
talks to its parent over the connection on file descriptor FD with the messages of
:mod:`orchestrator.running.protocol` and never touches Optuna or MLflow. It dies with its parent
(``PR_SET_PDEATHSIG``, and an end-of-file on the connection).
"""
from __future__ import annotations

import json
import os
import platform
import signal
import sys
import time
import traceback
import warnings
from dataclasses import replace
from multiprocessing.connection import Connection

from trainers.system import die_with_parent  # imports no torch

from . import usage
from .protocol import (
    REQUESTS,
    Checked,
    Decision,
    Done,
    Epoch,
    Export,
    Exported,
    Failed,
    Message,
    Preflight,
    ProtocolError,
    Ready,
    Request,
    Stop,
    Test,
    Tested,
    Train,
    Warm,
    Warmed,
    receive,
    send,
)

EXIT_PROTOCOL = 2  # the parent sent something that is not a request: a bug, never a trial


def main(fd: int, threads: int, warm: str = "") -> int:
    if not die_with_parent():  # the parent died before the request took effect
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)

    import torch

    torch.set_num_threads(threads)
    import trainers

    send(conn, ready(torch))
    if warm and not conn.poll(0):  # nothing to do yet: what the first trial would pay for
        warm_up(warm, trainers)
    while True:
        try:
            request = receive(conn, *REQUESTS)
        except EOFError:
            return 0
        if isinstance(request, Stop):
            # nothing is left to save: skip the second-long teardown of torch's modules
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        send(conn, answer(conn, request, trainers))


def ready(torch) -> Ready:
    """What this worker runs on, in plain types: a torch object in a message would make the
    parent import torch to unpickle it (``torch.__version__`` is a TorchVersion)."""
    cuda = torch.cuda.is_available()
    return Ready(pid=os.getpid(), torch_version=str(torch.__version__),
                 torch_threads=torch.get_num_threads(),
                 cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                 cuda_available=cuda, cuda_version=str(torch.version.cuda or ""),
                 cudnn_version=str(torch.backends.cudnn.version() or ""),
                 device_name=(torch.cuda.get_device_name(0) if cuda
                              else platform.processor() or platform.machine()))


def warm_up(warm: str, trainers) -> None:
    """:func:`trainers.warm_up` with the settings in ``warm`` (JSON: an object, or null for
    the imports alone); a failure is left for the first request, which reports it."""
    try:
        settings = json.loads(warm)
        seconds = trainers.warm_up(settings and trainers.TrainSettings.from_dict(settings))
    except Exception as e:  # noqa: BLE001 - the trial that meets it again reports it
        sys.stderr.write(f"warm-up skipped: {type(e).__name__}: {e}\n")
        return
    sys.stderr.write(f"warmed up for training while idle: {seconds:.1f} s\n")


def answer(conn: Connection, request: Request, trainers) -> Message:
    """Carry out one request (a trial streams its epochs on ``conn`` meanwhile)."""
    if isinstance(request, Train):
        return run_trial(conn, request, trainers)
    if isinstance(request, Test):
        return run_test(request, trainers)
    if isinstance(request, Export):
        return run_export(request.settings, request.weights, request.formats, request.dir,
                          trainers)
    if isinstance(request, Preflight):
        return run_preflight(request)
    if isinstance(request, Warm):
        return run_warm(request.formats)
    raise ProtocolError(f"no handler for a {request.op.value} request")


class _Warnings:
    """Warnings raised while a trial trains, each distinct one once, for the trial's run."""

    LIMIT = 20

    def __init__(self):
        self._seen: set[str] = set()
        self._caught: list = []
        self._context = warnings.catch_warnings(record=True)

    def __enter__(self):
        self._caught = self._context.__enter__()
        warnings.simplefilter("default")  # once per place, as a user's console would show
        return self

    def __exit__(self, *exc):
        self._context.__exit__(*exc)

    def new(self) -> list[str]:
        """The distinct warnings caught since the last call."""
        out = []
        for w in self._caught:
            text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:300]}"
            if text not in self._seen and len(self._seen) < self.LIMIT:
                self._seen.add(text)
                out.append(text)
        self._caught.clear()
        return out


def run_trial(conn: Connection, request: Train, trainers) -> Done | Failed:
    """Train one trial, streaming each epoch (and the use of the machine sampled meanwhile)
    to the parent; return the final message."""
    with _Warnings() as caught, usage.Sampler(gpus=_gpu_probe(request.settings)) as sampler:
        def on_epoch_end(report) -> bool:
            send(conn, Epoch(epoch=report.epoch, metrics=report.metrics,
                             lr_steps=report.lr_steps, resumed=report.resumed,
                             warnings=tuple(caught.new()), system=sampler.drain()))
            return receive(conn, Decision).stop

        end = _train(request, trainers, on_epoch_end)
        return replace(end, warnings=tuple(caught.new()), system=sampler.drain(last=True))


_GPUS: list = []  # the worker's GpuProbe, made by the first trial on CUDA


def _gpu_probe(settings: dict) -> usage.GpuProbe | None:
    """The probe of this worker's GPUs when the trial trains on CUDA (None on the CPU: a probe
    would start CUDA in a worker that does not use it)."""
    import torch

    if not str(settings.get("device", "auto")).startswith(("auto", "cuda")) or \
            not torch.cuda.is_available():
        return None
    if not _GPUS:
        _GPUS.append(usage.GpuProbe(torch))
    return _GPUS[0]


def _train(request: Train, trainers, on_epoch_end) -> Done | Failed:
    try:
        settings = trainers.TrainSettings.from_dict(request.settings)
        result = trainers.train(settings, on_epoch_end=on_epoch_end,
                                checkpoint_dir=request.checkpoint_dir)
        weights = trainers.save_weights(result.model, os.path.join(request.output_dir,
                                                                   "weights.pt"))
    except trainers.DETERMINISTIC_ERRORS as e:
        return Failed(reason=f"{type(e).__name__}: {e}", retryable=False)
    except (EOFError, ProtocolError):  # the parent is gone, or broke the protocol
        raise
    except Exception as e:  # a bug in user or trainer code must end the trial, not the worker
        tb = traceback.format_exc(limit=-8)
        # the same code, settings and seed raise again; only I/O trouble may pass
        return Failed(reason=f"{type(e).__name__}: {e}\n{tb}", retryable=isinstance(e, OSError))
    export = None
    if request.export_formats and not result.stopped:  # export_for: all
        export = run_export(request.settings, result.model, request.export_formats,
                            request.export_dir, trainers)
    return Done(state="pruned" if result.stopped else "complete", epochs=result.epochs_run,
                train_seconds=result.train_seconds, device=result.device,
                resumed_from=result.resumed_from, weights=str(weights), export=export,
                discarded_checkpoint=result.discarded_checkpoint, val_items=result.val_items)


def run_export(settings: dict, model, formats, folder: str, trainers) -> Exported:
    """Export ``model`` (a module, or the path of saved weights) into ``folder`` in
    ``formats``; a failed export never fails the trial."""
    t0 = time.perf_counter()
    try:
        from trainers.export import export, summary_metrics

        report = export(trainers.TrainSettings.from_dict(settings), model, folder,
                        tuple(formats)).to_dict()
    except Exception as e:  # reported on the run; the trial's result stands
        return Exported.failed(f"{type(e).__name__}: {e}", folder)
    sys.stderr.write(f"exported {', '.join(formats)} into {folder}: "
                     f"{time.perf_counter() - t0:.1f} s\n")
    return Exported(report=report, metrics=summary_metrics(report), error=None, dir=folder)


def run_warm(formats) -> Warmed:
    """Set up the exporters of ``formats`` (see :func:`trainers.export.prepare`)."""
    from trainers.export import prepare

    t0 = time.perf_counter()
    prepare(tuple(formats))
    seconds = time.perf_counter() - t0
    sys.stderr.write(f"prepared the export ({', '.join(formats)}) while idle: {seconds:.1f} s\n")
    return Warmed(seconds=seconds)


def run_preflight(request: Preflight) -> Checked:
    """The preflight checks of one configuration (:func:`orchestrator.running.preflight.run_checks`
    never raises: a crash of the checks is an ERROR report)."""
    from .preflight import run_checks

    return Checked(run_checks(request))


def run_test(request: Test, trainers) -> Tested:
    """Evaluate saved weights on the test split (metrics None: the dataset has none)."""
    try:
        settings = trainers.TrainSettings.from_dict(request.settings)
        metrics = trainers.evaluate_test(settings, request.weights)
    except Exception as e:  # reported on the run; the sweep's results stand without it
        return Tested(metrics=None, error=f"{type(e).__name__}: {e}")
    return Tested(metrics=metrics)


def run(fd: int, threads: int, warm: str = "") -> int:
    """:func:`main`, its exit code: 0 once the parent is gone, :data:`EXIT_PROTOCOL` when it
    broke the protocol (what a worker forked by :mod:`~orchestrator.running.spawner` runs)."""
    try:
        return main(fd, threads, warm)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return 0  # the parent is gone
    except ProtocolError as e:
        sys.stderr.write(f"orchestrator.running.worker: {e}\n")
        return EXIT_PROTOCOL


if __name__ == "__main__":
    sys.exit(run(int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4]))
