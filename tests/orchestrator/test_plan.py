"""``sweep plan``: a comparison's design sized from a pilot. The pilot's estimates against numpy,
the simulated chance of a decided answer against the rate at which the procedure decides on
values drawn from the same distribution, the table's trials and wall time against their
formulas, the refusals, and (slow) a real pilot end to end."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from datetime import datetime, timedelta

import numpy as np
import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial, TrialState
from scipy import stats as scipy_stats

from orchestrator.answer import compare, design, stats
from orchestrator.answer import simulate as sim
from orchestrator.commands.cli import main
from orchestrator.config.spec import load_spec
from orchestrator.core import keys
from orchestrator.stores.storages import open_storage
from tests.conftest import ROOT, run_cli
from tests.helpers import compare_spec

DRAWS = 1000  # simulated comparisons on each side of a predicted/realized check


def test_the_estimates_are_the_pilots_paired_differences():
    """Each pair's mean and sd (ddof 1) of b - a over the seeds where every level has a
    finite value; a seed with a NaN is left out and counted."""
    rng = np.random.default_rng(3)
    raw = rng.normal(0.9, 0.01, (6, 3))
    values = {lv: {seed: float(raw[seed, i]) for seed in range(6)}
              for i, lv in enumerate(("adam", "sgd", "lion"))}
    values["sgd"][5] = math.nan
    est = design.estimate(values)
    assert (est.seeds, est.dropped) == (5, 1)
    for a, b, mean, sd in est.pairs():
        diffs = [values[b][s] - values[a][s] for s in range(5)]
        assert mean == pytest.approx(np.mean(diffs), abs=1e-15)
        assert sd == pytest.approx(np.std(diffs, ddof=1), rel=1e-12)


def test_a_pilot_without_two_full_seeds_has_no_estimates():
    with pytest.raises(ValueError, match="2 or more paired seeds .* got 1"):
        design.estimate({"a": {1: 0.9, 2: 0.8}, "b": {1: 0.91, 2: math.inf}})


def _realized(c: compare.Comparison, means, cov, seed: int) -> float:
    """The rate at which the shipped procedure (:func:`simulate.run`, the plan's own looks:
    tests/orchestrator/test_simulate.py) decides its one pair, better or equivalent, on
    values drawn from N(means, cov) by numpy's own multivariate normal."""
    rng = np.random.default_rng(seed)
    decided = 0
    for _ in range(DRAWS):
        x = rng.multivariate_normal(means, cov, size=c.max_seeds)
        values = {lv.label: {c.seed + k + 1: float(x[k, i]) for k in range(c.max_seeds)}
                  for i, lv in enumerate(c.levels)}
        verdict = sim.run(c, values).results[0].verdict
        decided += verdict in (stats.BETTER, stats.EQUIVALENT)
    return decided / DRAWS


@pytest.mark.parametrize("seeds, max_seeds, precision, gap, sd, direction", [
    (3, 3, 0.01, 0.004, 0.006, "maximize"), (3, 5, 0.01, 0.002, 0.008, "minimize"),
    (4, 6, None, 0.01, 0.012, "maximize"), (3, 6, 0.02, 0.01, 0.01, "minimize")])
def test_the_predicted_chance_is_the_realized_rate_within_5_points(seeds, max_seeds, precision,
                                                                   gap, sd, direction):
    """Known normal values (level b ahead by ``gap``, paired differences of sd ``sd``): the
    planner's chance of a decided answer, from estimates equal to them, lies within 5 points
    of the rate the procedure decides at on fresh draws of them."""
    c = sim.comparison(["a", "b"], tune_trials=2, seeds=seeds, max_seeds=max_seeds,
                       precision=precision)
    c = dataclasses.replace(c, direction=direction)
    var = 0.015 ** 2
    cov = np.array([[var, var - sd ** 2 / 2], [var - sd ** 2 / 2, var]])
    means = np.array([0.9, 0.9 + gap])
    known = design.Estimates(("a", "b"), means, np.linalg.cholesky(cov).T, seeds=10 ** 6)
    predicted = design.simulate_design(c, known, DRAWS, seed=1, carry=False)
    realized = _realized(c, means, cov, seed=2)
    assert 0.1 < realized < 0.9  # a design whose chance says something
    assert abs(predicted.chance - realized) <= 0.05, (predicted, realized)


