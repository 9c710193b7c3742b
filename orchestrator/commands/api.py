"""The Python API: run, load, report, reproduce and export sweeps from a script or a notebook.

The ``sweep`` command line is a thin layer over these functions: it parses its flags, calls one of
them and prints what it returns. Errors are :class:`~orchestrator.core.errors.SpecError` (the YAML
or an override) or :class:`~orchestrator.core.errors.SweepError` (the stores, the data, a run), each
line naming the field, the value and the fix, or :class:`~orchestrator.core.errors.CouldNotFinish`
(an MLflow store that broke under a sweep); never ``SystemExit``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console

from ..config import space as sp
from ..config.reading import YamlDumper, apply_overrides
from ..config.spec import (
    MAX_GRID,
    SweepSpec,
    data_downloads,
    data_problems,
    load_spec,
    validate,
)
from ..core import keys, outputs, paths
from ..core.errors import SpecError, SweepError
from ..report.display import Progress, config_name
from ..stores import reach

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from ..report import Report
    from ..running.runner import Outcome
    from .plan import Planned
    from .reproduce import Verdict

MAPPING_SOURCE = "<mapping>"  # how messages name a sweep given as a dict


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT or SIGTERM; in Jupyter, the kernel's interrupt) stopped :func:`run`: its
    workers were stopped, its running trials failed in both stores (queued to run again on
    resume) and its parent run ended KILLED. ``result`` is the sweep as it stands."""

    def __init__(self, result: SweepResult):
        super().__init__(f"sweep {result.name!r} interrupted; run it again to resume")
        self.result = result


@dataclass
class SweepResult:
    """A sweep in its stores, as :func:`run` left it or :func:`load` found it.

    Attributes:
        spec: the validated sweep.
        study: its Optuna study (``study.trials``, ``study.trials_dataframe()``...).
        parent_run_id: its MLflow parent run (None when the tracking store never opened).
        experiment_id: its MLflow experiment.
        tracking_uri, storage: the stores, as the ``--tracking-uri`` and ``--storage`` flags.
        outcome: how :func:`run` ended (exit code, counts, time, held-out test metrics...);
            None from :func:`load`.
    """

    spec: SweepSpec
    study: optuna.Study
    parent_run_id: str | None
    experiment_id: str | None
    tracking_uri: str
    storage: str
    outcome: Outcome | None = None
    _sweep: Any = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        """The study's name: the spec's ``name``, or ``NAME-2``... for a ``new=True`` run."""
        return self.study.study_name

    @property
    def counts(self) -> dict[str, int]:
        """Trials by state: ``complete``, ``pruned``, ``fail`` (for good), ``running``,
        ``retried``, ``finished`` (what ``trials`` counts)."""
        from ..stores.study import state_counts

        return state_counts(self.study.get_trials(deepcopy=False))

    @property
    def best_trials(self) -> list[optuna.trial.FrozenTrial]:
        """The complete trials, best objective first (ties: the earlier trial); with several
        objectives, the Pareto front, best on the first objective first."""
        return self._sweep_study().best(len(self.study.trials))

    @property
    def best_trial(self) -> optuna.trial.FrozenTrial | None:
        """The best complete trial; None before any trial completed."""
        best = self.best_trials
        return best[0] if best else None

    @property
    def best_run_id(self) -> str | None:
        """The MLflow run id of the best trial (for :func:`reproduce` and :func:`export`)."""
        best = self.best_trial
        return best.user_attrs.get(keys.RUN_ID) if best is not None else None

    @property
    def best_settings(self) -> dict[str, Any] | None:
        """Every trainer setting the best trial ran with, its seed included:
        ``trainers.train(trainers.TrainSettings.from_dict(result.best_settings))`` trains it
        again."""
        best = self.best_trial
        return self._sweep_study().trial_settings(best) if best is not None else None

    def trials_frame(self) -> pd.DataFrame:
        """A row per trial, joined with its MLflow run: the columns of ``trials.csv`` in
        ``sweep report`` (trial, state, value, seed, run_id, ``params.*``, ``metrics.*``...).
        Read from the stores at each call."""
        from ..report import load_sweep, trial_table

        return trial_table(load_sweep(self.name, self.tracking_uri, self.storage,
                                      curves=False))

    def _sweep_study(self):
        from ..stores.study import StudyView

        if self._sweep is None:
            self._sweep = StudyView(self.spec, self.study)
        return self._sweep

    def __repr__(self) -> str:
        c, best = self.counts, self.best_trial
        text = (f"SweepResult({self.name!r}: {c['complete']} complete, {c['pruned']} pruned, "
                f"{c['fail']} failed")
        if best is not None:  # several objectives: the front's best on the first one
            objective = self.spec.objective
            first = objective[0] if isinstance(objective, list) else objective
            searched = config_name(sp.settings_for(self.spec.space, best.params))
            text += (f"; best {first.metric} {best.values[0]:.4g} (trial {best.number}: "
                     f"{searched})")
        return text + f"; parent run {self.parent_run_id})"


