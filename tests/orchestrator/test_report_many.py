"""`sweep report A B`: two real sweeps of one question (1 against 2 epochs, an added batch size)
side by side, their paired figures checked against a hand computation in both directions."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.conftest import run_cli

pytestmark = pytest.mark.slow  # end to end: real sweeps reported


def _by_hand(stores, metric: str) -> dict[str, dict[int, float]]:
    """sweep -> {batch size: the metric's last value}, read from the trial runs."""
    return {name: {int(r.data.params["batch_size"]): r.data.metrics[metric]
                   for r in stores.runs(name, "trial")} for name in ("short", "long")}


def _verdict(p: float, low: float, high: float, diff: float, maximize: bool) -> str:
    if not p < 0.05 or low <= 0 <= high:
        return "undecided"
    return "long better" if (diff > 0) == maximize else "short better"


def _said(row) -> str:
    """A results row's verdict with its winner (the CSV's verdict and winner columns)."""
    return f"{row['winner']} better" if row["verdict"] == "better" else row["verdict"]


def _rounded(value: float, scale: float, low: float, high: float) -> str:
    """``value`` as the answer writes it: to 2 significant digits of the half-width of the
    interval [low, high] (in the metric's units; ``scale`` 100 for points)."""
    return f"{value:.{max(0, 1 - math.floor(math.log10(scale * (high - low) / 2)))}f}"


def _span(ends, scale: float) -> str:
    """An interval ``[low, high]`` as the answer writes it (:func:`_rounded`)."""
    low, high = ends
    return (f"[{_rounded(scale * low, scale, low, high)}, "
            f"{_rounded(scale * high, scale, low, high)}]")


def _t(diff: np.ndarray, limits=None) -> tuple[float, float]:
    """The 95% Student t interval of the mean difference, clipped to ``limits``."""
    half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff))
    low, high = diff.mean() - half, diff.mean() + half
    return (low, high) if limits is None else (max(low, limits[0]), min(high, limits[1]))


@pytest.fixture(scope="module")
def reported(two_sweeps):
    rep = run_cli("report", "short", "long", "--out", "rep", cwd=two_sweeps.dir)
    assert rep.returncode == 0, rep.stderr
    return two_sweeps, two_sweeps.dir / "rep", rep.stdout


def test_matched_trials_and_their_paired_difference_match_a_hand_computation(reported):
    stores, out, stdout = reported
    acc = _by_hand(stores, "val_acc")
    sizes = [32, 64, 128]
    diff = np.array([acc["long"][b] - acc["short"][b] for b in sizes])
    table = pd.read_csv(out / "comparison.csv")
    row = table[table["scope"] == "all matched trials"].iloc[0]
    assert (row["a"], row["b"], row["pairs"]) == ("short", "long", 3)
    assert row["diff_b_minus_a"] == pytest.approx(diff.mean())
    low, high = _t(diff, (-1.0, 1.0))  # val_acc lives in [0, 1]: t, clipped to [-1, 1]
    assert (row["ci_low"], row["ci_high"], row["ci_level"]) == pytest.approx((low, high, 0.95))
    p = stats.ttest_rel([acc["long"][b] for b in sizes], [acc["short"][b] for b in sizes]).pvalue
    assert row["t_test_p"] == pytest.approx(p) and row["p_holm"] == pytest.approx(p)
    assert row["wilcoxon_p"] == pytest.approx(stats.wilcoxon(diff).pvalue)
    assert _said(row) == _verdict(p, low, high, diff.mean(), maximize=True)
    # each configuration on its own: one seed, too few for an interval or a verdict: no row,
    # but a line naming each
    assert table["scope"].tolist() == ["all matched trials"]
    assert ("No row, fewer than 3 matched trials (too few for an interval and a verdict): "
            + "; ".join(f"batch_size={b}, long against short (1 trial)" for b in sizes) + ".") \
        in (out / "report.md").read_text()
    pairs = pd.read_csv(out / "pairs.csv").set_index("configuration")
    assert pairs.loc["batch_size=256", "value:long"] == pytest.approx(acc["long"][256])
    assert math.isnan(pairs.loc["batch_size=256", "value:short"])
    unmatched = pd.read_csv(out / "unmatched.csv")
    assert unmatched[["sweep", "configuration", "seed"]].values.tolist() == \
        [["long", "batch_size=256", 0]]
    assert "no trial of short ran this configuration with seed 0" in unmatched["why"][0]
    html = (out / "report.html").read_text()
    headline = stdout.splitlines()[0]
    assert headline.startswith(("long better than short", "short better than long",
                                "short against long undecided"))  # names as written
    # the interval in the headline's units (points), turned with the lead, to 2 significant
    # digits of its half-width
    sign = -1 if _said(row) == "short better" else 1
    assert f"{_span(sorted((sign * low, sign * high)), 100)} (95% t interval" in headline
    assert "over 3 matched trials" in headline
    assert headline in (out / "report.md").read_text()
    assert "epochs: 1 (short), 2 (long)" in html and "data:image/png;base64," in html


