"""The sweep YAML: read once at the edge, validated, and frozen into a :class:`SweepSpec`.

Owns the models (each YAML key declared once, with its type, range and editor hover text), the
entry points :func:`load_spec` and :func:`validate`, and what a spec says about its data; reading
the file is in :mod:`orchestrator.config.reading`, the rules across keys in
:mod:`orchestrator.config.rules`. Every problem becomes one line naming the file, the field, the
value and the fix; nothing is created on disk before a spec validates.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from trainers import (
    DEFAULT_EXPORT_FORMATS,
    EXPORT_FORMATS,
    MAX_SEED,
    SettingsError,
    TrainSettings,
    check_data_files,
    is_user_code,
    pending_download,
)

from ..core.errors import SpecError, did_you_mean, key_text
from . import space as sp
from .reading import check_size, list_spellings, one_line, read_mapping
from .rules import MAX_GRID, check_rules
from .samplers import PRUNERS, SAMPLERS

RESUMABLE_KEYS = ("trials", "workers", "retries", "timeout_min", "trial_timeout_min",
                  "start_timeout_s",
                  "description", "keep_checkpoints", "gpus", "workers_per_gpu", "export",
                  "export_for", "export_timeout_s", "test_timeout_s", "preflight",
                  "heartbeat_seconds", "tags")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Objective(_Strict):
    """One objective: a metric the trainer logs each epoch, its direction, and how a trial's
    epochs become its value (see :func:`orchestrator.answer.objectives.reduce_curve`)."""

    metric: str = Field("val_acc", description="an epoch metric the trainer logs")
    direction: Literal["maximize", "minimize"] = Field("maximize", description="which way the "
                                                       "metric is better")
    reduce: Literal["last", "best", "mean_last_k"] = Field(
        "last", description="a trial's value: its last epoch, its best epoch, or the mean of "
        "its last k epochs (mean_last_k)")
    k: int | None = Field(None, ge=1, description="the epochs mean_last_k averages")
    target: float | None = Field(None, description="time to target: the trial's value is the "
                                 "epochs the metric takes to first reach this value (epochs + 1 "
                                 "if never), minimized")

    @property
    def goal(self) -> Literal["maximize", "minimize"]:
        """The study's direction for this objective (a time to target is minimized)."""
        return "minimize" if self.target is not None else self.direction

    @property
    def label(self) -> str:
        """``val_acc``, or ``epochs to val_acc 0.9`` with a target."""
        return self.metric if self.target is None else f"epochs to {self.metric} {self.target:g}"


class Constraint(_Strict):
    """``constraints:`` entry: a metric's value at a trial's last epoch kept within bounds."""

    metric: str = Field(description="an epoch metric the trainer logs")
    max: float | None = Field(None, description="the most the metric may be")
    min: float | None = Field(None, description="the least the metric may be")


class StopWhen(_Strict):
    """``stop_when:``: the sweep starts no new trial once either rule holds."""

    value: float | None = Field(None, description="a complete feasible trial's objective "
                                "reached this value")
    trials_without_improvement: int | None = Field(None, ge=1, description="this many trials "
                                                   "finished since the best one")


class SamplerSpec(BaseModel):
    """``name`` and ``seed``; any other key is passed to the Optuna sampler's constructor."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)
    name: Literal[SAMPLERS] = "tpe"
    seed: int | None = Field(None, ge=0, le=MAX_SEED)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PrunerSpec(BaseModel):
    """``name`` and ``min_epochs``; any other key is passed to the Optuna pruner's constructor."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)
    name: Literal[PRUNERS] = "none"
    min_epochs: int = Field(default=1, ge=1)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class PreflightSpec(_Strict):
    """``preflight:`` as a mapping; ``preflight: true`` is these defaults, ``false`` skips it."""

    lr_range_test: bool = False
    overfit_steps: int = Field(default=300, ge=1, le=10000)
    timeout_s: float | None = Field(None, gt=0, description="seconds one configuration's checks "
                                    "may take before they count as hung (a FAIL); default: "
                                    "300 + 1 per training step")