def _known(gap: float, sd: float, seeds: int) -> design.Estimates:
    """Two levels, b ahead by ``gap``, paired differences of sd ``sd``, from ``seeds``."""
    var = 0.015 ** 2
    cov = np.array([[var, var - sd ** 2 / 2], [var - sd ** 2 / 2, var]])
    return design.Estimates(("a", "b"), np.array([0.9, 0.9 + gap]),
                            np.linalg.cholesky(cov).T, seeds=seeds)


@pytest.mark.parametrize("tuning", ["each_seed", "once"])
def test_the_expected_trials_are_the_designs_count_at_the_expected_seeds(tuning):
    """each_seed: levels x E[seeds] x (tune_trials + 1); once: levels x (tune_trials +
    E[seeds])."""
    c = sim.comparison(["a", "b", "c"], tune_trials=4, seeds=3, max_seeds=6, precision=0.03,
                       tuning=tuning)
    est = design.Estimates(("a", "b", "c"), np.array([0.9, 0.905, 0.9]),
                           np.diag([0.006, 0.008, 0.007]), seeds=10)
    d = design.simulate_design(c, est, 200, carry=False)
    assert 3 < d.mean_seeds < 6
    want = 3 * d.mean_seeds * 5 if tuning == "each_seed" else 3 * (4 + d.mean_seeds)
    assert d.mean_trials == pytest.approx(want, rel=1e-12)


def test_the_carried_chance_is_the_chance_for_a_large_pilot_and_lower_for_a_small_one():
    """A clear difference: from a pilot of a million seeds, carrying its uncertainty changes
    nothing; from 3 seeds, the spread may be much larger than estimated: a lower chance."""
    c = sim.comparison(["a", "b"], tune_trials=2, seeds=3, max_seeds=6, precision=0.01)
    large = design.simulate_design(c, _known(0.03, 0.01, 10 ** 6), 500)
    small = design.simulate_design(c, _known(0.03, 0.01, 3), 500)
    assert large.chance > 0.9
    assert abs(large.carried - large.chance) <= 0.04, large
    assert small.carried < small.chance - 0.1, small


def test_a_carried_draw_spreads_as_the_posterior_predictive_of_the_pilot():
    """With the pilot's uncertainty carried, the mean of a comparison's m seeds of a level has
    variance sd^2 (n - 1) / (n - 3) (1 / n + 1 / m) (n pilot seeds: the spread's scale has
    mean (n - 1) / (n - 3), the pilot's mean is off by sd / sqrt(n)); without it, sd^2 / m.
    (n = 8: the scale's variance is finite, so the figure settles.)"""
    c = sim.comparison(["a", "b"], tune_trials=1, seeds=6, max_seeds=6)
    est = design.Estimates(("a", "b"), np.array([0.5, 0.5]), np.diag([0.02, 0.02]), seeds=8)
    rng = np.random.default_rng(4)
    for carried, want in ((True, 0.02 ** 2 * 7 / 5 * (1 / 8 + 1 / 6)), (False, 0.02 ** 2 / 6)):
        means = [np.mean(list(design.draw(c, est, rng, carried)["a"].values()))
                 for _ in range(6000)]
        assert np.var(means) == pytest.approx(want, rel=0.1), carried


