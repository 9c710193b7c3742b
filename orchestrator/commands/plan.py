"""``sweep plan SPEC``: a comparison's design sized from a pilot, so that its seeds are chosen,
not guessed.

The pilot is a few paired seeds of every level at the spec's settings: either a sweep this
command runs (the spec with ``seeds = max_seeds = N``, at base seed ``seed +``
:data:`PILOT_SEED`, in a folder of its own under ``.sweep/NAME/plan/``, reused while the spec is
unchanged), or a finished sweep of the same settings (``--from``). From its confirmed values
:mod:`orchestrator.answer.design` estimates each level's mean and their covariance, and
simulates the shipped procedure for a grid of designs; the trials' mean duration and the
spec's workers give the wall time.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ..answer import compare, design, summary
from ..answer.words import pilot_pair
from ..config.slots import plan_slots
from ..config.spec import SweepSpec, load_spec
from ..core import keys, paths
from ..core.errors import SweepError

PILOT_SEED = 20_000  # the pilot's base seed is the spec's plus this: no run of the spec trains
PILOT_SEEDS = 3  # paired seeds a pilot runs unless --pilot-seeds says otherwise
FREE = ("name", "seed")  # what a pilot may change of the spec it sizes
FREE_COMPARE = ("seeds", "max_seeds", "precision", "goal", "target")


@dataclass(frozen=True)
class Pilot:
    """A pilot's confirmed values (level -> {seed: value}), its finished trials' mean wall
    seconds, and where it came from, in words."""

    values: dict[str, dict[int, float]]
    trial_seconds: float
    trials: int
    where: str


@dataclass(frozen=True)
class Planned:
    """What ``sweep plan`` found: the spec's comparison, its pilot and estimates, each design
    simulated, the worker count the wall time assumes and the design recommended."""

    spec: SweepSpec
    comparison: compare.Comparison
    pilot: Pilot
    estimates: design.Estimates
    designs: list[design.Design]
    workers: int
    recommended: design.Design | None
    target: float = design.TARGET

    def wall_s(self, d: design.Design) -> float:
        """A design's expected wall seconds: its trials x a pilot trial's seconds / workers."""
        return d.mean_trials * self.pilot.trial_seconds / self.workers

    def lines(self) -> list[str]:
        """The plan as ``sweep plan`` prints it (:func:`plan_lines`)."""
        return plan_lines(self)


def check_spec(spec: SweepSpec) -> compare.Comparison:
    """The spec's comparison; a spec ``sweep plan`` cannot size is one line.

    Raises:
        SweepError: a scaling grid, or no ``compare:`` block.
    """
    if spec.scaling is not None:
        raise SweepError(f"{spec.source}: scaling: sweep plan sizes a comparison's seeds "
                         f"(compare:), not a scaling grid, whose seeds are its repeats; plan a "
                         f"spec with a compare: block")
    c = compare.Comparison.of(spec)
    if c is None:
        raise SweepError(f"{spec.source}: compare: missing; sweep plan sizes the seeds of a "
                         f"comparison; add a compare: block (docs/compare.md)")
    return c


def pilot_of(c: compare.Comparison, study, where: str) -> Pilot:
    """The pilot a study holds: every level's confirmed value at each seed
    (:func:`compare.confirmed_value`), and its finished trials' mean duration.

    Raises:
        SweepError: a level of ``c`` without a confirmed value, or no finished trial.
    """
    trials = compare.counted(study.get_trials(deepcopy=False))
    values: dict[str, dict[int, float]] = {lv.label: {} for lv in c.levels}
    for t in trials:
        label = t.user_attrs.get(keys.LEVEL)
        if t.user_attrs.get(keys.PHASE) == compare.CONFIRM and label in values:
            value = compare.confirmed_value(t)
            if value is not None:
                values[label][int(t.user_attrs.get(keys.SEED))] = value
    empty = [label for label, by_seed in values.items() if not by_seed]
    if empty:
        raise SweepError(f"{where}: no confirmed value of level {empty[0]} of "
                         f"{c.factor}; plan from a sweep that confirmed every level of the "
                         f"spec, or leave --from out to run a pilot")
    seconds = [(t.datetime_complete - t.datetime_start).total_seconds() for t in trials
               if t.state.is_finished() and t.datetime_start and t.datetime_complete]
    mean = math.fsum(seconds) / len(seconds) if seconds else math.nan
    return Pilot(values, mean, len(seconds), where)


def estimates_of(pilot: Pilot, option: str) -> design.Estimates:
    """The pilot's estimates (:func:`design.estimate`); too few full seeds is one line."""
    try:
        return design.estimate(pilot.values)
    except ValueError as e:
        raise SweepError(f"{option}: {pilot.where}: {e}; give the pilot more seeds") from None


