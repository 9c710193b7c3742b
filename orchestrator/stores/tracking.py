"""MLflow, written: the store, the sweep's experiment and parent run, one nested run per trial.

Only the ``sweep run`` process writes to MLflow (workers send their metrics over a pipe), so the
embedded SQLite store never sees two writers from one sweep and its schema is created once, here,
before any worker starts. What the commands that look at a sweep afterwards read of it is
:mod:`orchestrator.stores.tracking_reads`'s.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import platform
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import mlflow.store.db.utils as mlflow_db_utils
import yaml
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.tracking import MlflowClient

from trainers import READ_BY, reads

from ..core import compat, keys, paths, urls
from ..core.errors import SweepError
from ..core.urls import mask
from . import empty_store
from .locks import store_lock

ENV_URI = "MLFLOW_TRACKING_URI"  # what mlflow.set_tracking_uri also writes, for child processes

# after the import: MLflow sets its own level then; its INFO lines would break the progress display
for _name in ("mlflow", "alembic"):
    logging.getLogger(_name).setLevel(logging.WARNING)
# it logs a database error with its traceback before raising it: the sweep says it in one line
logging.getLogger(mlflow_db_utils.__name__).setLevel(logging.CRITICAL)


def _make_parent_dirs_if_sqlite(db_uri: str) -> None:
    """MLflow 3's ``store.db.utils._make_parent_dirs_if_sqlite`` makes the folder of a
    ``sqlite:///`` URI's path without percent-decoding it, as SQLAlchemy does: for the store in
    ``a?b/`` (``sqlite:////.../a%3Fb/mlflow.db``) it left an empty sibling folder ``a%3Fb``.
    The same, with the path SQLAlchemy opens."""
    db = paths.sqlite_file(db_uri)
    if db is not None and str(db) not in (".", ":memory:"):
        db.parent.mkdir(parents=True, exist_ok=True)


if hasattr(mlflow_db_utils, "_make_parent_dirs_if_sqlite"):
    mlflow_db_utils._make_parent_dirs_if_sqlite = _make_parent_dirs_if_sqlite

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
# the experiment's type in MLflow 3: "Machine learning" (runs, models), not "GenAI apps & agents"
# (traces); UIs that read it open the runs table without asking. MLflow 3.18's UI (as 3.17's)
# follows its GenAI / Model training toggle instead (mlflow/mlflow#24498); `sweep ui` prints the
# runs table URL.
MODEL_KIND = "custom_model_development"
# a trial run's MLflow status by its end. MLflow's UI marks FAILED and KILLED runs red: a pruned
# trial ran as asked and was stopped by the pruner, not a fault, so its run ends FINISHED and its
# tag keys.STATE ("pruned") says so. KILLED is an interrupt's (Ctrl-C)
STATUS = {"complete": "FINISHED", "pruned": "FINISHED", "failed": "FAILED",
          "interrupted": "KILLED"}


def _now_ms() -> int:
    return int(time.time() * 1000)


def metric_name_problem(name: str) -> str | None:
    """Why MLflow would refuse ``name`` as a metric name (its characters, its length), in its
    own words, by the public pieces of its own check (``_validate_metric``); None when it takes
    it."""
    from mlflow.utils import validation as rules

    if not rules.validate_param_and_metric_name(name):
        return rules.bad_character_message()
    if rules.path_not_unique(name):
        return rules.bad_path_message(name)
    if len(name) > rules.MAX_ENTITY_KEY_LENGTH:
        return (f"it is {len(name)} characters, past MLflow's {rules.MAX_ENTITY_KEY_LENGTH} for "
                f"a metric name")
    return None


def refused_input(error: BaseException) -> bool:
    """Whether the store refused what it was given (a name or value against MLflow's rules):
    the sweep's input at fault, not the store."""
    return getattr(error, "error_code", "") == "INVALID_PARAMETER_VALUE"


def read_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings a trial reads (``trainers.READ_BY``): not the momentum of an Adam trial,
    which would be logged as trained when it never was."""
    return {k: v for k, v in settings.items()
            if k not in READ_BY or reads(k, settings.get(READ_BY[k][0]))}


def epoch_metrics(epochs: list[tuple]) -> list[Metric]:
    """Epochs' metrics (step = epoch), the lr of each optimizer step (step = global step) and
    the worker's ``system/*`` samples (step = the sample's number, at the time it was taken),
    given as ``(epoch, metrics, lr_steps[, samples])``."""
    ts = _now_ms()
    batch = []
    for epoch, metrics, lr_steps, *samples in epochs:
        batch += [Metric(k, float(v), ts, epoch) for k, v in metrics.items()]
        batch += [Metric(keys.LR, float(lr), ts, step) for step, lr in lr_steps]
        batch += [Metric(k, float(v), int(at), int(number))
                  for number, at, figures in (samples[0] if samples else ())
                  for k, v in figures.items()]
    return batch


def git_diff_hash(directory: str | os.PathLike = ".") -> str | None:
    """SHA-256 of ``git diff HEAD`` (tracked files): which uncommitted changes a run saw."""
    import hashlib

    try:
        diff = subprocess.run(["git", "diff", "HEAD"], cwd=directory, capture_output=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return hashlib.sha256(diff.stdout).hexdigest() if diff.returncode == 0 else None


def installed_packages() -> str:
    """``name==version`` of every installed distribution, sorted (a run's package list)."""
    from importlib.metadata import distributions

    names = {f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]}
    return "\n".join(sorted(names, key=str.lower)) + "\n"


def git_commit(directory: str | os.PathLike = ".") -> tuple[str, bool] | None:
    """(commit, dirty) of the git checkout holding ``directory``, or None if it is not one."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip(), bool(status.stdout.strip())


def open_store(tracking_uri: str) -> MlflowClient:
    """A client of the MLflow store at ``tracking_uri``, its database created if needed.

    Raises:
        SweepError: the folder of a SQLite file is missing, or the store cannot be opened.
    """
    paths.check_sqlite_folder(tracking_uri, "--tracking-uri")
    try:
        # MlflowClient's constructor builds the SQLAlchemy store, whose constructor creates the
        # tables and runs every migration of a new database: not safe to race, so processes
        # opening one store take turns, from the constructor on
        with store_lock(tracking_uri):
            client = empty_store.open_client(tracking_uri)
    except Exception as e:  # MLflow raises many kinds here (driver, migration, HTTP)
        raise SweepError(f"--tracking-uri {mask(tracking_uri)}: cannot open the MLflow store: "
                         f"{urls.missing_driver(e) or str(e).splitlines()[0]}") from None
    return client


def _artifact_root(tracking_uri: str) -> str | None:
    if paths.sqlite_file(tracking_uri) is not None:
        return (paths.home(tracking_uri) / "mlartifacts").as_uri()
    return None  # the server's or the store's default


def tracker_for(tracking_uri: str, name: str) -> Tracker:
    """The store of sweep ``name``, refused (before the sweep writes anything) when it cannot
    be opened or its experiment is deleted."""
    tracker = Tracker(tracking_uri)
    _refuse_deleted(tracker.client.get_experiment_by_name(name), name)
    return tracker


def _refuse_deleted(experiment, name: str) -> None:
    if experiment is not None and experiment.lifecycle_stage == "deleted":
        raise SweepError(f"MLflow experiment {name!r} is deleted; restore it in the UI or "
                         f"`mlflow gc` it, or use another sweep name")


class Tracker:
    """MLflow bookkeeping of one sweep: its experiment, parent run and trial runs, their epochs,
    ends and files (and what the commands add after: a report, an export, a reproduction's
    run). Their reads afterwards: :class:`~orchestrator.stores.tracking_reads.TrackingReader`."""

    def __init__(self, tracking_uri: str):
        self.uri = tracking_uri
        self.client = open_store(tracking_uri)

    def experiment(self, name: str, description: str = "") -> str:
        """The id of experiment ``name``, created if needed (tagged as model development)."""
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            _refuse_deleted(exp, name)
            if keys.EXPERIMENT_KIND not in exp.tags:  # made by an older sweep or by hand
                self.client.set_experiment_tag(exp.experiment_id, keys.EXPERIMENT_KIND, MODEL_KIND)
            return exp.experiment_id
        root = _artifact_root(self.uri)
        tags = {keys.EXPERIMENT_KIND: MODEL_KIND}
        if description:
            tags[keys.NOTE] = description
        from mlflow.exceptions import MlflowException

        try:
            return self.client.create_experiment(
                name, artifact_location=f"{root}/{name}" if root else None, tags=tags)
        except MlflowException:  # another machine created it a moment ago
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def find_parent_run(self, experiment_id: str, study_name: str,
                        study_id: str | None = None) -> Run | None:
        """Study ``study_name``'s parent run, if any: the oldest; with ``study_id``, only one
        carrying it (a study of that name in another storage has a parent run of its own)."""
        query = (f"tags.`{keys.ROLE}` = 'parent' and tags.`{keys.STUDY}` = '{study_name}'"
                 + (f" and tags.`{keys.STUDY_ID}` = '{study_id}'" if study_id else ""))
        found = self.client.search_runs([experiment_id], filter_string=query, max_results=1,
                                        order_by=["attributes.start_time ASC"])
        return found[0] if found else None

    def resume_parent(self, run_id: str, study_id: str | None = None) -> None:
        """Mark the parent run RUNNING again (a rerun, or another machine joining), once
        :func:`check_parent` passed."""
        run = self.client.get_run(run_id)
        check_parent(self.uri, run, study_id)
        if run.info.status != "RUNNING":
            self.client.update_run(run_id, status="RUNNING")

    def parent_run(self, experiment_id: str, study_name: str, spec_text: str,
                   resolved: dict[str, Any], tags: dict[str, str]) -> tuple[str, bool]:
        """The sweep's parent run: found again on a rerun (and set RUNNING), or created.

        Returns (run_id, resumed).
        """
        found = self.find_parent_run(experiment_id, study_name, tags.get(keys.STUDY_ID))
        if found:
            self.resume_parent(found.info.run_id)
            return found.info.run_id, True
        run = self.client.create_run(experiment_id, run_name=study_name,
                                     tags={keys.ROLE: "parent", keys.STUDY: study_name,
                                           **tags})
        run_id = run.info.run_id
        self.client.log_text(run_id, spec_text, keys.SPEC_FILE)
        self.client.log_text(run_id, yaml.safe_dump(resolved, sort_keys=False),
                             keys.RESOLVED_FILE)
        return run_id, False

    def start_trial(self, experiment_id: str, parent_id: str, number: int,
                    settings: dict[str, Any], extra_params: dict[str, Any],
                    tags: dict[str, str], start_time: int | None = None,
                    packages: str | None = None, run_name: str | None = None) -> str:
        """A nested run for trial ``number`` with every setting it reads as a param (see
        :func:`read_settings`), named ``run_name`` or ``trial-<number>``."""
        run = self.client.create_run(
            experiment_id, run_name=run_name or f"trial-{number}", start_time=start_time,
            tags={keys.PARENT_RUN_ID: parent_id, keys.ROLE: "trial",
                  keys.TRIAL_NUMBER: str(number), **tags})
        run_id = run.info.run_id
        # a user seam's keywords also one param each (optimizer_args.eps), as space names them
        keywords = {f"{k}.{key}": v for k, mapping in settings.items()
                    if isinstance(mapping, dict) for key, v in mapping.items()}
        params = [Param(k, param_text(v)) for k, v in
                  {**read_settings(settings), **keywords, **extra_params}.items()]
        self.client.log_batch(run_id, params=params)
        self.client.log_text(run_id, yaml.safe_dump(settings, sort_keys=False), keys.SETTINGS_FILE)
        if packages:
            self.client.log_text(run_id, packages, keys.PACKAGES_FILE)
        return run_id

    def log_epochs(self, run_id: str, epochs: list[tuple]) -> None:
        """The :func:`epoch_metrics` of ``epochs``, in one call (more only past MLflow's
        1000-metric limit)."""
        batch = epoch_metrics(epochs)
        for i in range(0, len(batch), MAX_BATCH):
            self.client.log_batch(run_id, metrics=batch[i:i + MAX_BATCH])

    def end_trial(self, run_id: str, state: str, metrics: dict[str, float] | None = None,
                  tags: dict[str, str] | None = None) -> None:
        """Close a trial run tagged :data:`keys.STATE` ``state``: complete and pruned ->
        FINISHED (the tag tells them apart), failed -> FAILED, interrupted -> KILLED."""
        ts = _now_ms()
        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), ts, 0) for k, v in (metrics or {}).items()],
            tags=[RunTag(k, str(v)[:5000]) for k, v in {keys.STATE: state,
                                                        **(tags or {})}.items()])
        self.client.set_terminated(run_id, STATUS[state])

    def log_weights(self, run_id: str, path: str) -> None:
        """A trial's final state dict, as the artifact ``model/weights.pt``."""
        self.client.log_artifact(run_id, path, keys.WEIGHTS_DIR)

    def weights_path(self, run_id: str, dst_dir: str | os.PathLike) -> str | None:
        """A local copy of a trial's ``model/weights.pt`` in ``dst_dir`` (None if it has none)."""
        names = {a.path for a in self.client.list_artifacts(run_id, keys.WEIGHTS_DIR)}
        if f"{keys.WEIGHTS_DIR}/{keys.WEIGHTS_FILE}" not in names:
            return None
        os.makedirs(dst_dir, exist_ok=True)
        return self.client.download_artifacts(run_id, f"{keys.WEIGHTS_DIR}/{keys.WEIGHTS_FILE}",
                                              str(dst_dir))

    def log_export(self, run_id: str, result: dict[str, Any], mlflow_model: bool = False) -> None:
        """An export's files under ``export/``, its figures as the table ``export/parity.csv``,
        the tags of :func:`export_tags` and :func:`export_metrics`; with ``mlflow_model`` the
        ONNX file also becomes an MLflow model (``model_onnx``)."""
        tags = export_tags(result)
        folder = result.get("dir")
        if folder and os.path.isdir(folder):
            self.client.log_artifacts(run_id, folder, keys.EXPORT_DIR)
        if keys.EXPORT_FIGURES in tags:
            self.client.log_text(run_id, parity_csv(export_figures(result)), keys.PARITY_FILE)
        self.log_final(run_id, export_metrics(result), tags)
        onnx_file = os.path.join(folder or "", "model.onnx")
        if mlflow_model and tags.get(keys.export_tag("onnx")) == "passed":
            log_onnx_model(self.uri, run_id, onnx_file,
                           os.path.join(folder, "input_example.npy"))

    def start_reproduction(self, original: Run, threads: int) -> str:
        """A run beside trial run ``original`` for training it again (``sweep.role =
        reproduction``, ``sweep.reproduces = its id``); returns the new run's id."""
        run = self.client.create_run(
            original.info.experiment_id, run_name=f"reproduce-{original.info.run_name}",
            tags={keys.ROLE: "reproduction", keys.REPRODUCES: original.info.run_id,
                  keys.TORCH_THREADS: str(threads)})
        return run.info.run_id

    def log_preflight(self, parent_id: str, folder: str | os.PathLike, status: str) -> None:
        """The preflight's JSON, Markdown and images under ``preflight/``, its status as the
        tag ``sweep.preflight``."""
        self.client.log_artifacts(parent_id, str(folder), keys.PREFLIGHT_DIR)
        self.client.set_tag(parent_id, keys.PREFLIGHT, status)

    def log_report(self, parent_id: str, folder: str | os.PathLike) -> None:
        """A ``sweep report``'s files on the sweep's parent run, under ``report/``."""
        self.client.log_artifacts(parent_id, str(folder), keys.REPORT_DIR)

    def tag(self, run_id: str, key: str) -> str | None:
        return self.client.get_run(run_id).data.tags.get(key)

    def log_final(self, run_id: str, metrics: dict[str, float],
                  tags: dict[str, str] | None = None) -> None:
        """Metrics (step 0) and tags added to a run after it ended, e.g. test-split results."""
        ts = _now_ms()
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), ts, 0)
                                               for k, v in metrics.items()],
                              tags=[RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items()])

    def record_best(self, parent_id: str, value: float, run_id: str, number: int,
                    finished: int, tags: dict[str, str] | None = None) -> None:
        self.client.log_batch(parent_id,  # one batch: the best, its run, ``tags`` (the answer)
                              metrics=[Metric(keys.BEST_VALUE, value, _now_ms(), finished)],
                              tags=[RunTag(keys.BEST_RUN_ID, run_id),
                                    RunTag(keys.BEST_TRIAL, str(number)),
                                    *(RunTag(k, str(v)[:5000]) for k, v in (tags or {}).items())])

    def end_run(self, run_id: str, status: str = "FINISHED") -> None:
        """End a run (the parent run, a reproduction) with MLflow status ``status``."""
        self.client.set_terminated(run_id, status)

    def running_trial_runs(self, experiment_id: str, parent_id: str) -> list[tuple[str, int]]:
        """``(run_id, trial number)`` of the sweep's trial runs still marked RUNNING."""
        query = (f"tags.`{keys.PARENT_RUN_ID}` = '{parent_id}' and tags.`{keys.ROLE}` = 'trial' "
                 "and attributes.status = 'RUNNING'")
        runs = self.client.search_runs([experiment_id], filter_string=query, max_results=1000)
        return [(r.info.run_id, int(r.data.tags[keys.TRIAL_NUMBER])) for r in runs
                if r.data.tags.get(keys.TRIAL_NUMBER, "").isdigit()]

    def fail_run(self, run_id: str, reason: str, status: str = "FAILED") -> None:
        """Mark a run left RUNNING by a dead process as ended, with the reason."""
        run = self.client.get_run(run_id)
        if run.info.status == "RUNNING":
            self.client.set_tag(run_id, keys.FAIL_REASON, reason[:5000])
            self.client.set_terminated(run_id, status)


