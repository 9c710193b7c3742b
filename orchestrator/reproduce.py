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

import yaml

from .errors import SweepError
from .tracking import PARENT_ROLE, Tracker, git_commit, git_diff_hash

COMPARED = ("train_loss", "train_acc", "val_loss", "val_acc", "grad_norm", "clipped_fraction")
GPU_RTOL = 1e-3  # nondeterministic GPU kernels: curves agree to this relative tolerance


@dataclass
class Verdict:
    identical: bool
    rows: list[tuple[str, int, float, float, float]]  # metric, epoch, original, again, diff
    reasons: list[str]
    tolerance: float
    reproduction_id: str


def _param(value) -> str:
    return "None" if value is None else str(value)


def environment_differences(tags: dict[str, str], settings_edits: list[str]) -> list[str]:
    """What differs between the run's recorded environment and this process's."""
    import torch

    now = {"sweep.torch_version": str(torch.__version__),
           "sweep.python_version": platform.python_version(),
           "sweep.cuda_version": str(torch.version.cuda or ""),
           "sweep.cudnn_version": str(torch.backends.cudnn.version() or "")}
    out = [f"{key.removeprefix('sweep.')}: run {tags[key]!r}, here {value!r}"
           for key, value in now.items() if key in tags and tags[key] != value]
    git = git_commit()
    if "sweep.git_commit" in tags and git and git[0] != tags["sweep.git_commit"]:
        out.append(f"git commit: run {tags['sweep.git_commit'][:12]}, here {git[0][:12]}")
    if git and (git[1] or tags.get("sweep.git_dirty") == "true"):
        recorded, here = tags.get("sweep.git_diff_sha256"), git_diff_hash() if git[1] else None
        if recorded != here:
            out.append("uncommitted changes differ from the run's (git diff hash)")
    return settings_edits + out


def reproduce(run_id: str, tracking_uri: str, progress=None) -> Verdict:
    """Train ``run_id``'s trial again and compare its per-epoch curves with the original.

    Raises:
        SweepError: no such trial run, or one without its settings.
    """
    import torch

    from trainers import TrainSettings, train

    tracker = Tracker(tracking_uri)
    client = tracker.client
    try:
        run = client.get_run(run_id)
    except Exception:  # MLflow raises its own kinds for unknown ids
        raise SweepError(f"RUN_ID {run_id}: no such run; copy a trial's id from the UI or "
                         f"pass --tracking-uri") from None
    if run.data.tags.get(PARENT_ROLE) != "trial":
        raise SweepError(f"RUN_ID {run_id}: is not a trial run; pick one of the sweep's trials")
    with tempfile.TemporaryDirectory() as tmp:
        settings = yaml.safe_load(open(client.download_artifacts(run_id, "settings.yaml", tmp)))
    edits = [f"settings.yaml differs from the run's logged params: {k} is {settings.get(k)!r} "
             f"in the artifact, {run.data.params.get(k)!r} as a param"
             for k in sorted(settings) if _param(settings.get(k)) != run.data.params.get(k)]
    tags = run.data.tags
    threads = int(tags.get("sweep.torch_threads") or torch.get_num_threads())
    torch.set_num_threads(threads)
    s = TrainSettings.from_dict(settings)
    epochs = int(run.data.params.get("epochs", s.epochs))
    original = {k: {m.step: m.value for m in client.get_metric_history(run_id, k)}
                for k in COMPARED}
    ran = max((len(v) for v in original.values()), default=0)
    again = client.create_run(run.info.experiment_id,
                              run_name=f"reproduce-{run.info.run_name}",
                              tags={PARENT_ROLE: "reproduction", "sweep.reproduces": run_id,
                                    "sweep.torch_threads": str(threads)})
    history = []

    def on_epoch(report):
        history.append(report.metrics)
        tracker.log_epochs(again.info.run_id, [(report.epoch, report.metrics, report.lr_steps)])
        if progress:
            progress(report.epoch, epochs)
        return report.epoch >= ran  # a pruned original stopped there: so does its reproduction

    result = train(s, on_epoch_end=on_epoch)
    client.set_terminated(again.info.run_id)
    gpu = result.device.startswith("cuda") and not s.deterministic
    tol = GPU_RTOL if gpu else 0.0
    rows, same = [], True
    for k in COMPARED:
        for epoch, value in sorted(original[k].items()):
            new = history[epoch - 1].get(k, math.nan) if epoch <= len(history) else math.nan
            diff = new - value
            ok = (new == value) if tol == 0 else math.isclose(new, value, rel_tol=tol)
            same = same and ok
            rows.append((k, epoch, value, new, diff))
    reasons = [] if same else environment_differences(tags, edits)
    if not same and result.device != tags.get("sweep.device", result.device):
        reasons.append(f"device: run {tags.get('sweep.device')}, here {result.device}")
    return Verdict(same, rows, reasons, tol, again.info.run_id)
