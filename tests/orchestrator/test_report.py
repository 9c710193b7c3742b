"""`sweep report` on a real grid sweep with repeats, checked against a hand computation. The
sweeps train the perceptron: the report reads the same from any model, for a fraction of the
CNN's CPU."""
import math
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.conftest import run_cli, tiny_spec


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from tests.conftest import Stores

    d = tmp_path_factory.mktemp("report")
    # one worker: the report of a finished grid does not depend on two trials at once, and a
    # second worker would only start torch again
    spec = tiny_spec(name="grid", sampler={"name": "grid"}, repeats=3, trials=None, workers=1,
                     train={"model": "mlp", "epochs": 1, "lr": 3e-3},
                     space={"optimizer": ["adam", "sgd"], "clip_grad_norm": [None, 1.0]})
    spec.pop("trials")
    path = d / "grid.yaml"
    import yaml

    path.write_text(yaml.safe_dump(spec))
    out = run_cli("run", str(path), cwd=d)
    assert out.returncode == 0, out.stderr
    rep = run_cli("report", str(path), "--out", "rep", cwd=d)
    assert rep.returncode == 0, rep.stderr
    return Stores(d), d / "rep", rep


def _runs(stores):
    rows = []
    for r in stores.runs("grid", "trial"):
        rows.append({"optimizer": r.data.params["optimizer"],
                     "clip": r.data.params["clip_grad_norm"],
                     "repeat": int(r.data.tags["sweep.repeat"]),
                     "value": r.data.metrics["val_acc"]})
    return pd.DataFrame(rows)


@pytest.mark.slow  # a real sweep
def test_factor_table_matches_a_hand_computation(grid):
    stores, out, _ = grid
    runs = _runs(stores)
    table = pd.read_csv(out / "trials.csv")
    assert len(table) == 12 and (table["state"] == "COMPLETE").all()
    md = (out / "report.md").read_text()
    for level, group in runs.groupby("optimizer"):
        values = group["value"].to_numpy()
        mean, std = values.mean(), values.std(ddof=1)
        half = stats.t.ppf(0.975, len(values) - 1) * std / math.sqrt(len(values))
        row = f"| optimizer | {level} | {mean:.4g} | {std:.4g} | {mean - half:.4g} | " \
              f"{mean + half:.4g} | 6 |"
        assert row in md


@pytest.mark.slow  # a real sweep
def test_paired_difference_and_tests_match_scipy(grid):
    stores, out, _ = grid
    runs = _runs(stores)
    wide = runs.pivot_table(index=["clip", "repeat"], columns="optimizer", values="value")
    diff = (wide["sgd"] - wide["adam"]).to_numpy()
    assert len(diff) == 6
    from orchestrator.report import load_sweep, paired_differences

    data = load_sweep("grid", stores.tracking_uri, str(stores.journal))
    paired = paired_differences(data.trials, data.factors,
                                direction=data.spec.objective.direction).set_index("factor")
    row = paired.loc["optimizer"]
    assert row["pairs"] == 6 and row["mean_diff_b_minus_a"] == pytest.approx(diff.mean())
    if not np.allclose(diff, diff[0]):
        assert row["t_test_p"] == pytest.approx(stats.ttest_rel(wide["sgd"], wide["adam"]).pvalue)
        assert row["wilcoxon_p"] == pytest.approx(stats.wilcoxon(diff).pvalue)
    half = stats.t.ppf(0.975, 5) * diff.std(ddof=1) / math.sqrt(6)
    assert row["ci_low"] == pytest.approx(diff.mean() - half) and row["ci_level"] == 0.95


