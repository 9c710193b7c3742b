"""The sweeps' worker spawners forked from the tests' zygote (tests/zygote.py) are the spawners
a pool starts itself: their workers train the same, in the pool's folder and environment, and
they end, are killed and are reaped as a fresh one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.config.slots import Slot
from orchestrator.running.pool import WorkerPool
from tests import forkcli, zygote
from tests.conftest import ROOT, Stores, run_cli, tiny_spec
from tests.helpers import died_with_their_spawner, parent_of, pool_ready, wait_gone

pytestmark = pytest.mark.slow  # worker processes, sweeps

# a model that says where it was built: the worker, its spawner and the spawner's parent, the
# path it imports from (a helper module on PYTHONPATH), whether the tests' package is in reach
PROBE = '''
import importlib.util, json, os, sys
import torch
from torch import nn
from probe_lib import LAYERS


def build(num_classes, in_channels):
    spawner = os.getppid()
    parent = int(open(f"/proc/{spawner}/stat").read().rsplit(")", 1)[1].split()[1])
    with open("probe.json", "a") as f:
        f.write(json.dumps({
            "spawner": spawner,
            "spawner_parent": open(f"/proc/{parent}/cmdline", "rb").read().decode(),
            "cwd": os.getcwd(), "path0": sys.path[0], "threads": torch.get_num_threads(),
            "omp": os.environ.get("OMP_NUM_THREADS"), "path": sys.path[:2],
            "tests": importlib.util.find_spec("tests") is not None,
            "test": os.environ.get("PYTEST_CURRENT_TEST")}) + "\\n")
    return nn.Sequential(*LAYERS(64 * in_channels, num_classes))
'''
PROBE_LIB = """
from torch import nn
def LAYERS(inputs, classes):
    return [nn.Flatten(), nn.Linear(inputs, classes)]
