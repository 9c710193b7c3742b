"""A scaling grid (``scaling:``): its YAML rules, and its answer recomputed by hand from
hand-built trial tables (the optimum, the exponent and its interval, the rules compared on
paired seeds, the pooled noise scale, the step confound), in both directions."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sst

from orchestrator import SpecError
from orchestrator.config.spec import validate
from orchestrator.report import scaling as sc

LRS = [0.0125 * 2 ** (k / 2) for k in range(11)]


def _spec(**change) -> dict:
    spec = {"name": "s", "sampler": {"name": "grid"}, "repeats": 3,
            "train": {"dataset": "digits", "epochs": 1, "optimizer": "sgd"},
            "space": {"batch_size": [32, 256], "lr": LRS[:5]},
            "scaling": {"metric": "val_loss"}}
    for key, value in change.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    return spec


def test_a_scaling_grid_validates_and_counts_every_cell_times_its_seeds():
    spec = validate(_spec())
    assert spec.trials == 2 * 5 * 3
    assert spec.scaling.metric == "val_loss" and spec.scaling.bootstrap == 2000


@pytest.mark.parametrize("change, expected", [
    ({"sampler": {"name": "tpe"}, "trials": 30},
     "scaling: needs sampler.name: grid (every batch size x lr x seed trained), got tpe; set "
     "sampler: {name: grid}"),
    ({"space": {"batch_size": [32], "lr": LRS[:5]}},
     "scaling: space.batch_size lists 1 distinct values, [32]; list at least 2"),
    ({"space": {"batch_size": [32, 256], "lr": LRS[:4]}},
     "scaling: space.lr lists 4 distinct values"),
    ({"space": {"batch_size": [32, 256], "lr": {"low": 0.01, "high": 0.1, "log": True}}},
     "space.lr: the grid sampler needs lists or options, not ranges"),  # the grid's own rule
    ({"space": {"lr": LRS[:5]}},
     "scaling: space.batch_size must be a list of values at the top of space, got nothing; "
     "e.g. space.batch_size: [32, 256]"),
    ({"space": {"batch_size": [32, 256], "lr": LRS[:5], "momentum": [0.8, 0.9]}},
     "scaling: space searches momentum besides batch_size and lr; fix it under train"),
    ({"repeats": 2}, "scaling: repeats must be at least 3 (the seeds the exponent's bootstrap "
                     "interval resamples), got 2"),
    ({"scaling": {"metric": "val_los"}}, "scaling.metric: the trainer logs no metric 'val_los'"),
    ({"scaling": {"metric": ""}}, "scaling.metric is empty, got ''; name an epoch metric (e.g. "
                                  "val_loss), or remove the key to read the curves in the "
                                  "objective's metric"),
    ({"scaling": {"metric": "  "}}, "scaling.metric is empty, got '  '"),
    ({"scaling": {"metric": "noise_scale"}},
     "scaling.metric: noise_scale is logged only when the noise scale is measured "
     "(train.noise_scale: true), got train.noise_scale: false; set train.noise_scale: true"),
    ({"scaling": {"metric": "noise_trace"},
      "train": {"dataset": "digits", "epochs": 1, "optimizer": "sgd", "noise_scale": False,
                "metrics": ["tests.trainers.test_seams:top2"]}},
     "scaling.metric: noise_trace is logged only when the noise scale is measured "
     "(train.noise_scale: true), got train.noise_scale: false; set train.noise_scale: true"),
    ({"space": {"batch_size": [64, 64, 128], "lr": LRS[:5]}},
     "space.batch_size lists 64 twice; keep one"),
    ({"space": {"batch_size": [32, 256], "lr": [LRS[0], *LRS[:5]]}},
     f"space.lr lists {LRS[0]} twice; keep one"),
    ({"scaling": {"bootstrap": 10}}, "scaling.bootstrap"),
    ({"scaling": {"metrc": "val_loss"}}, "scaling.metrc is not a known key (did you mean "
                                         "`metric`?)"),
])
def test_a_bad_scaling_grid_is_one_line_naming_the_field_the_value_and_the_fix(change,
                                                                              expected):
    with pytest.raises(SpecError) as e:
        validate(_spec(**change), source="s.yaml")
    assert len(e.value.lines) == 1, e.value.lines
    assert e.value.lines[0].startswith("s.yaml: ") and expected in e.value.lines[0]


@pytest.mark.parametrize("metric", ["noise_scale", "noise_trace", "noise_grad_sq"])
def test_a_noise_metric_is_a_scaling_metric_when_the_noise_scale_is_measured(metric):
    train = {"dataset": "digits", "epochs": 1, "optimizer": "sgd", "noise_scale": True}
    spec = validate(_spec(scaling={"metric": metric}, train=train))
    assert sc.scaling_metric(spec) == (metric, "maximize") and spec.warnings == ()
    # as it is an objective's (the same rule), and refused there for the same reason without
    assert validate(_spec(objective={"metric": metric}, train=train)).objective.metric == metric
    with pytest.raises(SpecError) as e:
        validate(_spec(objective={"metric": metric}), source="s.yaml")
    assert e.value.lines == [f"s.yaml: objective.metric: {metric} is logged only when the noise "
                             f"scale is measured (train.noise_scale: true), got "
                             f"train.noise_scale: false; set train.noise_scale: true"]


@pytest.mark.parametrize("scaling, expected", [
    ("{metric: ''}", "scaling.metric is empty, got ''"),
    ("{metric: noise_scale}", "scaling.metric: noise_scale is logged only when the noise scale "
                              "is measured (train.noise_scale: true), got train.noise_scale: "
                              "false; set train.noise_scale: true"),
])
def test_cli_validate_refuses_a_scaling_metric_no_trial_logs_with_exit_2(write_spec, capsys,
                                                                        scaling, expected):
    import yaml

    from orchestrator.commands.cli import main

    text = yaml.safe_dump(_spec(scaling=None)) + f"scaling: {scaling}\n"
    path = write_spec(text)
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"sweep: {path}: {expected}"), err
    assert main(["validate", str(path), "--set", "train.noise_scale=true"]) == \
        (2 if "empty" in expected else 0)


def test_the_direction_follows_the_metric_unless_given():
    spec = validate(_spec())
    assert sc.scaling_metric(spec) == ("val_loss", "minimize")
    spec = validate(_spec(scaling={"metric": "train_acc"}))
    assert sc.scaling_metric(spec) == ("train_acc", "maximize")
    spec = validate(_spec(scaling={"metric": "val_acc", "direction": "minimize"}))
    assert sc.scaling_metric(spec) == ("val_acc", "minimize")


# ----------------------------------------------------------------------- the answer by hand

def _vertex_by_hand(lrs, values, direction, window=2):
    """numpy's least-squares quadratic in log lr through the best grid point and ``window``
    neighbours each side (fewer at the grid's ends), its vertex within their span."""
    x, y = np.log(lrs), np.asarray(values, float)
    i = int(np.nanargmax(y) if direction == "maximize" else np.nanargmin(y))
    lo, hi = max(0, i - window), min(len(x), i + window + 1)
    xs, ys = x[lo:hi], y[lo:hi]
    xs, ys = xs[~np.isnan(ys)], ys[~np.isnan(ys)]
    a, b, _ = np.polyfit(xs, ys, 2)
    assert (a < 0) == (direction == "maximize")  # curved the right way: a vertex
    return float(np.exp(np.clip(-b / (2 * a), xs.min(), xs.max())))


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_optimum_is_the_vertex_of_the_quadratic_fitted_around_the_best(direction):
    sign = 1 if direction == "maximize" else -1
    rng = np.random.default_rng(1)
    for _ in range(20):
        peak = rng.uniform(np.log(LRS[2]), np.log(LRS[8]))
        values = sign * (1 - 0.3 * (np.log(LRS) - peak) ** 2) + rng.normal(0, 0.02, len(LRS))
        found, edge = sc.optimum(np.array(LRS), values, direction)
        assert not edge
        assert found == pytest.approx(_vertex_by_hand(LRS, values, direction), rel=1e-9)
    # a noiseless parabola: its vertex exactly, wherever between grid points
    values = sign * -(np.log(LRS) - np.log(0.06)) ** 2
    assert sc.optimum(np.array(LRS), values, direction)[0] == pytest.approx(0.06)
    # next to the grid's end the fit takes the points there are (4 here)
    values = sign * -(np.log(LRS) - np.log(LRS[1] * 0.95)) ** 2
    assert sc.optimum(np.array(LRS), values, direction) == \
        (pytest.approx(LRS[1] * 0.95), False)
    # a fit whose vertex falls past the window (steep on one side, flat on the other) is kept
    # at the window's last lr
    values = -sign * np.array([5, 5, 5, 1, 1, 0, 0.001, 0.002, 5, 5, 5])
    assert sc.optimum(np.array(LRS), values, direction) == (pytest.approx(LRS[7]), False)
    # an lr without a run is left out of the fit
    values = sign * (1 - 0.3 * (np.log(LRS) - np.log(0.06)) ** 2) + rng.normal(0, 0.02, 11)
    values[4] = math.nan
    assert sc.optimum(np.array(LRS), values, direction)[0] == \
        pytest.approx(_vertex_by_hand(LRS, values, direction), rel=1e-9)
    # the best at the grid's edge is not located
    assert sc.optimum(np.array(LRS), sign * np.arange(11.0), direction) == (LRS[-1], True)


def _grid_table(exponent: float, seeds: int, noise: float, direction: str,
                rng) -> pd.DataFrame:
    """A trial table of curves peaking at 0.05 (batch 32) x (b / 32) ** exponent, each seed's
    peak moved by noise (in log lr)."""
    sign = 1 if direction == "maximize" else -1
    rows, trial = [], 0
    for b in (32, 128, 256):
        for s in range(seeds):
            peak = np.log(0.05 * (b / 32) ** exponent) + rng.normal(0, noise)
            for lr in LRS:
                used = lr * math.sqrt(b / 32)  # lr_scaling sqrt from 32
                rows.append({"trial": trial, "state": "COMPLETE", "repeat": s,
                             "params.batch_size": b, "params.lr": lr,
                             "params.lr_effective": used,
                             "metrics.val_loss": 0.1 + 0.05 * (np.log(used) - peak) ** 2,
                             "metrics.val_acc": 0.9 - sign * 0.0 - 0.02 * (np.log(used) - peak)
                             ** 2})
                trial += 1
    return pd.DataFrame(rows)


@pytest.mark.parametrize("metric, direction", [("val_acc", "maximize"),
                                               ("val_loss", "minimize")])
def test_the_exponent_is_the_slope_through_the_optima_of_the_median_curves(metric, direction):
    rng = np.random.default_rng(2)
    trials = _grid_table(0.75, seeds=5, noise=0.15, direction=direction, rng=rng)
    table = sc.cells(trials, metric, direction)
    e = sc.exponent(table, metric, direction, resamples=400)
    # by hand: each batch's median curve over the seeds, numpy's quadratic, scipy's line
    optima = []
    for b in (32, 128, 256):
        mine = trials[trials["params.batch_size"] == b]
        median = mine.groupby("params.lr_effective")[f"metrics.{metric}"].median()
        optima.append(_vertex_by_hand(median.index.to_numpy(), median.to_numpy(), direction))
    slope = sst.linregress(np.log([32, 128, 256]), np.log(optima)).slope
    assert e.value == pytest.approx(slope, rel=1e-9)
    assert e.optimum == pytest.approx(dict(zip((32, 128, 256), optima)))
    assert e.ci_low < e.value < e.ci_high and e.ci_high - e.ci_low < 0.5
    assert e.ci_low < 0.75 < e.ci_high and e.seeds == 5 and e.resamples == 400
    # no seed-to-seed spread: the interval collapses onto the exponent
    still = sc.exponent(sc.cells(_grid_table(0.6, 3, 0.0, "minimize", rng), "val_loss",
                                 "minimize"), "val_loss", "minimize", resamples=200)
    assert still.value == pytest.approx(0.6)
    assert still.ci_low == pytest.approx(still.value) == pytest.approx(still.ci_high)
    assert still.rules() == "linear (1) and square root (0.5) outside"


@pytest.mark.parametrize("metric, direction, blown", [("val_acc", "maximize", 0.1),
                                                      ("val_loss", "minimize", 2.3)])
def test_a_blow_up_on_one_seed_moves_no_located_lr_by_a_grid_step(metric, direction, blown):
    """The shipped grid's shape (2 batch sizes x 11 lrs x 5 seeds), each seed's curve a bowl
    in log lr with noise; one run at a time blown up to chance (val_loss 2.3, val_acc 0.1),
    at each lr within two grid steps of the best: the located best lr moves by less than a
    grid step (a factor sqrt(2)). The best grid lr of the mean over seeds, refined by the
    parabola through it and its neighbours, moved by 1.3 steps here (one blow-up shifts the
    mean by a fifth of the jump)."""
    trials = _grid_table(0.5, seeds=5, noise=0.1, direction=direction,
                         rng=np.random.default_rng(8))
    trials = trials[trials["params.batch_size"] != 128].reset_index(drop=True)
    table = sc.cells(trials, metric, direction)
    before = sc.exponent(table, metric, direction, resamples=2).optimum
    step = math.log(math.sqrt(2))
    moved = {}
    for b in (32, 256):
        lrs = np.sort(table[table["batch"] == b]["lr"].unique())
        near = np.abs(np.log(lrs / before[b])) <= 2.5 * step  # the best and 2 each side
        for lr in lrs[near]:
            for seed in range(5):
                cell = (table["batch"] == b) & (table["lr"] == lr) & (table["seed"] == seed)
                after = sc.exponent(table.assign(value=table["value"].where(~cell, blown)),
                                    metric, direction, resamples=2).optimum
                moved[(b, lr, seed)] = abs(math.log(after[b] / before[b])) / step
    assert len(moved) == 2 * 5 * 5
    assert max(moved.values()) < 1, max(moved.items(), key=lambda kv: kv[1])
    assert max(moved.values()) > 0.01  # the blow-ups do reach the located lr


@pytest.mark.parametrize("metric, direction", [("val_acc", "maximize"),
                                               ("val_loss", "minimize")])
def test_a_diverged_run_counts_as_the_worst_value_of_the_grid(metric, direction):
    trials = _grid_table(1.0, 3, 0.1, direction, np.random.default_rng(3))
    trials.loc[5, "state"] = "FAIL"
    trials.loc[5, f"metrics.{metric}"] = math.nan
    trials.loc[7, f"metrics.{metric}"] = math.inf
    table = sc.cells(trials, metric, direction)
    finite = trials[f"metrics.{metric}"].drop([5, 7])
    worst = finite.min() if direction == "maximize" else finite.max()
    assert table.loc[5, "value"] == worst == table.loc[7, "value"]


def test_a_run_still_to_finish_is_no_cell_and_a_retried_failure_has_its_retrys_value():
    """Read while the grid runs: a trial waiting (no params yet) or running is left out, not
    counted as a failure; a cell whose run failed and whose retry completed has the retry's
    value."""
    trials = _grid_table(1.0, 3, 0.1, "minimize", np.random.default_rng(3))
    done = len(trials)
    waiting = {"trial": done, "state": "WAITING", "repeat": math.nan}
    running = {**trials.loc[4].to_dict(), "trial": done + 1, "state": "RUNNING",
               "repeat": 5, "metrics.val_loss": math.nan}
    failed = {**trials.loc[9].to_dict(), "trial": done + 2, "state": "FAIL",
              "metrics.val_loss": math.nan}
    trials = pd.concat([pd.DataFrame([failed]), trials, pd.DataFrame([waiting, running])],
                       ignore_index=True)
    table = sc.cells(trials, "val_loss", "minimize")
    assert len(table) == done and set(table["seed"]) == {0, 1, 2}
    cell = table[(table["batch"] == failed["params.batch_size"])
                 & (table["lr"] == failed["params.lr_effective"]) & (table["seed"] == 0)]
    assert cell["value"].tolist() == [trials.loc[10, "metrics.val_loss"]]  # the retry's


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_rules_are_compared_on_paired_seeds_at_the_largest_batch(direction):
    sign = 1 if direction == "maximize" else -1
    rng = np.random.default_rng(4)
    rows = []
    for b in (32, 256):
        for s in range(4):
            for lr in LRS:
                used = lr * math.sqrt(b / 32)
                good = -abs(np.log(used) - np.log(0.05 * (b / 32) ** 0.5))  # sqrt wins
                rows.append({"trial": len(rows), "state": "COMPLETE", "repeat": s,
                             "params.batch_size": b, "params.lr": lr,
                             "params.lr_effective": used,
                             "metrics.m": sign * (good + rng.normal(0, 0.05))})
    trials = pd.DataFrame(rows)
    table = sc.cells(trials, "m", direction)
    small, ref, large, lrs, r = sc.compare_rules(table, direction, None)
    at32 = trials[trials["params.batch_size"] == 32].groupby("params.lr")["metrics.m"].mean()
    expected_ref = at32.idxmax() if direction == "maximize" else at32.idxmin()
    assert (small, large) == (32, 256) and ref == expected_ref
    assert lrs == pytest.approx({"square root": ref * math.sqrt(8), "linear": ref * 8})

    def at(lr):
        cell = trials[(trials["params.batch_size"] == 256)
                      & np.isclose(trials["params.lr_effective"], lr)]
        return cell.set_index("repeat")["metrics.m"].sort_index().to_numpy()

    diff = at(lrs["linear"]) - at(lrs["square root"])  # b - a, levels in order
    assert (r.a, r.b) == ("linear", "square root") or (r.a, r.b) == ("square root", "linear")
    d = diff if (r.a, r.b) == ("square root", "linear") else -diff
    half = sst.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert r.diff == pytest.approx(d.mean()) and r.pairs == 4
    assert (r.ci_low, r.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert r.p == pytest.approx(sst.ttest_rel(at(lrs["square root"]), at(lrs["linear"])).pvalue
                                if (r.a, r.b) == ("linear", "square root") else
                                sst.ttest_rel(at(lrs["linear"]), at(lrs["square root"])).pvalue)
    assert r.winner == "square root"
    # a grid written rounded (0.0707 for 0.0125 x 2^2.5) still finds the rules' cells
    rounded = trials.assign(**{"params.lr_effective": trials["params.lr_effective"].round(4)})
    again = sc.compare_rules(sc.cells(rounded, "m", direction), direction, None)[-1]
    assert again is not None and again.pairs == 4
    # a rule's lr farther than 2% from every grid lr: no comparison
    off = trials.assign(**{"params.lr_effective": np.where(
        trials["params.batch_size"] == 256, trials["params.lr_effective"] * 1.05,
        trials["params.lr_effective"])})
    assert sc.compare_rules(sc.cells(off, "m", direction), direction, None)[-1] is None


def test_the_noise_scale_is_the_geometric_mean_over_seeds_with_a_t_interval_on_the_log():
    trials = _grid_table(0.5, 3, 0.1, "minimize", np.random.default_rng(5))
    rng = np.random.default_rng(6)
    trials["metrics.noise_trace"] = rng.uniform(50, 150, len(trials))
    trials["metrics.noise_grad_sq"] = rng.uniform(0.2, 1.0, len(trials))
    table = sc.cells(trials, "val_loss", "minimize")
    found = sc.noise_scales(trials, table, "minimize")
    for b in (32, 128, 256):
        mine = trials[trials["params.batch_size"] == b]
        best = mine.groupby("params.lr_effective")["metrics.val_loss"].mean().idxmin()
        cell = mine[np.isclose(mine["params.lr_effective"], best)]
        logs = np.log(cell["metrics.noise_trace"] / cell["metrics.noise_grad_sq"])
        low, high = sst.t.interval(0.95, len(logs) - 1, loc=logs.mean(), scale=sst.sem(logs))
        assert (found[b].value, found[b].ci_low, found[b].ci_high, found[b].runs) == \
            pytest.approx((np.exp(logs.mean()), np.exp(low), np.exp(high), 3))
        assert found[b].ci_low < found[b].value < found[b].ci_high


@pytest.mark.parametrize("trace, grad_sq", [(-35.03, 0.5), (80.0, -0.0007), (math.nan, 0.5)])
def test_a_run_without_a_positive_noise_scale_makes_its_batch_size_say_it_cannot_tell(
        trace, grad_sq):
    """One run of the best lr at batch 32 without a positive figure (the old estimator logged
    noise_scale -35.03): no number for batch 32, and the report says why."""
    trials = _grid_table(0.5, 3, 0.1, "minimize", np.random.default_rng(5))
    trials["metrics.noise_trace"] = 100.0
    trials["metrics.noise_grad_sq"] = 0.5
    table = sc.cells(trials, "val_loss", "minimize")
    best = sc.noise_scales(trials, table, "minimize")
    assert best[32].value == pytest.approx(200) and best[32].runs == 3
    at = trials.index[(trials["params.batch_size"] == 32) & np.isclose(
        trials["params.lr_effective"], table[table["batch"] == 32].groupby("lr")["value"]
        .mean().idxmin())][0]
    trials.loc[at, ["metrics.noise_trace", "metrics.noise_grad_sq"]] = [trace, grad_sq]
    found = sc.noise_scales(trials, table, "minimize")
    assert math.isnan(found[32].value)
    assert found[32].why == ("1 of its 3 runs logged no positive noise_trace and "
                             "noise_grad_sq at their last epoch")
    assert found[32].words(32) == f"cannot tell ({found[32].why})"
    assert found[256].value == pytest.approx(200)  # no spread: no interval
    assert "over 3 seed(s), no interval (cannot tell which side)" in found[256].words(256)
    # a failed run is no run: its batch size has the others'
    trials.loc[at, ["metrics.noise_trace", "metrics.noise_grad_sq", "state"]] = \
        [trace, grad_sq, "FAIL"]
    assert sc.noise_scales(trials, table, "minimize")[32].runs == 2


def test_the_sentences_say_the_step_confound_and_where_each_batch_lies_against_the_noise():
    e = sc.Exponent("val_loss", "minimize", {32: 0.05, 256: 0.2}, [], 0.667, 0.45, 0.88,
                    2000, 5)
    a = sc.ScalingAnswer([e], 32, 0.05, 256, None, {"square root": 0.141, "linear": 0.4},
                         {32: 270, 256: 36}, 6,
                         {32: sc.NoiseFigure(180.0, 120.0, 270.0, 5),
                          256: sc.NoiseFigure(150.0, 100.0, 225.0, 5),
                          64: sc.NoiseFigure(150.0, 60.0, 225.0, 5)})
    text = " ".join(sc.sentences(a, "val_acc", "maximize"))
    assert "batch_size^0.67 [0.45, 0.88]" in text
    assert "square root (0.5) inside it, linear (1) outside" in text
    assert "batch 256 takes 8x fewer optimizer steps than batch 32 (batch 32: 270, batch " \
           "256: 36)" in text and "equal_steps_batch_size: 32" in text
    assert "at the last epoch (6)" in text
    assert "batch 32: 180 [120, 270] over 5 seeds (below it: linear scaling expected to " \
           "hold)" in text
    assert "batch 64: 150 [60, 225] over 5 seeds (within its interval: cannot tell which " \
           "side)" in text
    assert "batch 256: 150 [100, 225] over 5 seeds (above it: diminishing returns" in text
    edge = sc.Exponent("val_loss", "minimize", {32: 0.4, 256: 0.2}, [32], math.nan, math.nan,
                       math.nan, 0, 5)
    assert "not located at batch 32: it lies on the edge" in sc._exponent_sentence(edge)


def test_the_interval_is_t_times_the_sd_of_exponents_from_median_curves_of_drawn_seeds():
    """A resample's optima come from the median curve over the seeds drawn (one drawn twice
    counts twice, a missing run is left out of its lr's median), as pandas gives it, and the
    interval is the exponent plus and minus t(0.975, seeds - 1) times the resampled exponents'
    standard deviation; the grid is pivoted once, not once per resample: 2000 resamples of the
    shipped grid's size (2 batch sizes x 11 lrs x 5 seeds) took 13 CPU-seconds a metric at the
    end of sweep run that way."""
    import time

    trials = _grid_table(0.5, seeds=5, noise=0.2, direction="minimize",
                         rng=np.random.default_rng(3))
    trials = trials[trials["params.batch_size"] != 128]  # the shipped grid's two sizes
    trials = trials.drop(trials.index[[3, 40]])  # two runs missing
    table = sc.cells(trials, "val_loss", "minimize")
    # by hand: exponent's draws (its generator, seed 0), each batch's median curve by pandas
    seeds, draws, slopes = sorted(table["seed"].unique()), np.random.default_rng(0), []
    by_seed = {b: table[table["batch"] == b].pivot_table(index="seed", columns="lr",
                                                         values="value") for b in (32, 256)}
    for _ in range(50):
        drawn = list(draws.choice(seeds, size=len(seeds), replace=True))
        optima = []
        for b in (32, 256):
            median = by_seed[b].loc[drawn].median(axis=0)
            optima.append(_vertex_by_hand(median.index.to_numpy(float),
                                          median.to_numpy(float), "minimize"))
        slopes.append(sst.linregress(np.log([32, 256]), np.log(optima)).slope)
    e = sc.exponent(table, "val_loss", "minimize", resamples=50)
    assert len(set(slopes)) > 10  # the draws move the optima
    # the interval: the exponent plus and minus scipy's t(0.975, 4) times their sd
    half = sst.t.ppf(0.975, len(seeds) - 1) * np.std(slopes, ddof=1)
    assert [e.ci_low, e.ci_high] == pytest.approx([e.value - half, e.value + half], rel=1e-9)
    cpu = time.process_time()
    sc.exponent(table, "val_loss", "minimize", resamples=2000)
    assert time.process_time() - cpu < 3


# ------------------------------------------------ where the located optimum falls back to a grid lr

def _around_the_best(**values) -> np.ndarray:
    """A minimised curve over LRS: index -> value as given (NaN: no run), 9 elsewhere, so
    the best is at index 5 and only the indices given are near it."""
    curve = np.full(len(LRS), 9.0)
    for k, v in values.items():
        curve[int(k[1:])] = v
    return curve


def test_a_concave_fit_or_too_few_points_gives_the_best_grid_lr():
    # a W around the best: the least-squares quadratic is concave (no minimum): the grid lr
    w = _around_the_best(i3=0.1, i4=0.5, i5=0.05, i6=0.5, i7=0.2)
    x = np.log(LRS[3:8]) - np.log(LRS[5])
    assert np.polyfit(x, w[3:8], 2)[0] < 0
    assert sc.optimum(np.array(LRS), w, "minimize") == (LRS[5], False)
    assert sc.optimum(np.array(LRS), -w, "maximize") == (LRS[5], False)
    # two points with a value within the window: no quadratic through them
    two = _around_the_best(i3=math.nan, i4=math.nan, i5=0.3, i6=0.4, i7=math.nan)
    assert sc.optimum(np.array(LRS), two, "minimize") == (LRS[5], False)


def test_a_vertex_beyond_the_points_fitted_is_held_at_their_end():
    """The best (index 5) and the two lrs above it, none below: the parabola through them
    (0.30, 0.32, 0.36) has its vertex half a grid step below the best, outside the points it
    was fitted to, so the located lr is the best grid lr itself."""
    curve = _around_the_best(i3=math.nan, i4=math.nan, i5=0.30, i6=0.32, i7=0.36)
    h = math.log(LRS[6] / LRS[5])
    a, b, _ = np.polyfit(np.log(LRS[5:8]) - np.log(LRS[5]), curve[5:8], 2)
    assert -b / (2 * a) == pytest.approx(-h / 2)
    assert sc.optimum(np.array(LRS), curve, "minimize") == (pytest.approx(LRS[5]), False)


def test_an_optimum_on_the_grids_edge_leaves_the_exponent_unsaid():
    """Batch 256's curve peaks beyond the largest lr of the grid: its optimum is that lr, on
    the edge, and the exponent and its interval are NaN (a slope through it would be
    bounded by the grid, not measured)."""
    trials = _grid_table(1.6, 3, 0.0, "minimize", np.random.default_rng(5))
    e = sc.exponent(sc.cells(trials, "val_loss", "minimize"), "val_loss", "minimize",
                    resamples=50)
    assert e.edge == [256]
    assert e.optimum[256] == pytest.approx(LRS[-1] * math.sqrt(8))
    assert math.isnan(e.value) and math.isnan(e.ci_low) and math.isnan(e.ci_high)


def test_a_failed_run_counts_as_the_worst_value_even_with_a_good_metric_logged():
    """A run that failed after logging an epoch keeps that epoch's metric in MLflow: the cell
    is still its grid's worst value, not the last value it logged."""
    trials = _grid_table(1.0, 3, 0.1, "minimize", np.random.default_rng(3))
    best = trials["metrics.val_loss"].idxmin()
    trials.loc[best, "state"] = "FAIL"
    table = sc.cells(trials, "val_loss", "minimize")
    assert table.loc[best, "value"] == trials["metrics.val_loss"].max()


def test_the_rules_are_compared_at_the_largest_of_three_batch_sizes():
    trials = _grid_table(1.0, 4, 0.05, "minimize", np.random.default_rng(6))
    small, ref, large, lrs, _ = sc.compare_rules(sc.cells(trials, "val_loss", "minimize"),
                                                 "minimize", None)
    assert (small, large) == (32, 256)
    assert lrs == pytest.approx({"square root": ref * math.sqrt(8), "linear": ref * 8})


def test_a_batch_sizes_optimizer_steps_are_the_most_any_of_its_runs_took():
    from orchestrator.report.load import SweepData

    trials = pd.DataFrame({"trial": [0, 1, 2], "params.batch_size": [32, 32, 256]})
    # trial 1 stopped early (patience) after trial 0 took every step; trial 7 is not a run
    # of the table (its row not read yet)
    lr = pd.DataFrame({"trial": [0, 0, 1, 2, 2, 7], "step": [1, 270, 135, 1, 36, 999]})
    data = SweepData(validate(_spec()), "s", trials, pd.DataFrame(), lr, None)
    assert sc.optimizer_steps(data) == {32: 270, 256: 36}


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_rules_compared_directly_are_said_in_the_answers_voice(direction):
    """The rules' pair in the comparison's words (an accuracy's difference in points, rounded
    to its interval, its p as ``p = 0.012``), checked against scipy's paired t-test."""
    from scipy import stats as scipy_stats

    from orchestrator.answer.stats import compare_paired

    linear = [0.88, 0.885, 0.90, 0.89, 0.892]
    sqrt_ = [0.90, 0.89, 0.918, 0.90, 0.914]  # linear + [2, 0.5, 1.8, 1, 2.2] points
    [r] = compare_paired({"square root": dict(enumerate(sqrt_)),
                          "linear": dict(enumerate(linear))},
                         factor="lr rule", direction=direction, bounds=(0.0, 1.0))
    a = sc.ScalingAnswer([], 32, 0.05, 256, r, {"square root": 0.141, "linear": 0.4}, {}, 6, {})
    text = sc.sentences(a, "val_acc", direction)[0]
    d = np.subtract(sqrt_, linear)  # the lead of the higher level, in [0, 1]
    half = 100 * scipy_stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    digits = 1 - math.floor(math.log10(half))
    p = scipy_stats.ttest_rel(sqrt_, linear).pvalue
    assert 0.001 < p < 0.05  # the premise: better, its p written to 2 significant digits
    assert text.startswith("The rules compared directly at batch 256 from the best grid lr at "
                           "batch 32 (0.05), square root at lr 0.141 and linear at lr 0.4: ")
    winner, loser = ("square root", "linear") if direction == "maximize" else \
        ("linear", "square root")  # a lower value is better: linear leads
    assert text.endswith(
        f": {winner} better than {loser} by {100 * d.mean():.{digits}f} points "
        f"[{100 * d.mean() - half:.{digits}f}, {100 * d.mean() + half:.{digits}f}] (95% t "
        f"interval) over 5 paired seeds; Holm p = {p:.2g}.")
    assert "e-" not in text and "+-" not in text
