"""The report's statistics on a batch-size x lr-scaling grid, checked against pandas/scipy by hand:
numeric levels in numeric order, every pair of a 3-level setting with Holm and Friedman, and batch
64 under every scaling rule (reference batch 64: one configuration) counted once; a comparison's
time to target and lr ranges in both directions. Pure functions on hand-made tables: fast tier."""
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

BATCHES, RULES, REPEATS = [32, 64, 128], ["linear", "none", "sqrt"], 3


@pytest.fixture(scope="module")
def grid() -> pd.DataFrame:
    """Complete trials as the report's trial table holds them: every setting a param, and the
    learning rate after scaling; batch 64 trains alike under both rules (same value)."""
    rng = np.random.default_rng(8)
    seed_effect = rng.normal(0, 0.01, REPEATS)
    rows, number = [], 0
    for repeat in range(REPEATS):
        at_64 = 0.9 + seed_effect[repeat] + rng.normal(0, 0.003)
        for batch in BATCHES:
            for rule in RULES:
                scale = {"linear": batch / 64, "sqrt": math.sqrt(batch / 64), "none": 1.0}[rule]
                value = at_64 if batch == 64 else \
                    0.9 + seed_effect[repeat] - 0.02 * abs(math.log2(batch / 64)) * \
                    {"linear": 0.3, "sqrt": 0.6, "none": 1.0}[rule] + rng.normal(0, 0.003)
                rows.append({"trial": number, "state": "COMPLETE", "value": value,
                             "repeat": repeat, "params.batch_size": batch,
                             "params.lr_scaling": rule, "params.lr": 0.05,
                             "params.reference_batch_size": 64, "params.seed": 7 + repeat,
                             "params.lr_effective": 0.05 * scale})
                number += 1
    return pd.DataFrame(rows)


def test_levels_sort_as_numbers_and_a_repeated_configuration_counts_once(grid):
    from orchestrator.report import factor_table

    table = factor_table(grid, ["batch_size", "lr_scaling"])
    batch = table[table["factor"] == "batch_size"]
    assert list(batch["level"]) == ["32", "64", "128"]
    assert list(batch["n"]) == [9, 3, 9]  # batch 64: one configuration per repeat
    at_64 = grid[grid["params.batch_size"] == 64].drop_duplicates("repeat")["value"]
    assert batch.iloc[1]["mean"] == pytest.approx(at_64.mean())
    rules = table[table["factor"] == "lr_scaling"]
    assert list(rules["n"]) == [9, 9, 9]  # batch 64 is a member of each rule's level


def test_every_pair_of_three_levels_with_holm_and_friedman(grid):
    from orchestrator.report import paired_differences

    paired = paired_differences(grid, ["batch_size", "lr_scaling"], direction="maximize")
    rows = paired[paired["factor"] == "batch_size"]
    assert list(zip(rows["a"], rows["b"])) == [("32", "64"), ("32", "128"), ("64", "128")]
    wide = grid.pivot_table(index=["params.lr_scaling", "repeat"], columns="params.batch_size",
                            values="value")
    raw = [stats.ttest_rel(wide[b], wide[a]).pvalue for a, b in [(32, 64), (32, 128), (64, 128)]]
    order = np.argsort(raw)
    holm, running = np.empty(3), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (3 - rank) * raw[i]))
        holm[i] = running
    assert list(rows["pairs"]) == [9, 9, 9]
    assert list(rows["mean_diff_b_minus_a"]) == pytest.approx(
        [(wide[64] - wide[32]).mean(), (wide[128] - wide[32]).mean(),
         (wide[128] - wide[64]).mean()])
    assert list(rows["t_test_p"]) == pytest.approx(raw)
    assert list(rows["p_holm"]) == pytest.approx(list(holm))
    friedman = stats.friedmanchisquare(wide[32], wide[64], wide[128]).pvalue
    assert list(rows["friedman_p"]) == pytest.approx([friedman] * 3)
    for _, r in rows.iterrows():
        named = r["verdict"].endswith(" better")
        assert named == (r["p_holm"] < 0.05 and (r["ci_low"] > 0 or r["ci_high"] < 0))


