"""The sweep YAML: read once at the edge, validated, and frozen into a :class:`SweepSpec`.

Every problem becomes one line naming the file, the field, the value and the fix; nothing is
created on disk before a spec validates.
"""
from __future__ import annotations

import copy
import hashlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from trainers import (
    CUDA_METRICS,
    DEFAULT_EXPORT_FORMATS,
    EPOCH_METRICS,
    EXPORT_FORMATS,
    SettingsError,
    TrainSettings,
    check_data_files,
    check_seams,
    is_user_code,
    pending_download,
    setting_fields,
    setting_kind,
)

from . import space as sp
from .errors import SpecError, SweepError, did_you_mean, key_text
from .slots import plan_slots

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp", "qmc", "nsga2", "nsga3")
NUMERIC_ONLY_SAMPLERS = ("cmaes", "gp", "qmc")
SINGLE_OBJECTIVE_SAMPLERS = ("cmaes",)  # Optuna's CMA-ES refuses a study of several objectives
CONSTRAINED_SAMPLERS = ("tpe", "gp", "nsga2", "nsga3")  # those that read trial.constraints
PRUNERS = ("none", "median", "successive_halving", "hyperband")
RESUMABLE_KEYS = ("trials", "workers", "retries", "timeout_min", "trial_timeout_min",
                  "start_timeout_s",
                  "description", "keep_checkpoints", "gpus", "workers_per_gpu", "export",
                  "export_for", "export_timeout_s", "test_timeout_s", "preflight",
                  "heartbeat_seconds", "tags")
MINIMIZE_HINT = {"val_loss": "minimize", "train_loss": "minimize", "val_acc": "maximize"}
MAX_SEED = 2**32 - 1  # numpy's seeds: every trial seed (seed + repeat index) must be one
# Bounds on what a sweep file may be, so that any input is read or refused in bounded time and
# memory (an alias bomb expands to billions of values; a grid is a product of its lists).
MAX_FILE_BYTES = 1 << 20
MAX_YAML_VALUES = 2_000  # scalars, lists and mappings, aliases expanded
MAX_YAML_DEPTH = 32
MAX_GRID = 5_000  # configurations; `--max-grid N` raises it


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Objective(_Strict):
    """One objective: a metric the trainer logs each epoch, its direction, and how a trial's
    epochs become its value (see :func:`orchestrator.objectives.reduce_curve`)."""

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
    """``compare:``: the levels of a setting compared fairly (see :mod:`orchestrator.compare`)."""

    factor: str | list[str] = Field(description="the searched setting whose levels are "
                                    "compared (an option mapping or a list under space); a list "
                                    "of settings compares the product of their levels")
    tune_trials: int = Field(ge=1, description="tuning trials per level, each over that level's "
                             "own sub-space, on the tuning seed (seed)")
    seeds: int = Field(3, ge=2, description="fresh paired seeds (seed+1, seed+2, ...) each "
                       "level's best tuned configuration is trained on")
    max_seeds: int | None = Field(None, ge=2, description="add one paired seed a round, up to "
                                  "this many, while a pair of levels is undecided (default: "
                                  "seeds)")
    precision: float | None = Field(None, gt=0, description="a pair is decided when its "
                                    "confidence interval excludes 0 or lies within +-precision "
                                    "(metric units)")
    target: float | None = Field(None, description="objective value for time-to-target "
                                 "(epochs and seconds each level takes to reach it)")

    @property
    def factors(self) -> tuple[str, ...]:
        return (self.factor,) if isinstance(self.factor, str) else tuple(self.factor)

    @property
    def most_seeds(self) -> int:
        return self.seeds if self.max_seeds is None else self.max_seeds