def test_the_chance_is_of_the_specs_goal_a_pair_outside_it_holds_nothing_open():
    """Level a far ahead of b and c, which are alike, without a precision: the best level
    is decided almost always, every pair almost never (b against c is "better" only by a
    false verdict, at most 5%)."""
    est = design.Estimates(("a", "b", "c"), np.array([0.95, 0.90, 0.90]),
                           np.diag([0.003, 0.003, 0.003]), seeds=10)
    chance = {}
    for goal in ("best", "pairs"):
        c = sim.comparison(["a", "b", "c"], tune_trials=1, seeds=3, max_seeds=5, goal=goal)
        chance[goal] = design.simulate_design(c, est, 300, carry=False).chance
    assert chance["best"] > 0.95 and chance["pairs"] <= 0.05, chance


def _row(seeds: int, max_seeds: int, chance: float, trials: float) -> design.Design:
    return design.Design(seeds, max_seeds, chance, chance, seeds, trials, 100)


def test_the_recommendation_is_the_cheapest_design_that_reaches_80_percent():
    rows = [_row(3, 3, 0.5, 30), _row(3, 6, 0.8, 50), _row(5, 5, 0.95, 45),
            _row(5, 10, 0.99, 45)]
    assert design.recommend(rows) == rows[2]  # 45 trials; the tie: fewer max_seeds
    assert design.recommend(rows, target=0.99) == rows[3]
    assert design.recommend(rows[:1]) is None


def test_the_designs_tried_hold_the_specs_own_within_the_statistics_limits():
    c = sim.comparison(["a", "b"], tune_trials=2, seeds=6, max_seeds=20)
    got = design.designs(c)
    assert (6, 20) in got and (6, 6) in got and (6, 12) in got and (20, 40) in got
    assert got == sorted(got) and all(m - s + 1 <= 100 for s, m in got)


# ------------------------------------------------------------------ the command, no training

SECONDS = (4.0, 6.0)  # a tuning trial's and a confirmation trial's wall seconds


def _finished(folder, direction: str, values: dict[str, list[float]], tune_trials: int = 2):
    """A finished comparison as its study holds it (the journal alone: what --from reads): its
    identity, each replicate's tuning trials and its confirmations, each trial timed. Returns
    the spec's path."""
    metric = "val_acc" if direction == "maximize" else "val_loss"
    raw = compare_spec(objective={"metric": metric, "direction": direction},
                       compare={"factor": "optimizer", "tune_trials": tune_trials, "seeds": 3,
                                "max_seeds": 6, "precision": 0.01})
    folder.mkdir()
    path = folder / "cmp.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = load_spec(path)
    study = optuna.create_study(study_name="cmp", direction=direction,
                                storage=open_storage(str(folder / "optuna.journal")))
    study.set_user_attr(keys.IDENTITY, json.dumps(spec.identity(), sort_keys=True, default=str))
    start, number = datetime(2026, 1, 1), 0
    for k in range(1, len(next(iter(values.values()))) + 1):
        for level, by_seed in values.items():
            trials = [(compare.TUNE, None, 0.5, SECONDS[0])] * tune_trials + \
                [(compare.CONFIRM, by_seed[k - 1], by_seed[k - 1], SECONDS[1])]
            for phase, seed, value, seconds in trials:
                attrs = {keys.PHASE: phase, keys.LEVEL: level, keys.REPLICATE: k,
                         **({keys.SEED: spec.seed + k} if seed is not None else {})}
                failed = math.isnan(value)  # a confirmation that failed for good
                study.add_trial(FrozenTrial(
                    number=number, state=TrialState.FAIL if failed else TrialState.COMPLETE,
                    value=None if failed else value, params={},
                    distributions={}, user_attrs=attrs, system_attrs={},
                    intermediate_values={}, trial_id=number, datetime_start=start,
                    datetime_complete=start + timedelta(seconds=seconds)))
                number += 1
    return path


PILOT = {"adam": [0.951, 0.962, 0.948, 0.957], "sgd": [0.958, 0.961, 0.955, 0.969]}