def test_a_pair_or_block_that_ran_the_same_configuration_is_not_counted(grid):
    from orchestrator.report import paired_differences

    paired = paired_differences(grid, ["batch_size", "lr_scaling"], direction="maximize")
    rows = paired[paired["factor"] == "lr_scaling"].to_dict("records")
    assert [(r["a"], r["b"]) for r in rows] == [("linear", "none"), ("linear", "sqrt"),
                                                ("none", "sqrt")]
    row = rows[0]
    differ = grid[grid["params.batch_size"] != 64]
    wide = differ.pivot_table(index=["params.batch_size", "repeat"],
                              columns="params.lr_scaling", values="value")
    assert row["pairs"] == 6  # not 9: batch 64 is the same run under both rules
    assert row["mean_diff_b_minus_a"] == pytest.approx((wide["none"] - wide["linear"]).mean())
    assert row["t_test_p"] == pytest.approx(stats.ttest_rel(wide["none"], wide["linear"]).pvalue)
    # batch 64, a block tied across the rules, is no evidence that the rules are alike
    friedman = stats.friedmanchisquare(wide["linear"], wide["none"], wide["sqrt"]).pvalue
    assert row["friedman_p"] == pytest.approx(friedman)


def test_a_setting_some_runs_did_not_log_still_names_their_configurations():
    # a param missing on some runs (an option's own setting, a comparison's repeat) is NaN there
    from orchestrator.report.stats import configuration_ids

    trials = pd.DataFrame({"params.optimizer": ["sgd", "adam", "adam"],
                           "params.momentum": [0.9, None, None], "params.lr": [0.1, 0.01, 0.01]})
    ids = configuration_ids(trials)
    assert ids.tolist() == ["0.1|0.9|sgd", "0.01|nan|adam", "0.01|nan|adam"]
    assert ids.nunique() == 2  # the two adam runs are one configuration


def test_a_setting_is_summarised_over_the_trials_that_searched_it_only():
    """SGD's momentum is not a setting of Adam's trials: they are not in its rows, even when
    their runs carry a momentum param."""
    from orchestrator.report import factor_table

    rows = []
    for i, (opt, momentum, value) in enumerate([("sgd", 0.9, 0.8), ("sgd", 0.9, 0.84),
                                                ("adam", 0.9, 0.95), ("adam", 0.9, 0.97),
                                                ("sgd", 0.8, 0.7), ("sgd", 0.8, 0.72)]):
        rows.append({"trial": i, "state": "COMPLETE", "value": value, "repeat": i % 2,
                     "params.optimizer": opt, "params.momentum": momentum,
                     "searched": "optimizer,momentum" if opt == "sgd" else "optimizer"})
    table = factor_table(pd.DataFrame(rows), ["optimizer", "momentum"])
    momentum = table[table["factor"] == "momentum"].set_index("level")
    assert momentum.loc["0.9", "n"] == 2 and momentum.loc["0.9", "mean"] == pytest.approx(0.82)


def test_a_ranged_setting_is_a_trend_with_an_interval_never_a_row_per_value():
    from orchestrator.report import factor_table
    from orchestrator.report.stats import trend_table

    rng = np.random.default_rng(5)
    lr = 10 ** rng.uniform(-4, -1, 12)
    value = 0.5 + 0.1 * np.log10(lr) + rng.normal(0, 0.05, 12)
    trials = pd.DataFrame({"trial": range(12), "state": "COMPLETE", "value": value,
                           "repeat": 0, "params.lr": lr, "searched": "lr"})
    assert factor_table(trials, ["lr"], ranges={"lr"}).empty
    [row] = trend_table(trials, ["lr"], {"lr"}).to_dict("records")
    rho = stats.spearmanr(lr, value).statistic
    z, se = np.arctanh(rho), np.sqrt(1.06 / 9)
    assert row["spearman_rho"] == pytest.approx(rho) and row["n"] == 12
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        (np.tanh(z - 1.96 * se), np.tanh(z + 1.96 * se)))