@pytest.mark.slow  # a real sweep
def test_html_opens_with_every_plot_embedded_and_is_logged(grid):
    stores, out, rep = grid

    class Images(HTMLParser):
        srcs: list = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.srcs.append(dict(attrs)["src"])

    parser = Images()
    parser.feed((out / "report.html").read_text())
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert {"curves.png", "history.png", "lr_schedule.png"} <= set(pngs)
    assert len(parser.srcs) == len(pngs)
    assert all(s.startswith("data:image/png;base64,") for s in parser.srcs)
    assert pd.read_parquet(out / "trials.parquet").shape[0] == 12
    parent = stores.runs("grid", "parent")[0]
    logged = {a.path for a in stores.client().list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.html", "report/report.md", "report/trials.csv"} <= logged
    assert "optimizer" in rep.stdout


@pytest.mark.slow  # a real sweep
def test_a_report_opens_the_study_and_the_tracking_store_once(grid, tmp_path, monkeypatch):
    import optuna

    from orchestrator.commands.cli import main
    from orchestrator.stores import tracking

    stores, _, _ = grid
    opened = {"tracker": 0, "load_study": 0, "create_study": 0}

    def counting(name, real):
        def call(*args, **kwargs):
            opened[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(tracking.Tracker, "__init__",
                        counting("tracker", tracking.Tracker.__init__))
    for name in ("load_study", "create_study"):
        monkeypatch.setattr(optuna, name, counting(name, getattr(optuna, name)))
    assert main(["report", "grid", "--out", str(tmp_path / "rep"), "--tracking-uri",
                 stores.tracking_uri, "--storage", str(stores.journal)]) == 0
    assert {"importances.png", "parallel.png"} <= {p.name for p in (tmp_path / "rep" /
                                                                   "plots").iterdir()}
    # one read of the study, one in-memory study for the importance and parallel plots, one
    # MLflow store for the reads and the report's upload
    assert opened == {"tracker": 1, "load_study": 1, "create_study": 1}


@pytest.mark.slow  # a real sweep
def test_too_few_pairs_get_no_row_but_a_line_and_a_partial_sweep_says_so(tmp_path):
    import yaml

    # one worker: the grid's first 2 trials are the same ones trained one after the other
    spec = tiny_spec(name="few", sampler={"name": "grid"}, trials=2, workers=1,
                     train={"model": "mlp", "epochs": 1},
                     space={"optimizer": ["adam", "sgd"]})
    path = tmp_path / "few.yaml"
    path.write_text(yaml.safe_dump({**spec, "repeats": 2, "trials": 2}))
    assert run_cli("run", str(path), cwd=tmp_path).returncode == 0
    rep = run_cli("report", "few", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "No paired differences: no two complete trials differ in one setting alone" in md
    assert "t-test p" not in md and "| adam | sgd | 1 |" not in md  # no row of 1 pair
    # the grid holds 4 trials (2 configurations x 2 repeats); trials: 2 stopped half way
    assert "Incomplete: 2 of 4 trials finished: 2 missing" in md
    assert "incomplete:" in rep.stdout
    bad = run_cli("report", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # a real sweep
def test_the_report_reads_the_parent_run_every_sweep_run_logs_to(grid):
    from orchestrator.report import load_sweep
    from orchestrator.stores.tracking import Tracker
    from orchestrator.stores.tracking_reads import TrackingReader

    stores, _, _ = grid
    data = load_sweep("grid", stores.tracking_uri, str(stores.journal))
    reader = TrackingReader(Tracker(stores.tracking_uri))
    # the one the sweep logged to, read independently of the report's own query
    assert data.parent_id == stores.runs("grid", "parent")[0].info.run_id
    assert reader.experiment_id("no-such-sweep") is None


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize("b_shift", [0.2, -0.2])
def test_the_verdict_names_the_level_the_objective_prefers(direction, b_shift):
    """Level b's objective is a's plus a noisy shift; the better level is computed here by hand
    (the mean of each level, ordered by the direction) and the interval with scipy."""
    from orchestrator.report import paired_differences

    rng = np.random.default_rng(7)
    a = rng.uniform(0.3, 0.7, size=8)
    b = a + b_shift + rng.normal(0, 0.02, size=8)
    trials = pd.DataFrame(
        [{"state": "COMPLETE", "repeat": i, "params.optimizer": "adam", "value": v}
         for i, v in enumerate(a)] +
        [{"state": "COMPLETE", "repeat": i, "params.optimizer": "sgd", "value": v}
         for i, v in enumerate(b)])
    row = paired_differences(trials, ["optimizer"], direction=direction).iloc[0]
    diff = b - a
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        (diff.mean() - half, diff.mean() + half))
    assert (row["ci_level"], row["ci_method"]) == (0.95, "t")
    means = {"adam": a.mean(), "sgd": b.mean()}
    pick = max if direction == "maximize" else min
    better = pick(means, key=means.get)
    worse = "sgd" if better == "adam" else "adam"
    assert row["verdict"] == f"{better} better" and worse != better
    assert row["p_holm"] == pytest.approx(stats.ttest_rel(b, a).pvalue)  # one pair: as is


def test_a_verdict_without_a_direction_is_an_error():
    from orchestrator.report import paired_differences

    with pytest.raises(ValueError, match="direction"):
        paired_differences(_paired_trials([0.1, 0.2, 0.3]), ["opt"], direction="max")


def _paired_trials(diffs: list[float]) -> pd.DataFrame:
    """Complete trials of a two-level setting, a pair per repeat, level b = a + diff."""
    rows = []
    for repeat, diff in enumerate(diffs):
        rows += [{"state": "COMPLETE", "repeat": repeat, "params.opt": "a", "value": 0.5},
                 {"state": "COMPLETE", "repeat": repeat, "params.opt": "b", "value": 0.5 + diff}]
    return pd.DataFrame(rows)


def test_pairs_that_all_differ_alike_get_no_interval_and_no_t_test():
    from orchestrator.report import paired_differences

    row = paired_differences(_paired_trials([0.25, 0.25, 0.25]), ["opt"],
                             direction="maximize").iloc[0]
    assert row["pairs"] == 3 and row["mean_diff_b_minus_a"] == pytest.approx(0.25)
    assert row["verdict"] == "undecided" and "no spread" in row["ci_method"]
    assert math.isnan(row["ci_low"]) and math.isnan(row["ci_high"])
    assert math.isnan(row["t_test_p"]) and math.isnan(row["p_holm"])
    # the signed ranks are defined (every pair has the same sign)
    assert row["wilcoxon_p"] == pytest.approx(stats.wilcoxon([0.25, 0.25, 0.25]).pvalue)


def test_a_pair_short_of_the_minimum_has_no_row():
    from orchestrator.report import paired_differences

    table = paired_differences(_paired_trials([0.1, 0.3]), ["opt"], direction="minimize")
    assert table.empty
    assert len(paired_differences(_paired_trials([0.1, 0.3, 0.2]), ["opt"],
                                  direction="minimize")) == 1


@pytest.mark.slow  # a real sweep
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_with_repeats_the_headline_is_the_best_configuration_mean(grid, direction, tmp_path):
    import yaml

    from orchestrator.report import headline, load_sweep

    stores, _, _ = grid
    raw = load_sweep("grid", stores.tracking_uri, str(stores.journal), curves=False).spec.raw
    path = tmp_path / "grid.yaml"  # the same study read under either direction
    path.write_text(yaml.safe_dump({**raw, "objective": {"metric": "val_acc",
                                                         "direction": direction}}))
    line = headline(load_sweep(str(path), stores.tracking_uri, str(stores.journal),
                               curves=False))
    runs = _runs(stores).assign(trial=[int(r.data.tags["sweep.trial_number"])
                                       for r in stores.runs("grid", "trial")])
    by_hand = runs.groupby(["optimizer", "clip"]).agg(
        mean=("value", "mean"), std=("value", "std"), first=("trial", "min"))
    # ties (sgd may learn nothing with or without clipping): the configuration that ran first
    best = by_hand.sort_values(["mean", "first"], ascending=[direction == "minimize", True]).iloc[0]
    optimizer, clip = best.name
    assert line.startswith(f"Best configuration: val_acc mean {best['mean']:.4f} ± "
                           f"{best['std']:.4f} over 3 seed(s) ("), line
    assert f"optimizer={optimizer}" in line and f"clip_grad_norm={clip}" in line, line


@pytest.mark.slow  # a real sweep
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_reports_best_trial_is_the_one_sweep_status_names(grid, direction, tmp_path):
    """A complete trial with an infinite value (a time to a target never reached, a user
    metric) is never best: the report reads the study's rule, as sweep status does, not a
    copy of it on the trial table."""
    import shutil

    import optuna
    import yaml

    from orchestrator.report import load_sweep
    from orchestrator.report.front import best_rows
    from orchestrator.report.status import trial_rows
    from tests.conftest import Stores

    stores, _, _ = grid
    copy = Stores(tmp_path / "copy")
    shutil.copytree(stores.dir, copy.dir, ignore=shutil.ignore_patterns("rep", "mlruns"))
    study = copy.study("grid")
    first = study.trials[0]
    inf = math.inf if direction == "maximize" else -math.inf  # the best a sort could give
    study.add_trial(optuna.trial.create_trial(params=first.params,
                                              distributions=first.distributions, value=inf))
    raw = load_sweep("grid", copy.tracking_uri, str(copy.journal), curves=False).spec.raw
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**raw, "objective": {"metric": "val_acc",
                                                         "direction": direction}}))
    data = load_sweep(str(path), copy.tracking_uri, str(copy.journal), curves=False)
    finite = [(t.value, t.number) for t in study.trials
              if t.state.name == "COMPLETE" and math.isfinite(t.value)]
    by_hand = sorted(finite, key=lambda v: ((-1 if direction == "maximize" else 1) * v[0], v[1]))
    assert list(best_rows(data)["trial"]) == [n for _, n in by_hand]
    if direction == "maximize":  # the study's own direction: status marks that trial best
        from datetime import datetime, timezone

        rows = trial_rows(copy.study("grid"), datetime.now(timezone.utc))
        assert [r["#"] for r in rows if "best" in r["note"].split("; ")] == [str(by_hand[0][1])]


