"""The report of a comparison, on a real Optuna study and real MLflow runs written here with the
store keys a comparison uses (values chosen by the test), checked against independent
computations (pandas, scipy, numpy) in both objective directions."""
import json
import math
import shutil

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from scipy import stats

from orchestrator.config import space as sp
from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.stores.tracking import Tracker
from tests.conftest import Stores
from trainers import TrainSettings

# the tests of real comparisons reported (stores, the CLI, a browser) are slow-marked one by one:
# the pure statistics (scaling, resolution, schedule shapes) stay in the fast tier

SPACE = {"optimizer": {"adam": {"lr": {"low": 1e-4, "high": 1e-1, "log": True}},
                       "sgd": {"lr": {"low": 1e-3, "high": 1.0, "log": True},
                               "momentum": [0.8, 0.9]}}}
# tuning trials: (lr, val_acc); adam's best 0.96 at 3e-3 with 1e-3..1e-2 within 1 point (10x),
# sgd's best 0.94 at 0.1 with 3e-2..0.1 within 1 point (3.3x)
TUNE = {"adam": [(1e-4, 0.90), (3e-4, 0.945), (1e-3, 0.955), (3e-3, 0.96), (1e-2, 0.952),
                 (3e-2, 0.93)],
        "sgd": [(1e-3, 0.80), (1e-2, 0.90), (3e-2, 0.935), (1e-1, 0.94), (3e-1, 0.92),
                (1.0, 0.50)]}
CONFIRM = {"adam": [0.962, 0.958, 0.965, 0.955], "sgd": [0.941, 0.944, 0.936, 0.939]}
# epochs before the last: adam passes 0.9 at epoch 2, sgd at epoch 3 but on its second seed
EARLY = {"adam": [[0.85, 0.95], [0.85, 0.93], [0.8, 0.92], [0.85, 0.91]],
         "sgd": [[0.7, 0.88], [0.7, 0.91], [0.7, 0.85], [0.7, 0.89]]}
SECONDS = 2.5  # every epoch's epoch_seconds
TARGET_ACC = 0.9


def _distributions(spec) -> dict:
    out = {}
    for _, node in sp.walk(spec.space):
        if isinstance(node, sp.Options):
            out[node.name] = optuna.distributions.CategoricalDistribution(
                [o for o, _ in node.options])
        elif isinstance(node, sp.Choice):
            out[node.name] = optuna.distributions.CategoricalDistribution(list(node.choices))
        elif isinstance(node, sp.Range):
            out[node.name] = optuna.distributions.FloatDistribution(node.low, node.high,
                                                                    log=node.log)
    return out


def _trials(direction: str) -> list[dict]:
    """The comparison's trials in the objective's metric (val_loss = 1 - val_acc)."""
    as_metric = (lambda v: v) if direction == "maximize" else (lambda v: round(1 - v, 6))
    rows = []
    for level, points in TUNE.items():
        for lr, acc in points:
            params = {"optimizer": level, f"{level}.lr": lr}
            if level == "sgd":
                params["sgd.momentum"] = 0.9
            rows.append({"phase": "tune", "level": level, "seed": 0, "params": params,
                         "curve": [as_metric(v) for v in (acc - 0.1, acc - 0.05, acc)]})
    for level, values in CONFIRM.items():
        for seed, (acc, early) in enumerate(zip(values, EARLY[level]), start=1):
            best = max(TUNE[level], key=lambda p: p[1])[0]
            params = {"optimizer": level, f"{level}.lr": best,
                      **({"sgd.momentum": 0.9} if level == "sgd" else {})}
            rows.append({"phase": "confirm", "level": level, "seed": seed, "params": params,
                         "curve": [as_metric(v) for v in (*early, acc)]})
    return rows


def write_comparison(folder, name: str, direction: str, template) -> Stores:
    """A finished comparison's stores as a sweep leaves them: a study with the compare block and
    a trial per row (user attrs phase, level, seed, run id), a parent run and a trial run each
    with the settings as params, the phase/level/seed tags and per-epoch curves."""
    folder.mkdir()
    shutil.copyfile(template, folder / "mlflow.db")
    stores = Stores(folder)
    metric = "val_acc" if direction == "maximize" else "val_loss"
    target = TARGET_ACC if direction == "maximize" else round(1 - TARGET_ACC, 6)
    # one tuning per level, its best confirmed on every seed (the trials below)
    block = {"factor": "optimizer", "tune_trials": 6, "seeds": 3, "max_seeds": 4,
             "target": target, "tuning": "once"}
    raw = {"name": name, "objective": {"metric": metric, "direction": direction},
           "sampler": {"name": "random", "seed": 0}, "seed": 0, "compare": block,
           "train": {"dataset": "digits", "model": "small_cnn", "epochs": 3}, "space": SPACE}
    spec = validate(raw, "test")
    study = optuna.create_study(study_name=name, direction=direction, storage=JournalStorage(
        JournalFileBackend(str(stores.journal))))
    study.set_user_attr(keys.IDENTITY, json.dumps(spec.identity(), sort_keys=True))
    study.set_user_attr(keys.COMPARE, json.dumps(block))
    tracker = Tracker(stores.tracking_uri)
    experiment = tracker.experiment(name)
    parent, _ = tracker.parent_run(experiment, name, "text", {}, {})
    dists = _distributions(spec)
    for number, row in enumerate(_trials(direction)):
        resolved = TrainSettings.from_dict({**raw["train"], "seed": row["seed"],
                                            **sp.settings_for(spec.space, row["params"])})
        settings = resolved.to_dict()
        tags = {keys.STUDY: name, keys.PHASE: row["phase"], keys.LEVEL: row["level"],
                keys.SEED: str(row["seed"])}
        run = tracker.start_trial(experiment, parent, number, settings,
                                  {keys.LR_EFFECTIVE: resolved.lr_effective}, tags)
        tracker.log_epochs(run, [(e, {metric: v, "epoch_seconds": SECONDS},
                                  [(e, settings["lr"])]) for e, v in
                                 enumerate(row["curve"], start=1)])
        tracker.end_trial(run, "complete", {keys.TRAIN_SECONDS: SECONDS * len(row["curve"])})
        study.add_trial(optuna.trial.create_trial(
            params=row["params"], distributions={k: dists[k] for k in row["params"]},
            value=row["curve"][-1], intermediate_values=dict(enumerate(row["curve"], start=1)),
            user_attrs={keys.RUN_ID: run, keys.PHASE: row["phase"], keys.LEVEL: row["level"],
                        keys.SEED: row["seed"]}))
    return stores