class CompareSpec(_Strict):
    """``compare:``: the levels of a setting compared fairly (see
    :mod:`orchestrator.answer.compare`)."""

    factor: str | list[str] = Field(description="the searched setting whose levels are "
                                    "compared (an option mapping or a list under space); a list "
                                    "of settings compares the product of their levels")
    tune_trials: int = Field(ge=0, description="tuning trials per level and tuning, each over "
                             "that level's own sub-space; 0: nothing is tuned, each level's "
                             "fixed settings are confirmed directly")
    tuning: Literal["each_seed", "once"] = Field(
        "each_seed", description="each_seed: every paired seed tunes each level anew and trains "
        "its best once on that seed, so the interval holds the tuning draw (the estimand: a "
        "level's expected score after tuning with this budget); once: one tuning per level, its "
        "best trained on every seed (the interval holds the seeds of those configurations only)")
    seeds: int = Field(3, ge=2, description="fresh paired seeds (seed+1, seed+2, ...) each "
                       "level's best tuned configuration is trained on (each_seed: each with "
                       "its own tuning)")
    max_seeds: int | None = Field(None, ge=2, description="add one paired seed a round, up to "
                                  "this many, while a pair of levels is undecided (default: "
                                  "seeds)")
    precision: float | None = Field(None, gt=0, description="levels are called equivalent "
                                    "when the whole confidence interval of their difference "
                                    "lies between -precision and precision (metric units); "
                                    "seeding stops on better or equivalent, never on undecided")
    target: float | None = Field(None, description="objective value for time-to-target "
                                 "(epochs and seconds each level takes to reach it)")
    goal: Literal["best", "pairs", "effects"] | None = Field(
        None, description="the question whose answer stops the seeding: best (every pair of "
        "the leading level decided), pairs (every pair of levels decided) or effects (every "
        "main effect and interaction decided; two or more factors only); default: effects "
        "for two or more factors, else best")

    @property
    def factors(self) -> tuple[str, ...]:
        return (self.factor,) if isinstance(self.factor, str) else tuple(self.factor)

    @property
    def most_seeds(self) -> int:
        return self.seeds if self.max_seeds is None else self.max_seeds


class ScalingSpec(_Strict):
    """``scaling:``: a grid of batch sizes x learning rates x seeds read as lr-sensitivity
    curves (see :mod:`orchestrator.report.scaling`; its rules: :mod:`.scaling_rules`)."""

    metric: str | None = Field(None, description="the epoch metric each curve is read from, at "
                               "a run's last epoch (default: the objective's)")
    direction: Literal["maximize", "minimize"] | None = Field(
        None, description="which way the metric is better (default: the objective's direction "
        "for its metric, else minimize for a *loss, maximize otherwise)")
    bootstrap: int = Field(2000, ge=200, le=100_000, description="resamples of the seeds "
                           "behind the exponent's interval")


