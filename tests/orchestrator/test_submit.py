"""`sweep submit`: the job files it renders, the stores and folders it refuses, the slots a Slurm
task takes from its allocation, and a sweep on a real one-node Slurm cluster (munged, slurmctld
and slurmd started in a temporary folder) against PostgreSQL and `sweep server`, one of its two
array tasks cancelled mid-trial.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from orchestrator.config.slots import plan_slots
from orchestrator.config.spec import load_spec
from orchestrator.core.errors import SweepError
from orchestrator.running.submit import (
    Job,
    TaskSlots,
    check_job,
    filesystem_of,
    k8s_manifest,
    k8s_name,
    sbatch_script,
    secret_command,
    secret_name,
    store_problems,
    task_slots,
    workdir_problem,
)
from tests.conftest import free_port, rdb_storage, run_cli, tiny_spec
from tests.helpers import write_paced_model

PG = "postgresql://postgres@db.example:5432/sweeps"
SERVER = "http://mlflow.example:5000"


# ---------------------------------------------------------------------------- pure renderers

def test_the_sbatch_script_runs_sweep_run_with_slurm_slots_and_the_overrides_quoted(tmp_path):
    spec_file = tmp_path / ".sweep" / "s" / "submit" / "s.yaml"
    odd = "space.batch_size=[16, 32]"  # a space and brackets: one word for the shell
    text = sbatch_script("s", spec_file, tmp_path, Job(jobs=3, gpus=2, partition="gpu",
                                                      time="1-00:00:00"),
                         PG, SERVER, [odd, "train.epochs=1"], python="/opt/venv/bin/python",
                         max_grid=20000)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives = [line.split(" ", 1)[1] for line in lines if line.startswith("#SBATCH ")]
    assert directives == ["--job-name=sweep-s", "--array=0-2", "--cpus-per-task=8",
                          f"--output={spec_file.parent}/slurm-%A_%a.log", f"--chdir={tmp_path}",
                          "--gres=gpu:2", "--partition=gpu", "--time=1-00:00:00"]
    command = shlex.split(lines[-1])
    assert command == ["exec", "/opt/venv/bin/python", "-m", "orchestrator", "run",
                       str(spec_file), "--slurm", "--storage", PG, "--tracking-uri", SERVER,
                       "--set", odd, "--set", "train.epochs=1", "--max-grid", "20000"]
    out = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cpu = sbatch_script("s", spec_file, tmp_path, Job(jobs=1), PG, SERVER, [])
    assert "#SBATCH --cpus-per-task=2" in cpu and "--gres" not in cpu and "--array=0-0" in cpu


def test_the_k8s_manifest_is_a_config_map_and_an_indexed_job_reading_a_secret(tmp_path):
    spec_text = yaml.safe_dump(tiny_spec(name="Big_sweep.1"))
    job = Job(jobs=8, gpus=2, image="reg.example/sweep:1", volume_claim="sweeps")
    text = k8s_manifest("Big_sweep.1", spec_text, job, ["train.epochs=1"])
    assert "&id" not in text and "*id" not in text  # no YAML anchors: plain for any reader
    config_map, indexed = yaml.safe_load_all(text)
    base = k8s_name("Big_sweep.1")
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == base
    assert base.startswith("sweep-big-sweep-1-")  # readable, and the real name's hash after
    assert config_map["data"] == {"Big_sweep.1.yaml": spec_text}
    assert indexed["apiVersion"] == "batch/v1" and indexed["kind"] == "Job"
    js = indexed["spec"]
    assert (js["completionMode"], js["completions"], js["parallelism"]) == ("Indexed", 8, 8)
    pod = js["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "reg.example/sweep:1"
    assert container["command"] == ["sweep", "run", "/etc/sweep/Big_sweep.1.yaml", "--storage",
                                    "$(SWEEP_STORAGE)", "--set", "train.epochs=1",
                                    "--workers", "2"]  # its 2 GPUs
    assert container["resources"]["limits"] == {"cpu": "8", "nvidia.com/gpu": 2}
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env == {var: {"name": f"{base}-stores", "key": var}
                   for var in ("SWEEP_STORAGE", "MLFLOW_TRACKING_URI")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert volumes["work"]["persistentVolumeClaim"] == {"claimName": "sweeps"}
    assert mounts["work"] == container["workingDir"]  # checkpoints on the shared claim
    assert volumes["spec"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert container["command"][2] == f"{mounts['spec']}/Big_sweep.1.yaml"
    # the YAML a pod reads is the sweep itself
    (tmp_path / "pod.yaml").write_text(config_map["data"]["Big_sweep.1.yaml"])
    assert load_spec(tmp_path / "pod.yaml").name == "Big_sweep.1"
    cpu, = [d for d in yaml.safe_load_all(k8s_manifest(
        "s", spec_text, Job(jobs=2, cpus=6, image="i", volume_claim="v", secret="mine"), [],
        devices_per_trial=2)) if d["kind"] == "Job"]
    (container,) = cpu["spec"]["template"]["spec"]["containers"]
    assert container["command"][-2:] == ["--workers", "3"]  # its 6 CPUs in trials of 2
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"]} == {"mine"}


@pytest.mark.parametrize("gpus, devices_per_trial, workers_per_gpu", [
    (1, 1, 1), (4, 1, 1), (4, 2, 1), (5, 2, 1), (2, 1, 3), (8, 4, 2)])
def test_a_k8s_pods_workers_are_the_slots_its_own_gpus_give(gpus, devices_per_trial,
                                                             workers_per_gpu):
    """Whatever workers the YAML asks for (4 here), a pod runs as many as plan_slots gives its
    GPUs, so no pod is refused for workers its GPUs cannot hold."""
    spec_text = yaml.safe_dump(tiny_spec(workers=4))
    job = Job(jobs=2, gpus=gpus, image="i", volume_claim="v")
    (indexed,) = [d for d in yaml.safe_load_all(k8s_manifest(
        "s", spec_text, job, [], devices_per_trial, workers_per_gpu=workers_per_gpu))
        if d["kind"] == "Job"]
    (container,) = indexed["spec"]["template"]["spec"]["containers"]
    assert container["command"][-2] == "--workers"
    slots = plan_slots(None, [str(i) for i in range(gpus)], cores=job.cpus_per_task,
                       workers_per_gpu=workers_per_gpu, devices_per_trial=devices_per_trial)
    assert int(container["command"][-1]) == len(slots) >= 1


def test_a_k8s_pod_with_fewer_gpus_than_a_trial_is_refused_before_anything_is_written(
        tmp_path, write_spec):
    spec = write_spec(tiny_spec(train={"dataset": "digits", "epochs": 1,
                                       "devices_per_trial": 2}))
    out = run_cli("submit", str(spec), "--k8s", "--jobs", "2", "--gpus-per-job", "1",
                  "--image", "i", "--volume-claim", "v", "--storage", "postgresql://u@db/s",
                  "--tracking-uri", "http://db:5000", "--dry-run", cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "sweep: --gpus-per-job 1: a trial needs 2 GPUs (train.devices_per_trial); raise "
        "--gpus-per-job to 2 or lower train.devices_per_trial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing written


K8S_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"  # an RFC 1123 label, as Kubernetes checks names


@pytest.mark.parametrize("names", [
    ("my_sweep", "my.sweep", "My-Sweep", "my-sweep", "MY_SWEEP"),
    ("a" * 60 + "1", "a" * 60 + "2", "a" * 200),  # cut at the length limit
    ("x_", "x.", "x-", "X"),
])
def test_distinct_sweeps_get_distinct_valid_k8s_resource_names(names):
    manifests = {n: list(yaml.safe_load_all(k8s_manifest(
        n, "name: x\n", Job(jobs=1, image="i", volume_claim="v"), []))) for n in names}
    for kind in (0, 1):  # the ConfigMap, the Job
        given = [docs[kind]["metadata"]["name"] for docs in manifests.values()]
        assert len(set(given)) == len(names), given
        assert all(re.fullmatch(K8S_NAME, g) and len(g) <= 52 for g in given), given
    secrets = {secret_name(n, Job(jobs=1)) for n in names}
    assert len(secrets) == len(names) and all(len(s) <= 63 for s in secrets)
    assert k8s_name("my-sweep") == "sweep-my-sweep"  # a name Kubernetes takes as it is stays


# ------------------------------------------------------------------------------ pure checks

def test_bad_counts_and_the_other_schedulers_flags_are_refused_one_line_each():
    with pytest.raises(SweepError) as slurm:
        check_job(Job(jobs=0, gpus=-1, cpus=0, partition="a b", image="i", secret="s"), "slurm")
    assert slurm.value.lines == [
        "--jobs must be from 1 to 10000, got 0", "--gpus-per-job must be >= 0, got -1",
        "--cpus-per-job must be >= 1, got 0",
        "--partition 'a b': a partition name is letters, digits, '_', '.' and '-'",
        "--image is not an option of --slurm; leave it out",
        "--secret is not an option of --slurm; leave it out"]
    with pytest.raises(SweepError) as k8s:
        check_job(Job(jobs=2, image="i", volume_claim="Big_Claim", time="10"), "k8s")
    assert k8s.value.lines == [
        "--volume-claim 'Big_Claim': a claim name is lower-case letters, digits and '-'",
        "--time is not an option of --k8s; leave it out"]
    for limit in ("30", "1:30", "12:00:00", "2-00", "2-12:30", "2-12:30:00"):
        check_job(Job(jobs=1, time=limit), "slurm")  # Slurm's own formats pass


@pytest.mark.parametrize("limit", ["\u0663\u0660", "1:\u0663\u0660", "\u0662-00:00:00",
                                   "１２:00:00"])
def test_a_time_limit_of_digits_other_than_ascii_never_reaches_sbatch(limit):
    """Arabic-Indic or full-width digits match \\d, and Slurm reads none of them."""
    with pytest.raises(SweepError, match="--time .*: use minutes, HH:MM:SS"):
        check_job(Job(jobs=1, time=limit), "slurm")



@pytest.mark.parametrize("storage, tracking, words", [
    (None, SERVER, "--storage is required"),
    ("optuna.journal", SERVER, "--storage optuna.journal: a local file"),
    ("journal:/shared/o.journal", SERVER, "a local file"),
    ("sqlite:///o.db", SERVER, "--storage sqlite:///o.db: a SQLite file"),
    ("redis://db:6379", SERVER, "a redis:// storage"),
    (PG, None, "--tracking-uri is required"),
    (PG, "sqlite:///mlflow.db", "--tracking-uri sqlite:///mlflow.db: not an MLflow server"),
    (PG, "postgresql://db/mlflow", "not an MLflow server"),
    ("postgresql://u@db:99999/s", SERVER, "Port out of range"),  # not a traceback
    ("grpc://proxy", SERVER, "a grpc:// storage needs its port"),
])
def test_a_store_the_tasks_cannot_share_is_refused_with_one_line(storage, tracking, words):
    problems = store_problems(storage, tracking, nodes=4)
    assert len(problems) == 1 and words in problems[0], problems


def test_shared_stores_pass_and_loopback_is_refused_only_on_several_nodes():
    for storage in (PG, "postgresql+psycopg://u:pw@db/s", "mysql://db/s", "grpc://proxy:13000"):
        assert store_problems(storage, SERVER, nodes=8) == []
    local = ("postgresql://u:secret@127.0.0.1/s", "http://localhost:5000")
    problems = store_problems(*local, nodes=2)
    assert [p.split(":", 1)[0] for p in problems] == ["--storage postgresql", "--tracking-uri http"]
    assert "127.0.0.1 is each task's own node" in problems[0] and "secret" not in problems[0]
    assert store_problems(*local, nodes=1) == []  # one node: its tasks are on this machine
    assert store_problems(*local, nodes=None) == []  # cannot tell: not refused


MOUNTS = """/dev/vda / ext4 rw 0 0
tmpfs /dev/shm tmpfs rw 0 0
nas:/export/home /home nfs4 rw 0 0
nas:/export/home\\040two /mnt/home\\040two nfs rw 0 0
"""


def test_a_working_folder_on_a_local_filesystem_is_refused_on_several_nodes():
    assert filesystem_of(Path("/home/ann/proj"), MOUNTS) == "nfs4"
    assert filesystem_of(Path("/homework"), MOUNTS) == "ext4"  # not under /home
    assert filesystem_of(Path("/mnt/home two/x"), MOUNTS) == "nfs"
    assert filesystem_of(Path("/dev/shm/x"), MOUNTS) == "tmpfs"
    assert workdir_problem(Path("/home/ann"), "nfs4", nodes=16) is None
    line = workdir_problem(Path("/scratch/ann"), "ext4", nodes=16)
    assert line.startswith("working folder /scratch/ann: on a local ext4 filesystem")
    assert "shared filesystem" in line
    assert workdir_problem(Path("/dev/shm/x"), "tmpfs", nodes=2) is not None
    assert workdir_problem(Path("/scratch/ann"), "ext4", nodes=1) is None
    assert workdir_problem(Path("/scratch/ann"), "ext4", nodes=None) is None
    assert workdir_problem(Path("/gpfs/ann"), "gpfs", nodes=16) is None


def test_a_slurm_task_takes_its_slots_from_its_allocation():
    job = {"SLURM_JOB_ID": "7"}
    assert task_slots({**job, "SLURM_CPUS_PER_TASK": "3"}) == TaskSlots(3, [])
    assert task_slots({**job, "SLURM_CPUS_PER_TASK": "5"}, devices_per_trial=2).workers == 2
    assert task_slots({**job, "SLURM_CPUS_ON_NODE": "4"}).workers == 4
    assert task_slots(job).workers == 1
    gpus = {**job, "CUDA_VISIBLE_DEVICES": "2,3", "SLURM_CPUS_PER_TASK": "16"}
    assert task_slots(gpus) == TaskSlots(2, ["2", "3"])
    assert task_slots(gpus, workers_per_gpu=3) == TaskSlots(6, ["2", "3"])
    assert task_slots({**gpus, "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, devices_per_trial=2) == \
        TaskSlots(2, ["0", "1", "2", "3"])
    assert task_slots({**job, "SLURM_JOB_GPUS": "1"}) == TaskSlots(1, ["1"])
    assert task_slots({**job, "CUDA_VISIBLE_DEVICES": "NoDevFiles",
                       "SLURM_CPUS_PER_TASK": "2"}) == TaskSlots(2, [])
    with pytest.raises(SweepError, match="needs 2 GPUs, this Slurm job has 1"):
        task_slots({**job, "CUDA_VISIBLE_DEVICES": "0"}, devices_per_trial=2)
    with pytest.raises(SweepError, match="not inside a Slurm job"):
        task_slots({"SLURM_CPUS_PER_TASK": "2"})


JOIN = """
import sys, time
from pathlib import Path
from optuna.distributions import FloatDistribution
from orchestrator.config.spec import load_spec
from orchestrator.stores.study import SweepStudy
spec, storage, name, barrier = sys.argv[1:]
study = SweepStudy.open(load_spec(spec).model_copy(update={"name": name}), storage).study
Path(barrier, str(time.monotonic_ns())).touch()  # opened: now wait for the other joiner
while len(list(Path(barrier).iterdir())) < 2:
    time.sleep(0.05)
