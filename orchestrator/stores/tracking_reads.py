"""MLflow, read: a sweep's runs as the commands that look at it afterwards read them (``sweep
report``, ``export``, ``reproduce``, ``load``): trial runs as a table, metric histories, a trial's
run, settings and weights. What a running sweep writes is :mod:`orchestrator.stores.tracking`'s.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import yaml
from mlflow.entities import Run

from ..core import keys
from ..core.errors import SweepError
from ..core.urls import mask
from .tracking import Tracker, fluent_uri

if TYPE_CHECKING:
    import pandas as pd


class TrackingReader:
    """The reads of a sweep's MLflow store, through the client of the opened ``tracker`` (one
    store opened per command: its writes, a report's files or an export's, go through
    ``tracker``)."""

    def __init__(self, tracker: Tracker):
        self.tracker, self.client, self.uri = tracker, tracker.client, tracker.uri

    def experiment_id(self, name: str) -> str | None:
        """The id of experiment ``name``, or None if there is none (nothing is created)."""
        exp = self.client.get_experiment_by_name(name)
        return exp.experiment_id if exp else None

    def trial_runs(self, experiment_id: str, study_name: str) -> pd.DataFrame:
        """Study ``study_name``'s trial runs, a row each: ``run_id``, ``params.*``, ``tags.*``,
        ``metrics.*`` (the last value)."""
        import mlflow

        with fluent_uri(self.uri):
            return mlflow.search_runs(
                [experiment_id], output_format="pandas", max_results=50000,
                filter_string=f"tags.`{keys.ROLE}` = 'trial' and tags.`{keys.STUDY}` = "
                              f"'{study_name}'")

    def metric_histories(self, run_id: str, keys) -> dict[str, list[tuple[int, float]]]:
        """Every logged ``(step, value)`` of each metric in ``keys``, in the store's order."""
        return {key: [(m.step, m.value) for m in self.client.get_metric_history(run_id, key)]
                for key in keys}

    def trial_run(self, run_id: str) -> Run:
        """The MLflow run of a trial (its params, tags and info).

        Raises:
            SweepError: no such run, or not a trial run.
        """
        from mlflow.exceptions import MlflowException

        try:
            run = self.client.get_run(run_id)
        except MlflowException:
            raise SweepError(f"RUN_ID {run_id}: no such run in {mask(self.uri)}; copy the id "
                             f"from the UI or the end of `sweep run`, or pass --tracking-uri"
                             ) from None
        if run.data.tags.get(keys.ROLE) != "trial":
            raise SweepError(f"RUN_ID {run_id}: is not a trial run (it is the sweep's parent "
                             f"run or another run); pick one of its trials")
        return run

    def answer_of(self, run_id: str) -> str | None:
        """The comparison's answer (:data:`keys.ANSWER`, in words) when trial run ``run_id``
        is the run whose weights stand for it (its parent's ``sweep.best_run_id``); else
        None."""
        parent = self.trial_run(run_id).data.tags.get(keys.PARENT_RUN_ID)
        tags = self.client.get_run(parent).data.tags if parent else {}
        return tags.get(keys.ANSWER) if tags.get(keys.BEST_RUN_ID) == run_id else None

    def trial_settings(self, run_id: str, dst_dir: str | os.PathLike) -> dict[str, Any]:
        """A trial's settings, read from its ``settings.yaml`` (fetched into ``dst_dir``)."""
        with open(self.client.download_artifacts(run_id, keys.SETTINGS_FILE, str(dst_dir))) as f:
            return yaml.safe_load(f)

    def trial_files(self, run_id: str, dst_dir: str | os.PathLike) -> tuple[dict, str]:
        """A finished trial's settings (its ``settings.yaml``) and a local copy of its weights.

        Raises:
            SweepError: no such run, not a trial run, or a run without weights.
        """
        self.trial_run(run_id)
        weights = self.tracker.weights_path(run_id, dst_dir)
        if weights is None:
            raise SweepError(f"RUN_ID {run_id}: has no {keys.WEIGHTS_DIR}/{keys.WEIGHTS_FILE} "
                             f"(the trial failed, or ran before weights were logged); export "
                             f"another")
        return self.trial_settings(run_id, dst_dir), weights
