"""``sweep reproduce RUN_ID``: train a trial again from its MLflow run alone and compare curves.

The run holds everything needed: ``settings.yaml`` (every trainer setting and the seed), the
torch thread count (different counts round differently), the versions, the device and the git
state. The reproduction runs in this process with the recorded thread count, is logged as its own
run (``sweep.role = reproduction``, ``sweep.reproduces = RUN_ID``), and its per-epoch curves are
compared with the original: bit for bit on CPU; within :data:`GPU_RTOL` on a GPU unless the run
was ``deterministic: true``.
"""
from __future__ import annotations

import math
import platform
import tempfile
from dataclasses import dataclass

from trainers import READ_BY, reads

from ..core import keys
from ..stores.tracking import Tracker, git_commit, git_diff_hash, param_text
from ..stores.tracking_reads import TrackingReader

COMPARED = ("train_loss", "train_acc", "val_loss", "val_acc", "grad_norm", "clipped_fraction")
GPU_RTOL = 1e-3  # nondeterministic GPU kernels: curves agree to this relative tolerance


@dataclass
class Verdict:
    identical: bool
    rows: list[tuple[str, int, float, float, float]]  # metric, epoch, original, again, diff
    reasons: list[str]
    tolerance: float
    reproduction_id: str


def environment_differences(tags: dict[str, str], settings_edits: list[str]) -> list[str]:
    """What differs between the run's recorded environment and this process's."""
    import torch

    now = {keys.TORCH_VERSION: str(torch.__version__),
           keys.PYTHON_VERSION: platform.python_version(),
           keys.CUDA_VERSION: str(torch.version.cuda or ""),
           keys.CUDNN_VERSION: str(torch.backends.cudnn.version() or "")}
    out = [f"{key.removeprefix('sweep.')}: run {tags[key]!r}, here {value!r}"
           for key, value in now.items() if key in tags and tags[key] != value]
    git = git_commit()
    if keys.GIT_COMMIT in tags and git and git[0] != tags[keys.GIT_COMMIT]:
        out.append(f"git commit: run {tags[keys.GIT_COMMIT][:12]}, here {git[0][:12]}")
    if git and (git[1] or tags.get(keys.GIT_DIRTY) == "true"):
        recorded, here = tags.get(keys.GIT_DIFF), git_diff_hash() if git[1] else None
        if recorded != here:
            out.append("uncommitted changes differ from the run's (git diff hash)")
    return settings_edits + out


def reproduce(run_id: str, tracking_uri: str, progress=None) -> Verdict:
    """Train ``run_id``'s trial again and compare its per-epoch curves with the original.

    Raises:
        SweepError: no such trial run, or one without its settings.
    """
    import torch

    from trainers import TrainSettings

    tracker = Tracker(tracking_uri)
    reader = TrackingReader(tracker)
    run = reader.trial_run(run_id)
    with tempfile.TemporaryDirectory() as tmp:
        settings = reader.trial_settings(run_id, tmp)
    edits = [f"settings.yaml differs from the run's logged params: {k} is {settings.get(k)!r} "
             f"in the artifact, {run.data.params.get(k)!r} as a param"
             for k in sorted(settings) if param_text(settings.get(k)) != run.data.params.get(k)
             and (k not in READ_BY or reads(k, settings.get(READ_BY[k][0])))]  # else no param
    tags = run.data.tags
    threads = int(tags.get(keys.TORCH_THREADS) or torch.get_num_threads())
    torch.set_num_threads(threads)
    s = TrainSettings.from_dict(settings)
    epochs = int(run.data.params.get("epochs", s.epochs))
    original = {k: dict(v) for k, v in reader.metric_histories(run_id, COMPARED).items()}
    ran = max((len(v) for v in original.values()), default=0)
    again = tracker.start_reproduction(run, threads)
    try:
        result, history = _train_again(tracker, again, s, epochs, ran, progress)
    except BaseException as e:  # the user's code raised, or Ctrl-C: no run left RUNNING
        tracker.end_run(again, "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED")
        raise
    tracker.end_run(again)
    gpu = result.device.startswith("cuda") and not s.deterministic
    tol = GPU_RTOL if gpu else 0.0
    same, rows = compare(original, history, tol)
    reasons = [] if same else environment_differences(tags, edits)
    if not same and result.device != tags.get(keys.DEVICE, result.device):
        reasons.append(f"device: run {tags.get(keys.DEVICE)}, here {result.device}")
    return Verdict(same, rows, reasons, tol, again)


def _train_again(tracker: Tracker, run_id: str, settings, epochs: int, ran: int, progress):
    """Train ``settings`` logging each epoch on run ``run_id``, stopping after epoch ``ran``
    (a pruned original stopped there: so does its reproduction). Returns the result and each
    epoch's metrics."""
    from trainers import train

    history = []

    def on_epoch(report):
        history.append(report.metrics)
        tracker.log_epochs(run_id, [(report.epoch, report.metrics, report.lr_steps)])
        if progress:
            progress(report.epoch, epochs)
        return report.epoch >= ran

    return train(settings, on_epoch_end=on_epoch), history


def compare(original: dict[str, dict[int, float]], history: list[dict[str, float]],
            tol: float) -> tuple[bool, list[tuple[str, int, float, float, float]]]:
    """Whether each original ``{metric: {epoch: value}}`` is matched by the epochs' metrics in
    ``history`` (exactly, or within relative ``tol``), and the rows
    ``(metric, epoch, original, again, difference)``."""
    rows, same = [], True
    for k in COMPARED:
        for epoch, value in sorted(original[k].items()):
            new = history[epoch - 1].get(k, math.nan) if epoch <= len(history) else math.nan
            diff = new - value
            ok = (new == value) if tol == 0 else math.isclose(new, value, rel_tol=tol)
            same = same and ok
            rows.append((k, epoch, value, new, diff))
    return same, rows