@pytest.fixture(scope="module", params=["maximize", "minimize"])
def reported(request, tmp_path_factory, mlflow_template):
    """The comparison's stores and `sweep report`'s folder and printed lines."""
    from orchestrator.commands.cli import main

    d = tmp_path_factory.mktemp(f"compare-{request.param}")
    stores = write_comparison(d / "stores", "cmp", request.param, mlflow_template)
    out = d / "rep"
    args = ["report", "cmp", "--out", str(out), "--tracking-uri", stores.tracking_uri,
            "--storage", str(stores.journal)]
    return request.param, stores, out, args, main


@pytest.fixture(scope="module")
def report_printed(reported) -> str:
    """`sweep report` of the comparison, run once (exit code 0) for the tests that read its
    folder: what it printed."""
    import contextlib
    import io

    _, _, _, args, main = reported
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(args) == 0
    return printed.getvalue()


def _expected(direction: str) -> dict:
    """The pair (a = adam, b = sgd) computed here from the confirmation values alone: at 3
    pairs (look 1 of 2) the paired t-test's p is above the calibrated level, so a fourth seed
    was added; at 4 pairs, the t interval at the level of each of 2 looks."""
    from orchestrator.answer.stats import boundary_alpha

    to_metric = (lambda v: np.asarray(v)) if direction == "maximize" else \
        (lambda v: 1 - np.asarray(v))
    adam, sgd = to_metric(CONFIRM["adam"]), to_metric(CONFIRM["sgd"])
    level_alpha = boundary_alpha(0.05, 2, 3)
    assert stats.ttest_rel(sgd[:3], adam[:3]).pvalue > level_alpha  # undecided at look 1
    diff = sgd - adam
    p = stats.ttest_rel(sgd, adam).pvalue
    half = stats.t.ppf(1 - level_alpha / 2, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(4)
    return {"diff": diff.mean(), "ci_low": diff.mean() - half, "ci_high": diff.mean() + half,
            "ci_level": 1 - level_alpha, "p": p, "p_holm": p}


@pytest.mark.slow
def test_comparison_csv_and_headline_equal_a_hand_computation(reported, report_printed):
    from orchestrator.answer.stats import CSV_COLUMNS
    from orchestrator.answer.words import level_percent

    direction, stores, out, args, main = reported
    printed = report_printed
    expected = _expected(direction)
    table = pd.read_csv(out / "comparison.csv")
    assert tuple(table.columns) == CSV_COLUMNS
    row = table.iloc[0]
    assert (row["factor"], row["a"], row["b"], row["pairs"]) == ("optimizer", "adam", "sgd", 4)
    for col, value in expected.items():
        assert row[col] == pytest.approx(value, rel=1e-9, abs=1e-12), col
    # adam is better in both directions (higher val_acc, lower val_loss)
    assert (row["verdict"], row["winner"], row["ci_method"]) == ("better", "adam", "t")
    # adam's lead over sgd with its interval (sgd - adam turned so that better is up), in
    # points of val_acc (percent for its mean) or in val_loss, each to 2 significant digits of
    # its half-width
    scale, unit = (100, "points") if direction == "maximize" else (1, "val_loss")
    turn = -1 if direction == "maximize" else 1
    lead = sorted(turn * expected[k] for k in ("ci_low", "ci_high"))
    half = scale * (expected["ci_high"] - expected["ci_low"]) / 2
    adam = np.asarray(CONFIRM["adam"]) if direction == "maximize" else \
        1 - np.asarray(CONFIRM["adam"])
    m_low, m_high = stats.t.interval(0.95, 3, loc=adam.mean(), scale=stats.sem(adam))
    m_half = scale * (m_high - m_low) / 2

    def rounded(v, h):
        return f"{scale * v:.{max(0, 1 - math.floor(math.log10(h)))}f}"
    metric = "val_acc" if direction == "maximize" else "val_loss"
    headline = (f"optimizer after 4 seeds: adam best, {metric} {rounded(adam.mean(), m_half)}"
                f"{'%' if scale == 100 else ''}, better than sgd by "
                f"{rounded(turn * expected['diff'], half)} {unit} [{rounded(lead[0], half)}, "
                f"{rounded(lead[1], half)}] ({level_percent(expected['ci_level'])} t interval, "
                f"look 2 of 2).")
    lines = printed.splitlines()
    assert lines[0] == headline and printed.count(headline) == 1
    # the table: the levels ranked by their mean, separated (no letter in common)
    assert lines[1].split() == ["rank", "optimizer", "mean", metric] + \
        (["%"] if scale == 100 else []) + ["95%", "interval", "seeds", "group"]
    assert lines[2].split()[:2] + lines[2].split()[-2:] == ["1", "adam", "4", "a"]
    assert lines[3].split()[:2] + lines[3].split()[-2:] == ["2", "sgd", "4", "b"]
    assert lines[2].split()[2] == rounded(adam.mean(), m_half)
    assert any(line.startswith("The weights of adam: the run of seed ") for line in lines)
    parent = stores.runs("cmp", "parent")[0]
    assert parent.data.tags[keys.VERDICT] == headline
    logged = {a.path for a in stores.client().list_artifacts(parent.info.run_id, "report")}
    assert keys.COMPARISON_CSV in logged
    md = (out / "report.md").read_text()
    assert md.splitlines()[2] == f"**{headline}**"


@pytest.mark.slow
def test_lr_ranges_are_a_table_and_time_to_target_is_compared_over_the_seeds(reported,
                                                                            capsys):
    direction, stores, out, args, main = reported
    from orchestrator.report import compare, load_sweep

    data = load_sweep("cmp", stores.tracking_uri, str(stores.journal))
    c = compare(data)
    adam, sgd = c.sensitivity["adam"], c.sensitivity["sgd"]
    if direction == "maximize":  # within 1 point (0.01) of val_acc: see TUNE
        assert (adam.best_lr, adam.low, adam.high, adam.within) == (3e-3, 1e-3, 1e-2, 3)
        assert (sgd.best_lr, sgd.low, sgd.high, sgd.within) == (0.1, 3e-2, 0.1, 2)
    else:  # within 1% of the best val_loss (0.04 and 0.06): no neighbour is that close
        assert (adam.best_lr, adam.low, adam.high, adam.within) == (3e-3, 3e-3, 3e-3, 1)
        assert (sgd.best_lr, sgd.low, sgd.high, sgd.within) == (0.1, 0.1, 0.1, 1)
    # single-seed tuning trials around the luckiest: a table, no sentence claims a range
    assert not any("stays within" in line or "range of learning rates" in line
                   for line in c.sentences)
    # epochs to reach the target per seed, by hand from EARLY and CONFIRM
    reach = {lvl: [next((e for e, v in enumerate((*early, last), start=1)
                         if round(v, 6) >= TARGET_ACC), math.nan)
                   for early, last in zip(EARLY[lvl], CONFIRM[lvl])] for lvl in CONFIRM}
    got = c.reach.groupby("level")["epochs"].apply(list).to_dict()
    assert got == reach
    assert c.reach.set_index("trial")["seconds"].tolist() == \
        [SECONDS * e for lvl in CONFIRM for e in reach[lvl]]
    # the epochs compared over the paired seeds (sgd - adam = 1, 0, 1, 1): a 95% t interval
    # that includes 0, so no level is said to reach it sooner
    diff = np.asarray(reach["sgd"]) - np.asarray(reach["adam"])
    half = stats.t.ppf(0.975, 3) * diff.std(ddof=1) / 2
    target = f"{c.metric} {c.target:g}"
    [said] = [line for line in c.sentences if line.startswith(f"Epochs to reach {target}")]
    digits = 1 - math.floor(math.log10(half))  # 2 significant digits of the half-width
    assert (f"adam against sgd undecided after 4 paired seeds: sgd minus adam = "
            f"{diff.mean():.{digits}f} epochs [{diff.mean() - half:.{digits}f}, "
            f"{diff.mean() + half:.{digits}f}] (95% t interval), which includes 0") in said
    assert "sooner" not in said


@pytest.mark.slow
def test_sweep_report_finds_a_sweep_by_name_with_did_you_mean(reported, capsys):
    from orchestrator.commands.cli import main

    _, stores, _, _, _ = reported
    assert main(["report", "cmq", "--tracking-uri", stores.tracking_uri, "--storage",
                 str(stores.journal)]) == 2
    err = capsys.readouterr().err
    assert "no sweep named 'cmq'" in err and "(did you mean `cmp`?)" in err


def test_the_scaling_exponent_is_a_line_through_the_trials_near_each_optimum():
    """Each batch size's tuning trials at its best lr x 1/4 .. 4: the three in the middle are
    within 1 point of the best; the exponent is numpy's polyfit through them and its interval
    scipy's linregress standard error with Student's t."""
    from orchestrator.report import SweepData, compare

    raw = {"name": "scale", "objective": {"metric": "val_acc", "direction": "maximize"},
           "trials": 20, "train": {"dataset": "digits", "model": "small_cnn", "epochs": 3},
           "space": {"batch_size": [32, 64, 128, 256],
                     "lr": {"low": 1e-4, "high": 1.0, "log": True}}}
    jitter = {32: 1.0, 64: 1.1, 128: 0.9, 256: 1.05}
    rows, near = [], []
    for batch in jitter:
        best = 0.01 * (batch / 32) ** 0.6 * jitter[batch]
        for factor, value in zip((0.25, 0.5, 1, 2, 4), (0.90, 0.948, 0.95, 0.945, 0.92)):
            rows.append({"trial": len(rows), "state": "COMPLETE", "value": value,
                         "phase": "tune", "level": str(batch), "seed": 0,
                         "searched": "batch_size,lr", "params.batch_size": batch,
                         "params.lr": best * factor})
            if 0.5 <= factor <= 2:
                near.append((batch, best * factor))
    data = SweepData(validate(raw, "test"), "scale", pd.DataFrame(rows),
                     pd.DataFrame(columns=["trial", "metric", "epoch", "value"]),
                     pd.DataFrame(columns=["trial", "step", "lr"]), None,
                     compare={"factor": "batch_size", "tune_trials": 5, "seeds": 2})
    c = compare(data)
    x, y = np.log([b for b, _ in near]), np.log([lr for _, lr in near])
    slope = np.polyfit(x, y, 1)[0]
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, len(x) - 2) * fit.stderr
    s = c.scaling
    assert (s.points, s.levels) == (12, 4)
    assert (s.exponent, s.ci_low, s.ci_high) == pytest.approx((slope, slope - half, slope + half))
    linear, root = s.ci_low <= 1 <= s.ci_high, s.ci_low <= 0.5 <= s.ci_high
    assert s.supports == {
        (True, True): "cannot tell linear (1) from square-root (0.5) scaling",
        (True, False): "supports linear scaling (1), not square-root (0.5)",
        (False, True): "supports square-root scaling (0.5), not linear (1)",
        (False, False): "supports neither linear (1) nor square-root (0.5) scaling"}[
            (linear, root)]
    assert any(f"batch_size^{slope:.2f} [{slope - half:.2f}, {slope + half:.2f}]" in line
               for line in c.sentences)