def test_the_parent_runs_description_is_the_reports_headline_after_sweep_run(quickstart):
    """MLflow shows a run's `mlflow.note.content` on its page: whoever opens the parent run
    reads who won without running `sweep report`."""
    from orchestrator.core import keys
    from orchestrator.report import headline, load_sweep

    stores, _ = quickstart
    data = load_sweep("quickstart", stores.tracking_uri, str(stores.journal), curves=False)
    note = stores.runs("quickstart", "parent")[0].data.tags[keys.PARENT_NOTE]
    best = stores.study("quickstart").best_trial
    assert note.split("\n\n")[0] == f"**{headline(data)}**"
    assert note.startswith(f"**Best trial {best.number}: val_acc {best.value:.4f} (")
    # its settings read as `sweep status` shows them: a float to 4 significant digits
    settings = note.split("\n\n")[0].split(" (", 1)[1]
    floats = {name: value for name, value in best.params.items() if isinstance(value, float)}
    # (a setting of one option's sub-space, Optuna's `sgd.lr`, is shown by its own name)
    floats = {name.rsplit(".", 1)[-1]: value for name, value in floats.items()}
    assert floats and all(f"{name}={value:.4g}," in settings or f"{name}={value:.4g})" in
                          settings for name, value in floats.items()), settings
    assert any(f"{value:.4g}" != repr(value) for value in floats.values())  # one is rounded
    # the experiment's description stays the sweep's own
    experiment = stores.client().get_experiment_by_name("quickstart")
    assert experiment.tags.get(keys.NOTE) != note