class SweepSpec(_Strict):
    """A validated sweep, frozen: build it with :func:`load_spec` or :func:`validate`.

    Each field is a key of the sweep YAML, declared once: pydantic checks a YAML's types and
    ranges against them, and ``sweep schema`` publishes them to editors. :func:`validate` then
    checks the rules across keys and resolves five fields: ``space`` becomes the parsed search
    space (:mod:`orchestrator.space` nodes), ``trials`` is counted for a grid that leaves it out,
    ``preflight`` becomes its options (None for ``preflight: false``), and ``gpus`` and
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
    text = read_text(path)
    raw = parse_yaml(text, path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a sweep file must be a mapping of keys (name, objective, train, "
                        f"space...), got {type(raw).__name__}")
    raw = apply_overrides(raw, overrides, str(path))
    spec = validate(raw, source=str(path), max_grid=max_grid)
    spec._text = text  # the very bytes validated: the file may change while the sweep runs
    return spec


class _YamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """The safe loader (libyaml's where installed), refusing a key given twice in a mapping,
    and reading ``3e-3`` as a number as YAML 1.2 does (YAML 1.1 wants ``3.0e-3``)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # `<<: *base` may be overridden; complex keys are refused later
            key = self.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line "
                    f"{seen[key].line + 1}); a mapping names each key once, so remove one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's floats with an exponent and no dot: YAML 1.1, PyYAML's, reads them as strings
_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


class YamlDumper(yaml.SafeDumper):
    """The safe dumper, quoting a string that :class:`_YamlLoader` would read as a number
    (``'1e-5'``): what it writes reads back as the value it was given."""


YamlDumper.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
    r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def read_yaml(path: Path) -> Any:
    """A YAML file's value, read in bounded time and memory (see :data:`MAX_FILE_BYTES`).

    Raises:
        SpecError: the file is unreadable, too large, not UTF-8, not YAML, too deep or too big.
    """
    return parse_yaml(read_text(path), path)


def read_text(path: Path) -> str:
    """A sweep file's text, read once and in bounded memory.

    Raises:
        SpecError: the file is unreadable, too large or not UTF-8.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the sweep file ({e.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: the file is over {MAX_FILE_BYTES >> 10} KiB; a sweep YAML "
                        f"holds settings, not data")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start} is "
                        f"{data[e.start:e.start + 1]!r}); save the file as UTF-8") from None
    return text


def parse_yaml(text: str, path: Path) -> Any:
    """The value of a sweep file's text, built in bounded time and memory.

    Raises:
        SpecError: not YAML, too deep or too big.
    """
    try:
        _check_yaml_events(text, path)
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{path}: invalid YAML{where}: {_one_line(problem)}") from None
    except RecursionError:
        raise SpecError(f"{path}: the YAML nests deeper than {MAX_YAML_DEPTH} levels") from None


def _check_yaml_events(text: str, path: Path) -> None:
    """Refuse a YAML of too many values or too deep before building it (the parser's events
    are cheap; building Python values of a megabyte of them is not)."""
    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_YamlLoader)):
        if count > 2 * MAX_YAML_VALUES:
            raise SpecError(f"{path}: the YAML holds over {MAX_YAML_VALUES} values; a sweep YAML "
                            f"holds settings, not data")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                raise SpecError(f"{path}: the YAML nests deeper than {MAX_YAML_DEPTH} levels at "
                                f"line {mark.line + 1}; a sweep YAML is a few levels deep")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _check_size(raw: Any, source: str) -> None:
    """Refuse a mapping that expands (aliases repeat shared values) past
    :data:`MAX_YAML_VALUES` values or nests past :data:`MAX_YAML_DEPTH`, before anything
    formats, copies or hashes it; counted once per shared value, so an alias bomb costs little."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (values, height) of each list or mapping
    too_deep = SpecError(f"{source}: the YAML nests deeper than {MAX_YAML_DEPTH} levels (or "
                         f"contains itself through an alias)")

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if not isinstance(value, (dict, list)):
            return 1, 0
        if depth >= MAX_YAML_DEPTH:  # also where a value that contains itself ends
            raise too_deep
        if id(value) in sizes:
            size, height = sizes[id(value)]
            if depth + height > MAX_YAML_DEPTH:
                raise too_deep
            return size, height
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        size, height = 1, 1
        for item in items:
            item_size, item_height = measure(item, depth + 1)
            size, height = size + item_size, max(height, item_height + 1)
            if size > MAX_YAML_VALUES:
                raise SpecError(f"{source}: the YAML expands to over {MAX_YAML_VALUES} values "
                                f"(aliases repeat what they name); write the sweep out plainly")
        sizes[id(value)] = (size, height)
        return size, height

    measure(raw, 0)


def apply_overrides(raw: dict, overrides, source: str) -> dict:
    """Apply ``KEY=VALUE`` overrides (dotted keys, YAML values) to a copy of ``raw``."""
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.epochs=1")
        try:
            value = yaml.load(text, Loader=_YamlLoader) if text.strip() else None  # noqa: S506
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None)
            raise SpecError(_one_line(f"--set {item!r}: the value is not valid YAML"
                                      f"{f' ({problem})' if problem else ''}; quote it"
                                      )) from None
        node = out
        parts = key.strip().split(".")
        if not all(p.strip() for p in parts):
            raise SpecError(f"--set {item!r}: the key path {key.strip()!r} is malformed (an "
                            f"empty part between dots); write it as dotted names, e.g. "
                            f"--set train.epochs=3")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise SpecError(f"--set {item!r}: {'.'.join(parts[:i + 1])} is {child!r}, not a "
                                f"mapping, so it has no key {parts[i + 1]!r}")
            node = child
        node[parts[-1]] = value
    return out


def tag_overrides(path: str | os.PathLike, tags: list[str]) -> list[str]:
    """``--tag KEY=VALUE`` (the value a string as written), as one ``--set`` override of
    ``tags``: the YAML file's tags with these added (a tag name may hold dots, which a dotted
    ``--set`` key cannot name). The spec validates the names."""
    if not tags:
        return []
    raw = read_yaml(Path(path))
    given = raw.get("tags") if isinstance(raw, dict) else None
    merged = dict(given) if isinstance(given, dict) else {}
    for item in tags:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(_one_line(f"--tag {item!r}: expected KEY=VALUE, e.g. --tag "
                                      f"team=vision"))
        merged[key] = value
    return ["tags=" + json.dumps(merged)]