def run(spec: str | Path | Mapping[str, Any] | SweepSpec, *, trials: int | None = None,
        workers: int | None = None, gpus: list[int] | None = None, new: bool = False,
        force: bool = False, set: Mapping[str, Any] | Iterable[str] = (),  # noqa: A002
        tracking_uri: str | None = None, storage: str | None = None,
        max_grid: int | None = MAX_GRID, console: Console | None = None,
        progress: bool = True) -> SweepResult:
    """Run a sweep, or resume it where it stopped, as ``sweep run`` does.

    Args:
        spec: a sweep YAML file, the same content as a mapping, or a validated spec.
        trials: finished trials to reach (overrides ``trials:``).
        workers: trials run at once (overrides ``workers:``).
        gpus: GPU ids for the worker slots (overrides ``gpus:`` and the GPUs found).
        new: start a fresh study and parent run (``NAME-2``...) instead of resuming.
        force: start the trials even when a preflight check FAILs.
        set: overrides of any YAML value by dotted key, ``{"train.epochs": 2}`` (Python
            values), or ``["train.epochs=2"]`` (YAML text, as ``--set``).
        tracking_uri: MLflow tracking URI (default ``$MLFLOW_TRACKING_URI``, else
            ``sqlite:///mlflow.db`` in the current folder).
        storage: Optuna storage (default ``optuna.journal`` next to the MLflow database).
        max_grid: the most configurations a grid sweep may have (None: no cap).
        console: where warnings and progress go (default: a new rich console on stdout; in
            Jupyter, the cell's output). Progress is plain lines unless it is a terminal.
        progress: False shows no progress (warnings still show).

    Returns:
        The sweep, ``result.outcome`` saying how the run ended (``exit_code``
        :attr:`~orchestrator.core.errors.ExitCode.NEGATIVE`, 1: some trials failed for good).

    Raises:
        SpecError: the YAML or an override is invalid.
        SweepError: the data, the stores or the workers cannot be used, or a preflight check
            FAILed (without ``force``).
        CouldNotFinish: the MLflow store broke under the sweep (its running trials are queued
            for retry: fix the store, run again).
        SweepInterrupted: Ctrl-C (or SIGTERM) stopped it; a :class:`KeyboardInterrupt`.
            Signals are caught only when it runs in the main thread.
    """
    _check_counts(trials=trials, workers=workers)
    overrides = override_lines(set) + ([f"trials={trials}"] if trials else [])
    spec, text = _spec_of(spec, overrides, max_grid)
    console = console or Console(highlight=False)
    _check(spec, console, tracking_uri, storage)
    from ..running.runner import run_sweep

    shown = Progress(console, spec.name) if progress else contextlib.nullcontext()
    with shown as view:
        outcome = run_sweep(spec, spec_text=text, storage=storage, tracking_uri=tracking_uri,
                            workers=workers, gpus=gpus, new=new, force=force, progress=view)
    result = _result(spec, outcome)
    if outcome.exit_code.stopped:
        raise SweepInterrupted(result)
    return result


def _check_counts(**counts: int | None) -> None:
    """Refuse a count (``trials``, ``workers``) given but not an int of at least 1."""
    for flag, value in counts.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SweepError(f"{flag} must be an int >= 1, got {value!r} "
                             f"({type(value).__name__}); e.g. {flag}=3")
        if value is not None and value < 1:
            raise SweepError(f"{flag} must be >= 1, got {value}")


