"""``sweep submit``: a sweep as a Slurm job array or a Kubernetes Indexed Job, each task one
``sweep run`` joining the shared study.

The renderers and checks here are pure (they read what they are given); the few functions that
touch the world (the cluster's size, a mount table, a server, ``sbatch``) are named for it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from ..config.spec import MAX_GRID
from ..core.errors import SweepError
from ..core.urls import mask

SHARED_STORAGES = ("postgresql", "mysql", "grpc")  # what tasks on other nodes can all reach
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "http": 80, "https": 443}
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")
# filesystems a node keeps to itself: a working folder on one, seen from the submitting machine,
# is not what the other nodes see (a network filesystem shows as nfs, lustre, gpfs, ...)
LOCAL_FILESYSTEMS = ("tmpfs", "ramfs", "devtmpfs", "overlay", "ext2", "ext3", "ext4", "xfs",
                     "btrfs", "f2fs", "vfat", "exfat", "ntfs", "apfs")
# ASCII digits only (re.ASCII): \d also matches Arabic-Indic digits, which Slurm does not read
SLURM_TIME = re.compile(r"\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+(:\d{2}(:\d{2})?)?", re.ASCII)
SLURM_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SPEC_MOUNT = "/etc/sweep"  # where a pod finds the sweep YAML (from the manifest's ConfigMap)
WORK_MOUNT = "/sweep"  # a pod's working folder: the shared volume, with .sweep/NAME/checkpoints


@dataclass(frozen=True)
class Job:
    """What each task of a submitted sweep gets: ``jobs`` tasks of ``gpus`` GPUs and ``cpus``
    CPUs; Slurm's ``partition`` and ``time`` limit; the Kubernetes ``image``, the Secret holding
    the stores' URIs and the ReadWriteMany volume claim every pod mounts as its working folder."""

    jobs: int
    gpus: int = 0
    cpus: int | None = None
    partition: str | None = None
    time: str | None = None
    image: str | None = None
    secret: str | None = None
    volume_claim: str | None = None

    @property
    def cpus_per_task(self) -> int:
        """``cpus``, default 4 per GPU (data loading), else 2."""
        return self.cpus if self.cpus is not None else (4 * self.gpus if self.gpus else 2)


@dataclass(frozen=True)
class TaskSlots:
    """The worker slots of one task: ``workers`` processes on ``gpus`` (empty: on CPU)."""

    workers: int
    gpus: list[str]


# ------------------------------------------------------------------------------------- checks

def check_job(job: Job, kind: str) -> None:
    """Refuse option values the scheduler would refuse later, or misread.

    Raises:
        SweepError: one line per problem, naming the flag, the value and the fix.
    """
    problems = []
    if not 1 <= job.jobs <= 10000:
        problems.append(f"--jobs must be from 1 to 10000, got {job.jobs}")
    if job.gpus < 0:
        problems.append(f"--gpus-per-job must be >= 0, got {job.gpus}")
    if job.cpus is not None and job.cpus < 1:
        problems.append(f"--cpus-per-job must be >= 1, got {job.cpus}")
    if job.partition is not None and not SLURM_NAME.fullmatch(job.partition):
        problems.append(f"--partition {job.partition!r}: a partition name is letters, digits, "
                        f"'_', '.' and '-'")
    if job.time is not None and not SLURM_TIME.fullmatch(job.time):
        problems.append(f"--time {job.time!r}: use minutes, HH:MM:SS or D-HH:MM:SS, e.g. "
                        f"--time 2-00:00:00")
    if kind == "k8s":
        problems += _k8s_problems(job)
    other = {"slurm": (("--image", job.image), ("--volume-claim", job.volume_claim),
                       ("--secret", job.secret)),
             "k8s": (("--partition", job.partition), ("--time", job.time))}[kind]
    problems += [f"{flag} is not an option of --{kind}; leave it out" for flag, value in other
                 if value is not None]
    if problems:
        raise SweepError(*problems)