@pytest.mark.parametrize("sign", [1, -1])
def test_the_trend_of_tied_values_is_spearmans_rho_of_average_ranks(sign):
    """Ties in the setting (a log grid read back) and in the objective (accuracies in steps of
    1/360): scipy's spearmanr, average ranks, in both directions of the trend."""
    from orchestrator.report.stats import trend_table

    lr = np.array([1e-3, 1e-3, 3e-3, 3e-3, 3e-3, 1e-2, 1e-2, 3e-2, 3e-2, 0.1])
    value = np.round(0.5 + sign * 0.08 * np.log10(lr) + np.tile([0.02, -0.01], 5) * 3, 2)
    value[2] = value[7]
    trials = pd.DataFrame({"trial": range(10), "state": "COMPLETE", "value": value,
                           "repeat": 0, "params.lr": lr, "searched": "lr"})
    [row] = trend_table(trials, ["lr"], {"lr"}).to_dict("records")
    rho = stats.spearmanr(lr, value).statistic
    assert np.sign(rho) == sign and row["n"] == 10
    assert row["spearman_rho"] == pytest.approx(rho, abs=1e-12)


def test_the_statistics_of_a_report_without_a_comparison_leave_scipy_stats_unimported():
    """A level's t interval, a range's trend and a scaling exponent in a fresh interpreter:
    ``scipy.stats`` (about 0.2 s of each ``sweep report``) stays unimported; only a comparison's
    Wilcoxon and Friedman tests need it."""
    from tests.conftest import ROOT

    code = """
import sys
import numpy as np, pandas as pd
from orchestrator.report import factor_table
from orchestrator.report.comparison import scaling_exponent
from orchestrator.report.stats import trend_table
rng = np.random.default_rng(3)
lr = 10 ** rng.uniform(-4, -1, 8)
trials = pd.DataFrame({"trial": range(8), "state": "COMPLETE", "value": rng.random(8),
                       "repeat": 0, "params.lr": lr, "params.optimizer": ["adam", "sgd"] * 4,
                       "searched": "lr,optimizer"})
table = factor_table(trials, ["optimizer"])
trend = trend_table(trials, ["lr"], {"lr"})
slope = scaling_exponent(np.array([32, 32, 64, 64, 128.0]), np.array([.01, .012, .02, .019, .04]))
assert table["ci_low"].notna().all() and trend["ci_low"].notna().all(), (table, trend)
assert np.isfinite([slope.ci_low, slope.ci_high]).all(), slope
print(sorted(m for m in sys.modules if m == "scipy.stats" or m.startswith("scipy.stats.")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_level_mean_interval_stays_inside_the_metric_range():
    from orchestrator.report import factor_table

    trials = pd.DataFrame({"trial": range(3), "state": "COMPLETE", "value": [0.99, 1.0, 0.97],
                           "repeat": [0, 1, 2], "params.opt": "a", "searched": "opt"})
    [row] = factor_table(trials, ["opt"], bounds=(0.0, 1.0)).to_dict("records")
    assert row["ci_high"] == 1.0 and row["ci_low"] < row["mean"] < 1.0


def test_the_export_table_reads_the_figures_tag_and_an_older_stores_metrics():
    import json

    from orchestrator.core import keys
    from orchestrator.report import export_table

    figures = {"onnx": {"passed": 1.0, "max_abs_diff": 2e-6, "top1_agreement": 1.0,
                        "accuracy_delta": 0.0, "ms_per_image_b1": 0.3},
               "eager": {"ms_per_image_b1": 0.5}}  # no parity: not a row
    trials = pd.DataFrame([
        {"trial": 0, f"tags.{keys.EXPORT_FIGURES}": json.dumps(figures),
         "metrics.export_int8_passed": math.nan},
        {"trial": 1, f"tags.{keys.EXPORT_FIGURES}": math.nan,  # written before the tag
         "metrics.export_int8_passed": 0.0, "metrics.export_int8_top1_agreement": 0.9},
        {"trial": 2, f"tags.{keys.EXPORT_FIGURES}": math.nan,
         "metrics.export_int8_passed": math.nan}])  # not exported
    table = export_table(trials)
    assert table[["trial", "format", "parity"]].values.tolist() == [[0, "onnx", "passed"],
                                                                   [1, "int8", "FAILED"]]
    assert table["top1_agreement"].tolist() == [1.0, 0.9]
    assert table["ms_per_image_b1"].iloc[0] == 0.3 and math.isnan(table["max_abs_diff"].iloc[1])


def test_a_level_without_spread_gets_no_interval():
    from orchestrator.report import factor_table

    trials = pd.DataFrame({"trial": range(2), "state": "COMPLETE", "value": [0.98, 0.98],
                           "repeat": [0, 1], "params.opt": "a", "searched": "opt"})
    [row] = factor_table(trials, ["opt"], bounds=(0.0, 1.0)).to_dict("records")
    assert row["std"] == 0 and np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])


# ------------------------------------------- a comparison's pure statistics (report/comparison.py)

# epoch at which each confirmation seed first reaches val_acc 0.9 (None: never, in 6 epochs)
REACH = {"adam": [2, 2, 3, 2, 3, 2], "sgd": [4, 5, 5, 4, 6, None]}
EPOCHS, TARGET = 6, 0.9
EPOCH_SECONDS = {"adam": 3.0, "sgd": 1.25}  # adam's epochs are slower, per epoch + 0.5 * epoch


def _reach_sweep(direction: str):
    """A finished comparison's tables as the report reads them (no stores): confirmation trials
    whose accuracy crosses TARGET at the epochs of REACH; minimizing, the metric is
    val_loss = 1 - val_acc and the target 1 - TARGET."""
    from orchestrator.config.spec import validate
    from orchestrator.report import SweepData

    metric = "val_acc" if direction == "maximize" else "val_loss"
    as_metric = (lambda v: v) if direction == "maximize" else (lambda v: round(1 - v, 6))
    block = {"factor": "optimizer", "tune_trials": 1, "seeds": 3, "max_seeds": 6,
             "target": as_metric(TARGET)}
    spec = validate({"name": "reach", "objective": {"metric": metric, "direction": direction},
                     "sampler": {"name": "random", "seed": 0}, "seed": 0, "compare": block,
                     "train": {"dataset": "digits", "model": "small_cnn", "epochs": EPOCHS},
                     "space": {"optimizer": ["adam", "sgd"]}}, "test")
    trials, curves = [], []
    for level, epochs in REACH.items():
        for seed, at in enumerate(epochs, start=1):
            number = len(trials)
            # below the target by 5 to 15 points before `at`, above it by 2 to 6 from `at` on
            acc = [TARGET - 0.15 + 0.02 * e if at is None or e < at else
                   TARGET + 0.02 + 0.01 * (e - at) for e in range(1, EPOCHS + 1)]
            trials.append({"trial": number, "state": "COMPLETE", "phase": "confirm",
                           "level": level, "seed": seed, "value": as_metric(acc[-1]),
                           "searched": "optimizer", "params.optimizer": level})
            for e, v in enumerate(acc, start=1):
                curves += [{"trial": number, "metric": metric, "epoch": e,
                            "value": as_metric(v)},
                           {"trial": number, "metric": "epoch_seconds", "epoch": e,
                            "value": EPOCH_SECONDS[level] + 0.5 * e}]
    return SweepData(spec, "reach", pd.DataFrame(trials), pd.DataFrame(curves),
                     pd.DataFrame(columns=["trial", "step", "lr"]), None, compare=block)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_time_to_target_names_the_level_that_reaches_it_in_fewer_epochs_in_both_directions(
        direction):
    """Fewer epochs to the target is faster whichever way the objective goes: adam reaches
    val_acc 0.9 (val_loss 0.1) 2 to 3 epochs before sgd on every seed, and sgd never on one
    (its worst outcome), so adam is faster, by the paired t interval computed here."""
    from orchestrator.answer.stats import BETTER
    from orchestrator.report import compare

    c = compare(_reach_sweep(direction))
    by_hand = {lv: [math.nan if at is None else float(at) for at in ats]
               for lv, ats in REACH.items()}
    got = c.reach.groupby("level")["epochs"].apply(list).to_dict()
    assert {lv: pytest.approx(v, nan_ok=True) for lv, v in by_hand.items()} == got
    seconds = [sum(EPOCH_SECONDS[lv] + 0.5 * e for e in range(1, at + 1)) if at else math.nan
               for lv, ats in REACH.items() for at in ats]
    assert c.reach["seconds"].tolist() == pytest.approx(seconds, nan_ok=True)
    # sgd - adam over the seeds both reached it; sgd's sixth seed never did
    diff = np.array([b - a for a, b in zip(REACH["adam"], REACH["sgd"]) if b is not None], float)
    low, high = stats.t.interval(0.95, len(diff) - 1, loc=diff.mean(), scale=stats.sem(diff))
    p = stats.ttest_1samp(diff, 0.0).pvalue
    assert p < 0.05 and low > 0  # the test's premise: decided for adam
    [r] = c.reach_results
    assert (r.a, r.b, r.verdict, r.winner, r.nonfinite_a, r.nonfinite_b) == \
        ("adam", "sgd", BETTER, "adam", 0, 1)
    assert (r.diff, r.ci_low, r.ci_high, r.p) == pytest.approx((diff.mean(), low, high, p))
    [said] = [s for s in c.sentences if s.startswith("Epochs to reach")]
    metric = "val_acc" if direction == "maximize" else "val_loss"
    # every figure to 2 significant digits of its interval's half-width, as the answer writes it
    digits = max(0, 1 - math.floor(math.log10((high - low) / 2)))
    assert said.startswith(f"Epochs to reach {metric} {c.target:g}, compared over the paired "
                           f"seeds: adam is faster than sgd by {diff.mean():.{digits}f} ")
    assert f"[{low:.{digits}f}, {high:.{digits}f}] (95% t interval)" in said and \
        "sgd is faster" not in said


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_an_lr_range_is_the_run_of_neighbours_within_the_tolerance_of_the_best(direction):
    """A level's learning rates in any order: the best in the objective's direction, and the
    unbroken run of lrs around it whose value is at most the tolerance behind it (1 point of
    an accuracy, 1% of another metric's best), computed here with pandas."""
    from orchestrator.report.comparison import lr_sensitivity

    lr = np.array([3e-2, 1e-4, 3e-3, 1e-3, 1e-2, 3e-4, 1e-1, 3e-1])
    # as val_acc: best 0.96 at 3e-3; 0.953 and 0.951 within a point; 0.955 at 1e-1 is within
    # too but cut off from the best by 0.93 at 3e-2
    acc = np.array([0.93, 0.90, 0.96, 0.953, 0.951, 0.945, 0.955, 0.5])
    for metric, value, tolerance in (("val_acc", acc, 0.01),
                                     ("val_loss", 0.4 + 0.4 * (0.96 - acc), None)):
        if direction == "minimize" and metric == "val_acc":
            value = 1 - value  # an error rate in [0, 1]: lower is better, one point apart
        if direction == "maximize" and metric == "val_loss":
            value = -value
        frame = pd.DataFrame({"lr": lr, "value": value}).sort_values("lr").reset_index(drop=True)
        behind = frame["value"].max() - frame["value"] if direction == "maximize" else \
            frame["value"] - frame["value"].min()
        best = int(behind.idxmin())
        tol = tolerance if tolerance is not None else 0.01 * abs(frame["value"][best])
        run = (behind > tol).cumsum()  # runs of good lrs share a count with the bad lr before
        good = frame[(behind <= tol) & (run == run[best])]
        s = lr_sensitivity("adam", lr, value, direction, metric)
        assert (s.best_lr, s.best_value) == pytest.approx((frame["lr"][best],
                                                           frame["value"][best]))
        assert (s.low, s.high, s.within, s.trials) == pytest.approx(
            (good["lr"].min(), good["lr"].max(), len(good), len(lr)))
        assert s.tolerance == pytest.approx(tol)
        assert s.best_lr == 3e-3 and 1 < s.within < len(lr) - 2  # the premise: a real range