def _check(spec: SweepSpec, console: Console, tracking_uri: str | None,
           storage: str | None) -> None:
    """Refuse missing data and store folders; say the spec's warnings and the downloads."""
    missing = data_problems(spec)
    if missing:
        raise SweepError(*missing)
    for w in spec.warnings:
        console.print(f"warning: {w}", soft_wrap=True)
    # before the worker pool makes its log folder next to the store, and the study
    paths.check_store_folders(tracking_uri, storage)
    check_stores(tracking_uri, storage, create=True)
    logs = paths.work_dir(tracking_uri or paths.default_tracking_uri(), spec.name) / "logs"
    say_downloads(console, data_downloads(spec), f"its progress bar is in {logs}/worker-*.log")


def check_stores(tracking_uri: str | None, storage: str | None, *, create: bool) -> None:
    """:func:`reach.check_stores` for these flags, their defaults filled in (``storage``
    False: a command that uses no study storage)."""
    from ..stores.storages import default_storage

    uri = tracking_uri or paths.default_tracking_uri()
    reach.check_store(uri, "--tracking-uri", create=create)
    if storage is not False:
        reach.check_store(storage or default_storage(uri), "--storage", create=create)


def _result(spec: SweepSpec, outcome: Outcome) -> SweepResult:
    import optuna

    from ..stores.storages import open_storage

    study = optuna.load_study(study_name=outcome.study_name,
                              storage=open_storage(outcome.storage))
    return SweepResult(spec, study, outcome.parent_run_id or None,
                       outcome.experiment_id or None, outcome.tracking_uri, outcome.storage,
                       outcome)


def override_lines(values: Mapping[str, Any] | Iterable[str]) -> list[str]:
    """``KEY=VALUE`` lines of ``--set`` from a mapping of dotted keys to Python values (each
    written as YAML that reads back as the same value) or from such lines themselves."""
    if isinstance(values, str):
        raise SpecError(f"set={values!r}: give a mapping such as {{'train.epochs': 2}} or a "
                        f"list of KEY=VALUE lines")
    if not isinstance(values, Mapping):
        return [str(line) for line in values]
    out = []
    for key, value in values.items():
        text = yaml.dump(value, Dumper=YamlDumper, default_flow_style=True, width=10**9)
        out.append(f"{key}={text.removesuffix('...' + chr(10)).strip()}")
    return out


def _spec_of(source, overrides: list[str], max_grid: int | None) -> tuple[SweepSpec, str]:
    """The validated spec and the text logged on its parent run (a mapping's as YAML)."""
    if isinstance(source, (str, Path)):
        spec = load_spec(source, overrides, max_grid)
        return spec, spec.text
    if isinstance(source, SweepSpec):
        if not overrides:
            return source, source.text or yaml.safe_dump(source.raw, sort_keys=False)
        source = source.raw
    if not isinstance(source, Mapping):
        raise SpecError(f"spec: expected a YAML file's path, a mapping or a SweepSpec, got "
                        f"{type(source).__name__}")
    raw = apply_overrides(dict(source), overrides, MAPPING_SOURCE)
    return (validate(raw, MAPPING_SOURCE, max_grid=max_grid),
            yaml.safe_dump(dict(source), sort_keys=False))


def say_downloads(console: Console, downloads: list[str], where: str) -> None:
    """Name what the first trial (or the preflight) will download, and where to watch it."""
    for what in downloads:
        console.print(f"downloading {what}, once ({where})", soft_wrap=True)


def load(name: str, *, tracking_uri: str | None = None,
         storage: str | None = None) -> SweepResult:
    """A sweep already in the stores (finished, stopped or still running elsewhere).

    Raises:
        SweepError: no sweep ``name`` in the study storage (the line names the closest).
    """
    from ..report import load_sweep
    from ..report.status import load_named
    from ..stores.storages import default_storage
    from ..stores.tracking_reads import TrackingReader

    tracking_uri = tracking_uri or paths.default_tracking_uri()
    storage = storage or default_storage(tracking_uri)
    study = load_named(name, storage)
    data = load_sweep(name, tracking_uri, storage, curves=False)
    experiment_id = TrackingReader(data.tracker).experiment_id(data.spec.name) \
        if data.tracker else None
    return SweepResult(data.spec, study, data.parent_id, experiment_id, tracking_uri, storage)