def validate(raw: dict, source: str = "<sweep>", max_grid: int | None = MAX_GRID) -> SweepSpec:
    """Validate a sweep mapping: its size, each key against :class:`SweepSpec`'s fields, then the
    rules across keys (settings together, sampler, pruner, objective, trials, seeds, GPU slots).

    Args:
        max_grid: the most configurations a grid may have (None: no cap); a grid is counted as
            the product of its lists before any configuration is listed.

    Returns:
        the spec, with the fields its docstring names resolved.

    Raises:
        SpecError: one line per problem found, each starting with ``source``.
    """
    _check_size(raw, source)
    try:
        top = SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise SpecError(*[f"{source}: {_one_line(_pydantic_line(err))}"
                          for err in _one_branch(e.errors(), raw)]) from None
    problems: list[str] = []
    warnings: list[str] = []
    space = _check_settings(top, problems)
    n_configs = None
    trials = top.trials
    if not problems and top.compare is not None:
        trials = _check_compare(top, space, problems)
    if not problems:
        n_configs = _check_sampler(top, space, problems, warnings, max_grid)
        _check_pruner(top, problems, warnings)
        _check_objective(top, problems, warnings)
        _check_study_rules(top, space, problems, warnings)
    if not problems and top.compare is None:
        trials = _count_trials(top, n_configs, problems)
    last_seed = top.seed + (top.compare.most_seeds if top.compare else top.repeats - 1)
    if last_seed > MAX_SEED:
        how = "seed + confirmation round" if top.compare else "seed + repeat index"
        problems.append(f"seed: the trial seeds {how} reach {last_seed}, past numpy's largest "
                        f"seed {MAX_SEED}; lower seed")
    if top.gpus is not None and not problems:
        _check_slots(top, problems)
    if len(set(top.export)) != len(top.export):
        problems.append(f"export lists a format twice, got {top.export}")
    if problems:
        raise SpecError(*[f"{source}: {_one_line(p)}" for p in problems])
    return top._resolved(space, trials, raw, source, warnings)


def _check_settings(top: SweepSpec, problems: list[str]) -> sp.Space:
    """Check ``train`` and ``space`` as trainer settings; return the parsed space."""
    fixed = _check_train(top.train, problems)
    space = sp.parse_space(top.space, "space", problems)
    for path, node in sp.walk(space):
        if path.count(".") == 1 and node.setting in fixed:
            problems.append(f"{path}: {node.setting} is also fixed in train; keep it in one place")
    if not problems:  # one representative configuration first, then every searched value
        try:
            first = TrainSettings.from_dict(sp.overlay(fixed, sp.first_values(space)))
        except SettingsError as e:
            if e.field in fixed:
                problems.append(f"train.{e.field} {e.fix}, got {e.value!r}")
            elif e.field not in {n.setting for _, n in sp.walk(space)}:  # a default they
                # do not fit (a dataset's data_dir...): train's to fix, not a searched value's
                problems.append(f"train.{e.field} {e.fix}, got its default {e.value!r}; "
                                f"{_default_fix(e, fixed)}")
        else:
            _check_fixed_seams(first, fixed, problems)
    if not problems:
        for key, value in fixed.items():
            unused = sp.unused_problem(f"train.{key} = {value!r}", key, space, fixed, {})
            if unused:
                problems.append(unused)
        sp.check_values(space, fixed, problems)
    return space


def _default_fix(error: SettingsError, fixed: dict[str, Any]) -> str:
    """How to fix a default that the fixed settings do not fit: set it, or change the fixed
    settings its message names (lr_scaling for reference_batch_size), not every one."""
    named = [f"train.{k}" for k in fixed if re.search(rf"\b{re.escape(k)}\b", error.fix)]
    return f"set train.{error.field}" + (f", or change {', '.join(named)}" if named else "")


def _check_fixed_seams(first: TrainSettings, fixed: dict[str, Any], problems: list[str]) -> None:
    """User code fixed in train (an optimizer, its keywords, metrics) imported and checked
    against its signature; what space decides, check_values names by its path."""
    try:
        check_seams(first)
    except SettingsError as e:
        if e.field.partition(".")[0] in fixed or e.field.partition("_args")[0] in fixed:
            problems.append(f"train.{e.field} {e.fix}, got {e.value!r}")


def _count_trials(top: SweepSpec, n_configs: int | None, problems: list[str]) -> int | None:
    """``trials``, or for a grid that leaves it out, every configuration times its repeats."""
    trials = top.trials
    if top.sampler.name == "grid":
        total = n_configs * top.repeats
        if trials is None:
            return total
        if trials > total:
            problems.append(f"trials: the grid has {n_configs} configurations x {top.repeats} "
                            f"repeats = {total} trials, got trials: {trials}; lower it or "
                            f"drop it")
    elif trials is None:
        problems.append(f"trials is required for sampler {top.sampler.name}: how many trials "
                        f"to run, e.g. trials: 20")
    elif trials % top.repeats:
        problems.append(f"trials must be a multiple of repeats ({top.repeats}) so that every "
                        f"configuration gets all its seeds, got {trials}")
    return trials


