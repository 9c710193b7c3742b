"""A comparison of a setting's levels (``compare:``): every level tuned with the same budget, each
level's best configuration trained again on fresh paired seeds, and the levels decided by
:mod:`orchestrator.answer.stats`.

What it estimates (``compare.tuning``):

- ``each_seed`` (the default): the expected score of a level after tuning with this budget.
  Each paired seed ``k`` is a replicate: every level is tuned anew (``tune_trials`` trials, its
  sampler seeded for replicate ``k`` alike for every level, its trials trained on the replicate's
  tuning seed), and the replicate's best configuration is trained once on the confirmation seed
  ``seed + k``. A replicate's difference of two levels is an independent draw of tuning and
  seed, so the paired interval over replicates holds the tuning draw too: a re-run with another
  base seed lands inside it at the stated rate (``bench/tuning_draw.py`` measures it).
- ``once``: one tuning per level, its best trained on every confirmation seed: the interval
  holds the seed-to-seed spread of those two configurations, not the tuning draw.

:func:`plan` is the whole procedure as a pure function of the study's trials: start a tuning trial
of a level (:class:`Tune`), a confirmation trial (:class:`Confirm`), :class:`Wait` for running
trials, or :class:`Done`. Every ``sweep run`` process replays it from the trials alone, so an
interrupted comparison resumes in whichever phase it stopped; seeding stops once the question
``compare.goal`` names is decided (:mod:`orchestrator.answer.goal`). Optuna's sampler and pruner
see the trials of one level only (:mod:`orchestrator.stores.levels`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from optuna.trial import FrozenTrial, TrialState

# replicate k (each_seed) tunes on training seed seed + TUNING_SEEDS + k: never a confirmation
# seed (seed + 1 ... seed + max_seeds, at most MAX_COMPARE_SEEDS + MAX_LOOKS)
from ..config.compare_rules import TUNING_SEEDS, compare_levels
from ..config.spec import SweepSpec
from ..core import keys
from ..core.numbers import value_text
from . import goal as goals
from . import objectives, stats
from .edges import Edge, at_edges
from .effects import Effect, effects
from .words import Words, answer_why

TUNE, CONFIRM = "tune", "confirm"  # the values of keys.PHASE
EACH_SEED, ONCE = "each_seed", "once"  # the values of compare.tuning


def level_label(factors: Sequence[str], values: Sequence[Any]) -> str:
    """A level as text (keys.LEVEL): the value (``sgd``), or for several factors
    ``warmup_epochs=0,clip_grad_norm=1.0``; each value as YAML writes it (``null``, ``true``,
    ``1e-5``: :func:`~orchestrator.core.numbers.value_text`)."""
    text = value_text
    if len(factors) == 1:
        return text(values[0])
    return ",".join(f"{f}={text(v)}" for f, v in zip(factors, values))


@dataclass(frozen=True)
class Level:
    """One level: its label and the Optuna parameters that fix it (``{"optimizer": "sgd"}``)."""

    label: str
    params: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Comparison:
    """What a sweep's ``compare:`` block asks for, with its levels in YAML order."""

    factor: str  # the factors' names joined by ","
    levels: tuple[Level, ...]
    tune_trials: int
    seeds: int
    max_seeds: int
    precision: float | None
    seed: int  # the base seed; confirmation seeds are seed + 1 ... seed + max_seeds
    direction: str
    metric: str
    tuning: str = EACH_SEED  # EACH_SEED: a fresh tuning per paired seed; ONCE: one tuning
    goal: str = ""  # the question that stops seeding (answer.goal); "": its factors' default

    def __post_init__(self):
        if not self.goal:
            object.__setattr__(self, "goal", goals.default(len(self.factors)))

    @classmethod
    def of(cls, spec: SweepSpec) -> Comparison | None:
        """The comparison of a validated spec; None when it has no ``compare:``."""
        c = spec.compare
        if c is None:
            return None
        levels = tuple(Level(level_label(c.factors, list(p.values())), p)
                       for p in compare_levels(spec.space, c.factors))
        return cls(",".join(c.factors), levels, c.tune_trials, c.seeds, c.most_seeds,
                   c.precision, spec.seed, spec.objective.direction, spec.objective.metric,
                   c.tuning, c.goal or "")

    @property
    def factors(self) -> tuple[str, ...]:
        """The compared settings, in the order a level's parameters name them."""
        return tuple(self.factor.split(","))

    def cells(self) -> dict[str, tuple]:
        """Each level's label -> its values, one a factor (a cell of the product)."""
        return {lv.label: tuple(lv.params.values()) for lv in self.levels}

    def factor_levels(self) -> list[list[Any]]:
        """Each factor's levels in YAML order (the first is its reference)."""
        cells = list(self.cells().values())
        return [list({repr(cell[i]): cell[i] for cell in cells}.values())
                for i in range(len(self.factors))]

    @property
    def replicated(self) -> bool:
        """Whether every paired seed tunes each level anew (``tuning: each_seed``)."""
        return self.tuning == EACH_SEED

    def replicate_of(self, k: int) -> int:
        """The tuning replicate whose best the ``k``-th confirmation seed trains: ``k``
        (each_seed), or 0, the one tuning (once)."""
        return k if self.replicated else 0

    def tuning_seed(self, replicate: int) -> int:
        """The training seed of replicate ``replicate``'s tuning trials: ``seed`` for the one
        tuning, else ``seed + TUNING_SEEDS + replicate`` (never a confirmation seed)."""
        return self.seed if replicate == 0 else self.seed + TUNING_SEEDS + replicate

    def confirm_seeds(self, rounds: int) -> list[int]:
        """The paired seeds of the first ``rounds`` rounds; never the tuning seed."""
        return [self.seed + k for k in range(1, rounds + 1)]

    def total(self, rounds: int) -> int:
        """The trials planned with ``rounds`` confirmation seeds."""
        if self.replicated:
            return len(self.levels) * rounds * (self.tune_trials + 1)
        return len(self.levels) * (self.tune_trials + rounds)