def write_report(spec_or_name: str | Path, *, out: str | Path | None = None,
                 by: str | None = None, tracking_uri: str | None = None,
                 storage: str | None = None, console: Console | None = None) -> Report:
    """Write a sweep's report (HTML, Markdown, ``trials.csv``, plots) into ``out`` (default
    ``report-NAME`` here) and log it on the parent run, as ``sweep report`` does. It replaces
    only what sweep wrote there (:mod:`orchestrator.core.outputs`); other files stay.

    Args:
        by: the searched setting whose levels colour the curves (default: optimizer).
        console: shows what it is doing while it works, when given.

    Raises:
        SweepError: no such sweep, ``by`` is not one of its searched settings, a store or
            ``out`` cannot be used (checked before any work), or the folder holds a file of a
            name the report writes that sweep did not write, or one changed since it did.
    """
    if out is not None:  # checked before any work, as the stores are
        reach.check_out(out, folder=True)
        outputs.check(out, REPORT_NAMES)
    check_stores(tracking_uri, storage, create=False)
    from ..report import build_report, load_sweep, log_report  # MLflow: once the checks pass

    status = console.status if console is not None else (lambda _: contextlib.nullcontext())
    with status("reading the study and its runs..."):
        data = load_sweep(str(spec_or_name), tracking_uri or paths.default_tracking_uri(),
                          storage)
    if by and by not in data.factors:
        raise SweepError(f"--by {by}: not a searched setting of this sweep; searched: "
                         f"{', '.join(data.factors) or 'none'}")
    folder = Path(out or f"report-{data.study_name}")
    option = "--out" if out else "report folder"
    with status("building the report..."):
        with outputs.writing(folder, "sweep report", option, REPORT_NAMES) as staging:
            built = build_report(data, staging, by)
            outputs.check(folder, [f.name for f in staging.iterdir()], option)  # before logging
            log_report(data, built)  # the report's files alone, not what else the folder holds
    return dataclasses.replace(built, out_dir=folder,
                               files=[folder / f.relative_to(staging) for f in built.files])


# what a report holds whatever the sweep: checked before any work (the rest when written)
REPORT_NAMES = ("report.md", "report.html", "trials.csv", "trials.parquet", "plots")


def plan(spec: str | Path, *, pilot_seeds: int | None = None, source: str | None = None,
         draws: int = 1000, console: Console | None = None) -> Planned:
    """Size the comparison of sweep YAML ``spec`` from a pilot, as ``sweep plan`` does: the
    chance that each design of a grid decides its question, its expected seeds, trials and
    wall time, and the cheapest design that reaches 80% (:mod:`orchestrator.commands.plan`).

    Args:
        pilot_seeds: paired seeds of each level the pilot runs (default 3), with ``sweep
            run``'s machinery, in stores of its own under ``.sweep/NAME/plan/``; reused while
            the spec is unchanged.
        source: no pilot run: a finished sweep of the same settings, its folder (with its
            ``optuna.journal``) or its study storage.
        draws: simulated comparisons per design.
        console: shows the pilot's progress, when given.

    Returns:
        The plan: ``designs`` (each a :class:`orchestrator.answer.design.Design`),
        ``recommended``, and ``lines()`` as ``sweep plan`` prints them.

    Raises:
        SpecError: the YAML is invalid.
        SweepError: no ``compare:`` block, a scaling grid, a bad argument, or a ``source``
            that is missing, of other settings, or without two full paired seeds.
    """
    from .plan import plan as size

    return size(spec, run, pilot_seeds=pilot_seeds, source=source, draws=draws,
                console=console)


def reproduce(run_id: str, *, tracking_uri: str | None = None,
              progress: Callable[[int, int], None] | None = None) -> Verdict:
    """Train trial run ``run_id`` again from its MLflow run alone and compare the curves, as
    ``sweep reproduce`` does; ``progress(epoch, epochs)`` after each epoch.

    Returns:
        The verdict: ``identical``, the compared ``rows``, the ``reasons`` curves may differ.

    Raises:
        SweepError: no such trial run, one without its settings, or a store that is missing
            or does not answer.
    """
    check_stores(tracking_uri, False, create=False)  # a missing store is not made
    from .reproduce import reproduce as again  # MLflow: once the check passed

    return again(run_id, tracking_uri or paths.default_tracking_uri(), progress=progress)