def compare_levels(space: sp.Space, factors: tuple[str, ...]) -> list[dict[str, Any]]:
    """The levels a comparison of ``factors`` compares, in YAML order: the product of each
    factor's options or choices, as the Optuna parameters that fix a level (``{optimizer:
    sgd}``). Every factor must be a list or an option mapping at the top of ``space``."""
    nodes = {n.setting: n for n in space}
    per_factor = [[{nodes[f].name: v} for v in _levels_of(nodes[f])] for f in factors]
    return [dict(kv for part in combo for kv in part.items())
            for combo in itertools.product(*per_factor)]


def _levels_of(node: sp.Node) -> tuple:
    return node.choices if isinstance(node, sp.Choice) else tuple(o for o, _ in node.options)


def _check_compare(top: SweepSpec, space: sp.Space, problems: list[str]) -> int | None:
    """The rules of ``compare:``; the most trials the comparison can run."""
    c, before = top.compare, len(problems)
    nodes = {n.setting: n for n in space}
    searched = [n.setting for n in space if not isinstance(n, sp.Fixed)]
    twice = [f for i, f in enumerate(c.factors) if f in c.factors[:i]]
    if twice:
        problems.append(f"compare.factor names {twice[0]} twice, got {c.factor}; name it once")
    for f in dict.fromkeys(c.factors):
        node = nodes.get(f)
        if node is None or isinstance(node, sp.Fixed):
            problems.append(f"compare.factor: {f!r} is not a searched setting at the top of "
                            f"space (it searches {', '.join(searched) or 'nothing'}); list its "
                            f"levels under space, e.g. space.{f}: [a, b]")
        elif isinstance(node, sp.Range):
            problems.append(f"compare.factor: space.{f} is a range; a comparison needs its "
                            f"levels as a list (e.g. [32, 128]) or an option mapping")
        elif len(_levels_of(node)) < 2:
            problems.append(f"compare.factor: space.{f} has one level, "
                            f"{list(_levels_of(node))}; list at least two to compare")
    if c.max_seeds is not None and c.max_seeds < c.seeds:
        problems.append(f"compare.max_seeds must be >= compare.seeds ({c.seeds}), got "
                        f"{c.max_seeds}; raise it or drop it")
    if top.repeats > 1:
        problems.append(f"repeats: {top.repeats}: repeats does not apply to a comparison: use "
                        f"compare.seeds (each level's best is trained on that many fresh "
                        f"paired seeds); remove repeats")
    if top.sampler.name == "grid":
        problems.append("sampler.name: grid cannot tune inside a comparison's levels (each "
                        "level gets tune_trials sampled trials); use tpe or random")
    if top.pruner.name == "hyperband":
        problems.append("pruner.name: hyperband runs its brackets over the whole study, not "
                        "within each level; with compare use median or successive_halving")
    if len(problems) > before:
        return None
    levels = len(compare_levels(space, c.factors))
    least, most = levels * (c.tune_trials + c.seeds), levels * (c.tune_trials + c.most_seeds)
    if top.trials is not None:
        problems.append(f"trials: a comparison counts its own trials (levels x tune_trials + "
                        f"levels x seeds, up to max_seeds: here {least} to {most}), got "
                        f"trials: {top.trials}; remove trials (or --trials)")
    return most


def _check_slots(top: SweepSpec, problems: list[str]) -> None:
    """The worker slots ``sweep run`` will plan on ``gpus``, checked now."""
    twice = sorted({g for g in top.gpus if top.gpus.count(g) > 1})
    if twice:
        problems.append(f"gpus lists GPU {twice[0]} twice, got {top.gpus}; list each GPU once "
                        f"(workers_per_gpu puts several workers on one GPU)")
        return
    try:
        plan_slots(top.workers, top.gpus, cores=1, workers_per_gpu=top.workers_per_gpu,
                   devices_per_trial=top.train.get("devices_per_trial", 1))
    except SweepError as e:
        problems.extend(e.lines)


