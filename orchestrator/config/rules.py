"""The rules of a sweep YAML that look across its keys, run once pydantic has checked each key
alone: settings together, comparison (:mod:`.compare_rules`), sampler, pruner, objectives, the
study's keys, trials, seeds and GPU slots, in that order, each problem one line.

Each rule takes ``top``, the :class:`~orchestrator.config.spec.SweepSpec` as pydantic built it (not
yet resolved: ``space`` is still the YAML's mapping, ``objective`` one or a list). This module sits
below :mod:`orchestrator.config.spec`, whose :func:`~orchestrator.config.spec.validate` calls
:func:`check_rules`, so it names that class in words only.
"""
from __future__ import annotations

import importlib.util
import math
import re
from typing import Any

from trainers import (
    MAX_SEED,
    SettingsError,
    TrainSettings,
    check_seams,
    setting_fields,
    setting_kind,
)

from ..core.errors import SweepError, did_you_mean, key_text
from . import space as sp
from .compare_rules import TUNING_SEEDS, check_compare, tuning_nothing
from .dryrun import check_options, construct, dry_run
from .metrics import metric_problem
from .samplers import (
    CONSTRAINED_SAMPLERS,
    NUMERIC_ONLY_SAMPLERS,
    SINGLE_OBJECTIVE_SAMPLERS,
    build_pruner,
    build_sampler,
    pruner_arguments,
    pruner_class,
    sampler_class,
)
from .scaling_rules import check_scaling
from .slots import plan_slots
from .space_reading import check_values, parse_space, unused_problem

MINIMIZE_HINT = {"val_loss": "minimize", "train_loss": "minimize", "val_acc": "maximize"}
MAX_GRID = 5_000  # configurations; `--max-grid N` raises it


def check_rules(top, max_grid: int | None, problems: list[str], warnings: list[str],
                spellings: dict[tuple[str, ...], tuple[str, ...]] | None = None
                ) -> tuple[sp.Space, int | None]:
    """Check the rules across ``top``'s keys, adding a line to ``problems`` for each one broken
    and to ``warnings`` for each doubt; return the parsed space and the trials to run.

    Args:
        max_grid: the most configurations a grid may have (None: no cap); a grid is counted as
            the product of its lists before any configuration is listed.
        spellings: each list's items as the file wrote them (see
            :func:`~orchestrator.config.space_reading.parse_space`).
    """
    space = _check_settings(top, problems, spellings)
    n_configs = None
    trials = top.trials
    if not problems and top.compare is not None:
        trials = check_compare(top, space, problems)
        warnings.extend(tuning_nothing(top.compare, space) if not problems else [])
    if not problems:
        n_configs = _check_sampler(top, space, problems, warnings, max_grid)
        _check_pruner(top, problems, warnings)
        _check_objective(top, problems, warnings)
        _check_study_rules(top, space, problems, warnings)
    if not problems and top.scaling is not None:
        check_scaling(top, space, problems, warnings)
    if not problems and top.compare is None:
        trials = _count_trials(top, n_configs, problems)
    last_seed = top.seed + (top.compare.most_seeds if top.compare else top.repeats - 1)
    if top.compare is not None and top.compare.tuning == "each_seed":
        last_seed += TUNING_SEEDS  # replicate k tunes on seed + TUNING_SEEDS + k
    if last_seed > MAX_SEED:
        how = ("seed + 10000 + replicate (its tuning seed)" if top.compare is not None
               and top.compare.tuning == "each_seed" else "seed + confirmation round"
               if top.compare else "seed + repeat index")
        problems.append(f"seed: the trial seeds {how} reach {last_seed}, past numpy's largest "
                        f"seed {MAX_SEED}; lower seed")
    if top.gpus is not None and not problems:
        _check_slots(top, problems)
    if len(set(top.export)) != len(top.export):
        problems.append(f"export lists a format twice, got {top.export}")
    return space, trials