"""


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_a_sweep_trains_the_same_with_its_spawner_forked_by_the_zygote_or_fresh(tmp_path,
                                                                               monkeypatch):
    spec = tiny_spec(train={"dataset": "digits", "model": "probe:build", "epochs": 2})
    lib = tmp_path / "lib"  # on PYTHONPATH: forked, it is put on sys.path as a fresh one puts it
    lib.mkdir()
    (lib / "probe_lib.py").write_text(PROBE_LIB)
    got = {}
    for how in ("zygote", "fresh"):
        folder = tmp_path / how
        folder.mkdir()
        (folder / "probe.py").write_text(PROBE)
        (folder / "s.yaml").write_text(yaml.safe_dump(spec))
        # fresh: the zygote's address unset, the command too is a fresh process
        if how == "fresh":
            monkeypatch.setenv("SWEEP_TEST_FRESH_CLI", "1")
        forked = forkcli.FORKED
        done = run_cli("run", "s.yaml", cwd=folder, env={"PYTHONPATH": str(lib)} if
                       how == "zygote" else {"PYTHONPATH": str(lib), zygote.VAR: ""})
        assert done.returncode == 0, done.stderr[-3000:]
        assert forkcli.FORKED == forked + (how == "zygote")
        trials = [(t.params, t.values, t.intermediate_values)
                  for t in Stores(folder).study("tiny").trials]
        probes = [json.loads(line) for line in (folder / "probe.json").read_text().splitlines()]
        got[how] = trials, probes
    (zt, zp), (ft, fp) = got["zygote"], got["fresh"]
    # the same trials, to the last digit of every value and curve (seeded), in both
    assert len(zt) == 2 and zt == ft
    assert len(zp) == len(fp) == 2
    # where each worker's spawner came from: the zygote, or the sweep's own process
    assert all("tests.zygote" in p["spawner_parent"] for p in zp), zp
    assert all("orchestrator" in p["spawner_parent"] and "zygote" not in p["spawner_parent"]
               for p in fp), fp
    # the pool's folder (a model module in it imports), its thread cap, its environment
    for how, probes in (("zygote", zp), ("fresh", fp)):
        folder = str(tmp_path / how)
        assert {(p["cwd"], p["path0"], p["threads"], p["omp"]) for p in probes} == \
            {(folder, folder, 1, "1")}
        # PYTHONPATH's folder next, and the tests' package out of reach (the zygote and the
        # server imported it from the repository: each forked process forgets it)
        assert [(p["path"], p["tests"]) for p in probes] == [([folder, str(lib)], False)] * 2
    # the pool's own environment: the test's name pytest set, which the zygote's lacks
    assert {p["test"].split("::")[-1].split(" ")[0] for p in zp + fp} == \
        {"test_a_sweep_trains_the_same_with_its_spawner_forked_by_the_zygote_or_fresh"}


def test_a_spawner_from_the_zygote_is_killed_reaped_and_replaced_as_a_fresh_one(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pool = WorkerPool([Slot(0, None, 1), Slot(1, None, 1)], tmp_path / "logs")
    forked = zygote.FORKED
    pool.start()
    assert zygote.FORKED == forked + 1  # one spawner for both workers
    try:
        pool_ready(pool)
        old = pool.spawner.proc
        assert isinstance(old, zygote.Remote)
        # forked by an intermediate of this test process's zygote; the workers by it
        assert parent_of(parent_of(old.pid)) == zygote._ZYGOTE.pid
        assert "tests.zygote" in cmdline(old.pid)
        assert Path(f"/proc/{old.pid}/cwd").resolve() == tmp_path.resolve()
        workers = [w.info.pid for w in pool.workers]
        assert {parent_of(p) for p in workers} == {old.pid}
        assert [w.info.torch_threads for w in pool.workers] == [1, 1]
        # a worker's end and code, read by the spawner (reaping its own children)
        os.kill(workers[1], signal.SIGTERM)
        assert pool.wait(timeout=30) == [(pool.workers[1], None)]
        assert pool.workers[1].exit_reason().startswith(f"worker 1 (pid {workers[1]}) killed "
                                                        f"by SIGTERM")
        pool.restart(pool.workers[1])
        pool_ready(pool)
        workers = [w.info.pid for w in pool.workers]
        assert {parent_of(p) for p in workers} == {old.pid}
        # a SIGTERM to it is ignored, as by a fresh one
        os.kill(old.pid, signal.SIGTERM)
        time.sleep(0.3)
        assert old.poll() is None
        old.kill()  # its workers die with it, and their ends say so
        assert old.wait(timeout=10) == -signal.SIGKILL
        died_with_their_spawner(pool, workers)
        new = pool.spawner.proc
        assert isinstance(new, zygote.Remote) and new.pid != old.pid
        workers = [w.info.pid for w in pool.workers]
    finally:
        pool.stop()
    # stopped: its socket closed, it left by itself (code 0), and its workers with it
    assert new.wait(timeout=10) == 0 and wait_gone([*workers, new.pid])


def test_the_zygote_refuses_what_a_fork_would_change(tmp_path):
    """Another environment (a variable its imports may read), or a pool in another process
    group: the pool starts its spawner fresh."""
    zygote.ensure()
    refused = len(zygote.REFUSED)
    pool = WorkerPool([Slot(0, None, 1)], tmp_path / "logs")
    hook = tmp_path / "hook"  # a start-up hook, which only a fresh interpreter runs
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("")
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(hook)
    try:
        pool.start()
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.update(PYTHONPATH=old)
    try:
        pool_ready(pool)
        assert isinstance(pool.spawner.proc, subprocess.Popen)
        assert zygote.REFUSED[refused:] == [f"the pool's PYTHONPATH: {hook} holds "
                                            f"sitecustomize, which a fresh interpreter runs"]
    finally:
        pool.stop()
    # a process of another group (a `sweep run` started in a session of its own)
    code = ("import socket, sys; from tests import zygote\n"
            "a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
            f"got = zygote.ask({zygote.address()!r}, b, dict(__import__('os').environ), "
            f"{str(tmp_path / 'x.log')!r})\n"
            "print(got is None, zygote.REFUSED)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=forkcli.BASE_ENV, start_new_session=True)
    assert done.stdout.strip() == "True [\"the pool's process is in another process group\"]", \
        done.stderr