def _one_line(text: str, limit: int = 400) -> str:
    """Messages quote user values: keep each on one line and of readable length."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _pydantic_line(err: dict) -> str:
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
              ("constraints",): Constraint, ("stop_when",): StopWhen}
    model = models.get(tuple(parent))
    return tuple(model.model_fields) if model else ()


def _check_train(train: dict, problems: list[str]) -> dict[str, Any]:
    fields = setting_fields()
    fixed = {}
    for key, value in train.items():
        if key not in fields:
            problems.append(f"train.{key_text(key)} is not a trainer setting"
                            f"{did_you_mean(key, fields)}")
        elif key == "seed":
            problems.append("train.seed: trial seeds come from the top-level `seed` (plus the "
                            "repeat index); move it there")
        elif isinstance(value, (list, dict)) and setting_kind(key) not in ("dict", "list"):
            problems.append(f"train.{key} must be a single value (train holds fixed settings; "
                            f"search it under space), got {value!r}")
        else:
            fixed[key] = value
    return fixed


def _check_sampler(top: SweepSpec, space: sp.Space, problems, warnings,
                   max_grid: int | None) -> int | None:
    name = top.sampler.name
    nodes = list(sp.walk(space))
    if name == "grid":
        ranges = [p for p, n in nodes if isinstance(n, sp.Range)]
        if ranges:
            problems.append(f"{ranges[0]}: the grid sampler needs lists or options, not ranges; "
                            f"list the values to try (e.g. [0.01, 0.1])")
            return None
        if top.sampler.options:
            problems.append(f"sampler.{next(iter(top.sampler.options))}: the grid sampler takes "
                            f"only name and seed")
            return None
        size = sp.grid_size(space)
        if max_grid is not None and size > max_grid:
            problems.append(f"space: the grid has {size} configurations (the product of its "
                            f"lists), over the cap of {max_grid}; search fewer values, use a "
                            f"sampler such as tpe, or raise the cap with --max-grid {size}")
            return None
        configs = sp.grid(space)
        for params in configs:
            try:
                TrainSettings.from_dict({**top.train, **sp.settings_for(space, params)})
            except SettingsError as e:
                problems.append(f"space: the grid point {params} is invalid: {e}")
                return None
        return len(configs)
    if name in NUMERIC_ONLY_SAMPLERS:
        categorical = [p for p, n in nodes if isinstance(n, (sp.Choice, sp.Options))]
        if categorical:
            warnings.append(f"sampler {name} handles numeric ranges well but not categorical or "
                            f"conditional parameters ({', '.join(categorical)}); they will be "
                            f"sampled at random. Consider tpe.")
    if name == "cmaes" and importlib.util.find_spec("cmaes") is None:
        problems.append("sampler.name: cmaes needs the `cmaes` package: pip install cmaes")
        return None
    if not nodes or all(isinstance(n, sp.Fixed) for _, n in nodes):
        warnings.append("space searches nothing: every trial uses the same settings")
    if _check_kwargs(f"sampler ({name})", "sampler", _sampler_class(name), top.sampler.options,
                     problems, reserved=("seed",)):
        sampler = _construct("sampler", _sampler_class(name), {"seed": top.sampler_seed},
                             top.sampler.options, problems)
        # gp and qmc sample through torch and scipy: seconds to import, so only built here
        if sampler is not None and top.sampler.options and name == "tpe":
            _dry_run("sampler", top.sampler.options, problems, sampler=sampler,
                     trials=top.sampler.options.get("n_startup_trials", 10) + 3)
    return None


def _check_pruner(top: SweepSpec, problems, warnings) -> None:
    name = top.pruner.name
    reserved = {"median": ("n_warmup_steps",), "successive_halving": ("min_resource",),
                "hyperband": ("min_resource", "max_resource"), "none": ()}[name]
    epochs = {**TrainSettings().to_dict(), **top.train}["epochs"]
    if _check_kwargs(f"pruner ({name})", "pruner", _pruner_class(name), top.pruner.options,
                     problems, reserved=reserved) and name != "none":
        given = {"median": {"n_warmup_steps": top.pruner.min_epochs},
                 "successive_halving": {"min_resource": top.pruner.min_epochs},
                 "hyperband": {"min_resource": top.pruner.min_epochs, "max_resource": epochs}}
        pruner = _construct("pruner", _pruner_class(name), given[name], top.pruner.options,
                            problems)
        if pruner is not None and top.pruner.options:
            _dry_run("pruner", top.pruner.options, problems, pruner=pruner, epochs=epochs,
                     trials=top.pruner.options.get("n_startup_trials", 5) + 3)
    if name != "none" and top.pruner.min_epochs > epochs:
        warnings.append(f"pruner.min_epochs ({top.pruner.min_epochs}) is past train.epochs "
                        f"({epochs}): no trial will be pruned")


def _check_objective(top: SweepSpec, problems, warnings) -> None:
    several = isinstance(top.objective, list)
    objectives = top.objective if several else [top.objective]
    if several and not objectives:
        problems.append("objective: the list is empty; name at least one, e.g. objective: "
                        "[{metric: val_acc, direction: maximize}]")
    for i, objective in enumerate(objectives):
        where = f"objective.{i}" if several else "objective"
        metric = objective.metric
        if _metric_problem(top, f"{where}.metric", metric, problems, warnings):
            pass
        elif metric in MINIMIZE_HINT and MINIMIZE_HINT[metric] != objective.direction:
            warnings.append(f"{where}: {metric} is usually {MINIMIZE_HINT[metric]}d, but "
                            f"direction is {objective.direction}")
        if objective.reduce == "mean_last_k" and objective.k is None:
            problems.append(f"{where}.k is required with reduce: mean_last_k (the last k epochs "
                            f"averaged), e.g. k: 3")
        elif objective.k is not None and objective.reduce != "mean_last_k":
            problems.append(f"{where}.k: {objective.k} applies to reduce: mean_last_k only, got "
                            f"reduce: {objective.reduce}; remove k or set reduce: mean_last_k")
        elif objective.k is not None and objective.k > top.epochs:
            warnings.append(f"{where}.k ({objective.k}) is past train.epochs ({top.epochs}): "
                            f"every epoch is averaged")
        if objective.target is not None and objective.reduce != "last":
            problems.append(f"{where}.target: a time to target counts epochs until the metric "
                            f"reaches {objective.target:g}, so reduce ({objective.reduce}) does "
                            f"not apply; remove one of them")
        opposite = [j for j, other in enumerate(objectives[:i]) if other.metric == metric
                    and other.direction != objective.direction
                    and other.target is None and objective.target is None]
        if opposite:  # each trial is as good one way as it is bad the other: all on the front
            problems.append(f"{where}: {metric} is maximized in one objective and minimized in "
                            f"objective.{opposite[0]}, so every trial is on the Pareto front; "
                            f"keep one direction")
        if objective.target is not None and top.pruner.name != "none":
            problems.append(f"{where}.target: a time to target is known only when the trial "
                            f"ends, and pruner {top.pruner.name} would judge its epochs by "
                            f"{metric}, the other way round; set pruner: none (patience stops "
                            f"a trial that no longer improves)")


def _check_study_rules(top: SweepSpec, space: sp.Space, problems, warnings) -> None:
    """The rules of the study's keys across the spec: several objectives, constraints,
    enqueue, warm_start, patience, stop_when and tags."""
    if isinstance(top.objective, list) and len(top.objective) > 1:
        _check_several_objectives(top, problems)
    elif top.compare is not None and any(o.target is not None for o in _objectives_of(top)):
        problems.append("objective.target: a comparison measures time to target itself "
                        "(compare.target); remove objective.target")
    _check_constraints(top, problems, warnings)
    _check_enqueue(top, space, problems)
    if top.warm_start is not None and top.compare is not None:
        problems.append(f"warm_start: {top.warm_start}: a comparison tunes each level from "
                        f"scratch; remove warm_start")
    elif top.warm_start == top.name:
        problems.append(f"warm_start names this sweep itself ({top.name}); name another sweep "
                        f"of the same study storage")
    if top.patience is not None and top.patience >= top.epochs:
        warnings.append(f"patience ({top.patience}) is not below train.epochs ({top.epochs}): "
                        f"no trial will be stopped by it")
    if top.stop_when is not None:
        if top.stop_when.value is None and top.stop_when.trials_without_improvement is None:
            problems.append("stop_when: give value, trials_without_improvement or both, e.g. "
                            "stop_when: {trials_without_improvement: 10}")
        elif top.compare is not None:
            problems.append("stop_when: a comparison runs its own plan to a verdict; remove "
                            "stop_when")
    for key, value in top.tags.items():
        problem = tag_problem(key, str(value))
        if problem:
            problems.append(f"tags.{key_text(key)}: {problem}")


def _objectives_of(top: SweepSpec) -> list[Objective]:
    return list(top.objective) if isinstance(top.objective, list) else [top.objective]


def _metric_problem(top: SweepSpec, where: str, metric: str, problems: list[str],
                    warnings: list[str]) -> bool:
    """Whether ``metric`` is refused as an objective or constraint (a line is added): it must
    be an epoch metric, ``peak_memory_mb`` (CUDA only: a warning), or with ``train.metrics``
    (user functions, whose names are known only once they ran) any name."""
    if metric in EPOCH_METRICS or top.train.get("metrics"):  # a user's metric
        return False
    if metric in CUDA_METRICS:
        warnings.append(f"{where}: {metric} is logged on CUDA devices only; a trial on another "
                        f"device lacks it (an objective: the trial fails; a constraint: it is "
                        f"infeasible)")
        return False
    known = (*EPOCH_METRICS, *CUDA_METRICS)
    problems.append(f"{where}: the trainer logs no metric {metric!r}{did_you_mean(metric, known)};"
                    f" it logs {', '.join(EPOCH_METRICS)}, {', '.join(CUDA_METRICS)} on CUDA, "
                    f"and what the functions of train.metrics return")
    return True


def _check_several_objectives(top: SweepSpec, problems: list[str]) -> None:
    n = len(top.objective)
    if top.sampler.name in SINGLE_OBJECTIVE_SAMPLERS:
        problems.append(f"sampler.name: {top.sampler.name} optimizes one objective, got {n}; "
                        f"with several use tpe, nsga2, nsga3, gp, qmc, random or grid")
    if top.pruner.name != "none":
        problems.append(f"pruner.name: {top.pruner.name}: Optuna cannot prune a study of "
                        f"several objectives (Trial.report takes one value); use pruner: none, "
                        f"or patience: N to stop a trial whose first objective stops improving")
    if top.compare is not None:
        problems.append(f"objective: a comparison decides on one objective, got {n}; give "
                        f"objective as one mapping")
    if top.repeats > 1:
        problems.append(f"repeats: {top.repeats}: the Pareto front of several objectives is "
                        f"made of single trials, not of means over seeds; use repeats: 1")
    if top.stop_when is not None:
        problems.append("stop_when: several objectives have no single best value to stop on "
                        "(their best trials are a Pareto front); remove stop_when")


def _check_constraints(top: SweepSpec, problems: list[str], warnings: list[str]) -> None:
    for i, c in enumerate(top.constraints):
        where = f"constraints.{i}"
        _metric_problem(top, f"{where}.metric", c.metric, problems, warnings)
        if c.max is None and c.min is None:
            problems.append(f"{where}: give max, min or both, e.g. {{metric: {c.metric}, "
                            f"max: 4000}}")
        elif c.max is not None and c.min is not None and c.min > c.max:
            problems.append(f"{where}: min ({c.min:g}) is above max ({c.max:g}); swap them")
    if not top.constraints:
        return
    if top.compare is not None:
        problems.append("constraints: a comparison ranks each level's trials on its objective "
                        "alone; remove constraints")
    elif top.sampler.name not in CONSTRAINED_SAMPLERS:
        warnings.append(f"sampler {top.sampler.name} samples without the constraints (tpe, gp, "
                        f"nsga2 and nsga3 use them); the best trials are still the feasible "
                        f"ones")


def _check_enqueue(top: SweepSpec, space: sp.Space, problems: list[str]) -> None:
    if not top.enqueue:
        return
    if top.is_grid or top.compare is not None:
        what = "the grid sampler tries every configuration" if top.is_grid else \
            "a comparison plans its own trials"
        problems.append(f"enqueue: {what}; remove enqueue")
        return
    runs = len(top.enqueue) * top.repeats  # each entry runs repeats times, as a sampled one
    if top.trials is not None and runs > top.trials:  # the rest would wait for ever, unrun
        problems.append(f"enqueue lists {len(top.enqueue)} configurations"
                        f"{f' x repeats {top.repeats}' if top.repeats > 1 else ''} = {runs} "
                        f"trials, more than trials: {top.trials}; raise trials to {runs} or "
                        f"remove entries")
    for i, point in enumerate(top.enqueue):
        problem = point_problem(space, point, top.train)
        if problem:
            problems.append(f"enqueue.{i}: {problem}")


def point_problem(space: sp.Space, point: dict[str, Any], train: dict[str, Any]) -> str | None:
    """Why ``point`` (Optuna parameter names to values) is not a configuration of ``space``:
    a name the space does not search, a value outside its node, a parameter missing for the
    options it picks, or settings the trainer refuses; None when it is one."""
    nodes = {n.name: n for _, n in sp.walk(space) if not isinstance(n, sp.Fixed)}
    for key, value in point.items():
        node = nodes.get(key)
        if node is None:
            return (f"{key_text(key)} is not a searched parameter{did_you_mean(key, nodes)}; "
                    f"the space searches {', '.join(nodes) or 'nothing'}")
        problem = _value_problem(node, value)
        if problem:
            return f"{key}: {problem}"
    needed = _active_names(space, point)
    missing, extra = [n for n in needed if n not in point], [n for n in point if n not in needed]
    if missing:
        return f"gives no value for {', '.join(missing)}; a configuration sets every searched " \
               f"parameter it uses"
    if extra:
        return f"{', '.join(extra)} is not used by the options it picks; remove it"
    try:
        TrainSettings.from_dict({**train, **sp.settings_for(space, point)})
    except SettingsError as e:
        return f"the trainer refuses it: {e}"
    return None


def _value_problem(node: sp.Node, value: Any) -> str | None:
    if isinstance(node, (sp.Choice, sp.Options)):
        allowed = node.choices if isinstance(node, sp.Choice) else [o for o, _ in node.options]
        if not any(type(value) is type(a) and value == a for a in allowed):
            return f"{value!r} is not one of {list(allowed)}"
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if node.kind == "int" and not (number and float(value).is_integer()):
        return f"must be an integer in [{node.low:g}, {node.high:g}], got {value!r}"
    if not number or not math.isfinite(value) or not node.low <= value <= node.high:
        return f"must be a number in [{node.low:g}, {node.high:g}], got {value!r}"
    if node.step and abs(round((value - node.low) / node.step) * node.step + node.low - value) \
            > 1e-9 * max(1.0, abs(value)):
        return f"must be {node.low:g} plus a multiple of step {node.step:g}, got {value!r}"
    return None


def _active_names(space: sp.Space, point: dict[str, Any]) -> list[str]:
    """The parameter names a configuration picking ``point``'s options must give."""
    out = []
    for node in space:
        if isinstance(node, sp.Fixed):
            continue
        out.append(node.name)
        if isinstance(node, sp.Options) and point.get(node.name) in dict(node.options):
            out += _active_names(dict(node.options)[point[node.name]], point)
    return out