def worker_count(spec: SweepSpec) -> int:
    """The trials the spec runs at once on this machine (``sweep run``'s slots)."""
    return len(plan_slots(spec.workers, list(spec.gpus) if spec.gpus is not None else None,
                          workers_per_gpu=spec.workers_per_gpu,
                          devices_per_trial=spec.train.get("devices_per_trial", 1)))


def settings(identity: dict) -> dict:
    """What of a sweep's identity a pilot must share with the spec it sizes: all but its
    name, base seed and design (:data:`FREE`, :data:`FREE_COMPARE`)."""
    out = {k: v for k, v in identity.items() if k not in FREE}
    if isinstance(out.get("compare"), dict):
        out["compare"] = {k: v for k, v in out["compare"].items() if k not in FREE_COMPARE}
    return out


def read_finished(spec: SweepSpec, source: str) -> Pilot:
    """The pilot a finished sweep of the spec's settings holds (``--from``): a sweep folder
    (its ``optuna.journal``) or a study storage, the sweep named as the spec names it.

    Raises:
        SweepError: no such folder or sweep, a sweep of other settings, a level unconfirmed.
    """
    from ..report.status import load_named

    folder = Path(source)
    url = str(folder / "optuna.journal") if folder.is_dir() else source
    if "://" not in source and not Path(url).exists():
        what = "no optuna.journal in that folder" if folder.is_dir() else \
            "no such folder or journal file"
        raise SweepError(f"--from {source}: {what}; give the folder a finished sweep ran in "
                         f"(its optuna.journal), or its study storage")
    study = load_named(spec.name, url)
    theirs = settings(json.loads(study.user_attrs.get(keys.IDENTITY) or "{}"))
    ours = settings(json.loads(json.dumps(spec.identity(), sort_keys=True, default=str)))
    differ = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
    if differ:
        raise SweepError(f"--from {source}: sweep {spec.name!r} there ran other settings than "
                         f"{spec.source} (they differ in {', '.join(differ)}); a pilot must run "
                         f"the spec's settings: plan from a sweep of this YAML, or leave --from "
                         f"out to run a pilot")
    return pilot_of(check_spec(spec), study, f"sweep {spec.name!r} in {source}")


def pilot_overrides(spec: SweepSpec, seeds: int) -> list[str]:
    """The ``--set`` lines that make the spec its own pilot: ``seeds`` paired seeds in one
    look, at a base seed no run of the spec uses, exporting nothing."""
    return [f"compare.seeds={seeds}", f"compare.max_seeds={seeds}",
            f"seed={spec.seed + PILOT_SEED}", "export_for=none"]


def run_pilot(spec: SweepSpec, seeds: int, run: Callable, console: Console | None) -> Pilot:
    """Run the spec's pilot (:func:`pilot_overrides`) with ``run`` (``sweep run``'s
    :func:`orchestrator.commands.api.run`), in its own stores under ``.sweep/NAME/plan/``
    (named by the pilot's settings), or reuse it when it finished there before."""
    from ..report.status import load_named

    overrides = pilot_overrides(spec, seeds)
    pilot = load_spec(spec.source, overrides, max_grid=None)
    folder = (paths.work_dir(paths.default_tracking_uri(), spec.name) / "plan" /
              f"pilot-{pilot.fingerprint()[:12]}")
    storage = str(folder / "optuna.journal")
    c = compare.Comparison.of(pilot)
    if not _finished(c, storage, spec.name):
        folder.mkdir(parents=True, exist_ok=True)
        if console is not None:
            console.print(f"pilot: {seeds} paired seeds of each level at the spec's settings "
                          f"(base seed {pilot.seed}), in {folder}", soft_wrap=True)
        run(spec.source, set=overrides, tracking_uri=paths.sqlite_uri(folder / "mlflow.db"),
            storage=storage, console=console, max_grid=None)
    study = load_named(spec.name, storage)
    return pilot_of(c, study, f"the pilot of {seeds} seeds in {folder}")


def _finished(c: compare.Comparison, storage: str, name: str) -> bool:
    """Whether the pilot's study in ``storage`` exists and its plan is done."""
    import optuna

    from ..stores.storages import open_storage

    if not Path(storage).exists():
        return False
    store = open_storage(storage)
    if name not in optuna.get_all_study_names(store):
        return False
    trials = optuna.load_study(study_name=name, storage=store).get_trials(deepcopy=False)
    return isinstance(compare.plan(c, trials).action, compare.Done)