def _k8s_problems(job: Job) -> list[str]:
    problems = []
    if not job.image:
        problems.append("--image is required with --k8s: the container image with this project "
                        "installed, e.g. --image registry.example.com/sweep:1.0")
    if not job.volume_claim:
        problems.append("--volume-claim is required with --k8s: a ReadWriteMany "
                        "PersistentVolumeClaim every pod mounts as its working folder, where "
                        "trials keep the checkpoints another pod resumes from")
    elif not K8S_NAME.fullmatch(job.volume_claim):
        problems.append(f"--volume-claim {job.volume_claim!r}: a claim name is lower-case "
                        f"letters, digits and '-'")
    if job.secret is not None and not K8S_NAME.fullmatch(job.secret):
        problems.append(f"--secret {job.secret!r}: a Secret name is lower-case letters, digits "
                        f"and '-'")
    return problems


def store_problems(storage: str | None, tracking_uri: str | None,
                   nodes: int | None) -> list[str]:
    """Why the study storage or the tracking URI cannot be shared by tasks on ``nodes`` nodes
    (None: unknown; a Kubernetes pod counts as a node of its own: pass 2), one line each.

    A local file (an Optuna journal, SQLite) is seen by one machine only; an MLflow database URI
    leaves every task's artifacts on its own node; ``localhost`` names each task's own node.
    """
    problems = []
    fix = "use postgresql://USER@HOST/DB or grpc://HOST:PORT (sweep server --storage-proxy)"
    if not storage:
        problems.append(f"--storage is required with sweep submit: the tasks share one study; "
                        f"{fix}")
    else:
        scheme = urlsplit(storage).scheme.split("+")[0]
        if scheme not in SHARED_STORAGES:
            what = "a SQLite file" if scheme == "sqlite" else (
                "a local file" if len(scheme) <= 1 or scheme == "journal" else
                f"a {scheme}:// storage")
            problems.append(f"--storage {mask(storage)}: {what}, which tasks on other nodes "
                            f"cannot share; {fix}")
        else:
            problems += _port_problem(storage) or _loopback("--storage", storage, nodes)
    serve = "start an MLflow server (sweep server --host 0.0.0.0 ...) and give http://HOST:PORT"
    if not tracking_uri:
        problems.append(f"--tracking-uri is required with sweep submit (or $MLFLOW_TRACKING_URI): "
                        f"the tasks log to one MLflow server; {serve}")
    elif urlsplit(tracking_uri).scheme not in ("http", "https"):
        problems.append(f"--tracking-uri {mask(tracking_uri)}: not an MLflow server, so each "
                        f"task would keep its runs or artifacts on its own node; {serve}")
    else:
        problems += _loopback("--tracking-uri", tracking_uri, nodes)
    return problems


def _loopback(flag: str, url: str, nodes: int | None) -> list[str]:
    host = urlsplit(url).hostname or ""
    if host in LOOPBACK and nodes is not None and nodes > 1:
        return [f"{flag} {mask(url)}: {host} is each task's own node, not this machine "
                f"({nodes} nodes may run the tasks); use a host name they resolve, e.g. "
                f"{socket.gethostname()}"]
    return []


def workdir_problem(folder: Path, filesystem: str | None, nodes: int | None) -> str | None:
    """Why the working folder (``.sweep/NAME/checkpoints`` lives in it) is not seen by every
    task, as far as can be told: on a cluster of more than one node, a filesystem this machine
    keeps to itself (``filesystem`` as the mount table names it). None when it may be shared."""
    if nodes is None or nodes <= 1 or filesystem not in LOCAL_FILESYSTEMS:
        return None
    return (f"working folder {folder}: on a local {filesystem} filesystem, but the tasks on "
            f"{nodes} nodes must all see it (a retried trial resumes from the checkpoints in "
            f".sweep/ there); run sweep submit from a folder on a shared filesystem (NFS, "
            f"Lustre, GPFS...)")