TAG_KEY = re.compile(r"^[\w./\- ]+$")  # MLflow's rule for tag names
RESERVED_TAGS = ("sweep.", "mlflow.")


def tag_problem(key: str, value: str) -> str | None:
    """Why MLflow (or this project) would refuse the user tag ``key: value``; None if fine."""
    if not TAG_KEY.match(key) or len(key) > 250 or key.startswith("/") or \
            ".." in key.split("/"):
        return ("a tag name is 1 to 250 letters, digits, '_', '-', '.', ' ' or '/' (not "
                "starting with '/', no '..')")
    if key.lower().startswith(RESERVED_TAGS):
        return f"names starting with {' or '.join(RESERVED_TAGS)} are reserved; rename it"
    if len(value) > 8000:
        return f"the value is {len(value)} characters, over MLflow's 8000"
    return None


def _check_kwargs(label, key, cls, options: dict, problems, reserved=()) -> bool:
    """Each option a keyword of ``cls`` whose value a YAML can give with the annotated type;
    False if any is not."""
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p in params if p not in ("self", "seed", *reserved)]
    before = len(problems)
    for opt, value in options.items():
        if opt in reserved:
            problems.append(f"{key}.{opt} is set by sweep from min_epochs/epochs; remove it")
        elif opt not in allowed:
            problems.append(f"{key}.{opt} is not an option of the {label}"
                            f"{did_you_mean(opt, allowed)}; it takes {', '.join(allowed)}")
        else:
            annotation = params[opt].annotation
            text = annotation if isinstance(annotation, str) else \
                getattr(annotation, "__name__", str(annotation))
            types = tuple(t for part in text.split("|") for t in YAML_TYPES.get(part.strip(), ()))
            if not types:
                problems.append(f"{key}.{opt} takes a Python object ({text}), which a YAML "
                                f"cannot give; remove it")
            elif not _is_a(value, types):
                problems.append(f"{key}.{opt} must be {text.replace(' | ', ' or ')}, "
                                f"got {value!r}")
    return len(problems) == before