def _as_minimized(data, metric: str):
    """The same sweep read with ``metric`` as a minimized objective (its last value)."""
    objective = data.spec.objective.model_copy(update={"metric": metric,
                                                       "direction": "minimize"})
    trials = data.trials.assign(value=data.trials[f"metrics.{metric}"])
    return replace(data, spec=data.spec.model_copy(update={"objective": objective}),
                   trials=trials)


def test_a_minimized_objective_is_compared_the_other_way(two_sweeps):
    from orchestrator.report import compare_sweeps, load_sweep

    loaded = [load_sweep(n, two_sweeps.tracking_uri, str(two_sweeps.journal))
              for n in ("short", "long")]
    for metric in ("val_acc", "val_loss"):  # bounded: bootstrap interval; unbounded: t
        many = compare_sweeps([_as_minimized(d, metric) for d in loaded])
        values = _by_hand(two_sweeps, metric)
        diff = np.array([values["long"][b] - values["short"][b] for b in (32, 64, 128)])
        row = many.results.iloc[0]
        assert row["diff_b_minus_a"] == pytest.approx(diff.mean())
        low, high = _t(diff, (-1.0, 1.0) if metric == "val_acc" else None)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high))
        p = stats.ttest_1samp(diff, 0.0).pvalue
        verdict = _verdict(p, low, high, diff.mean(), maximize=False)
        assert _said(row) == verdict
        sentence = many.sentences()[0]
        if verdict == "undecided":
            assert sentence.startswith("short against long undecided after 3 matched trials")
        else:  # the lower value wins, by a positive amount
            winner = verdict.split()[0]
            loser = "long" if winner == "short" else "short"
            scale, unit = (100, "points") if metric == "val_acc" else (1, "val_loss")
            assert sentence.startswith(f"{winner} better than {loser} by "
                                       f"{_rounded(scale * abs(diff.mean()), scale, low, high)} "
                                       f"{unit} [")
    # named the other way round (a = long): b - a changes sign, the winner's lead does not
    acc = _by_hand(two_sweeps, "val_acc")
    diff = np.array([acc["short"][b] - acc["long"][b] for b in (32, 64, 128)])
    many = compare_sweeps(loaded[::-1])
    row = many.results.iloc[0]
    assert (row["a"], row["b"]) == ("long", "short")
    assert row["diff_b_minus_a"] == pytest.approx(diff.mean())
    low, high = _t(diff, (-1.0, 1.0))
    verdict = _verdict(stats.ttest_1samp(diff, 0.0).pvalue, low, high, -diff.mean(), True)
    assert _said(row) == verdict
    if verdict != "undecided":
        winner = verdict.split()[0]
        loser = "long" if winner == "short" else "short"
        lead = -diff.mean() if winner == "long" else diff.mean()
        assert many.sentences()[0].startswith(f"{winner} better than {loser} by "
                                              f"{_rounded(100 * lead, 100, low, high)} points [")