print(study.ask({"x": FloatDistribution(0, 1)}).params["x"])
"""


@pytest.mark.slow  # several sweep run processes
def test_tasks_joining_a_submitted_study_at_once_draw_their_own_trials(tmp_path, write_spec):
    """Two processes of this host open a study whose creator is gone, as the tasks of a sweep
    submit do on the node it ran on, both before either asks: marked as submitted, their first
    draws differ (unmarked, both would resume at offset 0 and draw the same trial)."""
    from orchestrator.core import keys
    from orchestrator.stores.study import SweepStudy

    spec = write_spec(tiny_spec(name="marked", sampler={"name": "random", "seed": 0}))
    storage = f"sqlite:///{tmp_path / 'o.db'}"
    made = SweepStudy.open(load_spec(spec), storage).study
    made.set_user_attr(keys.CREATOR, {"host": socket.gethostname(), "pid": _dead_pid(),
                                      "started": 1})
    made.set_user_attr(keys.SUBMITTED, True)
    (tmp_path / "barrier").mkdir()
    joiners = [subprocess.Popen([sys.executable, "-c", JOIN, str(spec), storage, "marked",
                                 str(tmp_path / "barrier")], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    draws = [float(j.communicate(timeout=120)[0]) for j in joiners]
    assert draws[0] != draws[1]


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# --------------------------------------------------------------------------------- the CLI

def test_submit_refuses_local_stores_and_bad_flags_writing_nothing(tmp_path, write_spec):
    spec = write_spec(tiny_spec())
    out = run_cli("submit", str(spec), "--slurm", "--jobs", "2", "--time", "2h", cwd=tmp_path,
                  timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == ["sweep: --time '2h': use minutes, HH:MM:SS or "
                                       "D-HH:MM:SS, e.g. --time 2-00:00:00"]
    out = run_cli("submit", str(spec), "--k8s", "--jobs", "2", "--image", "i",
                  "--volume-claim", "v", "--storage", "optuna.journal", cwd=tmp_path, timeout=120)
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and len(lines) == 2, out.stderr
    assert lines[0].startswith("sweep: --storage optuna.journal: a local file")
    assert lines[1].startswith("sweep: --tracking-uri is required")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing written


def test_sweep_run_slurm_outside_a_job_or_with_workers_is_one_line(write_spec, monkeypatch,
                                                                     capsys):
    from orchestrator.commands.cli import main

    spec = str(write_spec(tiny_spec()))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main(["run", spec, "--slurm"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sweep: --slurm: not inside a Slurm job (SLURM_JOB_ID is not set); sweep submit "
        "--slurm writes the job script that runs sweep run --slurm"]
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert main(["run", spec, "--slurm", "--workers", "3"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sweep: --slurm takes the workers and GPUs from the Slurm allocation; drop --workers "
        "and --gpus (or --slurm)"]


def test_the_secret_command_names_both_uris_with_passwords_masked():
    line = secret_command("sweep-s-stores", "postgresql://ann:hunter2@db/s", SERVER)
    assert shlex.split(line) == ["kubectl", "create", "secret", "generic", "sweep-s-stores",
                                 "--from-literal=SWEEP_STORAGE=postgresql://ann:***@db/s",
                                 f"--from-literal=MLFLOW_TRACKING_URI={SERVER}"]


def test_submit_dry_run_prints_the_script_it_writes_and_creates_nothing(tmp_path, write_spec):
    spec = write_spec(tiny_spec(name="dry"))
    out = run_cli("submit", str(spec), "--slurm", "--jobs", "4", "--cpus-per-job", "3",
                  "--storage", PG, "--tracking-uri", SERVER, "--set", "train.epochs=1",
                  "--dry-run", cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    script = tmp_path / ".sweep" / "dry" / "submit" / "dry.sbatch"
    assert out.stdout.startswith(script.read_text())  # db.example was never asked: dry run
    assert f"(dry run: wrote {script}; nothing created or submitted)" in out.stdout
    assert oct(script.stat().st_mode & 0o777) == "0o700"  # it holds the storage URL
    copy = script.with_name("dry.yaml")
    assert copy.read_text() == spec.read_text()
    assert "#SBATCH --array=0-3" in out.stdout and "#SBATCH --cpus-per-task=3" in out.stdout
    assert f"run {copy} --slurm" in out.stdout and "--set train.epochs=1" in out.stdout


# ------------------------------------------------------------------- a real Slurm cluster

SLURM_PROGRAMS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scancel",
                  "sinfo")
SLURM_CONF = """ClusterName=sweeptest
SlurmctldHost={host}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
MailProg=/bin/true
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    """A one-node Slurm cluster of this machine; ``env`` points its commands at it."""

    dir: Path
    env: dict[str, str]

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)

    def jobs(self) -> list[str]:
        out = self.run("squeue", "--noheader", "--array", "--format=%i")
        assert out.returncode == 0, out.stderr
        return out.stdout.split()