def check_parent(tracking_uri: str, run: Run, study_id: str | None) -> None:
    """Refuse a parent run that carries another study's :data:`keys.STUDY_ID` than ``study_id``
    (a study of that name in another storage): nothing is written to it.

    Raises:
        SweepError: the run is another study's.
    """
    theirs = run.data.tags.get(keys.STUDY_ID)
    if study_id and theirs and theirs != study_id:
        raise SweepError(f"--tracking-uri {mask(tracking_uri)}: run {run.info.run_id}, which "
                         f"study {run.data.tags.get(keys.STUDY, '?')!r} records as its parent "
                         f"run, is the parent run of another study (in "
                         f"{run.data.tags.get(keys.STORAGE, '?')}); rerun with --new to start a "
                         f"fresh study with its own parent run")


def param_text(value: Any) -> str:
    """A setting's value as MLflow stores a param (``None`` included)."""
    return "None" if value is None else str(value)


def export_tags(result: dict[str, Any]) -> dict[str, str]:
    """The tags of an export: ``sweep.exported``, ``sweep.export_error`` if it failed, its
    figures (``sweep.export_figures``, :func:`export_figures` as JSON), and one per format
    (``sweep.export.<format>``: passed, failed or its error; ``.method`` if any)."""
    tags = {keys.EXPORTED: "true"}
    if result.get("error"):
        tags[keys.EXPORT_ERROR] = result["error"]
    if export_figures(result):  # not one-value metrics: their charts come before the curves
        tags[keys.EXPORT_FIGURES] = json.dumps(export_figures(result))
    for fmt, r in ((result.get("report") or {}).get("formats") or {}).items():
        tags[keys.export_tag(fmt)] = ("passed" if r.get("passed") else
                                      f"error: {r['error']}" if r.get("error") else "failed")
        if r.get("method"):  # torchscript: script or trace; int8: static or dynamic
            tags[keys.export_tag(fmt, method=True)] = r["method"]
    return tags