def plan(spec_path: str | Path, run: Callable, *, pilot_seeds: int | None = None,
         source: str | None = None, draws: int = design.DRAWS,
         console: Console | None = None) -> Planned:
    """Size the comparison of sweep YAML ``spec_path``, as ``sweep plan`` does (see the
    module), a pilot run by ``run`` (:func:`orchestrator.commands.api.run`); ``console``
    shows the pilot's progress when given."""
    if pilot_seeds is not None and source is not None:
        raise SweepError("--pilot-seeds and --from: a finished sweep is the pilot; drop "
                         "--pilot-seeds (or --from to run a pilot)")
    if pilot_seeds is not None and pilot_seeds < 2:
        raise SweepError(f"--pilot-seeds must be >= 2 (a spread needs 2 paired seeds), got "
                         f"{pilot_seeds}; e.g. --pilot-seeds 3")
    if draws < 100:
        raise SweepError(f"--draws must be >= 100 (a chance to a few points), got {draws}; "
                         f"e.g. --draws {design.DRAWS}")
    spec = load_spec(spec_path, max_grid=None)
    c = check_spec(spec)
    pilot = read_finished(spec, source) if source is not None else \
        run_pilot(spec, pilot_seeds or PILOT_SEEDS, run, console)
    est = estimates_of(pilot, "--from" if source else "the pilot")
    rows = design.table(c, est, draws)
    return Planned(spec, c, pilot, est, rows, worker_count(spec), design.recommend(rows))


# ------------------------------------------------------------------------------ the text

def _workers(n: int) -> str:
    return f"{n} worker{'s' if n != 1 else ''}"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def plan_lines(p: Planned) -> list[str]:
    """The pilot, each pair's estimates, the designs' table, the recommendation and what the
    figures assume."""
    c, est = p.comparison, p.estimates
    words = summary.words_of(c)
    dropped = f"; {est.dropped} seed(s) without a finite value at every level left out" \
        if est.dropped else ""
    lines = [f"pilot: {p.pilot.where}: {est.seeds} paired seeds of {len(c.levels)} levels"
             f"{dropped}; its {p.pilot.trials} trials took {p.pilot.trial_seconds:.1f} s each "
             f"on average"]
    lines += [f"  {pilot_pair(words, a, b, mean, sd, est.seeds)}"
              for a, b, mean, sd in est.pairs()]
    precision = "none" if c.precision is None else words.precision(c.precision)
    lines.append(f"designs ({p.designs[0].draws} simulated comparisons each; precision "
                 f"{precision}, goal {c.goal}, tune_trials {c.tune_trials}, tuning {c.tuning}, "
                 f"{_workers(p.workers)}):")
    lines.append(f"  {'seeds':>5} {'max_seeds':>9} {'decided':>8} {'carried':>8} "
                 f"{'E[seeds]':>8} {'E[trials]':>9} {'E[wall]':>10}")
    for d in p.designs:
        mine = "  (the spec's)" if (d.seeds, d.max_seeds) == (c.seeds, c.max_seeds) else ""
        lines.append(f"  {d.seeds:>5} {d.max_seeds:>9} {d.chance:>8.0%} {d.carried:>8.0%} "
                     f"{d.mean_seeds:>8.2f} {d.mean_trials:>9.1f} "
                     f"{_minutes(p.wall_s(d)):>10}{mine}")
    lines.append(recommendation(p))
    lines.append(assumptions(p))
    return lines


def recommendation(p: Planned) -> str:
    """The one sentence naming the cheapest design that reaches the target chance."""
    draws, target = p.designs[0].draws, f"{p.target:.0%}"
    how = (f"chance of a decided answer in {draws} simulated comparisons drawn from the "
           f"pilot's estimates")
    d = p.recommended
    if d is None:
        top = max(p.designs, key=lambda x: (x.chance, -x.mean_trials))
        return (f"recommended: none of these designs reaches {target} ({how}); the highest is "
                f"seeds {top.seeds}, max_seeds {top.max_seeds} at {top.chance:.0%}: give the "
                f"comparison more seeds, a wider precision, or a question with fewer pairs")
    return (f"recommended: seeds {d.seeds}, max_seeds {d.max_seeds}: the fewest trials on "
            f"average ({d.mean_trials:.0f}, about {_minutes(p.wall_s(d))}) among the designs "
            f"whose {how} reaches {target} ({d.chance:.0%}; {d.carried:.0%} with the pilot's "
            f"uncertainty carried)")


def assumptions(p: Planned) -> str:
    """What the figures assume, in one paragraph."""
    n = p.estimates.seeds
    return (f"assumes: at each seed the levels' values are normal with the pilot's means and "
            f"covariance ({n} seeds); 'decided' takes them as the truth (the pilot's own "
            f"uncertainty left out), 'carried' also draws them from what {n} seeds allow; "
            f"E[wall] = E[trials] x {p.pilot.trial_seconds:.1f} s (a pilot trial on this "
            f"machine) / {_workers(p.workers)}, not counting the start")