# what each annotation of an Optuna constructor's keyword accepts from a YAML
YAML_TYPES = {"int": (int,), "float": (float, int), "bool": (bool,), "str": (str,),
              "None": (type(None),), "dict[str, Any]": (dict,)}


def _is_a(value, types: tuple) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def _construct(key: str, cls, given: dict, options: dict, problems: list[str]):
    """Build the Optuna object as ``sweep run`` will, turning its refusal into a line naming
    the option (each option alone first, to find the one refused); None if refused."""
    import warnings

    built = []

    def refusal(opts: dict) -> str | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built.append(cls(**given, **opts))
        except Exception as e:  # noqa: BLE001 - any refusal of Optuna's becomes the line
            return str(e).splitlines()[0] if str(e) else type(e).__name__
        return None

    why = refusal({})
    if why:
        problems.append(f"{key}: Optuna refuses it as sweep builds it ({', '.join(given)} from "
                        f"min_epochs and epochs): {why}")
        return
    for opt, value in options.items():
        why = refusal({opt: value})
        if why:
            problems.append(f"{key}.{opt}: Optuna refuses {value!r}: {why}")
            return
    why = refusal(options)
    if why:
        problems.append(f"{key}: Optuna refuses the options {', '.join(options) or '(none)'} "
                        f"together: {why}")
        return None
    return built[-1]


