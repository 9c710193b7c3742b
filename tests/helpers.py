"""Helpers several test files share (fixtures live in conftest.py): a `sweep run` started and
watched as a process, its workers found, the specs and fakes more than one file runs."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.running.protocol import Done, Epoch, Ready
from tests import forkcli, zygote
from tests.conftest import SLACK, tiny_spec

# ------------------------------------------------------------------ a paced user model

# a user model (train.model: paced:model, its file beside the spec) whose trials last about as
# long on an idle machine as on a loaded one: the perceptron, each batch held PAUSE seconds
# without using the CPU; with a GATE (a file path), training first waits (10 minutes at most)
# until that file exists: the test opens the gate once what it must see at once is there
PACED_MODEL = """
import time
from pathlib import Path
from torch import nn

PAUSE, GATE = {pause!r}, {gate!r}


class Paced(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))

    def forward(self, x):
        deadline = time.monotonic() + 600  # the tests' own waits end well before
        while GATE and not Path(GATE).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(PAUSE)
        return self.net(x)


def model(num_classes, in_channels):
    return Paced(num_classes)
"""


def write_paced_model(folder: Path, pause_s: float, gate: Path | None = None) -> None:
    """``paced.py`` (:data:`PACED_MODEL`) in ``folder``."""
    (folder / "paced.py").write_text(PACED_MODEL.format(pause=pause_s,
                                                        gate=str(gate) if gate else None))


# ------------------------------------------------------------------ a sweep as a process


def start_sweep(spec_path: Path, cwd: Path) -> subprocess.Popen | forkcli.Forked:
    """``sweep run SPEC`` in ``cwd`` as a real process, its output piped; the caller waits.
    Forked as the tests' other commands (:func:`tests.forkcli.start`), with its worker spawner
    its own child, as a fresh one's (the zygote's address empty): these tests signal it, kill
    it and read its process tree (:func:`worker_pids`)."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env[zygote.VAR] = ""
    args = ["run", str(spec_path)]
    return forkcli.start(args, cwd, env) or subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env)


def wait_for_epoch(stores, name: str, proc: subprocess.Popen, pace):
    """Block until some trial of sweep ``name`` has reported an epoch and has its MLflow run
    (created once MLflow is ready, which may come after the first epoch); return the run id.
    Waits as long as :class:`tests.conftest.Pace` says the CLI and a worker take to start and
    train an epoch.

    Reads the Optuna journal (safe beside a writer), not the MLflow database, which this test
    must not open while the sweep may still be creating it.
    """
    deadline = time.monotonic() + pace.budget(epochs=1, starts=2)
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if stores.journal.exists():
            try:
                trials = stores.study(name).trials
            except KeyError:  # the study is not created yet
                trials = []
            for t in trials:
                if t.intermediate_values and "sweep.mlflow_run_id" in t.user_attrs:
                    return t.user_attrs["sweep.mlflow_run_id"]
        time.sleep(0.3)
    raise AssertionError("no epoch was reported in time")


def progress(stores, name: str) -> tuple[int, int]:
    """(epochs reported, trials finished) of sweep ``name``, read from its journal."""
    trials = stores.study(name).trials
    return (sum(len(t.intermediate_values) for t in trials),
            sum(t.state.is_finished() for t in trials))


def finish(proc: subprocess.Popen, stores, name: str, pace) -> tuple[str, str]:
    """``proc.communicate()``, waiting as long as the sweep makes progress: it fails only once
    no epoch and no trial end came for as long as a fresh worker takes to start and train an
    epoch (:class:`tests.conftest.Pace`), or SLACK times the longest such gap seen so far: on
    a loaded machine epochs come slower, and so does the limit."""
    seen, last, longest = progress(stores, name), time.monotonic(), 0.0
    while True:
        try:
            return proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        now, done = time.monotonic(), progress(stores, name)
        if done != seen:
            seen, last, longest = done, now, max(longest, now - last)
        stalled = now - last
        assert stalled < max(pace.budget(epochs=1), SLACK * longest), \
            f"no progress for {stalled:.0f} s (longest gap before: {longest:.0f} s)"


def worker_pids(parent: int) -> list[int]:
    """The pids of the training workers that ``parent`` started: its children running
    ``orchestrator.running.worker`` (a fresh process, as on a GPU) or the children of its
    worker spawner, named ``sweep-worker`` (forked, :mod:`orchestrator.running.spawner`)."""
    children: dict[int, list[int]] = {}
    worker = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (proc / "cmdline").read_bytes()
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        children.setdefault(int(stat[1]), []).append(int(proc.name))
        if b"orchestrator.running.worker" in cmd or comm == "sweep-worker":
            worker.add(int(proc.name))
    spawners = [p for p in children.get(parent, []) if p not in worker]
    return sorted(p for p in (*children.get(parent, []),
                              *(c for s in spawners for c in children.get(s, [])))
                  if p in worker)