def _plan(capsys, *args) -> tuple[int, list[str]]:
    code = main(["plan", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out.splitlines() + out.err.splitlines()


def _table(lines: list[str]) -> dict[tuple[int, int], list[str]]:
    """The designs' rows: (seeds, max_seeds) -> the rest of the row's words."""
    rows = [line.split() for line in lines if re.match(r"^\s+\d+\s+\d+\s+\d+%", line)]
    return {(int(r[0]), int(r[1])): r[2:] for r in rows}


def _from_finished(tmp_path, capsys, direction: str) -> dict[tuple[int, int], list[str]]:
    """``sweep plan --from`` a finished sweep of :data:`PILOT` (a loss: its mirror, 1 - v):
    its pair (sgd - adam; an accuracy in points), and every design's E[trials] = levels x
    E[seeds] x (tune_trials + 1) and E[wall] = E[trials] x a trial's mean seconds /
    workers; the spec's design marked, one recommendation. Returns the table's rows."""
    values = PILOT if direction == "maximize" else \
        {lv: [1 - v for v in vs] for lv, vs in PILOT.items()}
    spec = _finished(tmp_path / direction, direction, values)
    code, lines = _plan(capsys, spec, "--from", tmp_path / direction, "--draws", 100)
    assert code == 0, lines
    diffs = np.subtract(values["sgd"], values["adam"])
    # the mean to 2 significant digits of its 95% t interval's half-width (scipy), the sd to 3
    scale, unit = (100, "points") if direction == "maximize" else (1, "val_loss")
    n, sd = len(diffs), diffs.std(ddof=1)
    half = scale * scipy_stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    digits = 1 - math.floor(math.log10(half))
    mean, low, high = (f"{scale * diffs.mean() + k * half:.{digits}f}" for k in (0, -1, 1))
    pair = (f"sgd minus adam: mean {mean} {unit} [{low}, {high}] (95% t interval over {n} "
            f"paired seeds), sd of the paired differences "
            f"{scale * sd:.{2 - math.floor(math.log10(scale * sd))}f} {unit}")
    assert pair in [line.strip() for line in lines], lines
    seconds = (2 * SECONDS[0] + SECONDS[1]) / 3  # per trial: 2 tuning, 1 confirmation
    assert f"took {seconds:.1f} s each" in lines[0]
    rows = _table(lines)
    assert [k for k, row in rows.items() if "(the spec's)" in " ".join(row)] == [(3, 6)]
    for (s, m), (chance, carried, seeds, trials, wall, *_) in rows.items():
        assert s <= float(seeds) <= m
        assert float(trials) == pytest.approx(2 * float(seeds) * 3, abs=0.09)
        assert float(wall) == pytest.approx(float(trials) * seconds / 2 / 60, abs=0.051)
    assert sum(line.startswith("recommended: ") for line in lines) == 1
    return rows


def test_plan_from_a_finished_sweep_in_both_directions(tmp_path, capsys):
    """The pair and each design's cost by their formulas (:func:`_from_finished`), and a
    minimized metric whose values mirror a maximized one's: the same chances."""
    rows = {d: _from_finished(tmp_path, capsys, d) for d in ("maximize", "minimize")}
    assert rows["maximize"] == rows["minimize"]


@pytest.mark.parametrize("change, flags, line", [
    ({"compare": None, "trials": 4}, [], "compare: missing; sweep plan sizes the seeds of a "
                                         "comparison; add a compare: block"),
    ({}, ["--pilot-seeds", "1"], "--pilot-seeds must be >= 2 (a spread needs 2 paired seeds), "
                                 "got 1; e.g. --pilot-seeds 3"),
    ({}, ["--pilot-seeds", "3", "--from", "x"], "--pilot-seeds and --from: a finished sweep is "
                                                "the pilot; drop --pilot-seeds"),
    ({}, ["--draws", "10"], "--draws must be >= 100 (a chance to a few points), got 10"),
    ({}, ["--from", "nowhere"], "--from nowhere: no such folder or journal file; give the "
                                "folder a finished sweep ran in"),
    ({}, ["--from", "."], "--from .: no optuna.journal in that folder"),
], ids=["no compare", "one pilot seed", "both sources", "few draws", "no source",
        "no journal"])
def test_each_refusal_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, change, flags,
                                             line):
    monkeypatch.chdir(tmp_path)
    raw = compare_spec()
    for key, value in change.items():
        raw.pop(key) if value is None else raw.update({key: value})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    code, lines = _plan(capsys, "s.yaml", *flags)
    assert code == 2
    assert len(lines) == 1 and line in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # nothing written


def test_a_scaling_grid_is_refused(capsys):
    code, lines = _plan(capsys, ROOT / "sweeps" / "batch_lr_scaling.yaml")
    assert code == 2 and len(lines) == 1
    assert "scaling: sweep plan sizes a comparison's seeds (compare:), not a scaling grid" \
        in lines[0]


def test_a_finished_sweep_of_other_settings_is_refused(tmp_path, capsys):
    spec = _finished(tmp_path / "sweep", "maximize", PILOT)
    other = yaml.safe_load(spec.read_text())
    other["train"]["epochs"] = 2
    other["compare"]["max_seeds"] = 12  # the design may differ: it is what is planned
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    code, lines = _plan(capsys, tmp_path / "other.yaml", "--from", tmp_path / "sweep")
    assert code == 2 and len(lines) == 1
    assert "ran other settings than" in lines[0] and "(they differ in train)" in lines[0]


def test_a_finished_sweep_with_one_full_seed_is_refused(tmp_path, capsys):
    spec = _finished(tmp_path / "sweep", "maximize", {"adam": [0.95, math.nan],
                                                      "sgd": [0.96, 0.97]})
    code, lines = _plan(capsys, spec, "--from", tmp_path / "sweep")
    assert code == 2 and len(lines) == 1
    assert "2 or more paired seeds with a finite value at every level, got 1" in lines[0]


# ------------------------------------------------------------------ a real pilot, end to end

@pytest.mark.slow
def test_a_pilot_runs_in_its_own_stores_and_from_it_the_same_table(tmp_path, write_spec):
    """``sweep plan`` on a 2-level comparison (1 epoch, 1 tuning trial): the pilot runs 2
    seeds of each level (2 x 2 x 2 trials) at base seed + 20000, in .sweep/cmp/plan/ alone
    (no store of the user's), and --from on its folder prints the same table."""
    raw = compare_spec(workers=1, compare={"factor": "optimizer", "tune_trials": 1,
                                           "seeds": 3, "max_seeds": 6, "precision": 0.05})
    spec = write_spec(raw, "cmp.yaml")
    out = run_cli("plan", "cmp.yaml", "--pilot-seeds", "2", "--draws", "100", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sweep", "cmp.yaml"]
    (folder,) = (tmp_path / ".sweep" / "cmp" / "plan").iterdir()
    study = optuna.load_study(study_name="cmp",
                              storage=open_storage(str(folder / "optuna.journal")))
    trials = study.get_trials()
    assert len(trials) == 2 * 2 * 2 and all(t.state == TrialState.COMPLETE for t in trials)
    confirmed = {t.user_attrs[keys.SEED] for t in trials
                 if t.user_attrs[keys.PHASE] == compare.CONFIRM}
    assert confirmed == {20_001, 20_002}  # base seed 0 + 20000: no seed the sweep trains on
    seconds = np.mean([(t.datetime_complete - t.datetime_start).total_seconds()
                       for t in trials])
    lines = out.stdout.splitlines()
    assert any(f"its 8 trials took {seconds:.1f} s each" in line for line in lines), lines
    rows = _table(lines)
    for (s, m), (chance, carried, seeds, trials_, wall, *_) in rows.items():
        assert float(trials_) == pytest.approx(2 * float(seeds) * 2, abs=0.07)
        assert float(wall) == pytest.approx(float(trials_) * seconds / 60, abs=0.051)
    again = run_cli("plan", "cmp.yaml", "--from", str(folder), "--draws", "100", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _table(again.stdout.splitlines()) == rows
    assert spec.exists()
