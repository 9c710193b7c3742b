"""What a trial's epochs are worth to a study, and which trials are the best: the objective's
reduction of a curve (last, best, mean of the last k, epochs to a target), constraint values,
the feasible trials, the Pareto front of several objectives, the configuration with the best
mean, which failures were retried, and the rules that stop a trial (``patience``) or a sweep
(``stop_when``) early.

Pure functions over numbers and Optuna's frozen trials, shared by the study, the trial book,
``sweep status`` and the report, so that each names the same trials best.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from ..core import keys

# ------------------------------------------------------------------ the one direction rule

def sign(direction: str) -> int:
    """-1 for ``maximize``, +1 for ``minimize``: ``sign * value`` is smaller for the better
    value. Every order of values by an objective's direction goes through it."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be maximize or minimize, got {direction!r}")
    return -1 if direction == "maximize" else 1


def is_better(a: float, b: float, direction: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` (higher when maximizing); a NaN is never
    better, nor worse."""
    return sign(direction) * a < sign(direction) * b


def reaches(value: float, target: float, direction: str) -> bool:
    """Whether ``value`` is at ``target`` or beyond it in ``direction`` (``>=`` when
    maximizing, ``<=`` when minimizing); a non-finite value never does."""
    return math.isfinite(value) and sign(direction) * value <= sign(direction) * target


def best_of(values, direction: str) -> float | None:
    """The best finite value in ``direction``; None when none is finite (a NaN anywhere does
    not change the answer, unlike ``max`` over a list with NaN)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return min(finite, key=lambda v: sign(direction) * v) if finite else None


def worst_of(values, direction: str) -> float | None:
    """The worst finite value in ``direction`` (the lowest when maximizing); None when none is
    finite."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return max(finite, key=lambda v: sign(direction) * v) if finite else None


def running_best(values, direction: str) -> list[float]:
    """The best value so far at each position (non-finite values skipped; NaN before the
    first finite one)."""
    out, best = [], None
    for v in values:
        if v is not None and math.isfinite(v) and (best is None or is_better(v, best,
                                                                             direction)):
            best = v
        out.append(math.nan if best is None else best)
    return out


def reached_at(curve: Sequence[float], target: float, maximize: bool) -> int | None:
    """The first epoch (1-based) whose value reaches ``target`` (``>=`` when maximizing,
    ``<=`` when minimizing); None when none does. A comparison's time to target counts the same
    way (:func:`orchestrator.report.comparison.time_to_target`)."""
    direction = "maximize" if maximize else "minimize"
    for epoch, value in enumerate(curve, start=1):
        if reaches(value, target, direction):
            return epoch
    return None


def reduce_curve(objective, curve: Sequence[float], epochs: int) -> float:
    """One trial's value of ``objective`` (a :class:`orchestrator.config.spec.Objective`) from the
    per-epoch values of its metric.

    ``target`` set: the epochs the metric took to first reach it, ``epochs + 1`` when it never
    did (finite, so that samplers learn from such trials; ranked behind every trial that reached
    it). Else by ``reduce``: ``last`` epoch, ``best`` epoch in the metric's direction, or
    ``mean_last_k``, the mean of the last ``k`` epochs (of all of them when fewer ran).
    A NaN epoch is never the best (the best of the finite ones, NaN when none is); a NaN last
    epoch, or one among the last ``k``, makes the value NaN (the trial fails, naming it).
    """
    maximize = objective.direction == "maximize"
    if objective.target is not None:
        hit = reached_at(curve, objective.target, maximize)
        return float(hit if hit is not None else epochs + 1)
    if objective.reduce == "last":
        return curve[-1] if curve else math.nan
    if objective.reduce == "best":  # max() over a list with NaN depends on the order
        best = best_of(curve, objective.direction)
        return math.nan if best is None else best
    tail = list(curve[-objective.k:])
    return sum(tail) / len(tail) if tail else math.nan


def reduce_text(objective) -> str:
    """How a trial's value of ``objective`` is read from its epochs, in words."""
    if objective.target is not None:
        return f"epochs to reach {objective.target:g}"
    return {"last": "last epoch", "best": "best epoch"}.get(
        objective.reduce, f"mean of the last {objective.k} epochs")


def violations(constraints, last: dict[str, float]) -> dict[str, float]:
    """Per constraint (named :func:`constraint_name`), Optuna's constraint value from the
    metrics of the trial's last epoch: how far past its bound the metric is, <= 0 when met.
    A metric that is missing or not finite violates its constraint (``inf``)."""
    out = {}
    for c in constraints:
        value = last.get(c.metric, math.nan)
        if not math.isfinite(value):
            out[constraint_name(c)] = math.inf
            continue
        over = [value - c.max] if c.max is not None else []
        under = [c.min - value] if c.min is not None else []
        out[constraint_name(c)] = max(over + under)
    return out


def constraint_name(c) -> str:
    """``peak_memory_mb<=4000``, ``val_acc>=0.9`` or ``0.1<=x<=0.3``."""
    if c.min is not None and c.max is not None:
        return f"{c.min:g}<={c.metric}<={c.max:g}"
    return f"{c.metric}<={c.max:g}" if c.max is not None else f"{c.metric}>={c.min:g}"


def is_feasible(trial: FrozenTrial) -> bool:
    """Whether every constraint of ``trial`` is met (a trial without constraints is)."""
    return all(v <= 0 for v in trial.constraints.values())


def is_constrained(trials: Sequence[FrozenTrial]) -> bool:
    """Whether any trial carries constraint values (a sweep with ``constraints``)."""
    return any(t.constraints for t in trials)


def epochs_of(trial: FrozenTrial) -> int:
    """The epochs a trial trained as its study knows them: its epoch values, or with several
    objectives (never told epochs) the count recorded when it completed; 0 when unknown."""
    return len(trial.intermediate_values) or int(trial.user_attrs.get(keys.EPOCHS, 0))


def is_copied(trial: FrozenTrial) -> bool:
    """Whether ``trial`` was copied from another sweep by ``warm_start`` (history for the
    sampler, not a trial of this sweep)."""
    return keys.COPIED_FROM in trial.user_attrs


def candidates(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that may be named best: this sweep's own complete, feasible trials."""
    return [t for t in trials if t.state == TrialState.COMPLETE and t.values is not None
            and not is_copied(t) and is_feasible(t)
            and all(math.isfinite(v) for v in t.values)]


def _signs(directions: Sequence[str]) -> list[int]:
    """:func:`sign` per objective: smaller signed values are better."""
    return [sign(d) for d in directions]


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """Whether values ``a`` are at least as good as ``b`` in every objective and better in one."""
    pairs = [(s * x, s * y) for s, x, y in zip(_signs(directions), a, b)]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def pareto_front(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrozenTrial]:
    """The :func:`candidates` no other candidate dominates, best on the first objective first
    (ties by number). Trials with equal values are all on the front."""
    pool = candidates(trials)
    front = [t for t in pool if not any(dominates(o.values, t.values, directions) for o in pool)]
    return sorted(front, key=lambda t: (_signs(directions)[0] * t.values[0], t.number))


def ranked(trials: Sequence[FrozenTrial], direction: str) -> list[FrozenTrial]:
    """The :func:`candidates` of a single-objective study, best first (ties: earliest)."""
    return sorted(candidates(trials), key=lambda t: (sign(direction) * t.values[0], t.number))


def best_trials(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrozenTrial]:
    """The trials a sweep names best: ranked (one objective) or the Pareto front (several)."""
    if len(directions) == 1:
        return ranked(trials, directions[0])
    return pareto_front(trials, directions)


def config_key(params: dict[str, Any]) -> tuple:
    """What makes two trials the same configuration: their parameters, by name and ``repr``
    (so ``1``, ``1.0`` and ``True`` stay apart)."""
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def by_configuration(trials: Sequence[FrozenTrial], direction: str,
                     key: Callable[[FrozenTrial], Any] | None = None) -> list[list[FrozenTrial]]:
    """Complete ``trials`` (e.g. the :func:`candidates`) grouped by configuration
    (:func:`config_key`; or by ``key``, e.g. a comparison's level), the best mean value over
    each group's seeds first (ties: the group with the earliest trial).
    Every "best configuration by mean" goes through it: the study's, the run summary's."""
    groups: dict[Any, list[FrozenTrial]] = {}
    for t in trials:
        groups.setdefault(config_key(t.params) if key is None else key(t), []).append(t)
    return sorted(groups.values(), key=lambda g: (
        sign(direction) * statistics.fmean(t.value for t in g), min(t.number for t in g)))


def best_configuration(spec, trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The complete feasible trials of sweep ``spec`` (a
    :class:`orchestrator.config.spec.SweepSpec`) of the configuration with the best mean objective
    over its repeats (one trial without repeats; ties go to the earliest); with several objectives,
    the Pareto front's trial best on the first objective."""
    pool = candidates(trials)
    if spec.is_multi_objective:
        return best_trials(pool, spec.directions)[:1]
    groups = by_configuration(pool, spec.objective.goal)
    return groups[0] if groups else []


# ------------------------------------------------------------------ retries

def _retried_targets(trials: Sequence[FrozenTrial]) -> set:
    """The trial numbers some trial of ``trials`` is the retry of."""
    return {t.user_attrs.get(keys.RETRY_OF) for t in trials}


def retried_numbers(trials: Sequence[FrozenTrial]) -> set[int]:
    """The numbers of the FAIL trials (of a whole study) whose retry is queued or has run: a
    failure marked for retry, or one some trial retries. Such a failure is not counted (its
    retry stands for it) by the trial counts, ``sweep status`` or a comparison's budget."""
    targets = _retried_targets(trials)
    return {t.number for t in trials if t.state == TrialState.FAIL and
            (t.user_attrs.get(keys.WILL_RETRY) or t.number in targets)}


def lost_retries(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The FAIL trials (of a whole study) marked for retry that no trial retries yet: their
    process died between failing them and queueing the retry."""
    targets = _retried_targets(trials)
    return [t for t in trials if t.state == TrialState.FAIL and
            t.user_attrs.get(keys.WILL_RETRY) and t.number not in targets]


# ------------------------------------------------------------------ early stops

def patience_spent(curve: Sequence[float], patience: int, maximize: bool) -> bool:
    """Whether the last ``patience`` epochs of ``curve`` brought no improvement on the best
    value before them (equal is no improvement; a non-finite value never improves)."""
    direction = "maximize" if maximize else "minimize"
    best, since = None, 0
    for value in curve:
        if math.isfinite(value) and (best is None or is_better(value, best, direction)):
            best, since = value, 0
        else:
            since += 1
    return best is not None and since >= patience


def stop_reason(stop_when, trials: Sequence[FrozenTrial], direction: str,
                metric: str) -> str | None:
    """Why ``stop_when`` (value and/or trials_without_improvement) ends the sweep now, in one
    line; None while it does not. Judged on this sweep's own finished trials in the order they
    finished; only complete feasible trials can improve; failed trials are not counted."""
    mine = sorted((t for t in trials if not is_copied(t) and
                   t.state in (TrialState.COMPLETE, TrialState.PRUNED)),
                  key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
    best: FrozenTrial | None = None
    since = 0
    for t in mine:
        if t in candidates([t]) and (best is None or is_better(t.values[0], best.values[0],
                                                               direction)):
            best, since = t, 0
            if stop_when.value is not None and reaches(t.values[0], stop_when.value, direction):
                word = ">=" if direction == "maximize" else "<="
                return (f"stop_when.value: trial {t.number} reached {metric} {t.values[0]:.4g} "
                        f"({word} {stop_when.value:g}); no new trials start")
        else:
            since += 1
    n = stop_when.trials_without_improvement
    if n is not None and best is not None and since >= n:
        return (f"stop_when.trials_without_improvement: {since} trials finished since the best, "
                f"trial {best.number} ({metric} {best.values[0]:.4g}); no new trials start")
    return None


def values_text(values: Sequence[float] | None) -> str:
    """A trial's objective values as a table cell: ``0.9123`` or ``0.9123, 0.4567``."""
    return ", ".join(f"{v:.4f}" for v in values) if values else ""


def stored_objectives(identity: dict[str, Any]) -> list[dict[str, Any]]:
    """The objectives a study's stored identity (``sweep.spec``) names, as a list of mappings
    (one objective may be written as a mapping)."""
    objective = identity.get("objective") or {}
    return list(objective) if isinstance(objective, list) else [objective]