class SweepSpec(_Strict):
    """A validated sweep, frozen: build it with :func:`load_spec` or :func:`validate`.

    Each field is a key of the sweep YAML, declared once: pydantic checks a YAML's types and
    ranges against them, and ``sweep schema`` publishes them to editors. :func:`validate` then
    checks the rules across keys and resolves five fields: ``space`` becomes the parsed search
    space (:mod:`orchestrator.config.space` nodes), ``trials`` is counted for a grid that leaves it
    out, ``preflight`` becomes its options (None for ``preflight: false``), and ``gpus`` and
    ``export`` become tuples; ``objective`` becomes the first objective (:attr:`objectives`
    holds them all) and ``tags`` strings.
    """

    # the descriptions are the hover texts of editors reading `sweep schema`
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$",
                      description="Optuna study name and MLflow experiment name")
    description: str = Field("", description="shown as the experiment's description")
    objective: Objective | list[Objective] = Field(
        Objective(), description="what the sampler optimizes: one objective, or a list of "
        "them (several objectives: the study's best trials are its Pareto front)")
    constraints: list[Constraint] = Field([], description="bounds on metrics of a trial's "
                                          "last epoch: the best trials are the feasible ones")
    enqueue: list[dict[str, Any]] = Field([], description="configurations tried first, each a "
                                          "mapping of every searched parameter to a value")
    warm_start: str | None = Field(None, description="a sweep in the same study storage with "
                                   "the same space: its finished trials are copied into this "
                                   "study's history for the sampler")
    patience: int | None = Field(None, ge=1, description="stop a trial after this many epochs "
                                 "without improvement of its (first) objective's metric")
    stop_when: StopWhen | None = Field(None, description="start no new trial once value is "
                                       "reached or trials_without_improvement trials finished "
                                       "without a better one")
    tags: dict[str, str | int | float | bool] = Field({}, description="MLflow tags of the "
                                                      "parent run and every trial run")
    trials: int | None = Field(None, ge=1, description="finished trials the study must hold; "
                               "required unless the sampler is grid")
    timeout_min: float | None = Field(None, gt=0, description="stop starting trials after this "
                                      "many minutes")
    workers: int | None = Field(None, ge=1, le=256, description="trials run at once (default: "
                                "one per GPU, else one per core)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="base of the trial seeds: seed + repeat "
                      "index")
    repeats: int = Field(1, ge=1, description="seeds per configuration")
    sampler: SamplerSpec = Field(SamplerSpec(), description="name, seed, and any option of the "
                                 "Optuna sampler")
    pruner: PrunerSpec = Field(PrunerSpec(), description="name, min_epochs, and any option of "
                               "the Optuna pruner")
    retries: int = Field(1, ge=0, description="retries of a crashed trial, from its checkpoint")
    trial_timeout_min: float | None = Field(None, gt=0, description="a trial running longer is "
                                            "killed and handled as a crash")
    start_timeout_s: float = Field(600, gt=0, description="seconds a worker may take to start "
                                   "(import torch, initialise its device) before it is killed "
                                   "as a failed start")
    keep_checkpoints: bool = Field(False, description="keep each trial's epoch checkpoint")
    gpus: list[int] | None = Field(None, description="GPU ids for the worker slots (default: "
                                   "the visible GPUs)")
    workers_per_gpu: int = Field(1, ge=1, description="worker slots per GPU")
    export: list[Literal[EXPORT_FORMATS]] = Field(list(DEFAULT_EXPORT_FORMATS),
                                                  description="formats to export the winner in")
    export_for: Literal["best", "all", "none"] = Field("best", description="which trials are "
                                                       "exported")
    export_timeout_s: float | None = Field(None, gt=0, description="seconds the export of the "
                                           "best trial may take per format (default: 300 plus "
                                           "10 of its epochs)")
    test_timeout_s: float | None = Field(None, gt=0, description="seconds one trial's "
                                         "evaluation on the test split may take (default: 120 "
                                         "plus 10 of its epochs)")
    preflight: bool | PreflightSpec = Field(True, description="checks before the first trial; "
                                            "false skips them")
    heartbeat_seconds: int = Field(10, ge=1, le=3600, description="RDB storages: heartbeat "
                                   "interval of running trials")
    train: dict[str, Any] = Field({}, description="fixed trainer settings")
    space: dict[str, Any] = Field({}, description="searched trainer settings")
    compare: CompareSpec | None = Field(None, description="compare the levels of a searched "
                                        "setting: each level tuned with tune_trials, its best "
                                        "confirmed on fresh paired seeds")
    scaling: ScalingSpec | None = Field(None, description="read a grid of batch_size x lr "
                                        "x repeats as lr-sensitivity curves: the best lr per "
                                        "batch size, its exponent, the linear and square-root "
                                        "rules compared, the gradient noise scale")

    # not YAML keys: where the spec came from, and what validating it found worth saying
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)
    _source: str = PrivateAttr("<sweep>")
    _text: str = PrivateAttr("")
    _warnings: tuple[str, ...] = PrivateAttr(())
    _objectives: tuple[Objective, ...] = PrivateAttr(())

    @property
    def raw(self) -> dict[str, Any]:
        """The mapping the spec was built from (after ``--set`` overrides)."""
        return self._raw

    @property
    def source(self) -> str:
        """The file the spec was read from, as messages name it."""
        return self._source

    @property
    def text(self) -> str:
        """The file's text as the user wrote it (before ``--set``), read once with the spec:
        what the sweep logs is what it validated, even if the file changes meanwhile."""
        return self._text

    @property
    def warnings(self) -> tuple[str, ...]:
        """What validation found doubtful but not wrong, one line each."""
        return self._warnings

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """Every objective, in YAML order (``objective`` is the first of them)."""
        return self._objectives or (self.objective,)

    @property
    def directions(self) -> list[str]:
        """The study's direction per objective."""
        return [o.goal for o in self.objectives]

    @property
    def is_multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def is_grid(self) -> bool:
        return self.sampler.name == "grid"

    @property
    def sampler_seed(self) -> int:
        return self.seed if self.sampler.seed is None else self.sampler.seed

    @property
    def epochs(self) -> int:
        return self.train.get("epochs", TrainSettings().epochs)

    def grid(self) -> list[dict[str, Any]]:
        """Every configuration of a grid sweep as Optuna parameters (repeats not included)."""
        return sp.grid(self.space)

    def identity(self) -> dict[str, Any]:
        """What decides a sweep's results: every key but trials, workers, retries, timeouts,
        placement and wording. A study resumes only from a YAML with the same identity."""
        return {k: v for k, v in self.raw.items() if k not in RESUMABLE_KEYS}

    def fingerprint(self) -> str:
        """A hash of :meth:`identity`."""
        text = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def _resolved(self, space: sp.Space, trials: int, raw: dict[str, Any], source: str,
                  warnings: list[str]) -> SweepSpec:
        """This spec as :func:`validate` returns it (see the class docstring)."""
        preflight = PreflightSpec() if self.preflight is True else self.preflight or None
        objectives = tuple(self.objective) if isinstance(self.objective, list) else \
            (self.objective,)
        spec = self.model_copy(update={
            "space": space, "trials": trials, "preflight": preflight, "export": tuple(self.export),
            "gpus": tuple(self.gpus) if self.gpus is not None else None,
            "objective": objectives[0],
            "tags": {k: str(v).lower() if isinstance(v, bool) else str(v)
                     for k, v in self.tags.items()}})
        spec._raw, spec._source, spec._warnings = raw, source, tuple(warnings)
        spec._objectives = objectives
        return spec