# ------------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class Tune:
    """Start a tuning trial of ``level`` (its factor fixed, the rest sampled) in tuning
    replicate ``replicate`` (0: the one tuning of ``tuning: once``)."""

    level: Level
    replicate: int = 0


@dataclass(frozen=True)
class Confirm:
    """Train ``level``'s best tuned parameters on ``seed``."""

    level: Level
    params: dict[str, Any] = field(hash=False)
    seed: int


@dataclass(frozen=True)
class Wait:
    """Nothing to start until running trials end."""


@dataclass(frozen=True)
class Done:
    """The comparison is decided (or out of seeds): the decision at the last look."""

    results: tuple[stats.PairResult, ...]
    values: dict[str, dict[int, float]] = field(hash=False)  # level -> {seed: value}
    effects: tuple[Effect, ...] = ()  # two or more factors: answer.effects at that look


@dataclass(frozen=True)
class Look:
    """A look after which seeding went on: look ``look`` of ``looks``, at ``rounds`` paired
    seeds, and what of the comparison's goal was still open (undecided pairs or effects)."""

    look: int
    looks: int
    rounds: int
    open: tuple[stats.PairResult | Effect, ...]
    effects: tuple[Effect, ...] = ()  # every effect at that look (two or more factors)


@dataclass(frozen=True)
class Answer:
    """A finished comparison's one answer, named alike by the parent run, the export, the end
    table, ``sweep status`` and the report: ``level`` with its ``mean`` objective over its
    ``seeds`` finite confirmation values, ``trial`` the confirmation run whose weights stand for
    it, ``why`` in words (:func:`orchestrator.answer.words.answer_why`), the numeric parameters
    its levels' tunings left on an edge of their range (:mod:`.edges`), the ``peers`` no
    evidence separates from it (its weights then stand for one of them), and the ``half``-width
    of its mean's interval (how its figures are rounded)."""

    level: str
    mean: float
    seeds: int
    trial: FrozenTrial = field(hash=False)
    why: str
    edges: tuple[Edge, ...] = ()
    peers: tuple[str, ...] = ()  # the levels no other beats that are not separated from it
    half: float = math.nan  # its mean's 95% t interval's half-width; NaN without one


@dataclass(frozen=True)
class Plan:
    action: Tune | Confirm | Wait | Done
    total: int  # the trials the comparison plans now (grows with each seed added)
    looks: tuple[Look, ...] = ()  # the looks taken so far after which seeding went on