def _resolved(confirm: dict[str, list[float]], direction: str = "maximize",
              metric: str = "val_acc", val_items: int | None = 200) -> str | None:
    """The resolution sentence of a comparison whose levels confirmed ``confirm`` (a value per
    seed), compared by the sweep's own paired procedure."""
    from orchestrator.answer.stats import compare_paired
    from orchestrator.report.comparison import Comparison, _resolution_sentence

    values = {lv: dict(enumerate(v)) for lv, v in confirm.items()}
    c = Comparison("optimizer", metric, direction, list(confirm),
                   compare_paired(values, direction=direction, factor="optimizer"), {}, values,
                   {}, pd.DataFrame(), None, "", val_items=val_items)
    return _resolution_sentence(c)


def test_the_resolution_of_an_accuracy_is_always_said_with_what_lies_within_one_item():
    """200 validation items: val_acc moves in steps of 1/200 (0.5 points), said whatever the
    values; a difference below that, or a level within it of the best value, named too."""
    steps = "val_acc counts 200 validation items, so it moves in steps of 0.5 points"
    apart = [0.80, 0.82, 0.81]  # sgd: 10 points below adam, far from either end
    # neither: said all the same, the resolution every other figure is read against
    assert _resolved({"adam": [0.90, 0.91, 0.92], "sgd": apart}) == steps + "."
    # a difference of 0.07 points (adam - sgd), below one item
    assert _resolved({"adam": [0.900, 0.905, 0.910], "sgd": [0.902, 0.906, 0.909]}) == \
        steps + ": the two levels' means differ by less than one item."
    # several pairs: each pair below one item named in a sentence (rmsprop - adam 0.4 points,
    # sgd - adam 0.1 and rmsprop - sgd 0.3, both below one item too; lion 10 points off)
    assert _resolved({"adam": [0.900, 0.905, 0.910], "sgd": [0.902, 0.906, 0.910],
                      "rmsprop": [0.905, 0.909, 0.913], "lion": apart}) == \
        steps + (": the means of each of these pairs differ by less than one item: adam vs "
                 "rmsprop, adam vs sgd, rmsprop vs sgd.")
    # one pair of several
    assert _resolved({"adam": [0.900, 0.905, 0.910], "sgd": [0.902, 0.906, 0.909],
                      "lion": apart}) == \
        steps + ": the means of adam and sgd differ by less than one item."
    # maximize: a mean of 0.998 is within one item (0.995) of the ceiling; 0.99 is not
    assert _resolved({"adam": [0.996, 0.998, 1.0], "sgd": apart}) == \
        steps + ": adam is within one item of the ceiling."
    assert _resolved({"adam": [0.985, 0.99, 0.995], "sgd": apart}) == steps + "."
    # minimize (no error rate in [0, 1] is an objective here: the floor of the same metric)
    assert _resolved({"adam": [0.002, 0.0, 0.004], "sgd": apart}, "minimize") == \
        steps + ": adam is within one item of the floor."
    assert _resolved({"adam": [0.90, 0.91, 0.92], "sgd": apart}, "minimize") == steps + "."
    # not a fraction of items: nothing to say
    assert _resolved({"adam": [0.90, 0.91, 0.92], "sgd": apart}, val_items=None) is None
    assert _resolved({"adam": [0.3, 0.31, 0.32], "sgd": [0.5, 0.52, 0.51]}, "minimize",
                     "val_loss") is None