TOP_LEVEL_KEYS = tuple(SweepSpec.model_fields)


def _dataset_configs(spec: SweepSpec) -> list[dict[str, Any]]:
    """One representative configuration per dataset the sweep can train on."""
    base = sp.overlay(spec.train, sp.first_values(spec.space))
    datasets = {base.get("dataset", TrainSettings().dataset)}
    for _, node in sp.walk(spec.space):
        if isinstance(node, sp.Choice) and node.setting == "dataset":
            datasets.update(node.choices)
    return [{**base, "dataset": d} for d in sorted(datasets)]


def data_downloads(spec: SweepSpec) -> list[str]:
    """What the sweep's first trials will download (``download: true``, files missing)."""
    out = []
    for config in _dataset_configs(spec):
        try:
            what = pending_download(TrainSettings.from_dict(config))
        except SettingsError:  # data_problems names it
            continue
        if what:
            out.append(what)
    return out


# what the trainer caches a loaded dataset by (trainers.datasets.load_data)
DATA_KEY = ("dataset", "data_dir", "val_fraction", "image_size")


def warm_up_settings(spec: SweepSpec) -> str:
    """What a worker with nothing to do yet warms up for (:func:`trainers.warm_up`), as JSON:
    the settings of the one dataset every trial reads when it is built in and on disk, else
    ``null`` (the imports alone: a user's dataset or a download waits for the trial, and a
    dataset that differs between trials may not be the one the worker's first trial reads)."""
    searched = {node.setting for _, node in sp.walk(spec.space) if not isinstance(node, sp.Fixed)}
    configs = _dataset_configs(spec)
    if len(configs) != 1 or searched & set(DATA_KEY) or is_user_code("dataset",
                                                                       configs[0]["dataset"]):
        return "null"
    try:
        settings = TrainSettings.from_dict(configs[0])
        check_data_files(settings)
    except SettingsError:  # data_problems names it
        return "null"
    if pending_download(settings):
        return "null"
    return json.dumps({k: getattr(settings, k) for k in DATA_KEY})


def data_problems(spec: SweepSpec) -> list[str]:
    """Missing dataset files, one line each (``sweep run`` refuses to start on them; ``sweep
    validate`` only warns, so that a YAML can be checked on a machine without the data)."""
    problems = []
    for config in _dataset_configs(spec):
        try:
            check_data_files(TrainSettings.from_dict(config))
        except SettingsError as e:
            where = "train" if "dataset" in spec.train or e.field != "dataset" else "space"
            problems.append(f"{spec.source}: {where}.{e.field}: {e.value} {e.fix}"
                            if e.field == "dataset" else
                            f"{spec.source}: train.{e.field} {e.fix}, got {e.value!r}")
    return problems


