"""A sweep as tables: its study (Optuna) joined with its runs (MLflow, read through a
:class:`~orchestrator.stores.tracking_reads.TrackingReader`)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..answer import objectives
from ..config import space as sp
from ..config.reading import read_yaml
from ..config.spec import SweepSpec, load_spec, validate
from ..core import keys, paths
from ..core.errors import SweepError
from ..stores.storages import default_storage
from ..stores.tracking import Tracker
from ..stores.tracking_reads import TrackingReader
from .status import load_named

CURVES = ("val_acc", "val_loss", "train_loss")  # the per-epoch metrics a report plots
SECONDS = "epoch_seconds"  # an epoch's wall time: time-to-target in seconds


@dataclass
class SweepData:
    """One sweep as tables: ``trials`` (a row per Optuna trial, joined with its MLflow run;
    ``phase``, ``level`` and ``seed`` from its user attributes), ``curves`` (trial, epoch,
    metric, value) and the parent run's metrics and tags; ``compare`` is a comparison's
    ``compare:`` block (None for any other sweep); ``tracker`` is the store they were read
    from, kept open for the report's own writes."""

    spec: SweepSpec
    study_name: str
    trials: pd.DataFrame
    curves: pd.DataFrame
    lr: pd.DataFrame
    parent_id: str | None
    parent_metrics: dict[str, float] = field(default_factory=dict)
    parent_tags: dict[str, str] = field(default_factory=dict)
    tracker: Tracker | None = field(default=None, repr=False, compare=False)
    compare: dict | None = None
    # the trials of the configuration with the best mean (objectives.best_configuration)
    best_group: list[int] = field(default_factory=list)
    # the trials the study names best (objectives.best_trials): ranked, or the Pareto front
    best: list[int] = field(default_factory=list)
    # the study's own trials (Optuna's), from which a comparison's plan is replayed
    frozen: list = field(default_factory=list, repr=False, compare=False)

    @property
    def factors(self) -> list[str]:
        """The searched settings (the space's non-fixed nodes), in YAML order."""
        out = []
        for _, node in sp.walk(self.spec.space):
            if not isinstance(node, sp.Fixed) and node.setting not in out:
                out.append(node.setting)
        return out


def load_sweep(spec_or_name: str, tracking_uri: str | None = None,
               storage: str | None = None, *, curves: bool = True) -> SweepData:
    """The study and runs of a sweep given by its YAML file or its name; ``curves=False``
    leaves the per-epoch curves empty (a read per run and metric: what its headline skips).

    Raises:
        SweepError: no such sweep in the stores.
    """
    tracking_uri = tracking_uri or paths.default_tracking_uri()
    storage = storage or default_storage(tracking_uri)
    is_file = os.path.isfile(spec_or_name)
    name = _name_in(spec_or_name) if is_file else spec_or_name
    study = load_named(name, storage)
    # the study exists, so its grid was accepted when it ran (perhaps with --max-grid)
    spec = load_spec(spec_or_name, max_grid=None) if is_file else _spec_from_study(name, study)
    tracker = Tracker(tracking_uri)
    reader = TrackingReader(tracker)
    experiment_id = reader.experiment_id(spec.name)
    runs = reader.trial_runs(experiment_id, name) if experiment_id else pd.DataFrame()
    trials = _trial_table(study, runs, spec)
    curves, lr = _curves(reader, trials if curves else trials.iloc[0:0],
                         spec.objective.metric)
    parent = tracker.find_parent_run(experiment_id, name, study.user_attrs.get(keys.STUDY_ID)) \
        if experiment_id else None
    compare = study.user_attrs.get(keys.COMPARE)
    every = study.get_trials(deepcopy=False)
    return SweepData(spec, name, trials, curves, lr, parent.info.run_id if parent else None,
                     dict(parent.data.metrics) if parent else {},
                     dict(parent.data.tags) if parent else {}, tracker,
                     json.loads(compare) if compare else None,
                     [t.number for t in objectives.best_configuration(spec, every)],
                     [t.number for t in objectives.best_trials(every, spec.directions)],
                     every)