def test_the_lr_plot_draws_one_trial_per_schedule_shape():
    from orchestrator.report.plots import schedule_shapes

    def warmup_cosine(total: int, peak: float) -> list[float]:  # warmup: a fifth of the run
        warm = total // 5
        return [peak * (s / warm if s <= warm else
                        0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))))
                for s in range(1, total + 1)]

    curves = {0: warmup_cosine(40, 0.1), 1: warmup_cosine(40, 0.003),  # one shape, two peaks
              2: [0.1] * 40,  # constant
              3: warmup_cosine(20, 0.1)}  # twice the batch size: half the steps, same shape
    lr = pd.DataFrame([{"trial": t, "step": s, "lr": v} for t, values in curves.items()
                       for s, v in enumerate(values, start=1)])
    assert sorted(schedule_shapes(lr).values()) == [[0, 1, 3], [2]]


@pytest.mark.slow
def test_the_html_report_shows_the_headline_and_every_plot_in_chromium(reported, report_printed,
                                                                       tmp_path):
    import os

    from playwright.sync_api import sync_playwright

    from tests.conftest import ROOT
    from tests.helpers import CHROMIUM, CHROMIUM_ARGS

    direction, stores, out, args, main = reported  # both directions' reports are opened
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: `apt-get install -y chromium` as root",
                    pytrace=False)
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert {"lr_sensitivity.png", "tuning_progress.png", "confirmation_curves.png",
            "differences.png", "time_to_target.png"} <= set(pngs)
    md = (out / "report.md").read_text()
    assert "No importance plot: a comparison tunes each level" in md
    assert all(f"![{name}](plots/{name})" in md for name in pngs)
    shots = ROOT / "test-output" / "report"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((out / "report.html").as_uri())
        headline = page.locator(".headline p").first
        assert headline.inner_text() == stores.runs("cmp", "parent")[0].data.tags[keys.VERDICT]
        assert headline.is_visible()
        images = page.locator("figure img")
        assert sorted(images.evaluate_all("els => els.map(e => e.alt)")) == pngs
        # every image decoded: a broken data URL has no natural size
        assert images.evaluate_all("els => els.every(e => e.complete && e.naturalWidth > 0)")
        shot = shots / ("comparison.png" if direction == "maximize" else
                        f"comparison-{direction}.png")
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
def test_sweep_report_of_a_real_comparison_sweep(tmp_path):
    """A tiny real `compare:` sweep (2 levels x 2 tuning trials, 2 paired seeds, 1 epoch of the
    perceptron), then `sweep report NAME`: the headline first, on the parent run as
    sweep.verdict, and comparison.csv as orchestrator.answer.stats computes it from the
    confirmation runs read back from MLflow; the parent's best_value, best_run_id, sweep status
    and the report name one answer. The end of `sweep run` says the answer before any run id,
    its per-trial lines name each trial's level and phase, an accuracy is in percent in every
    view, and a batch size of two values (every tuned best on an edge) is named at its edge."""
    import yaml

    from orchestrator.answer import stats as st
    from tests.conftest import run_cli
    from tests.helpers import COMPARE_SPACE, compare_spec

    # one worker: the report, the parent run and the export name one answer whatever order the
    # trials end in; a second worker would only start torch again
    spec = compare_spec(name="tinycmp", export=["torchscript"], export_for="best", workers=1,
                        train={"dataset": "digits", "model": "mlp", "epochs": 1},
                        space={**COMPARE_SPACE,
                               "batch_size": {"low": 32, "high": 64, "step": 32}})
    spec["compare"] = {**spec["compare"], "target": 0.5}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(spec))
    ran = run_cli("run", "c.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    stores = Stores(tmp_path)
    noted = stores.runs("tinycmp", "parent")[0].data.tags[keys.PARENT_NOTE]  # by sweep run
    rep = run_cli("report", "tinycmp", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    parent = stores.runs("tinycmp", "parent")[0]
    assert rep.stdout.splitlines()[0] == parent.data.tags[keys.VERDICT]
    # the parent's description (shown on its MLflow page): the sentence, then the table as a
    # Markdown table with the rows the terminal printed, the same from sweep run and from
    # sweep report
    note = parent.data.tags[keys.PARENT_NOTE]
    assert note == noted
    printed = rep.stdout.splitlines()
    assert note.startswith(f"**{printed[0]}**\n\n| rank | optimizer | mean val_acc % | 95% "
                           f"interval | seeds | group |\n|---|---|---|---|---|---|\n")
    md_rows = [line.strip("| ").split(" | ") for line in note.splitlines()
               if line.startswith("| ") and not line.startswith("| rank")]
    assert len(md_rows) == 2 and [r[0] for r in md_rows] == ["1", "2"]
    for row, line in zip(md_rows, printed[2:4]):  # the terminal's rows, the same cells
        assert " ".join(row).split() == line.split()
    # the end of sweep run said the report's answer once, before the next commands
    said = ran.stdout.splitlines()
    headline = said.index(f"sweep report: {printed[0]}")
    assert sum(printed[0] in line for line in said) == 1
    assert said[headline + 1:headline + 4] == printed[1:4]
    assert headline < next(i for i, line in enumerate(said) if line.startswith("the report:"))
    confirm = [r for r in stores.runs("tinycmp", "trial")
               if r.data.tags.get(keys.PHASE) == "confirm"]
    values = pd.DataFrame([{"level": r.data.tags[keys.LEVEL], "seed": int(r.data.tags[keys.SEED]),
                            "value": r.data.metrics["val_acc"]} for r in confirm])
    seeds = values.groupby("level")["seed"].apply(frozenset)
    assert len(values) == 4 and seeds.nunique() == 1  # paired: the same seeds for each level
    by_level = {lvl: dict(zip(g["seed"], g["value"])) for lvl, g in values.groupby("level")}
    expected = pd.DataFrame([r.as_row() for r in st.compare_paired(
        by_level, factor="optimizer", direction="maximize", bounds=(0.0, 1.0), seeds=2)])
    got = pd.read_csv(tmp_path / "rep" / "comparison.csv")
    pd.testing.assert_frame_equal(got.fillna(""), expected.fillna(""), check_dtype=False)
    # one answer: the level of the best confirmed mean (nothing decided on 2 seeds) or the
    # winner, its mean over the confirmation seeds, and the confirmation run nearest that mean
    means = values.groupby("level")["value"].mean()
    [r] = st.compare_paired(by_level, direction="maximize", bounds=(0.0, 1.0), seeds=2)
    level = r.winner or means.idxmax()
    mine = values[values["level"] == level].sort_values("seed")
    near = mine.iloc[(mine["value"] - means[level]).abs().round(12).argsort(kind="stable")
                     .iloc[0]]
    run = next(x for x in confirm if x.data.tags[keys.LEVEL] == level and
               int(x.data.tags[keys.SEED]) == int(near["seed"]))
    assert parent.data.metrics["best_value"] == pytest.approx(means[level])
    assert parent.data.tags[keys.BEST_RUN_ID] == run.info.run_id
    # its mean in percent, to 2 significant digits of its 95% t interval's half-width (scipy)
    low, high = stats.t.interval(0.95, len(mine) - 1, loc=mine["value"].mean(),
                                 scale=stats.sem(mine["value"]))
    half = 100 * (min(high, 1.0) - max(low, 0.0)) / 2
    named = f"{100 * means[level]:.{max(0, 1 - math.floor(math.log10(half)))}f}%"
    assert parent.data.tags[keys.ANSWER].startswith(f"{level}: val_acc {named}, mean over 2 ")
    weights = f"The weights of {level}: the run of seed {int(near['seed'])} (trial " \
        f"{int(run.data.tags[keys.TRIAL_NUMBER])}), the confirmation run closest to its mean."
    other = next(lv for lv in means.index if lv != level)
    if r.winner is None:  # not separated: the weights are one of the two levels', said so
        weights += (f" {level} is not separated from {other}, so these weights are those of "
                    f"one of 2 levels: {level}'s, the best mean among them (another may yet "
                    f"prove better).")
        assert parent.data.tags[keys.ANSWER].endswith(
            f"; no evidence separates {level} from {other}, so these weights are those of one "
            f"of 2 levels, the one named for the reason above")
        assert f"({level}'s confirmation run closest to its mean; one of 2 levels no " \
            f"evidence separates, the one the answer names)" in ran.stdout
    assert weights in rep.stdout.splitlines()
    from orchestrator.stores.tracking import Tracker
    from orchestrator.stores.tracking_reads import TrackingReader

    reader = TrackingReader(Tracker(stores.tracking_uri))  # what `sweep export RUN_ID` says
    assert reader.answer_of(run.info.run_id) == parent.data.tags[keys.ANSWER]
    assert reader.answer_of(next(x.info.run_id for x in confirm if x != run)) is None
    # the table ranks the levels by their mean over the confirmation seeds, in percent
    ranked = means.sort_values(ascending=False, kind="stable")
    assert [line.split()[1] for line in printed[2:4]] == list(ranked.index)
    for line, mean in zip(printed[2:4], ranked):
        shown = line.split()[2]
        assert abs(float(shown) - 100 * mean) <= 0.5 * 10 ** -len(shown.partition(".")[2])
    status = run_cli("status", "tinycmp", cwd=tmp_path)
    assert f"the comparison names {level}: val_acc {named}, the mean of 2 " in status.stdout
    assert "the answer: " in status.stdout and said[-1] != ""
    _check_units_lines_and_edges(stores, said, status.stdout, rep.stdout, level, means)
    # the export is that run's, and the end table lists that level first
    exported = [x.info.run_id for x in stores.runs("tinycmp", "trial")
                if x.data.tags.get(keys.EXPORTED) == "true"]
    assert exported == [run.info.run_id]
    table = said[next(i for i, line in enumerate(said) if "best configurations" in line):]
    # each seed tuned the level anew: the end table names the level, not one configuration
    first = next(line for line in table if "tuned anew" in line)
    assert first.strip("│ ").startswith(f"{level} (tuned anew at each seed)"), first
    assert {"lr_sensitivity.png", "tuning_progress.png", "confirmation_curves.png",
            "differences.png", "time_to_target.png", "expected_best.png"} <= \
        {p.name for p in (tmp_path / "rep" / "plots").iterdir()}
    # the expected best tuning score after k trials, on the parent run: each level's mean over
    # its tunings (one a seed) of the running best, recomputed here with pandas
    folder = stores.client().download_artifacts(parent.info.run_id, keys.EXPECTED_BEST_CSV)
    logged = pd.read_csv(folder)
    tune = pd.DataFrame([{"level": t.user_attrs[keys.LEVEL], "trial": t.number,
                          "replicate": t.user_attrs[keys.REPLICATE],
                          "value": t.value if t.state.name == "COMPLETE" else np.nan}
                         for t in stores.study("tinycmp").trials
                         if t.user_attrs.get(keys.PHASE) == "tune"]).sort_values("trial")
    tune["k"] = tune.groupby(["level", "replicate"]).cumcount() + 1
    tune["best"] = tune.groupby(["level", "replicate"])["value"].cummax()
    tune["best"] = tune.groupby(["level", "replicate"])["best"].ffill()
    expected = tune.groupby(["level", "k"])["best"].agg(["mean", "count"]).reset_index()
    assert sorted(tune["replicate"].unique()) == [1, 2]  # a tuning per paired seed
    got = logged.set_index(["level", "trials"])
    for _, row in expected.iterrows():
        assert got.loc[(row["level"], row["k"]), "expected_best"] == pytest.approx(row["mean"])
        assert got.loc[(row["level"], row["k"]), "tunings"] == row["count"]


def _check_units_lines_and_edges(stores, said: list[str], status: str, report: str, level: str,
                                 means: pd.Series) -> None:
    """The end of `sweep run` (``said``), `sweep status` and the report of the tiny real
    comparison against its study: the answer before any run id, a line per trial naming its
    level and phase, val_acc in percent, and the tuned bests at an edge of their range found
    here by hand (each replicate's best: the highest value, ties to the earliest)."""
    import statistics

    from optuna.distributions import FloatDistribution, IntDistribution

    from orchestrator.answer.edges import Edge

    answer = next(i for i, line in enumerate(said) if line.startswith("sweep report: "))
    assert answer < next(i for i, line in enumerate(said) if "best configurations" in line)
    assert answer < said.index("their MLflow runs:")
    study = stores.study("tinycmp")
    # each run id under the name of its configuration, which names the trial's level
    header, listed = None, 0
    for line in said[said.index("their MLflow runs:") + 1:]:
        if not line.startswith("  "):
            break
        if line.startswith("  trial "):
            level = study.trials[int(line.split()[1].rstrip(":"))].user_attrs[keys.LEVEL]
            assert header is not None and level in header, (header, line)
            listed += 1
        else:
            header = line
    assert listed > 0
    for t in study.trials:  # piped lines: each trial by its level and phase, val_acc in %
        a = t.user_attrs
        where = f"confirmation seed {a[keys.SEED]}" if a[keys.PHASE] == "confirm" else \
            f"tuning replicate {a[keys.REPLICATE]}"
        assert f"trial {t.number} (level {a[keys.LEVEL]}, {where}) complete: val_acc " \
               f"{100 * t.value:.2f}%" in said
    rows = {line.split()[0]: line.split() for line in status.splitlines()
            if line.split() and line.split()[0].isdigit()}
    assert "val_acc %" in status and all(rows[str(t.number)][2] == f"{100 * t.value:.2f}"
                                         for t in study.trials)
    confirmed = [t.value for t in study.trials if t.user_attrs[keys.PHASE] == "confirm"
                 and t.user_attrs[keys.LEVEL] == level]
    row = next(line for line in said if line.startswith(f"│ {level} (tuned anew"))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[1:3] == [f"{100 * means[level]:.2f}", f"{100 * statistics.stdev(confirmed):.2f}"]
    edges = []
    for lv in ("adam", "sgd"):
        bests = []
        for r in (1, 2):
            mine = [t for t in study.trials if t.user_attrs[keys.PHASE] == "tune"
                    and t.user_attrs[keys.LEVEL] == lv and t.user_attrs[keys.REPLICATE] == r]
            bests.append(max(mine, key=lambda t: (t.value, -t.number)))
        for name in (f"{lv}.lr", "batch_size"):
            d = bests[0].distributions[name]
            assert isinstance(d, (FloatDistribution, IntDistribution))
            at = [(math.log(b.params[name] / d.low) / math.log(d.high / d.low)) if d.log else
                  (b.params[name] - d.low) / (d.high - d.low) for b in bests]
            for side, hit in (("low", [x <= 0.05 for x in at]), ("high", [x >= 0.95 for x in at])):
                if any(hit):
                    edges.append(Edge(lv, name, side, tuple(b.params[name] for b, h in
                                                            zip(bests, hit) if h),
                                      d.low, d.high, d.log, 2))
    assert any(e.param == "batch_size" for e in edges)  # 32 or 64: always at an edge
    shown = [x for x in report.splitlines() if x.startswith("Tuned within 5%")]
    assert len(shown) == 1 and status.splitlines()[1] == shown[0]
    for e in edges:  # each edge by hand, in the one line
        lo, hi = min(e.values), max(e.values)
        value = f"{lo:.3g}" if lo == hi else f"{lo:.3g} to {hi:.3g}"
        assert f"{e.level} {e.param.rpartition('.')[2]} {value} at the {e.side} end" in shown[0]
        assert f"in {len(e.values)} of 2 tunings" in shown[0]
    assert shown[0].count(" end of [") == len(edges)


@pytest.mark.slow
def test_a_level_that_failed_every_tuning_trial_is_said_so_not_called_unfinished(tmp_path):
    """Rerunning cannot change a comparison whose level never completed a trial: the report
    says which level and why there is no verdict, with no raw table printed."""
    import yaml

    from tests.conftest import run_cli
    from tests.helpers import compare_spec

    (tmp_path / "boom.py").write_text(
        "def model(num_classes, in_channels):\n    raise RuntimeError('boom')\n")
    # one worker: a level failing every tuning trial does not depend on two trials at once
    spec = compare_spec(name="onefails", space={"model": ["mlp", "boom:model"]}, workers=1,
                        train={"dataset": "digits", "epochs": 1},
                        compare={"factor": "model", "tune_trials": 2, "seeds": 2})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(spec))
    ran = run_cli("run", "c.yaml", cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # failed trials, not a crash
    rep = run_cli("report", "onefails", "--out", "rep", cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    first = rep.stdout.splitlines()[0]
    assert first.startswith("No comparison of model: boom:model completed none of its 2 "
                            "tuning trials"), first
    assert "resumes it" not in rep.stdout and "Empty DataFrame" not in rep.stdout


def _no_verdict_headline(levels: list[str], tuning: dict[str, list[str]], finished: bool) -> str:
    """The headline of a comparison of lr with no pair of levels decided: ``tuning`` holds
    each level's tuning trials' states (tune_trials: the most any level has)."""
    from orchestrator.report.comparison import Comparison, sentences
    from orchestrator.report.load import SweepData
    from tests.helpers import compare_spec

    trials = pd.DataFrame([{"phase": "tune", "level": level, "state": state}
                           for level, states in tuning.items() for state in states],
                          columns=["phase", "level", "state"])
    planned = max(map(len, tuning.values()))
    c = Comparison("lr", "val_acc", "maximize", levels, [], {}, {}, {}, pd.DataFrame(), None,
                   "", finished=finished)
    data = SweepData(validate(compare_spec()), "cmp", trials, pd.DataFrame(), pd.DataFrame(),
                     None, compare={"factor": "lr", "tune_trials": planned})
    return sentences(c, data)[0]


def test_a_comparison_without_a_verdict_says_what_happened_in_its_headline():
    # the two levels 1e-3 and 0.001 were one: three complete tuning trials, nothing compared
    one = _no_verdict_headline(["0.001"], {"0.001": ["COMPLETE"] * 3}, finished=True)
    assert one == ("No comparison of lr: it has 1 level (0.001), so there is nothing to "
                   "compare; list two or more distinct levels under space and start it anew "
                   "with --new.")
    # every level failed or pruned all its tuning trials: named, in the plural
    both = _no_verdict_headline(["0.001", "0.01"], {"0.001": ["FAIL"], "0.01": ["PRUNED"]},
                                finished=True)
    assert both.startswith("No comparison of lr: 0.001, 0.01 each completed none of their 1 "
                           "tuning trial (each pruned or failed; "), both
    # one level did: it alone is named, while or after the other is confirmed
    for finished in (False, True):
        single = _no_verdict_headline(["0.001", "0.01"], {"0.001": ["COMPLETE", "FAIL"],
                                                          "0.01": ["FAIL", "FAIL"]}, finished)
        assert single.startswith("No comparison of lr: 0.01 completed none of its 2 tuning "
                                 "trials (each pruned or failed; "), single
    # every level tuned, the plan done, no pair of confirmation values
    none = _no_verdict_headline(["0.001", "0.01"], {"0.001": ["COMPLETE"], "0.01": ["COMPLETE"]},
                                finished=True)
    assert none == ("No comparison of lr: fewer than two levels have a confirmation value to "
                    "compare (the trials table says why).")
    assert _no_verdict_headline(["0.001", "0.01"], {"0.001": ["COMPLETE"], "0.01": ["COMPLETE"]},
                                finished=False).startswith("The comparison of lr is not finished")


# two factors' levels: label -> the level's values (warmup_epochs, clip_grad_norm)
TWO = {"warmup_epochs=0,clip_grad_norm=null": (0, None),
       "warmup_epochs=0,clip_grad_norm=1.0": (0, 1.0),
       "warmup_epochs=1,clip_grad_norm=1.0": (1, 1.0)}


def _plotted(levels: list[str], factor: str = "optimizer", metric: str = "val_acc"):
    """A comparison of ``levels`` (several factors: from :data:`TWO`) with a learning-rate
    sensitivity each (three tuning trials a level) and every pair compared over 4 paired
    seeds: the report's Comparison and its tuning trials."""
    from orchestrator.answer.stats import compare_paired
    from orchestrator.answer.words import Words
    from orchestrator.report.comparison import Comparison, lr_sensitivity

    tune = pd.DataFrame([{"level": lv, "params.lr": lr, "value": 0.9 - abs(lr - 0.01) - i / 100}
                         for i, lv in enumerate(levels) for lr in (1e-3, 1e-2, 1e-1)])
    sensitivity = {lv: lr_sensitivity(lv, g["params.lr"].to_numpy(), g["value"].to_numpy(),
                                      "maximize", metric) for lv, g in tune.groupby("level")}
    values = {lv: {s: 0.9 - i / 50 + s / 1000 * (i % 2) for s in range(1, 5)}
              for i, lv in enumerate(levels)}
    c = Comparison(factor, metric, "maximize", levels,
                   compare_paired(values, direction="maximize", factor=factor), {}, values,
                   sensitivity, pd.DataFrame(), None, "",
                   words=Words.of(factor.split(","), metric,
                                  {lv: TWO[lv] for lv in levels if "," in factor}))
    return c, tune


def test_the_sensitivity_panels_titles_never_run_into_each_other():
    """Four levels named by long values: each panel's title wrapped to its own width."""
    import matplotlib

    from orchestrator.report.comparison_plots import sensitivity_figure

    matplotlib.use("Agg")
    levels = [f"mypackage.optimizers:decoupled_weight_decay_variant_{i}" for i in range(4)]
    fig = sensitivity_figure(*_plotted(levels))
    fig.canvas.draw()
    boxes = [ax.title.get_window_extent(fig.canvas.get_renderer()) for ax in fig.axes]
    assert len(boxes) == 4 and all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    assert "".join(fig.axes[0].get_title().split("\n")) == levels[0]  # wrapped, whole


def test_the_sensitivity_panels_of_several_factors_name_the_factors_once():
    import matplotlib

    from orchestrator.report.comparison_plots import sensitivity_figure

    matplotlib.use("Agg")
    levels = list(TWO)[:2]
    c, tune = _plotted(levels, factor="warmup_epochs,clip_grad_norm")
    fig = sensitivity_figure(c, tune)
    assert list(c.sensitivity) == levels[::-1]  # a panel a level, in the sensitivity's order
    assert [ax.get_title() for ax in fig.axes] == ["0, 1.0", "0, null"]
    assert fig._suptitle.get_text() == "warmup_epochs, clip_grad_norm"


@pytest.mark.parametrize("metric, scale", [("val_acc", 100.0), ("val_loss", 1.0)])
def test_the_forest_plot_shows_differences_in_the_answers_unit(metric, scale):
    """An accuracy's differences in points (as the answer gives them), said in the axis
    label; any other metric in its own units; each pair named as the answer names levels."""
    import matplotlib

    from orchestrator.report.comparison_plots import forest_figure

    matplotlib.use("Agg")
    levels = list(TWO)
    c, _ = _plotted(levels, factor="warmup_epochs,clip_grad_norm", metric=metric)
    ax = forest_figure(c).axes[0]
    shown = ax.get_xlabel()
    assert shown == f"difference in {metric} (b - a)" + (", in points" if scale == 100 else "")
    # the points from the bottom: the pairs in reverse, each at its b - a, scaled by hand
    rows = c.results[::-1]
    means = {lv: np.mean(list(v.values())) for lv, v in c.confirm.items()}
    xs = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o"]
    assert xs == pytest.approx([scale * (means[r.b] - means[r.a]) for r in rows])
    names = dict(zip(levels, ["(0, null)", "(0, 1.0)", "(1, 1.0)"]))
    assert [t.get_text() for t in ax.get_yticklabels()] == \
        [f"{names[r.b]} - {names[r.a]}" for r in rows]