def test_sweeps_that_ask_another_question_are_refused_with_one_line(two_sweeps, capsys):
    from orchestrator.core.errors import SweepError
    from orchestrator.report import compare_sweeps, load_sweep

    short, long = (load_sweep(n, two_sweeps.tracking_uri, str(two_sweeps.journal))
                   for n in ("short", "long"))
    cases = {
        "a sweep is named twice": [short, short],
        "long's objective is val_loss (minimize), short's val_acc (maximize)":
            [short, _as_minimized(long, "val_loss")],
        "long is a comparison (compare:)": [short, replace(long, compare={"factor": "x"})],
    }
    for words, datas in cases.items():
        with pytest.raises(SweepError) as e:
            compare_sweeps(datas)
        assert words in str(e.value) and "\n" not in str(e.value)
    # not a refusal: a sweep without trials yet leaves every trial of the other unmatched
    many = compare_sweeps([replace(short, trials=pd.DataFrame()), long])
    assert many.results.empty and not many.too_few and len(many.unmatched) == 4
    assert many.sentences()[0].startswith("long against short: no paired difference")
    from orchestrator.commands.cli import main

    assert main(["report", "short", "long", "--by", "batch_size", "--tracking-uri",
                 two_sweeps.tracking_uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--by" in err and "leave it out" in err


def _report_md(datas, out) -> tuple:
    """The side-by-side report of ``datas`` written into ``out``: (its Many, report.md's text,
    comparison.csv's rows)."""
    from orchestrator.report.many import build_many_report

    report = build_many_report(datas, out)
    return report.many, (out / "report.md").read_text(), pd.read_csv(out / "comparison.csv")


def test_sweeps_without_a_matched_configuration_and_seed_get_one_line_and_no_paired_table(
        two_sweeps, tmp_path):
    from orchestrator.report import load_sweep

    short, long = (load_sweep(n, two_sweeps.tracking_uri, str(two_sweeps.journal))
                   for n in ("short", "long"))
    other_seed = replace(long, trials=long.trials.assign(seed=100))  # nothing matches
    many, md, rows = _report_md([short, other_seed], tmp_path)
    assert rows.empty and many.results.empty and not many.too_few  # no row of 0 pairs
    assert "Paired differences" not in md and "undecided" not in md
    assert ("No paired differences: no configuration and seed was completed by two of the "
            "sweeps (unmatched.csv lists each trial and why).") in md
    assert many.sentences() == [
        "long against short: no paired difference, as no configuration was completed with the "
        "same seed by both (trials are matched by batch_size and seed; unmatched.csv lists each "
        "trial and why)."]
    assert len(many.unmatched) == 7 and not (tmp_path / "plots" / "matched.png").exists()


def test_fewer_matched_trials_than_a_comparison_needs_give_no_interval_or_verdict(two_sweeps,
                                                                                tmp_path):
    from orchestrator.report import load_sweep
    from orchestrator.report.many import ALL

    short, long = (load_sweep(n, two_sweeps.tracking_uri, str(two_sweeps.journal))
                   for n in ("short", "long"))
    two = replace(long, trials=long.trials[long.trials["params.batch_size"].isin([32, 64])])
    many, md, rows = _report_md([short, two], tmp_path)
    assert rows.empty and many.results.empty  # 2 matched trials: no row with a verdict
    assert many.too_few == [(ALL, "short", "long", 2), ("batch_size=32", "short", "long", 1),
                            ("batch_size=64", "short", "long", 1)]
    assert "Paired differences" not in md and "undecided" not in md
    assert ("No paired differences: at most 2 trials matched (the same configuration and seed "
            "in two sweeps), fewer than the 3 an interval and a verdict need") in md
    assert many.sentences() == [
        "long against short: no interval and no verdict from 2 trials matched (the same "
        "configuration and seed in both), fewer than the 3 a paired comparison needs."]
    assert many.sentences()[0] in md and (tmp_path / "plots" / "matched.png").exists()