def export_figures(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """An export's flat ``export_<format>_<figure>`` numbers (``result["metrics"]``) by format
    (``eager``: the eager model's latency) and figure."""
    formats = sorted([*((result.get("report") or {}).get("formats") or {}), "eager"],
                     key=len, reverse=True)  # the longest first: a name may extend another's
    out: dict[str, dict[str, float]] = {}
    for name, value in (result.get("metrics") or {}).items():
        fmt = next((f for f in formats if name.startswith(f"export_{f}_")), None)
        if fmt is not None:
            out.setdefault(fmt, {})[name[len(f"export_{fmt}_"):]] = value
    return out


def export_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The metrics of an export: those of ``result["metrics"]`` that are no figure of a format
    (``export_seconds``)."""
    figures = export_figures(result)
    shown = {f"export_{fmt}_{k}" for fmt, figure in figures.items() for k in figure}
    return {k: v for k, v in (result.get("metrics") or {}).items() if k not in shown}


def parity_csv(figures: dict[str, dict[str, float]]) -> str:
    """:func:`export_figures` as CSV: a row per format, a column per figure."""
    columns = list(dict.fromkeys(k for fig in figures.values() for k in fig))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["format", *columns])
    writer.writerows([fmt, *(fig.get(k, "") for k in columns)] for fmt, fig in figures.items())
    return buffer.getvalue()


_PREPARED: list[threading.Thread] = []  # the one thread prepare_onnx_model starts
_PREPARED_LOCK = threading.Lock()


def prepare_onnx_model() -> threading.Thread:
    """Start, in a daemon thread, the slow first steps of :func:`log_onnx_model` that need no
    model: importing onnx, onnxruntime and MLflow's ONNX flavour, and MLflow's map of the
    installed packages (read from every distribution's file list to check the model's
    requirements: seconds). Called while the workers export, which leaves this process idle."""
    def warm() -> None:
        try:
            import mlflow.onnx  # noqa: F401
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
            from mlflow.utils import requirements_utils

            getattr(requirements_utils, "_init_packages_to_modules_map", lambda: None)()
        except Exception:  # a head start only: log_onnx_model does it all again if need be
            pass

    with _PREPARED_LOCK:  # once per process: the imports and the map stay
        if not _PREPARED:
            _PREPARED.append(threading.Thread(target=warm, name="sweep-prepare-onnx-model",
                                              daemon=True))
            _PREPARED[0].start()
    return _PREPARED[0]


@contextlib.contextmanager
def fluent_uri(tracking_uri: str) -> Iterator[None]:
    """MLflow's fluent API (``mlflow.start_run``, ``mlflow.search_runs``) pointed at
    ``tracking_uri`` for the block only: the process's own setting, and the environment variable
    ``MLFLOW_TRACKING_URI`` that ``mlflow.set_tracking_uri`` also writes, are put back after it,
    so a user of the Python API logs where their own code said, and so do processes they start."""
    import mlflow

    before, env = compat.mlflow_tracking_uri(), os.environ.get(ENV_URI)
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # None: unset, as it was
        if env is None:
            os.environ.pop(ENV_URI, None)
        else:
            os.environ[ENV_URI] = env


def log_onnx_model(tracking_uri: str, run_id: str, onnx_file: str, example_file: str) -> None:
    """The ONNX file as an MLflow model with a signature and an input example: MLflow's
    serving and registry load it without unpickling any Python class."""
    from importlib.metadata import version

    import mlflow
    import numpy as np
    import onnx
    import onnxruntime as ort
    from mlflow.models import infer_signature

    example = np.load(example_file, allow_pickle=False)
    session = ort.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    logits, classes = session.run(["logits", "class_index"], {"pixels": example})
    signature = infer_signature({"pixels": example},
                                {"logits": logits, "class_index": classes})
    # mlflow.onnx warns on a CPU-only machine that the model declares CUDA first: meant for
    # the serving machine (onnxruntime falls back to the CPU), not news to this one
    quiet = logging.getLogger("mlflow.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    # the model is logged inside the run, which that reopens and ends again: its end time and
    # status are put back, so that the trial's duration is its training, not this export. A run
    # found RUNNING (another process's export of it under way) ends FINISHED: a trial's run is
    # ended before it is exported, and must not be left RUNNING by a write after its end
    client = mlflow.MlflowClient(tracking_uri)
    ended = client.get_run(run_id).info
    status = "FINISHED" if ended.status == "RUNNING" else ended.status
    try:
        with fluent_uri(tracking_uri), mlflow.start_run(run_id=run_id):
            # the requirements given: MLflow otherwise infers them by loading the model in a
            # new Python process (seconds at the end of every sweep); a model under 1 GiB
            # stays one file, which MLflow's check of the input example can load
            mlflow.onnx.log_model(
                onnx.load(onnx_file), name=keys.ONNX_MODEL, signature=signature,
                input_example={"pixels": example},
                pip_requirements=[f"onnx=={version('onnx')}",
                                  f"onnxruntime=={version('onnxruntime')}"],
                save_as_external_data=os.path.getsize(onnx_file) > 1 << 30)
    finally:
        quiet.setLevel(level)
        client.set_terminated(run_id, status, ended.end_time)


def environment_tags() -> dict[str, str]:
    """What is the same for every trial of this ``sweep run``: versions, host, git state."""
    from importlib.metadata import PackageNotFoundError, version

    def v(pkg):
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "not installed"

    tags = {keys.VERSION: v("sweep"), keys.PYTHON_VERSION: platform.python_version(),
            keys.OPTUNA_VERSION: v("optuna"), keys.MLFLOW_VERSION: v("mlflow"),
            keys.HOST: platform.node(), keys.PLATFORM: platform.platform()}
    git = git_commit()
    if git:
        tags[keys.GIT_COMMIT], dirty = git[0], git[1]
        tags[keys.GIT_DIRTY] = str(dirty).lower()
        if dirty:
            tags[keys.GIT_DIFF] = git_diff_hash() or ""
    return tags