def _name_in(path: str) -> str:
    """The sweep name a YAML file gives, read without validating the rest (a grid is only
    counted once the study it names is found)."""
    raw = read_yaml(Path(path))
    name = raw.get("name") if isinstance(raw, dict) else None
    return name if isinstance(name, str) else load_spec(path).name  # load_spec names the fault


def _spec_from_study(name: str, study) -> SweepSpec:
    identity = json.loads(study.user_attrs.get(keys.IDENTITY, "{}"))
    if not identity:
        raise SweepError(f"study {name!r} was not made by sweep run; pass its YAML file instead")
    raw = {**identity, "name": identity.get("name", name)}
    if raw.get("sampler", {}).get("name") != "grid" and "compare" not in raw:
        raw["trials"] = max(1, sum(not objectives.is_copied(t) for t in study.trials))
        raw["trials"] += (-raw["trials"]) % raw.get("repeats", 1)
    return validate(raw, f"study {name}", max_grid=None)


def _trial_table(study, runs: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    # the settings each trial sampled (Optuna names a parameter by its option: ``sgd.lr``)
    setting = {node.name: node.setting for _, node in sp.walk(spec.space)
               if not isinstance(node, sp.Fixed)}
    rows = []
    by_run = runs.set_index("run_id") if len(runs) else None
    for t in study.get_trials(deepcopy=False):
        row = {"trial": t.number, "state": "COPIED" if objectives.is_copied(t) else t.state.name,
               "value": t.values[0] if t.values else None,
               "repeat": t.user_attrs.get(keys.REPEAT), "run_id": t.user_attrs.get(keys.RUN_ID),
               "retry_of": t.user_attrs.get(keys.RETRY_OF),
               "fail_reason": t.user_attrs.get(keys.FAIL_REASON),
               "phase": t.user_attrs.get(keys.PHASE), "level": t.user_attrs.get(keys.LEVEL),
               "replicate": t.user_attrs.get(keys.REPLICATE),
               "seed": t.user_attrs.get(keys.SEED), "epochs": objectives.epochs_of(t),
               "searched": ",".join(setting.get(p, p) for p in t.params),
               **_study_columns(t, spec)}
        if by_run is not None and row["run_id"] in by_run.index:
            run = by_run.loc[row["run_id"]]
            for col, value in run.items():
                if col.startswith(("params.", "metrics.")) or col in (
                        f"tags.{keys.SEED}", f"tags.{keys.export_tag('onnx')}",
                        f"tags.{keys.EXPORT_FIGURES}"):
                    row[col] = value
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in [c for c in table.columns if c.startswith("params.")]:
        table[col] = table[col].map(_typed)
    return table


def _study_columns(t, spec: SweepSpec) -> dict:
    """A trial's columns from the study's rules: each objective's value (``value_0``,
    ``value_1``... with several), feasibility with constraints, where a copy came from, why
    patience stopped it."""
    out = {}
    if spec.is_multi_objective:
        for i in range(len(spec.objectives)):
            out[f"value_{i}"] = t.values[i] if t.values else None
    if spec.constraints:
        out["feasible"] = objectives.is_feasible(t) if t.constraints else None
    out["copied_from"] = t.user_attrs.get(keys.COPIED_FROM)
    out["stopped_early"] = t.user_attrs.get(keys.STOPPED_EARLY)
    return out


def _typed(text):
    """MLflow params are strings: numbers back to numbers, for sorting and plotting."""
    if not isinstance(text, str):
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _curves(reader: TrackingReader, trials: pd.DataFrame,
            objective: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, lr_rows = [], []
    wanted = tuple(dict.fromkeys((*CURVES, objective, SECONDS)))
    for _, t in trials.dropna(subset=["run_id"]).iterrows():
        for key, history in reader.metric_histories(t["run_id"], wanted).items():
            for step, value in history:
                rows.append({"trial": t["trial"], "metric": key, "epoch": step, "value": value})
        if t["state"] == "COMPLETE":
            for step, value in reader.metric_histories(t["run_id"], (keys.LR,))[keys.LR]:
                lr_rows.append({"trial": t["trial"], "step": step, "lr": value})
    return (pd.DataFrame(rows, columns=["trial", "metric", "epoch", "value"]),
            pd.DataFrame(lr_rows, columns=["trial", "step", "lr"]))
