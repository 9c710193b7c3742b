"""The reports of the shipped sweeps read line by line against the MLflow runs and the Optuna
study: every number recomputed here (pandas, scipy), no row of 0 pairs, no row per float, no
interval outside the metric's range, no setting attributed to trials that did not train it."""
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from orchestrator.core import keys
from tests.conftest import SWEEPS, Stores, run_cli

pytestmark = pytest.mark.slow  # end to end: a real comparison reported


def _runs(stores: Stores, name: str) -> pd.DataFrame:
    """A row per trial run: its Optuna number, params as MLflow holds them, val_acc (last),
    phase, level and seed tags, and the epochs it logged."""
    client = stores.client()
    rows = []
    for r in stores.runs(name, "trial"):
        history = client.get_metric_history(r.info.run_id, "val_acc")
        rows.append({"trial": int(r.data.tags[keys.TRIAL_NUMBER]), "run_id": r.info.run_id,
                     "value": r.data.metrics.get("val_acc"), "epochs": len(history),
                     "phase": r.data.tags.get(keys.PHASE), "level": r.data.tags.get(keys.LEVEL),
                     "seed": int(r.data.tags[keys.SEED]), "val_items": r.data.metrics.get(
                         keys.VAL_ITEMS), **{f"params.{k}": v for k, v in r.data.params.items()}})
    return pd.DataFrame(rows).sort_values("trial").reset_index(drop=True)


def _intervals(md: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"\[(-?[\d.e+-]+), (-?[\d.e+-]+)\]", md)]


def test_the_quickstart_report_holds_up_line_by_line(quickstart_once, tmp_path):
    stores, _ = quickstart_once
    rep = run_cli("report", "quickstart", "--out", str(tmp_path / "rep"), cwd=stores.dir)
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    study = stores.study("quickstart")
    runs = _runs(stores, "quickstart")
    searched = {t.number: {n.split(".")[-1] for n in t.params} for t in study.trials}
    done = {t.number for t in study.trials if t.state.name == "COMPLETE"}
    # no row of 0 pairs, no "insufficient" rows
    assert "0 pairs" not in md and "insufficient" not in md
    # the ranged settings (lr, warmup_epochs) are trends, never a row per value
    per_level = md.split("## Objective per level")[1].split("## ")[0] \
        if "## Objective per level" in md else ""
    for ranged in ("lr", "warmup_epochs"):
        assert f"| {ranged} |" not in per_level
    trend = md.split("## Trends of ranged settings")[1].split("## ")[0]
    assert "| lr |" in trend and "Spearman" in trend
    # each level row recomputed by hand over the complete trials that searched the setting
    rows = [line.split("|")[1:-1] for line in per_level.splitlines()
            if line.startswith("| ") and not line.startswith("| setting")]
    assert rows, per_level
    for cells in rows:
        setting, level, mean, _, low, high, n = (c.strip() for c in cells)
        mine = runs[runs["trial"].isin(done) & runs["trial"].map(
            lambda t, s=setting: s in searched[t])]
        mine = mine[mine[f"params.{setting}"].astype(str) == level]
        assert int(n) == len(mine), (setting, level)
        assert float(mean) == pytest.approx(mine["value"].mean(), rel=1e-3)
        if low != "-":
            assert 0.0 <= float(low) <= float(high) <= 1.0  # inside val_acc's range
    # momentum belongs to SGD's sub-space: counted over SGD's trials only
    for cells in rows:
        if cells[0].strip() == "momentum":
            sgd = runs[runs["params.optimizer"] == "sgd"]
            assert int(cells[-1]) <= len(sgd[sgd["trial"].isin(done)])
    # the headline's configuration names only settings its trial searched
    best = study.best_trial
    head = md.splitlines()[2]
    assert f"trial {best.number}" in head
    if best.params.get("optimizer") == "adam":
        assert "momentum" not in head
    for low, high in _intervals(md):
        assert -1.0 <= low <= high <= 1.0


@pytest.fixture(scope="module")
def adam_vs_sgd(tmp_path_factory):
    """sweeps/adam_vs_sgd.yaml, shortened (2 tuning trials a level, 2 epochs of the perceptron,
    3 to 5 seeds), run and reported. (The report reads the same from any model; the CNN's
    epochs would cost several times the CPU.)"""
    d = tmp_path_factory.mktemp("adam-vs-sgd")
    ran = run_cli("run", str(SWEEPS / "adam_vs_sgd.yaml"), "--set", "compare.tune_trials=2",
                  "--set", "train.epochs=2", "--set", "train.model=mlp",
                  "--set", "compare.seeds=3", "--set", "compare.max_seeds=5",
                  # one worker: the report is read against the runs whatever order they ended
                  # in; a second worker would only start torch again
                  "--workers", "1", cwd=d)
    assert ran.returncode == 0, ran.stderr
    rep = run_cli("report", "adam-vs-sgd", "--out", "rep", cwd=d)
    assert rep.returncode == 0, rep.stderr
    return Stores(d), d / "rep", ran, rep