def counted(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that spend the budget: all but a failure whose retry is queued or ran (its
    retry stands for it)."""
    retried = objectives.retried_numbers(trials)
    return [t for t in trials if t.number not in retried]


def best_tuned(trials: Sequence[FrozenTrial], direction: str) -> FrozenTrial | None:
    """The complete tuning trial with the best value (ties: the earliest); None if none."""
    done = [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None
            and math.isfinite(t.value)]
    return min(done, key=lambda t: (objectives.sign(direction) * t.value, t.number),
               default=None)


def replicate(trial: FrozenTrial) -> int:
    """The tuning replicate a tuning trial belongs to (0: the one tuning of ``once``)."""
    return int(trial.user_attrs.get(keys.REPLICATE, 0))


def plan(c: Comparison, trials: Sequence[FrozenTrial]) -> Plan:
    """The next step of comparison ``c`` given every trial of its study (any state).

    The ``k``-th confirmation seed ``seed + k`` trains the best configuration of tuning
    replicate ``c.replicate_of(k)``. Tune: in replicate order, the level of that replicate with
    the fewest tuning trials started goes next (ties: level order), until each has
    ``tune_trials``. Confirm, once a replicate's tuning trials all finished: each level's best
    (:func:`best_tuned`) on the replicate's seed; a level without a complete tuning trial in it
    has no finite value there (its worst outcome). With ``tune_trials`` 0 there is no Tune:
    each level's own parameters are confirmed (:func:`confirmed_params`). While a replicate
    waits on running trials, the next one starts. After the seeds of the current round count
    have all finished, the comparison is looked at (look ``rounds - seeds + 1`` of
    ``max_seeds - seeds + 1``: :func:`look`) and, while its goal is open
    (:func:`orchestrator.answer.goal.still_open`) and below ``max_seeds``, one more paired seed
    (and, each_seed, its replicate) is added; each such look is kept in :attr:`Plan.looks`.
    """
    trials = counted(trials)
    tuning: dict[tuple[str, int], list[FrozenTrial]] = {}
    confirms: dict[tuple[Any, Any], FrozenTrial] = {}
    for t in trials:
        if t.user_attrs.get(keys.PHASE) == TUNE:
            tuning.setdefault((t.user_attrs.get(keys.LEVEL), replicate(t)), []).append(t)
        elif t.user_attrs.get(keys.PHASE) == CONFIRM:
            confirms[t.user_attrs.get(keys.LEVEL), t.user_attrs.get(keys.SEED)] = t
    looks: list[Look] = []
    for rounds in range(c.seeds, c.max_seeds + 1):
        step, values = _round(c, rounds, tuning, confirms)
        if step is not None:
            return Plan(step, c.total(rounds), tuple(looks))
        # a level no replicate tuned to completion is left out: there is nothing to compare
        values = {label: v for label, v in values.items()
                  if c.tune_trials == 0
                  or any(x is not None and not math.isnan(x) for x in v.values())
                  or any(best_tuned(tuning.get((label, c.replicate_of(k)), ()), c.direction)
                         for k in range(1, rounds + 1))}
        results, found, still = look(c, values, rounds)
        if rounds == c.max_seeds or not still:
            return Plan(Done(results, values, found), c.total(rounds), tuple(looks))
        looks.append(Look(rounds - c.seeds + 1, c.max_seeds - c.seeds + 1, rounds, still,
                          found))
    raise AssertionError("unreachable: the last round is always Done")


def look(c: Comparison, values: dict[str, dict[int, float | None]], rounds: int
         ) -> tuple[tuple[stats.PairResult, ...], tuple[Effect, ...],
                    tuple[stats.PairResult | Effect, ...]]:
    """The look at ``rounds`` paired seeds: every pair of levels (:func:`decide_look`), the
    effects of two or more factors (:func:`decide_effects`), and what of the comparison's
    goal is still open (:func:`orchestrator.answer.goal.still_open`; empty: seeding may stop).
    The plan and the simulated procedure (:func:`orchestrator.answer.simulate.run`) both stop
    on it."""
    results = decide_look(c, values, rounds)
    found = decide_effects(c, values, rounds)
    return results, found, tuple(goals.still_open(c.goal, results, found, values,
                                                  c.direction))


def _round(c: Comparison, rounds: int, tuning: dict, confirms: dict
           ) -> tuple[Tune | Confirm | Wait | None, dict[str, dict[int, float | None]]]:
    """The first step to start among the first ``rounds`` seeds (:class:`Wait` when only
    running trials remain), else None and every level's value at each seed."""
    waiting = False
    values: dict[str, dict[int, float | None]] = {lv.label: {} for lv in c.levels}
    for seed in c.confirm_seeds(rounds):
        r = c.replicate_of(seed - c.seed)
        mine = {lv.label: tuning.get((lv.label, r), []) for lv in c.levels}
        short = [lv for lv in c.levels if len(mine[lv.label]) < c.tune_trials]
        if short:
            return Tune(min(short, key=lambda lv: len(mine[lv.label])), r), values
        if any(not t.state.is_finished() for ts in mine.values() for t in ts):
            waiting = True
            continue
        for lv in c.levels:
            params = confirmed_params(c, lv, mine[lv.label])
            if params is None:
                values[lv.label][seed] = math.nan
            elif (lv.label, seed) not in confirms:
                return Confirm(lv, params, seed), values
            elif not confirms[lv.label, seed].state.is_finished():
                waiting = True
            else:
                values[lv.label][seed] = confirmed_value(confirms[lv.label, seed])
    return (Wait() if waiting else None), values


def confirmed_params(c: Comparison, level: Level,
                     tuning: Sequence[FrozenTrial]) -> dict[str, Any] | None:
    """The parameters a confirmation of ``level`` trains: the best of its ``tuning`` trials
    (:func:`best_tuned`), or with nothing to tune (``tune_trials: 0``) the level's own (the
    space's fixed settings come with every trial). None when no tuning trial completed."""
    if c.tune_trials == 0:
        return dict(level.params)
    best = best_tuned(tuning, c.direction)
    return None if best is None else dict(best.params)


def tuning_values(trials: Sequence[FrozenTrial]) -> dict[str, dict[int, list[float | None]]]:
    """Each level's tunings (level -> {replicate: values}): the objective of every tuning trial
    that spends the budget (:func:`counted`) in the order they started, None for one without a
    value (pruned, failed, running): the input of
    :func:`orchestrator.answer.budget.expected_best`."""
    out: dict[str, dict[int, list[float | None]]] = {}
    for t in sorted(counted(trials), key=lambda t: t.number):
        if t.user_attrs.get(keys.PHASE) == TUNE:
            value = t.value if t.state == TrialState.COMPLETE else None
            out.setdefault(str(t.user_attrs.get(keys.LEVEL)), {}).setdefault(
                replicate(t), []).append(value)
    return out


def confirmed_value(trial: FrozenTrial) -> float | None:
    """A confirmation trial's value for the comparison: its objective when complete; NaN when
    it failed for good (diverged or crashed: the worst outcome of its level, see
    :mod:`orchestrator.answer.stats`); None while it has none yet."""
    if trial.state == TrialState.COMPLETE:
        return trial.value
    return math.nan if trial.state == TrialState.FAIL else None


def decide_look(c: Comparison, values: dict[str, dict[int, float | None]],
                rounds: int) -> tuple[stats.PairResult, ...]:
    """:func:`stats.compare_paired` at the look of ``rounds`` seeds (cached: the plan replays
    every look each time it is asked)."""
    frozen = tuple((label, tuple(sorted(v.items()))) for label, v in values.items())
    return _decide(c.factor, c.direction, c.metric, c.precision, c.seeds, frozen,
                   rounds - c.seeds + 1, c.max_seeds - c.seeds + 1)


@lru_cache(maxsize=256)
def _decide(factor, direction, metric, precision, seeds, frozen, look,
            looks) -> tuple[stats.PairResult, ...]:
    values = {label: dict(v) for label, v in frozen}
    if len(values) < 2:  # one level tuned (the others failed every tuning trial): no pair
        return ()
    return tuple(stats.compare_paired(values, factor=factor, direction=direction,
                                      bounds=stats.difference_bounds(metric, values),
                                      look=look, looks=looks, precision=precision,
                                      seeds=seeds))


def decide_effects(c: Comparison, values: dict[str, dict[int, float | None]],
                   rounds: int) -> tuple[Effect, ...]:
    """:func:`orchestrator.answer.effects.effects` of a comparison of two or more factors at
    the look of ``rounds`` seeds (the levels' values as cells of the product); empty for one
    factor."""
    if len(c.factors) < 2:
        return ()
    cells = c.cells()
    by_cell = {cells[label]: v for label, v in values.items() if label in cells}
    return tuple(effects(c.factors, c.factor_levels(), by_cell, direction=c.direction,
                         bounds=stats.difference_bounds(c.metric, values),
                         look=rounds - c.seeds + 1, looks=c.max_seeds - c.seeds + 1,
                         precision=c.precision, seeds=c.seeds))


def answer(c: Comparison, trials: Sequence[FrozenTrial], done: Done) -> Answer | None:
    """The level a finished comparison names, and its run (None when no level has a finite
    confirmation value).

    The level: among the levels no other level is better than (:mod:`orchestrator.answer.stats`),
    the one with the fewest seeds without a finite value, then the best mean over its confirmation
    seeds (ties: level order). So a level better than every other is named; when no pair is
    decided, the best confirmed mean is named, and ``why`` says that the evidence does not
    single it out. Its run: the complete confirmation run whose value is closest to that mean
    (ties: the lower seed), a typical seed rather than the luckiest.
    """
    beaten = {r.loser for r in done.results if r.winner is not None}
    label = goals.leader(done.values, done.results, c.direction)
    if label is None:
        return None
    finite = [v for v in done.values[label].values() if v is not None and math.isfinite(v)]
    mean, n = math.fsum(finite) / len(finite), len(finite)
    runs = [t for t in trials if t.user_attrs.get(keys.PHASE) == CONFIRM
            and t.user_attrs.get(keys.LEVEL) == label and t.state == TrialState.COMPLETE
            and t.value is not None and math.isfinite(t.value)]
    # equally close (two seeds): the lower seed, whatever the last bit of the float says
    run = min(runs, key=lambda t: (round(abs(t.value - mean), 12),
                                   t.user_attrs.get(keys.SEED, 0)))
    others = [lv for lv in stats.level_order(done.values) if lv != label]
    # the top levels not separated: the weights are one of theirs, and the reason says which
    peers = [lv for lv in others if lv not in beaten
             and any(v is not None and math.isfinite(v) for v in done.values[lv].values())]
    half = _half(finite, c.metric)
    why = answer_why(Words.of(c.factors, c.metric, c.cells()), label, mean, half, n, others,
                     {r.loser for r in done.results if r.winner == label} >= set(others),
                     bool(beaten), (run.user_attrs.get(keys.SEED), run.number), peers)
    return Answer(label, mean, n, run, why, tuple(at_edges(tuned_bests(c, trials))),
                  tuple(peers), half)


def _half(values: Sequence[float], metric: str) -> float:
    """The half-width of the 95% t interval of a level's mean over its finite confirmation
    ``values`` (clipped to the metric's range), as the table of levels rounds it; NaN
    without one."""
    _, low, high, _ = stats.mean_interval(values, stats.METRIC_BOUNDS.get(metric))
    return (high - low) / 2 if not math.isnan(low) else math.nan


def tuned_bests(c: Comparison, trials: Sequence[FrozenTrial]) -> dict[str, list[FrozenTrial]]:
    """Each level's tuned best (:func:`best_tuned`) of each of its tunings, in level and
    replicate order: a level without a complete tuning trial has an empty list."""
    tunings: dict[tuple[str, int], list[FrozenTrial]] = {}
    for t in counted(trials):
        if t.user_attrs.get(keys.PHASE) == TUNE:
            tunings.setdefault((t.user_attrs.get(keys.LEVEL), replicate(t)), []).append(t)
    out: dict[str, list[FrozenTrial]] = {lv.label: [] for lv in c.levels}
    for (label, _), mine in sorted(tunings.items(), key=lambda kv: kv[0][1]):
        best = best_tuned(mine, c.direction)
        if best is not None and label in out:
            out[label].append(best)
    return out


def final_answer(c: Comparison | None, trials: Sequence[FrozenTrial]) -> Answer | None:
    """The answer of comparison ``c`` once its plan is done (:func:`answer`); None before, or
    without a comparison."""
    if c is None:
        return None
    step = plan(c, trials)
    if not isinstance(step.action, Done):
        return None
    return answer(c, counted(trials), step.action)


@dataclass(frozen=True)
class Standing:
    """What the parent run of a single-objective sweep records of its trials at one moment
    (``best_value``, ``sweep.best_run_id``, ``sweep.best_trial``, ``sweep.answer``): a decided
    comparison's ``answer`` (``value`` its level's confirmed mean, ``trial`` the run standing for
    it), else the best ``trial`` so far and its ``value``."""

    trial: FrozenTrial = field(hash=False)
    value: float
    answer: Answer | None = None

    @property
    def key(self) -> tuple[int, float, bool]:
        """What tells two standings apart: the trial, the value, and whether it is the answer."""
        return self.trial.number, self.value, self.answer is not None


def standing(c: Comparison | None, trials: Sequence[FrozenTrial],
             directions: Sequence[str]) -> Standing | None:
    """What a sweep's ``trials`` (any order, any states) stand for: once comparison ``c`` is
    decided, its answer (:func:`final_answer`); before, or without a comparison, the best trial
    (:func:`objectives.best_trials` in ``directions``); None with no complete trial."""
    found = final_answer(c, trials)
    if found is not None:
        return Standing(found.trial, found.mean, found)
    best = objectives.best_trials(trials, list(directions))
    return Standing(best[0], best[0].value) if best else None