def _wait(ready, timeout: float, what: str, explain=None):
    """``ready()``'s first true value within ``timeout`` seconds; else an assertion that says
    what was awaited and, where given, ``explain()``: what the test saw instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        time.sleep(0.2)
    seen = f": {explain()}" if explain else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """munged (its own key and socket), slurmctld and slurmd on free ports, in a temporary
    folder; every job cancelled and every daemon stopped at the end."""
    missing = [p for p in SLURM_PROGRAMS if shutil.which(p) is None and
               not Path("/usr/sbin", p).exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: the Slurm test needs Debian's slurm-wlm and "
                    f"munge; install them as root with `apt-get install -y slurm-wlm munge` (the "
                    f"README's test command does)", pytrace=False)
    d = tmp_path_factory.mktemp("slurm")
    (d / "state").mkdir()
    (d / "spool").mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=socket.gethostname(), dir=d, ctld_port=free_port(),
                                      d_port=free_port(), user=_user()))
    env = {**os.environ, "SLURM_CONF": str(conf),
           "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin"}
    env.pop("MLFLOW_TRACKING_URI", None)
    daemons = [_start(["munged", "-F", "-f", f"--socket={d}/munge.socket", f"--key-file={key}",
                       f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                       f"--seed-file={d}/munged.seed"], env, d / "munged.out")]
    cluster = Cluster(d, env)
    try:
        _wait(lambda: cluster.run("munge", "-n", "-S", f"{d}/munge.socket").returncode == 0, 30,
              "munged")
        daemons.append(_start(["slurmctld", "-D", "-i", "-f", str(conf)], env, d / "ctld.out"))
        daemons.append(_start(["slurmd", "-D", "-f", str(conf)], env, d / "slurmd.out"))
        _wait(lambda: cluster.run("sinfo", "--noheader", "--format=%t").stdout.strip() == "idle",
              60, f"the Slurm node to be idle (logs in {d})")
        yield cluster
    finally:
        _stop(cluster, daemons)


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def _stop(cluster: Cluster, daemons: list[subprocess.Popen]) -> None:
    if len(daemons) == 3:
        jobs = cluster.jobs()
        if jobs:
            cluster.run("scancel", *jobs)
            _wait(lambda: not cluster.jobs(), 60, "the jobs to end")
    for proc in reversed(daemons):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def _states(study, tmp_path: Path, *tasks: str) -> str:
    """What a failed assertion shows: every trial's state and owner, and the end of each of
    the ``tasks``' logs."""
    trials = [(t.number, t.state.name, t.user_attrs.get("sweep.owner", {}).get("pid"))
              for t in study.trials]
    logs = [tmp_path / ".sweep" / study.study_name / "submit" / f"slurm-{task}.log"
            for task in tasks]
    return f"trials {trials}" + "".join(
        f"; {log.name}: {log.read_text()[-3000:] if log.exists() else '-'}" for log in logs)