def test_the_adam_vs_sgd_report_holds_up_against_the_runs(adam_vs_sgd):
    from orchestrator.answer.stats import boundary_alpha

    stores, out, ran, rep = adam_vs_sgd
    runs = _runs(stores, "adam-vs-sgd")
    confirm = runs[runs["phase"] == "confirm"]
    wide = confirm.pivot(index="seed", columns="level", values="value")
    table = pd.read_csv(out / "comparison.csv")
    [row] = table.to_dict("records")
    assert (row["a"], row["b"]) == ("adam", "sgd")
    diff = (wide["sgd"] - wide["adam"]).dropna()
    assert row["pairs"] == len(diff) and row["diff"] == pytest.approx(diff.mean())
    looks = 5 - 3 + 1
    level_alpha = boundary_alpha(0.05, looks, 3)
    assert row["ci_level"] == pytest.approx(1 - level_alpha)
    if diff.std() > 0:
        half = stats.t.ppf(1 - level_alpha / 2, len(diff) - 1) * diff.std(ddof=1) / \
            math.sqrt(len(diff))
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(
            (max(-1, diff.mean() - half), min(1, diff.mean() + half)))
        assert row["p"] == pytest.approx(stats.ttest_rel(wide["sgd"], wide["adam"]).pvalue)
    # the verdict is the one its numbers give
    decided = row["p_holm"] < level_alpha and (row["ci_low"] > 0 or row["ci_high"] < 0)
    assert (row["verdict"] == "better") == decided
    if row["verdict"] == "better":
        assert row["winner"] == ("sgd" if row["diff"] > 0 else "adam")
    elif row["verdict"] == "equivalent":
        assert -0.005 <= row["ci_low"] and row["ci_high"] <= 0.005
    # stopped where the rule says: decided, or at max_seeds
    assert row["verdict"] in ("better", "equivalent") or row["pairs"] == 5
    md = (out / "report.md").read_text()
    lines = rep.stdout.splitlines()
    # one answer: the level named, its mean by hand, the parent's best_value and run
    parent = stores.runs("adam-vs-sgd", "parent")[0]
    means = confirm.groupby("level")["value"].mean()
    level = row["winner"] if row["verdict"] == "better" else means.idxmax()
    assert parent.data.metrics["best_value"] == pytest.approx(means[level])
    # the sentence names it with its mean in percent, rounded to its interval (at most 2
    # significant digits of the half-width, so within half its last digit of the mean)
    found = re.search(rf"(?:{level} (?:is )?best|best mean {level}), val_acc ([\d.]+)%", lines[0])
    assert found, lines[0]
    shown = found.group(1)
    assert abs(float(shown) - 100 * means[level]) <= 0.5 * 10 ** -len(shown.partition(".")[2])
    # the table under it ranks the levels by their mean
    ranked = means.sort_values(ascending=False, kind="stable")
    assert [line.split()[1] for line in lines[2:2 + len(ranked)]] == list(ranked.index)
    named = confirm[confirm["run_id"] == parent.data.tags[keys.BEST_RUN_ID]]
    assert list(named["level"]) == [level]
    # the budget per level, by hand from the runs: tuning trials and the epochs they trained
    tune = runs[runs["phase"] == "tune"]
    for lv, group in tune.groupby("level"):
        assert f"| {lv} | " in md and f"| {len(group)} | {int(group['epochs'].sum())} |" in md
    # the resolution: val_items is the validation split the trainer builds for digits
    from trainers import TrainSettings
    from trainers.datasets import load_data

    split = len(load_data(TrainSettings.from_dict({"dataset": "digits"})).val)
    assert set(runs["val_items"]) == {split}
    for low, high in _intervals(md):
        assert -100.0 <= low <= high <= 100.0  # points or the metric's units, never beyond
    assert "0 pairs" not in md and "insufficient" not in md
    # every interval in the CSV inside the range a difference of val_acc can take
    assert -1 <= row["ci_low"] <= row["ci_high"] <= 1 or math.isnan(row["ci_low"])
    assert np.isfinite(row["diff"])