def task_slots(env: Mapping[str, str], workers_per_gpu: int = 1,
               devices_per_trial: int = 1) -> TaskSlots:
    """The worker slots of a Slurm task, from its allocation: ``workers_per_gpu`` per group of
    ``devices_per_trial`` allocated GPUs (``CUDA_VISIBLE_DEVICES``, else ``SLURM_STEP_GPUS`` or
    ``SLURM_JOB_GPUS``), else one per ``devices_per_trial`` allocated CPUs
    (``SLURM_CPUS_PER_TASK``, else ``SLURM_CPUS_ON_NODE``).

    Raises:
        SweepError: not inside a Slurm job, or too few GPUs for one trial.
    """
    if not env.get("SLURM_JOB_ID"):
        raise SweepError("--slurm: not inside a Slurm job (SLURM_JOB_ID is not set); sweep "
                         "submit --slurm writes the job script that runs sweep run --slurm")
    k = devices_per_trial
    gpus = next((ids for var in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")
                 for ids in [_gpu_ids(env.get(var))] if ids), [])
    if gpus:
        if len(gpus) < k:
            raise SweepError(f"train.devices_per_trial: a trial needs {k} GPUs, this Slurm job "
                             f"has {len(gpus)}; submit with --gpus-per-job {k} or more")
        return TaskSlots(workers=len(gpus) // k * workers_per_gpu, gpus=gpus)
    cpus = next((int(v) for var in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")
                 for v in [env.get(var, "")] if v.isdigit() and int(v) > 0), 1)
    return TaskSlots(workers=max(1, cpus // k), gpus=[])


def _gpu_ids(text: str | None) -> list[str]:
    """GPU ids of a list like ``0,1`` or ``GPU-uuid,...``; none for ``-1``, ``NoDevFiles``..."""
    ids = [g.strip() for g in (text or "").split(",") if g.strip()]
    return [g for g in ids if g.isdigit() or g.startswith(("GPU-", "MIG-"))]


# ---------------------------------------------------------------------------------- renderers

def sbatch_script(name: str, spec_file: Path, workdir: Path, job: Job, storage: str,
                  tracking_uri: str, overrides: list[str], python: str = sys.executable,
                  max_grid: int | None = MAX_GRID) -> str:
    """The job array script: ``job.jobs`` tasks, each ``sweep run SPEC --slurm`` in ``workdir``
    (where the checkpoints are), its output in ``slurm-JOB_TASK.log`` beside ``spec_file``."""
    directives = [f"--job-name=sweep-{name}", f"--array=0-{job.jobs - 1}",
                  f"--cpus-per-task={job.cpus_per_task}",
                  f"--output={spec_file.parent / 'slurm-%A_%a.log'}", f"--chdir={workdir}"]
    if job.gpus:
        directives.append(f"--gres=gpu:{job.gpus}")
    if job.partition:
        directives.append(f"--partition={job.partition}")
    if job.time:
        directives.append(f"--time={job.time}")
    command = [python, "-m", "orchestrator", "run", str(spec_file), "--slurm",
               "--storage", storage, "--tracking-uri", tracking_uri,
               *run_flags(overrides, max_grid)]
    lines = ["#!/bin/bash",
             f"# sweep {name}: {job.jobs} Slurm array tasks, each a sweep run joining the study "
             f"{name} (written by sweep submit)",
             *(f"#SBATCH {d}" for d in directives),
             "set -euo pipefail",
             "# the task's workers come from its allocation (SLURM_CPUS_PER_TASK, "
             "CUDA_VISIBLE_DEVICES)",
             "exec " + " ".join(shlex.quote(word) for word in command)]
    return "\n".join(lines) + "\n"


def pod_workers(job: Job, devices_per_trial: int = 1, workers_per_gpu: int = 1) -> int:
    """The workers of one Kubernetes pod: a pod sees its own GPUs and every core of its node, so
    its share is its limits, whatever workers the YAML asks for on another machine.

    Raises:
        SweepError: a pod's GPUs are fewer than one trial needs.
    """
    if job.gpus and job.gpus < devices_per_trial:
        raise SweepError(f"--gpus-per-job {job.gpus}: a trial needs {devices_per_trial} GPUs "
                         f"(train.devices_per_trial); raise --gpus-per-job to "
                         f"{devices_per_trial} or lower train.devices_per_trial")
    if job.gpus:
        return job.gpus // devices_per_trial * workers_per_gpu
    return max(1, job.cpus_per_task // devices_per_trial)


def k8s_manifest(name: str, spec_text: str, job: Job, overrides: list[str],
                 devices_per_trial: int = 1, max_grid: int | None = MAX_GRID,
                 workers_per_gpu: int = 1) -> str:
    """A ConfigMap holding the sweep YAML and an Indexed Job of ``job.jobs`` pods, each
    ``sweep run`` with the storage and tracking URIs from the Secret ``job.secret``, its GPUs
    as resource limits and the volume claim as its working folder. Each pod runs as many
    workers as its share allows (``--workers``, in place of the YAML's): its GPUs in groups of
    ``devices_per_trial``, ``workers_per_gpu`` on each, or its CPU limit in trials of
    ``devices_per_trial`` cores.

    Raises:
        SweepError: a pod's GPUs are fewer than one trial needs.
    """
    base = k8s_name(name)
    labels = {"app.kubernetes.io/name": "sweep", "sweep/name": base[len("sweep-"):]}
    secret = secret_name(name, job)
    spec_name = f"{name}.yaml"
    command = ["sweep", "run", f"{SPEC_MOUNT}/{spec_name}", "--storage", "$(SWEEP_STORAGE)",
               *run_flags(overrides, max_grid)]
    command += ["--workers", str(pod_workers(job, devices_per_trial, workers_per_gpu))]
    limits = {"cpu": str(job.cpus_per_task), **({"nvidia.com/gpu": job.gpus} if job.gpus else {})}
    container = {
        "name": "sweep", "image": job.image, "workingDir": WORK_MOUNT, "command": command,
        "env": [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": var}}}
                for var in ("SWEEP_STORAGE", "MLFLOW_TRACKING_URI")],
        "resources": {"requests": {"cpu": str(job.cpus_per_task)}, "limits": limits},
        "volumeMounts": [{"name": "spec", "mountPath": SPEC_MOUNT, "readOnly": True},
                         {"name": "work", "mountPath": WORK_MOUNT},
                         {"name": "shm", "mountPath": "/dev/shm"}]}
    pod = {"restartPolicy": "Never", "containers": [container],
           "volumes": [{"name": "spec", "configMap": {"name": base}},
                       {"name": "work", "persistentVolumeClaim": {"claimName": job.volume_claim}},
                       {"name": "shm", "emptyDir": {"medium": "Memory"}}]}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": base, "labels": dict(labels)},
                  "data": {spec_name: spec_text}}
    indexed = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": base, "labels": dict(labels)},
               "spec": {"completionMode": "Indexed", "completions": job.jobs,
                        "parallelism": job.jobs, "backoffLimit": job.jobs,
                        "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}}
    head = (f"# sweep {name}: {job.jobs} pods, each a sweep run joining the study {name} "
            f"(written by sweep submit; kubectl apply -f this file)\n")
    return head + yaml.dump_all([config_map, indexed], Dumper=_Manifest, sort_keys=False)


class _Manifest(yaml.SafeDumper):
    """YAML as people write manifests: a multi-line string (the sweep YAML) as a block."""

    def represent_str(self, data: str):
        style = "|" if "\n" in data else None
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Manifest.add_representer(str, _Manifest.represent_str)


def run_flags(overrides: list[str], max_grid: int | None = MAX_GRID) -> list[str]:
    """The flags of ``sweep submit`` each task's ``sweep run`` repeats: ``--set`` and a raised
    grid cap (the task validates the YAML again)."""
    flags = [a for o in overrides for a in ("--set", o)]
    if max_grid is not None and max_grid != MAX_GRID:
        flags += ["--max-grid", str(max_grid)]
    return flags


K8S_NAME_MAX = 52  # a Job's name: its pods' names add a suffix within Kubernetes' 63


def k8s_name(name: str) -> str:
    """``sweep-NAME`` as Kubernetes names objects (lower case, ``-`` for ``_`` and ``.``, at
    most :data:`K8S_NAME_MAX` characters). Where that changes the name (``my_sweep``,
    ``my.sweep`` and ``My-Sweep`` would all be ``sweep-my-sweep``), cuts it or must drop its
    last ``-``, 8 hex digits of
    the name's SHA-256 follow: distinct sweeps get distinct ConfigMaps, Jobs and Secrets."""
    slug = name.lower().replace("_", "-").replace(".", "-")
    base = f"sweep-{slug}"
    if slug == name and len(base) <= K8S_NAME_MAX and not slug.endswith("-"):
        return base
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{base[:K8S_NAME_MAX - len(digest) - 1].rstrip('-')}-{digest}"


def secret_name(name: str, job: Job) -> str:
    """The Secret the pods read the stores' URIs from: ``--secret``, else sweep-NAME-stores."""
    return job.secret or f"{k8s_name(name)}-stores"


def secret_command(secret: str, storage: str, tracking_uri: str) -> str:
    """The ``kubectl`` line creating the Secret the pods read the URIs from (passwords masked:
    the user types them)."""
    return (f"kubectl create secret generic {secret} "
            f"--from-literal=SWEEP_STORAGE={shlex.quote(mask(storage))} "
            f"--from-literal=MLFLOW_TRACKING_URI={shlex.quote(mask(tracking_uri))}")


# ------------------------------------------------------------------------ the world around it

def cluster_nodes(partition: str | None) -> int | None:
    """The nodes of a Slurm partition (default: every partition) as ``sinfo`` counts them;
    None when there is no Slurm to ask."""
    cmd = ["sinfo", "--noheader", "--format=%n"] + (["--partition", partition] if partition
                                                  else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = {line.strip() for line in out.stdout.splitlines() if line.strip()}
    return len(names) if out.returncode == 0 and names else None


def filesystem_of(folder: Path, mounts: str | None = None) -> str | None:
    """The type of the filesystem ``folder`` is on, from the mount table (``/proc/mounts``)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return None
    best, kind = "", None
    target = str(folder.resolve())
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def _port_problem(storage: str) -> list[str]:
    """A port that is not a number in range, or a grpc:// storage without one."""
    parts = urlsplit(storage)
    try:
        port = parts.port
    except ValueError as e:
        return [f"--storage {mask(storage)}: {e}; give HOST:PORT with a port from 1 to 65535"]
    if parts.scheme == "grpc" and port is None:
        return [f"--storage {mask(storage)}: a grpc:// storage needs its port, e.g. "
                f"grpc://HOST:13000 (sweep server --storage-proxy prints it)"]
    return []


def check_reachable(storage: str, tracking_uri: str, timeout: float = 10) -> None:
    """From this machine: the storage's host accepts a connection and the MLflow server
    answers its health check.

    Raises:
        SweepError: one line for each that does not.
    """
    problems = []
    parts = urlsplit(storage)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme.split("+")[0])
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=timeout).close()
    except (OSError, TypeError) as e:
        problems.append(f"--storage {mask(storage)}: nothing answers at "
                        f"{parts.hostname}:{port} from this machine ({e}); start the database "
                        f"or proxy, or fix the URL")
    health = tracking_uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(health, timeout=timeout) as answer:
            answer.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        problems.append(f"--tracking-uri {mask(tracking_uri)}: no MLflow server answers there "
                        f"({reason}); start one (sweep server --host 0.0.0.0 ...) or fix the URL")
    if problems:
        raise SweepError(*problems)


def create_once(spec, storage: str, tracking_uri: str) -> tuple[str, str]:
    """Create the sweep's study and parent run (or find them: a submit again resumes), so the
    tasks only join; returns the study name and the parent run id."""
    from ..stores.study import SweepStudy
    from ..stores.tracking import tracker_for
    from .runs import open_tracking

    tracker = tracker_for(tracking_uri, spec.name)  # refused before the study is made
    study = SweepStudy.open(spec, storage)
    study.mark_submitted()  # before any task joins: see machines.sampler_offset
    tracking = open_tracking(tracker, spec, study, spec.text, storage)
    return study.name, tracking.parent_id


def sbatch(script: Path) -> str:
    """Submit ``script``; returns the job id.

    Raises:
        SweepError: no ``sbatch`` here, or Slurm refused the job (its first line).
    """
    try:
        out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                             text=True, timeout=120)
    except FileNotFoundError:
        raise SweepError(f"sbatch: not found on this machine; run sweep submit --slurm on a "
                         f"Slurm login node, or submit {script} from one") from None
    if out.returncode != 0:
        reason = next((line for line in out.stderr.splitlines() if line.strip()), "no reason")
        raise SweepError(f"sbatch refused {script}: {reason}; fix it and submit again "
                         f"(sweep submit, or {shlex.join(['sbatch', str(script)])})")
    return out.stdout.strip().split(";")[0]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only (it may hold a database password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


# ------------------------------------------------------------------------------ the command

@dataclass(frozen=True)
class Submitted:
    """What ``sweep submit`` did: the file it wrote and its text, the job id (Slurm, not with
    ``dry_run``) and the study and parent run it created (not with ``dry_run``)."""

    file: Path
    text: str
    job_id: str | None = None
    study: str | None = None
    parent_run_id: str | None = None


def submit(spec, kind: str, job: Job, storage: str | None, tracking_uri: str | None,
           overrides: list[str], folder: Path, dry_run: bool = False,
           max_grid: int | None = MAX_GRID) -> Submitted:
    """Check, create the study and parent run once, write the job file into ``folder``
    (``.sweep/NAME/submit``) and, for Slurm, submit it. With ``dry_run``: the checks that need
    no server, and the file, nothing created or submitted.

    Args:
        kind: ``slurm`` or ``k8s`` (rendered, never applied).

    Raises:
        SweepError: a flag or store that tasks could not use (nothing written then), a store
            that does not answer, or Slurm refusing the job.
    """
    check_job(job, kind)
    if kind == "k8s":  # before anything is created
        pod_workers(job, spec.train.get("devices_per_trial", 1), spec.workers_per_gpu)
    workdir = Path.cwd()
    nodes = cluster_nodes(job.partition) if kind == "slurm" else 2  # a pod is a node apart
    problems = store_problems(storage, tracking_uri, nodes)
    if kind == "slurm":
        problems.append(workdir_problem(workdir, filesystem_of(workdir), nodes) or "")
    if any(problems):
        raise SweepError(*problems)
    study = parent = None
    if not dry_run:
        check_reachable(storage, tracking_uri)
        study, parent = create_once(spec, storage, tracking_uri)
    if kind == "k8s":
        file = folder / f"{spec.name}-k8s.yaml"
        text = k8s_manifest(spec.name, spec.text, job, overrides,
                            spec.train.get("devices_per_trial", 1), max_grid,
                            spec.workers_per_gpu)
        write_private(file, text)
        return Submitted(file, text, None, study, parent)
    spec_file, file = folder / f"{spec.name}.yaml", folder / f"{spec.name}.sbatch"
    text = sbatch_script(spec.name, spec_file, workdir, job, storage, tracking_uri, overrides,
                         max_grid=max_grid)
    write_private(spec_file, spec.text)
    write_private(file, text)
    os.chmod(file, 0o700)
    job_id = None if dry_run else sbatch(file)
    return Submitted(file, text, job_id, study, parent)