def _dry_run(key: str, options: dict, problems: list[str], sampler=None, pruner=None,
             trials: int = 10, epochs: int = 5) -> None:
    """Some option values pass the constructor and fail at the first sample or prune (a
    negative candidate count, a reduction factor of 1): run a small in-memory study with the
    object, past its startup trials, so that they fail here and not in trial 11."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(sampler=sampler, pruner=pruner)
            for _ in range(min(trials, 30)):
                trial = study.ask()
                x = trial.suggest_float("x", 0.0, 1.0)
                trial.suggest_categorical("c", ["a", "b"])
                pruned = False
                for step in range(1, min(epochs, 10) + 1):
                    trial.report(x * step, step)
                    pruned = trial.should_prune()
                    if pruned:
                        break
                study.tell(trial, None if pruned else x,
                           state=optuna.trial.TrialState.PRUNED if pruned else None)
    except Exception as e:  # noqa: BLE001 - any failure of Optuna's becomes the line
        problems.append(f"{key} ({', '.join(f'{k}={v!r}' for k, v in options.items())}): "
                        f"Optuna fails with these options at the first trials: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def _sampler_class(name):
    import optuna

    return {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler,
            "grid": optuna.samplers.RandomSampler, "cmaes": optuna.samplers.CmaEsSampler,
            "gp": optuna.samplers.GPSampler, "qmc": optuna.samplers.QMCSampler,
            "nsga2": optuna.samplers.NSGAIISampler,
            "nsga3": optuna.samplers.NSGAIIISampler}[name]


def _pruner_class(name):
    import optuna

    return {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
            "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
            "hyperband": optuna.pruners.HyperbandPruner}[name]