def pool_ready(pool, timeout: float = 120) -> None:
    """Wait till every worker of ``pool`` (a :class:`~orchestrator.running.pool.WorkerPool`)
    said Ready; each worker's ``info`` is its Ready message."""
    deadline = time.monotonic() + timeout
    while not all(w.ready for w in pool.workers):
        assert time.monotonic() < deadline, "the workers did not start in time"
        for worker, msg in pool.wait(timeout=0.5):
            assert isinstance(msg, Ready), (worker.slot, msg, worker.exit_reason())
            worker.info = msg


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended and been reaped (no zombie left)."""
    return not Path(f"/proc/{pid}").exists()


def wait_gone(pids, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return all(gone(p) for p in pids)


def died_with_their_spawner(pool, workers: list[int], seconds: float = 30) -> None:
    """After ``pool``'s spawner was killed: each of its ``workers`` (pids) ended with it, none
    left training, each end told as the kill it was; then each is started again."""
    ends = []
    deadline = time.monotonic() + seconds
    while len(ends) < len(workers) and time.monotonic() < deadline:
        ends += pool.wait(timeout=0.5)
    assert sorted(w.slot.index for w, msg in ends if msg is None) == \
        [w.slot.index for w in pool.workers]
    assert wait_gone(workers)
    assert all(w.exit_reason().startswith(f"worker {w.slot.index} (pid {pid}) killed by "
                                          f"SIGKILL") for w, pid in zip(pool.workers, workers))
    for w in list(pool.workers):
        pool.restart(w)
    pool_ready(pool)


def long_spec(**overrides):
    """A 2-configuration grid of 40 epochs each: still training when the test acts on it."""
    return tiny_spec(train={"dataset": "digits", "epochs": 40, "batch_size": 32},
                     space={"lr": [1e-3, 2e-3]}, sampler={"name": "grid"}, trials=None,
                     **overrides)


# ------------------------------------------------------------------ specs and fakes

COMPARE_SPACE = {"optimizer": {"adam": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
                               "sgd": {"lr": {"low": 1e-2, "high": 0.3, "log": True}}}}


def compare_spec(**overrides) -> dict:
    """A digits comparison of adam and sgd, one epoch a trial, on two workers (a comparison
    schedules its levels' trials side by side); an override of None removes that key."""
    spec = tiny_spec(name="cmp", trials=None, workers=2, sampler={"name": "random", "seed": 0},
                     train={"dataset": "digits", "model": "small_cnn", "epochs": 1},
                     space=COMPARE_SPACE,
                     compare={"factor": "optimizer", "tune_trials": 2, "seeds": 2})
    for key, value in overrides.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


# the hello of a worker that never ran (pid 1, CPU only), for a TrialBook driven by hand
FAKE_WORKER = Ready(pid=1, torch_version="2.0", torch_threads=1, cuda_visible_devices="",
                    cuda_available=False, cuda_version="", cudnn_version="", device_name="cpu")


def epoch(n: int, val_acc: float, resumed: bool = False) -> Epoch:
    """Epoch ``n`` as a worker reports it: ``val_acc`` and ``val_loss = 1 - val_acc``."""
    return Epoch(epoch=n, metrics={"val_acc": val_acc, "val_loss": 1 - val_acc},
                 lr_steps=[(n, 0.01)], resumed=resumed)


def run_trial(book, curve: list[float], slot: int = 0):
    """Start the next trial on ``slot`` as the loop does and report ``curve``, one value an
    epoch."""
    pending = book.study.next_trial()
    book.runs.open_run(book.start(slot, pending, FAKE_WORKER))
    for n, value in enumerate(curve, 1):
        book.report_epoch(slot, epoch(n, value))
        book.log_epoch(slot, epoch(n, value))
    return pending


def done(state: str = "complete") -> Done:
    """A worker's end of a 2-epoch trial in ``state``."""
    return Done(state=state, epochs=2, train_seconds=1.5, device="cpu", resumed_from=0,
                weights="")


# ------------------------------------------------------------------ the trainer's lr curves


def lrs(s, steps_per_epoch: int) -> list[float]:
    """The lr of each optimizer step of settings ``s`` as ``lr_at`` computes it."""
    from trainers.optim import lr_at

    return [lr_at(s, i, steps_per_epoch) for i in range(s.epochs * steps_per_epoch)]


def scheduler_lrs(s, steps_per_epoch: int) -> list[float]:
    """The lr of each optimizer step as the optimizer and its scheduler give it."""
    import torch

    from trainers.optim import build_optimizer, build_scheduler

    opt = build_optimizer(torch.nn.Linear(2, 2), s)
    sched = build_scheduler(opt, s, steps_per_epoch=steps_per_epoch)
    seen = []
    for _ in range(s.epochs * steps_per_epoch):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return seen


# ------------------------------------------------------------------ the browser

CHROMIUM = "/usr/bin/chromium"
# headless and quiet: no GPU, no sandbox (root in CI), nothing fetched from the network
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic"]
