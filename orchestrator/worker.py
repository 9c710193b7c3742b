"""A training worker process: imports torch once, then trains the trials its parent sends.

Started by :mod:`orchestrator.workers` as ``python -m orchestrator.worker FD THREADS``; talks to
its parent over the connection on file descriptor FD and never touches Optuna or MLflow. It dies
with its parent (``PR_SET_PDEATHSIG``, and an end-of-file on the connection).

Protocol (pickled dicts of plain types):
  parent -> worker: {"op": "trial", "number", "settings", "checkpoint_dir", "output_dir"}
                    | {"op": "test", "settings", "weights"} | {"op": "stop"}
                    | {"op": "preflight", "settings", "dir", ...} (see orchestrator.preflight)
  worker -> parent: {"op": "ready", ...environment} once, then per trial
                    {"op": "epoch", "epoch", "metrics", "lr_steps", "warnings"} (answered by
                    {"stop": bool}) and {"op": "done", "state": complete|pruned|failed,
                    "weights": path of the final state dict, "warnings", ...};
                    per test {"op": "tested", "metrics": dict | None, "error": str | None},
                    per preflight {"op": "checked", "report": dict}
"""
from __future__ import annotations

import os
import platform
import signal
import sys
import traceback
import warnings
from multiprocessing.connection import Connection

from trainers.system import die_with_parent  # imports no torch


def main(fd: int, threads: int) -> int:
    if not die_with_parent():  # the parent died before the request took effect
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)

    import torch

    torch.set_num_threads(threads)
    import trainers

    # plain types only: a torch object in a message would make the parent import torch to
    # unpickle it (torch.__version__ is a TorchVersion)
    conn.send({"op": "ready", "pid": os.getpid(), "torch_version": str(torch.__version__),
               "torch_threads": torch.get_num_threads(),
               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
               "cuda_available": torch.cuda.is_available(),
               "cuda_version": str(torch.version.cuda or ""),
               "cudnn_version": str(torch.backends.cudnn.version() or ""),
               "device_name": (torch.cuda.get_device_name(0) if torch.cuda.is_available()
                               else platform.processor() or platform.machine())})
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return 0
        if msg["op"] == "stop":
            # nothing is left to save: skip the second-long teardown of torch's modules
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if msg["op"] == "test":
            conn.send(run_test(msg, trainers))
        elif msg["op"] == "export":
            conn.send({"op": "exported", **run_export(msg, trainers)})
        elif msg["op"] == "preflight":
            conn.send({"op": "checked", "report": run_preflight(msg)})
        else:
            conn.send(run_trial(conn, msg, trainers))


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


def run_trial(conn: Connection, msg: dict, trainers) -> dict:
    """Train one trial, streaming each epoch to the parent; return the final message."""
    with _Warnings() as caught:
        def on_epoch_end(report) -> bool:
            conn.send({"op": "epoch", "epoch": report.epoch, "metrics": report.metrics,
                       "lr_steps": report.lr_steps, "resumed": report.resumed,
                       "warnings": caught.new()})
            return conn.recv()["stop"]

        done = _train(msg, trainers, on_epoch_end)
        done["warnings"] = caught.new()
    return done


def _train(msg: dict, trainers, on_epoch_end) -> dict:
    try:
        settings = trainers.TrainSettings.from_dict(msg["settings"])
        result = trainers.train(settings, on_epoch_end=on_epoch_end,
                                checkpoint_dir=msg["checkpoint_dir"])
        weights = trainers.save_weights(result.model, os.path.join(msg["output_dir"],
                                                                   "weights.pt"))
    except trainers.DETERMINISTIC_ERRORS as e:
        return {"op": "done", "state": "failed", "reason": f"{type(e).__name__}: {e}",
                "retryable": False}
    except EOFError:
        raise
    except Exception as e:  # a bug in user or trainer code must end the trial, not the worker
        tb = traceback.format_exc(limit=-8)
        # the same code, settings and seed raise again; only I/O trouble may pass
        retryable = isinstance(e, OSError)
        return {"op": "done", "state": "failed", "reason": f"{type(e).__name__}: {e}\n{tb}",
                "retryable": retryable}
    done = {"op": "done", "state": "pruned" if result.stopped else "complete",
            "epochs": result.epochs_run, "train_seconds": result.train_seconds,
            "device": result.device, "resumed_from": result.resumed_from,
            "weights": str(weights)}
    if msg.get("export") and not result.stopped:  # export_for: all
        done["export"] = run_export({**msg["export"], "settings": msg["settings"]}, trainers,
                                    result.model)
    return done


def run_export(msg: dict, trainers, model=None) -> dict:
    """Export a model (given, or from ``msg["weights"]``) into ``msg["dir"]``: {"report",
    "metrics", "error", "dir"}; a failed export never fails the trial."""
    try:
        from trainers.export import export, summary_metrics

        settings = trainers.TrainSettings.from_dict(msg["settings"])
        report = export(settings, model if model is not None else msg["weights"], msg["dir"],
                        tuple(msg["formats"])).to_dict()
        result = {"report": report, "metrics": summary_metrics(report), "error": None}
    except Exception as e:  # reported on the run; the trial's result stands
        result = {"report": None, "metrics": {}, "error": f"{type(e).__name__}: {e}"}
    return {**result, "dir": msg["dir"]}


def run_preflight(msg: dict) -> dict:
    """The preflight checks of one configuration, as a report dict (a crash of the checks
    themselves is a FAIL of the configuration, not of the worker)."""
    from .preflight import run_checks

    try:
        return run_checks(msg)
    except Exception as e:  # noqa: BLE001 - reported as the finding it is
        return {"status": "FAIL", "files": {}, "seconds": 0.0, "suggested_lr": None,
                "checks": [{"name": "preflight", "status": "FAIL",
                            "evidence": f"{type(e).__name__}: {e}"[:500],
                            "cause": "the checks themselves crashed", "fix": "see the worker "
                                                                             "log"}]}


def run_test(msg: dict, trainers) -> dict:
    """Evaluate saved weights on the test split: {"metrics": ... or None, "error": ...}."""
    try:
        settings = trainers.TrainSettings.from_dict(msg["settings"])
        metrics = trainers.evaluate_test(settings, msg["weights"])
    except Exception as e:  # reported on the run; the sweep's results stand without it
        return {"op": "tested", "metrics": None, "error": f"{type(e).__name__}: {e}"}
    return {"op": "tested", "metrics": metrics, "error": None}


if __name__ == "__main__":
    try:
        sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        sys.exit(0)  # the parent is gone