def _check_settings(top, problems: list[str], spellings) -> sp.Space:
    """Check ``train`` and ``space`` as trainer settings; return the parsed space."""
    fixed = _check_train(top.train, problems)
    space = parse_space(top.space, "space", problems, spellings)
    _check_fixed_and_searched(fixed, space, problems)
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
            unused = unused_problem(f"train.{key} = {value!r}", key, space, fixed, {})
            if unused:
                problems.append(unused)
        check_values(space, fixed, problems)
    return space


def _check_fixed_and_searched(fixed: dict[str, Any], space: sp.Space,
                              problems: list[str]) -> None:
    """One line for each setting that ``train`` fixes and ``space`` decides too, wherever in
    space: at its top, under an option, or as a keyword of user code (``model_args.width``,
    fixed at ``train.model_args.width``): a trial would silently take space's value."""
    refused = ()
    for path, node in sp.walk(space):
        group, dot, key = node.setting.partition(".")
        where = fixed.get(group) if dot else fixed
        name = key if dot else group
        if isinstance(where, dict) and name in where and not path.startswith(refused):
            refused += (f"{path}.",)  # its options' settings: moot once one place is kept
            problems.append(f"{path}: {name} is also fixed at train.{node.setting} "
                            f"({where[name]!r}), and a trial would take the value given here "
                            f"instead; remove one of the two")


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


def _count_trials(top, n_configs: int | None, problems: list[str]) -> int | None:
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


def _check_slots(top, problems: list[str]) -> None:
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



def _check_sampler(top, space: sp.Space, problems, warnings,
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
    if check_options(f"sampler ({name})", "sampler", sampler_class(name), top.sampler.options,
                     problems, reserved=("seed",)):
        sampler = construct("sampler",
                            lambda opts: build_sampler(name, top.sampler_seed, opts), ("seed",),
                            top.sampler.options, problems)
        # gp and qmc sample through torch and scipy: seconds to import, so only built here
        if sampler is not None and top.sampler.options and name == "tpe":
            dry_run("sampler", top.sampler.options, problems, sampler=sampler,
                    trials=top.sampler.options.get("n_startup_trials", 10) + 3)
    return None


def _check_pruner(top, problems, warnings) -> None:
    name, min_epochs = top.pruner.name, top.pruner.min_epochs
    epochs = {**TrainSettings().to_dict(), **top.train}["epochs"]
    reserved = tuple(pruner_arguments(name, min_epochs, epochs))
    if check_options(f"pruner ({name})", "pruner", pruner_class(name), top.pruner.options,
                     problems, reserved=reserved) and name != "none":
        pruner = construct("pruner", lambda opts: build_pruner(name, min_epochs, epochs, opts),
                           reserved, top.pruner.options, problems)
        if pruner is not None and top.pruner.options:
            dry_run("pruner", top.pruner.options, problems, pruner=pruner, epochs=epochs,
                    trials=top.pruner.options.get("n_startup_trials", 5) + 3)
    if name != "none" and top.pruner.min_epochs > epochs:
        warnings.append(f"pruner.min_epochs ({top.pruner.min_epochs}) is past train.epochs "
                        f"({epochs}): no trial will be pruned")


def _check_objective(top, problems, warnings) -> None:
    several = isinstance(top.objective, list)
    objectives = top.objective if several else [top.objective]
    if several and not objectives:
        problems.append("objective: the list is empty; name at least one, e.g. objective: "
                        "[{metric: val_acc, direction: maximize}]")
    for i, objective in enumerate(objectives):
        where = f"objective.{i}" if several else "objective"
        metric = objective.metric
        if metric_problem(top, f"{where}.metric", metric, problems, warnings):
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


def _check_study_rules(top, space: sp.Space, problems, warnings) -> None:
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


def _objectives_of(top) -> list:
    return list(top.objective) if isinstance(top.objective, list) else [top.objective]


def _check_several_objectives(top, problems: list[str]) -> None:
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


def _check_constraints(top, problems: list[str], warnings: list[str]) -> None:
    for i, c in enumerate(top.constraints):
        where = f"constraints.{i}"
        metric_problem(top, f"{where}.metric", c.metric, problems, warnings)
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


def _check_enqueue(top, space: sp.Space, problems: list[str]) -> None:
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

