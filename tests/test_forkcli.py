"""The tests' ``sweep`` commands forked from one process that imported the CLI's modules
(tests/forkcli.py) are the commands a fresh ``python -m orchestrator`` runs: the same output,
exit codes and files, in a process of their own."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests import forkcli
from tests.conftest import run_cli, tiny_spec


def fresh(*args, cwd):
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=forkcli.BASE_ENV)


def same(text: str) -> str:
    """Output with what differs between two runs of one command masked: ids, times, paths."""
    text = re.sub(r"[0-9a-f]{32}", "ID", text)
    text = re.sub(r"\d+(\.\d+)? (s|ms|min)\b", "T", text)
    return re.sub(r"/tmp/\S+", "PATH", text)


def test_the_tests_commands_are_forked_from_a_server_without_torch_or_threads(tmp_path):
    import torch  # noqa: F401 - what it sets in this process's environment changes nothing

    before = forkcli.FORKED
    done = run_cli("--help", cwd=tmp_path)  # as every test's commands: the tests' environment
    assert forkcli._SERVER is not None and forkcli._SERVER.ready, forkcli._SERVER.problem
    assert forkcli.FORKED == before + 1 and done.returncode == 0 and "sweep" in done.stdout
    # a command with another environment is never forked: only a fresh process reads it
    for changed in ({"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "true"},
                    {"PYTHONPATH": "relative/folder"}):
        other = {**forkcli.BASE_ENV, **changed}
        assert forkcli.run(["--help"], cwd=forkcli.ROOT, timeout=60, env=other) is None
    assert forkcli.FORKED == before + 1


def test_a_pythonpath_is_read_as_a_fresh_interpreter_reads_it_or_the_command_runs_fresh(
        tmp_path):
    """A folder of user code on PYTHONPATH is importable, the tests' own package is not (the
    server imported it from the repository); a folder with a start-up hook, or with a module
    that shadows one the server imported, sends the command to a fresh interpreter."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "usermod.py").write_text("def top1(outputs, labels):\n    return 1.0\n")
    hook, shadow = tmp_path / "hook", tmp_path / "shadow"
    for folder, module in ((hook, "sitecustomize.py"), (shadow, "yaml.py")):
        folder.mkdir()
        (folder / module).write_text("")
    spec = tmp_path / "s.yaml"
    both = f"{user}{os.pathsep}{forkcli.ROOT}"
    cases = [({"PYTHONPATH": str(user)}, "usermod:nope"),  # found, and no such function
             ({"PYTHONPATH": both}, "tests.trainers.test_seams:nope"),
             ({}, "tests.trainers.test_seams:nope"),  # not importable without PYTHONPATH
             ({}, "usermod:nope")]
    for changed, metric in cases:
        spec.write_text(yaml.safe_dump(tiny_spec(train={"epochs": 1, "metrics": [metric]})))
        env = {**forkcli.BASE_ENV, **changed}
        before = forkcli.FORKED
        forked = forkcli.run(["validate", str(spec)], cwd=tmp_path, timeout=60, env=env)
        assert forked is not None and forkcli.FORKED == before + 1, changed
        done = subprocess.run([sys.executable, "-m", "orchestrator", "validate", str(spec)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        assert (forked.returncode, forked.stdout, forked.stderr) == \
            (done.returncode, done.stdout, done.stderr) and done.returncode == 2, changed
        said = "has no attribute 'nope'" if changed else "No module named"
        assert said in done.stderr, (changed, done.stderr)
    for folder in (hook, shadow):
        env = {**forkcli.BASE_ENV, "PYTHONPATH": f"{user}{os.pathsep}{folder}"}
        assert forkcli.run(["--help"], cwd=tmp_path, timeout=60, env=env) is None, folder


@pytest.mark.slow  # sweeps
def test_a_forked_command_does_what_a_fresh_one_does(tmp_path):
    spec = tiny_spec(trials=1, train={"dataset": "digits", "model": "small_cnn", "epochs": 1})
    for how in ("forked", "fresh"):
        folder = tmp_path / how
        folder.mkdir()
        (folder / "s.yaml").write_text(yaml.safe_dump(spec))
        (folder / "bad.yaml").write_text(yaml.safe_dump({**spec, "trials": -1}))
    got = {}
    for how in ("forked", "fresh"):
        folder = tmp_path / how
        runs = []
        for args in (["run", "s.yaml"], ["status"], ["report", "tiny"], ["validate", "bad.yaml"],
                     ["run", "nope.yaml"], ["run", "--bogus"]):
            if how == "forked":
                done = forkcli.run(args, cwd=folder, timeout=300, env=forkcli.BASE_ENV)
                assert done is not None
            else:
                done = fresh(*args, cwd=folder)
            runs.append((args, done.returncode, same(done.stdout), same(done.stderr)))
        got[how] = runs
        files = sorted(same(str(p.relative_to(folder))) for p in folder.rglob("*")
                       if ".sweep" not in p.parts and "mlruns" not in p.parts)
        got[how].append(files)
    assert got["forked"][0][1] == 0 and got["forked"][3][1] == 2  # a sweep ran; bad YAML refused
    assert got["forked"] == got["fresh"]


@pytest.mark.slow  # a sweep
def test_a_started_command_is_signalled_waited_for_and_read_as_a_popen(tmp_path):
    """:func:`forkcli.start` (the tests' ``start_sweep``): its output read to the end, a
    ``communicate`` that timed out kept for the next, SIGINT and SIGKILL as a ``Popen``'s."""
    spec = tiny_spec(trials=50, train={"dataset": "digits", "model": "mlp", "epochs": 1})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    env = {**forkcli.BASE_ENV, "SWEEP_TEST_ZYGOTE": ""}
    forked = forkcli.start(["--help"], tmp_path, env)
    fresh = subprocess.Popen([sys.executable, "-m", "orchestrator", "--help"], cwd=tmp_path,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert forked.communicate(timeout=60) == fresh.communicate(timeout=60)
    assert forked.returncode == fresh.returncode == 0 and forked.poll() == 0
    ends = []
    for sig in (signal.SIGINT, signal.SIGKILL):
        proc = forkcli.start(["run", "s.yaml"], tmp_path, env)
        assert isinstance(proc, forkcli.Forked) and proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.communicate(timeout=0.5)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
        deadline = time.monotonic() + 120  # till it trains: its spawner a child of its own
        while not _children(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _children(proc.pid), "no spawner started"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        ends.append((proc.returncode, out, err))
        proc.kill()  # ended: nothing happens
    (code, out, err), (killed, _, _) = ends
    assert code == 130, err  # interrupted: what was printed before and after the signal
    assert "tiny" in out + err and "interrupted" in (out + err).lower(), (out, err)
    assert killed == -signal.SIGKILL


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.slow  # sweeps
def test_a_forked_command_is_a_process_of_its_own_killed_at_its_timeout(tmp_path):
    shutil.copy(forkcli.ROOT / "sweeps" / "quickstart.yaml", tmp_path / "q.yaml")
    before = forkcli._SERVER.proc.pid if forkcli._SERVER else None
    try:
        forkcli.run(["run", "q.yaml"], cwd=tmp_path, timeout=3, env=forkcli.BASE_ENV)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("the sweep was not stopped at its timeout")
    pid = forkcli._SERVER.last_pid
    assert pid not in (0, os.getpid(), forkcli._SERVER.proc.pid)  # a process of its own
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()  # killed, and reaped by its intermediate
    assert forkcli._SERVER.proc.poll() is None  # the server goes on
    assert before in (None, forkcli._SERVER.proc.pid)
