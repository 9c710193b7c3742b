"""A training worker process: imports torch once, then trains the trials its parent sends.

Started by :mod:`orchestrator.workers` as ``python -m orchestrator.worker FD THREADS``; talks to
its parent over the connection on file descriptor FD and never touches Optuna or MLflow. It dies
with its parent (``PR_SET_PDEATHSIG``, and an end-of-file on the connection).

Protocol (pickled dicts):
  parent -> worker: {"op": "trial", "number", "settings"} | {"op": "stop"}
  worker -> parent: {"op": "ready", ...environment} once, then per trial
                    {"op": "epoch", "epoch", "metrics", "lr_steps"} (answered by {"stop": bool})
                    and {"op": "done", "state": complete|pruned|failed, ...}
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the closed connection still ends us
        pass


def main(fd: int, threads: int) -> int:
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before prctl took effect
        return 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn = Connection(fd)

    import torch

    torch.set_num_threads(threads)
    from trainers import SettingsError, TrainingDiverged, TrainSettings, train
    from trainers.checkpoint import CheckpointError

    # plain types only: a torch object in a message would make the parent import torch to
    # unpickle it (torch.__version__ is a TorchVersion)
    conn.send({"op": "ready", "pid": os.getpid(), "torch_version": str(torch.__version__),
               "torch_threads": torch.get_num_threads(),
               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
               "cuda_available": torch.cuda.is_available()})
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
        conn.send(run_trial(conn, msg, train, TrainSettings,
                            (SettingsError, TrainingDiverged, CheckpointError)))


def run_trial(conn: Connection, msg: dict, train, settings_cls, deterministic_errors) -> dict:
    """Train one trial, streaming each epoch to the parent; return the final message."""
    def on_epoch_end(report) -> bool:
        conn.send({"op": "epoch", "epoch": report.epoch, "metrics": report.metrics,
                   "lr_steps": report.lr_steps, "resumed": report.resumed})
        return conn.recv()["stop"]

    try:
        settings = settings_cls.from_dict(msg["settings"])
        result = train(settings, on_epoch_end=on_epoch_end, checkpoint_dir=msg["checkpoint_dir"])
    except deterministic_errors as e:
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
    return {"op": "done", "state": "pruned" if result.stopped else "complete",
            "epochs": result.epochs_run, "train_seconds": result.train_seconds,
            "device": result.device, "resumed_from": result.resumed_from}


if __name__ == "__main__":
    try:
        sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        sys.exit(0)  # the parent is gone