def _parallel_ticks(lrs: list, batches: list) -> tuple[list[list[str]], list[str]]:
    """The parallel-coordinate plot of complete trials at ``lrs`` and ``batches`` (a trial
    each): each setting's axis labels (batch_size, then lr: Optuna's order) and scales."""
    from orchestrator.config.spec import validate
    from orchestrator.report.load import SweepData
    from orchestrator.report.plots import complete_study, parallel_axes

    trials = pd.DataFrame({"trial": range(len(lrs)), "state": "COMPLETE",
                           "value": np.linspace(0.5, 0.9, len(lrs)), "params.lr": lrs,
                           "params.batch_size": batches})
    data = SweepData(validate(tiny_spec(), "t.yaml"), "tiny", trials, pd.DataFrame(),
                     pd.DataFrame(), None)
    axes = parallel_axes(complete_study(data)).figure.axes[2:]  # after the plot and colour bar
    return ([[t.get_text() for t in ax.get_yticklabels()] for ax in axes],
            [ax.get_yscale() for ax in axes])


def test_the_parallel_plot_sorts_a_few_numeric_values_and_labels_them_rounded():
    """A few learning rates as drawn (16 digits) and batch sizes out of order: each axis
    lists its values from low to high, lr to 3 significant digits, batch sizes as integers."""
    lrs = [0.10000000000000002, 0.0031622776601683794, 0.012345678901234567, 0.0031622776601683794]
    labels, _ = _parallel_ticks(lrs, [128, 32, 64, 32])
    assert labels == [["32", "64", "128"],
                      [f"{v:.3g}" for v in sorted({0.1, 0.00316, 0.0123})]]


def test_the_parallel_plot_draws_many_learning_rates_on_a_log_axis():
    lrs = list(np.geomspace(1e-4, 1e-1, MANY := 13))  # above MAX_LEVELS: a range
    labels, scales = _parallel_ticks(lrs, [32, 64] * 6 + [32])
    assert scales[1] == "log" and len(set(lrs)) == MANY