def settings_of(spec: SweepSpec, sampled: dict[str, Any]) -> dict[str, Any]:
    """Fixed settings overlaid with a trial's sampled ones (a user's keywords merged)."""
    return sp.overlay(spec.train, sampled)


# ------------------------------------------------------------------------------------ loading

def load_spec(path: str | os.PathLike, overrides: list[str] = (),
              max_grid: int | None = MAX_GRID) -> SweepSpec:
    """Read, override and validate a sweep YAML.

    Args:
        max_grid: the most configurations a grid may have (None: no cap).

    Raises:
        SpecError: with one line per problem, each starting with the file name.
    """
    path = Path(path)
    text, raw = read_mapping(path, overrides)
    spec = validate(raw, source=str(path), max_grid=max_grid,
                    spellings=list_spellings(text, overrides))
    spec._text = text  # the very bytes validated: the file may change while the sweep runs
    return spec


def validate(raw: dict, source: str = "<sweep>", max_grid: int | None = MAX_GRID,
             spellings: dict[tuple[str, ...], tuple[str, ...]] | None = None) -> SweepSpec:
    """Validate a sweep mapping: its size, each key against :class:`SweepSpec`'s fields, then the
    rules across keys (settings together, sampler, pruner, objective, trials, seeds, GPU slots).

    Args:
        max_grid: the most configurations a grid may have (None: no cap); a grid is counted as
            the product of its lists before any configuration is listed.
        spellings: each list's items as the file wrote them, for messages that quote two of
            them (:func:`~orchestrator.config.reading.list_spellings`; None: as read).

    Returns:
        the spec, with the fields its docstring names resolved.

    Raises:
        SpecError: one line per problem found, each starting with ``source``.
    """
    check_size(raw, source)
    try:
        top = SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise SpecError(*[f"{source}: {one_line(_pydantic_line(err))}"
                          for err in _one_branch(e.errors(), raw)]) from None
    problems: list[str] = []
    warnings: list[str] = []
    space, trials = check_rules(top, max_grid, problems, warnings, spellings)
    if problems:
        raise SpecError(*[f"{source}: {one_line(p)}" for p in problems])
    return top._resolved(space, trials, raw, source, warnings)


def _pydantic_line(err: dict) -> str:
    """One of pydantic's errors as this project's line: the key's path, what it must be, the
    value given."""
    loc = ".".join(key_text(p) for p in err["loc"]) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = err["loc"][:-1]
        known = _known_keys(parent)
        return (f"{loc} is not a known key{did_you_mean(err['loc'][-1], known)}; "
                f"known keys here: {', '.join(known)}")
    if kind == "missing":
        return f"{loc} is required"
    if kind in ("dict_type", "model_type"):
        return f"{loc} must be a mapping, got {err['input']!r}"
    msg = err["msg"]
    if kind == "literal_error":
        msg = msg.replace("Input should be", "must be")
    elif kind == "string_pattern_mismatch":
        msg = "must be letters, digits, '_', '-' or '.' (it names the study and the experiment)"
    else:
        msg = msg.replace("Input should be", "must be").replace("Value should", "must")
    return f"{loc} {msg}, got {err['input']!r}"


def _one_branch(errors: list[dict], raw: dict) -> list[dict]:
    """``objective`` is a mapping or a list of them: keep the errors of the form the YAML
    wrote, without the union's branch in their path (``objective.reduce``, ``objective.1.k``)."""
    given = raw.get("objective") if isinstance(raw, dict) else None
    wrote = "list[Objective]" if isinstance(given, list) else "Objective"
    out = []
    for err in errors:
        loc = tuple(err["loc"])
        if loc[:1] == ("objective",) and len(loc) > 1 and loc[1] in ("Objective",
                                                                       "list[Objective]"):
            if loc[1] != wrote:
                continue
            err = {**err, "loc": loc[:1] + loc[2:]}
        out.append(err)
    return out


def _known_keys(parent: tuple) -> tuple[str, ...]:
    parent = tuple(p for p in parent if not isinstance(p, int))  # an entry of a list
    models = {(): SweepSpec, ("objective",): Objective, ("compare",): CompareSpec,
              ("scaling",): ScalingSpec,
              ("constraints",): Constraint, ("stop_when",): StopWhen}
    model = models.get(tuple(parent))
    return tuple(model.model_fields) if model else ()