@dataclass
class Exported:
    """What :func:`export` wrote: the files in ``out``, the parity ``report`` per format (as
    ``export/export.json``) and its summary ``metrics``; ``failed``: formats that failed;
    ``answer``: a comparison's answer in words when the run is the one standing for it."""

    out: Path
    report: dict[str, Any]
    metrics: dict[str, float]
    answer: str | None = None  # the comparison's answer, when these weights stand for it

    @property
    def failed(self) -> list[str]:
        return [f for f, r in self.report["formats"].items() if not r.get("passed")]


def export(run_id: str, *, formats: Iterable[str] | None = None, out: str | Path | None = None,
           tracking_uri: str | None = None, console: Console | None = None) -> Exported:
    """Export trial run ``run_id``'s final weights, check each file against the eager model,
    log them on the run and copy them to ``out`` (default ``export-RUN_ID`` here), as ``sweep
    export`` does.

    Args:
        formats: from ``trainers.EXPORT_FORMATS`` (default ``trainers.DEFAULT_EXPORT_FORMATS``).
        console: says what it exports while it works, when given.

    Raises:
        SweepError: no such run, its weights cannot be exported, the store or ``out``
            cannot be used, or ``out`` holds a file of a name the export writes that sweep
            did not write, or one changed since it did (checked before any work; other files
            stay).
    """
    from trainers import DEFAULT_EXPORT_FORMATS, TrainSettings
    from trainers.export import summary_metrics

    formats = tuple(formats or DEFAULT_EXPORT_FORMATS)
    option = "--out" if out else "export folder"
    out = reach.check_out(out or f"export-{run_id}", folder=True)  # before any work
    outputs.check(out, export_names(formats), option)
    check_stores(tracking_uri, False, create=False)  # a missing store is not made
    from ..stores.tracking import Tracker, export_figures, parity_csv  # MLflow: once checked
    from ..stores.tracking_reads import TrackingReader

    tracker = Tracker(tracking_uri or paths.default_tracking_uri())
    with tempfile.TemporaryDirectory(prefix="sweep-export-") as tmp:
        reader = TrackingReader(tracker)
        settings_dict, weights = reader.trial_files(run_id, tmp)
        status = contextlib.nullcontext()
        if console is not None:
            console.print(f"exporting run {run_id} as {', '.join(formats)}...")
            status = console.status("exporting and checking each file against the eager "
                                    "model...")
        with status:
            parity = _export(run_id, TrainSettings.from_dict(settings_dict), weights,
                             Path(tmp) / "export", formats)
        metrics = summary_metrics(parity)
        result = {"report": parity, "metrics": metrics, "error": None,
                  "dir": str(Path(tmp) / "export")}
        # the figures' table, as on the run (export/parity.csv), beside the files in --out
        (Path(tmp) / "export" / PARITY_CSV).write_text(parity_csv(export_figures(result)))
        tracker.log_export(run_id, result)
        outputs.publish(Path(tmp) / "export", out, "sweep export", option)
    return Exported(out, parity, metrics, reader.answer_of(run_id))


PARITY_CSV = Path(keys.PARITY_FILE).name


def export_names(formats: Iterable[str]) -> list[str]:
    """What ``sweep export`` writes into its folder for ``formats`` (checked before any
    work): the files, ``export.json``, ``parity.csv``, a parity file per format, the input
    example and the validation split's items."""
    from trainers.export import FILES, VALIDATION_FILE

    return [*(FILES[f] for f in formats if f in FILES), *(f"parity_{f}.json" for f in formats),
            "export.json", "input_example.npy", VALIDATION_FILE, PARITY_CSV]


def _export(run_id: str, settings, weights: str, out: Path, formats: tuple[str, ...]) -> dict:
    """:func:`trainers.export.export`'s report; weights that do not load are one line."""
    from trainers import CheckpointError, SettingsError
    from trainers.export import export as export_files

    try:
        return export_files(settings, weights, out, formats).to_dict()
    except (CheckpointError, SettingsError) as e:
        artifact = f"{keys.WEIGHTS_DIR}/{keys.WEIGHTS_FILE}"
        reason = str(e).replace(str(weights), artifact).splitlines()[0]
        raise SweepError(f"RUN_ID {run_id}: its {artifact} cannot be exported: {reason}; "
                         f"export another run (sweep status NAME lists them)") from None