def _task_of(pid: int) -> str:
    """The array task (``JOB_TASK``) a process on this node runs in, from its environment."""
    env = dict(item.split("=", 1) for item in
               Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
    return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"


def test_a_slurm_array_sweeps_together_and_a_cancelled_task_is_retried_by_the_other(
        slurm, databases, server, tmp_path, pace):
    import optuna
    from mlflow.tracking import MlflowClient

    storage = databases()
    spec = tiny_spec(name="slurm", trials=4, workers=2, heartbeat_seconds=1, retries=1,
                     train={"dataset": "digits", "model": "paced:model", "epochs": 4})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    # the tasks' model waits at a gate the test opens once both tasks own a running trial: a
    # task that starts first, however much sooner on a loaded machine, trains nothing alone;
    # then each batch is held 20 ms, a trial lasts long enough to be seen running and cancelled
    gate = tmp_path / "gate"
    write_paced_model(tmp_path, 0.02, gate)
    submit = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", "s.yaml",
                               "--slurm", "--jobs", "2", "--cpus-per-job", "1", "--storage",
                               storage, "--tracking-uri", server], cwd=tmp_path, env=slurm.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = submit.communicate(timeout=120)
    assert submit.returncode == 0, err
    job = out.split("submitted job ")[1].split(":")[0]
    assert sorted(slurm.jobs()) in ([f"{job}_0", f"{job}_1"], [])  # the id squeue knows
    assert f"squeue -j {job}" in out

    def study():
        return optuna.load_study(study_name="slurm", storage=rdb_storage(storage))

    # created once, by sweep submit: the tasks only joined
    assert optuna.get_all_study_names(rdb_storage(storage)) == ["slurm"]
    assert study().user_attrs["sweep.creator"]["pid"] == submit.pid
    # and marked so, for the tasks that join it at once to draw their own trials (see
    # test_tasks_joining_a_submitted_study_at_once_draw_their_own_trials)
    assert study().user_attrs["sweep.submitted"] is True

    def running():
        return [t for t in study().get_trials(deepcopy=False) if t.state.name == "RUNNING"
                and "sweep.owner" in t.user_attrs]

    def seen() -> str:
        return _states(study(), tmp_path, f"{job}_0", f"{job}_1")

    # the gate opens once each task owns a running trial: the task that starts second may
    # still be importing when the first would have trained every trial (then no trial of the
    # other would be running, and a cancelled task rightly ends the parent run)
    _wait(lambda: len({t.user_attrs["sweep.owner"]["pid"] for t in running()}) == 2,
          pace.budget(epochs=1, starts=2), "both tasks to own a running trial", seen)
    gate.touch()
    victim = _wait(lambda: next((t for t in running() if t.intermediate_values), None),
                   pace.budget(epochs=1), "a trial past its first epoch", seen)
    owner = victim.user_attrs["sweep.owner"]["pid"]
    cancelled = _task_of(owner)
    assert slurm.run("scancel", cancelled).returncode == 0
    survivor = ({f"{job}_0", f"{job}_1"} - {cancelled}).pop()
    _wait(lambda: cancelled not in slurm.jobs(), pace.budget(epochs=1), "the task to end")
    client = MlflowClient(tracking_uri=server)
    shared = client.get_run(study().user_attrs["sweep.parent_run_id"])
    assert survivor in slurm.jobs()  # it still trains: the parent run stays open for it
    assert shared.info.status == "RUNNING", _states(study(), tmp_path, cancelled)
    _wait(lambda: not slurm.jobs(), pace.budget(epochs=4 * 4, starts=2), "the job to end")

    trials = {t.number: t for t in study().trials}
    assert Counter(t.state.name for t in trials.values()) == {"COMPLETE": 4, "FAIL": 1}
    assert trials[victim.number].state.name == "FAIL"
    (retry,) = [t for t in trials.values() if t.user_attrs.get("sweep.retry_of") == victim.number]
    assert retry.state.name == "COMPLETE" and retry.params == victim.params
    drawn = [t.params for t in trials.values() if "sweep.retry_of" not in t.user_attrs]
    assert len({tuple(sorted(p.items())) for p in drawn}) == 4  # the tasks drew their own
    owners = {t.user_attrs["sweep.owner"]["pid"] for t in trials.values()}
    assert len(owners) == 2 and retry.user_attrs["sweep.owner"]["pid"] != owner  # both trained
    for pid in owners:  # one worker per task: its one CPU, not the YAML's workers: 2
        spans = sorted((t.datetime_start, t.datetime_complete) for t in trials.values()
                       if t.user_attrs["sweep.owner"]["pid"] == pid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans

    runs = client.search_runs([client.get_experiment_by_name("slurm").experiment_id],
                              max_results=100)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    (parent,) = [r for r in runs if r.data.tags.get("sweep.role") == "parent"]
    assert parent.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("sweep.role") == "trial"]
    assert len(children) == 5
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent.info.run_id}
    (again,) = [r for r in children if r.info.run_id == retry.user_attrs["sweep.mlflow_run_id"]]
    assert int(again.data.tags["sweep.resumed_from_epoch"]) >= 1  # its checkpoint was shared
    logs = tmp_path / ".sweep" / "slurm" / "submit"
    assert "CANCELLED" in (logs / f"slurm-{cancelled}.log").read_text()
    assert "sweep 'slurm' finished" in (logs / f"slurm-{survivor}.log").read_text()
