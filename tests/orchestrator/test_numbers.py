"""Numbers as a person reads them (issue 44, class 4): a level's name writes its value as a sweep
file does (``1e-5``, never Python's ``1e-05``) in the comparison's labels, table, notes and
settings; a terminal table shows a dash for a number it cannot give, never ``NaN``, and says why
once."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hs
from scipy import stats as scipy_stats

from orchestrator.answer import compare, stats, summary
from orchestrator.config.reading import parse_yaml
from orchestrator.config.spec import load_spec, validate
from orchestrator.core.numbers import plain_exponent, value_text
from orchestrator.report import factor_table, paired_differences
from orchestrator.report.display import (
    MISSING,
    config_name,
    no_level_spread,
    no_pair_interval,
    params_text,
    table_lines,
)
from tests.conftest import run_cli, tiny_spec
from tests.helpers import compare_spec

# ------------------------------------------------------------------ a value as YAML writes it


@pytest.mark.parametrize("value, text", [
    (1e-5, "1e-5"), (3e-3, "3e-3"), (1e-4, "1e-4"), (5e-4, "5e-4"), (-1e-5, "-1e-5"),
    (1.5e-7, "1.5e-7"), (2.5e-300, "2.5e-300"), (0.00015, "1.5e-4"),
    (0.01, "0.01"), (0.05, "0.05"), (0.1, "0.1"), (0.25, "0.25"), (0.0015, "0.0015"),
    (0.9, "0.9"), (0.0, "0.0"), (1.0, "1.0"), (100.0, "100.0"), (123456.789, "123456.789"),
    (1e16, "1e16"), (2.5e300, "2.5e300"), (math.inf, "inf"), (-math.inf, "-inf"),
    (np.float32(1e-5), "1e-5"), (np.float64(3e-3), "3e-3"), (np.float16(6e-8), "6e-8"),
    (64, "64"), (0, "0"), (True, "true"), (False, "false"), (None, "null"), ("adam", "adam"),
    ("1e-05", "1e-05"),  # text is itself, even one that looks like a number
])
def test_a_value_is_written_as_a_sweep_file_writes_it(value, text):
    assert value_text(value) == text


@settings(max_examples=300, deadline=None)
@given(hs.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_floats_text_reads_back_as_the_same_float_with_a_plain_exponent(value):
    text = value_text(value)
    read = parse_yaml(f"v: {text}", Path("v.yaml"))["v"]
    assert isinstance(read, float) and read == value and \
        math.copysign(1, read) == math.copysign(1, value), text
    assert "e+" not in text and "e-0" not in text and not text.startswith(("e", "-e")), text
    python = plain_exponent(repr(value))  # never longer than Python's own shortest digits
    assert len(text) <= len(python) or abs(value) >= 1 and text == python, (text, python)


@pytest.mark.parametrize("text, plain", [
    ("1e-05", "1e-5"), ("2.5e+16", "2.5e16"), ("1e+00", "1e0"), ("-1.5e-300", "-1.5e-300"),
    ("0.003", "0.003"), ("1e5", "1e5"), ("lr=1e-05, wd=3e-08", "lr=1e-5, wd=3e-8"),
])
def test_a_formatted_figures_exponent_is_written_plain(text, plain):
    assert plain_exponent(text) == plain


# --------------------------------------------------------------- a comparison's level names


def _labels(tmp_path, text: str) -> list[str]:
    spec = compare_spec(space={"lr": "LR", "batch_size": [32, 64]},
                        compare={"factor": "lr", "tune_trials": 2})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(spec).replace("LR", text))
    return [lv.label for lv in compare.Comparison.of(load_spec(path)).levels]


@pytest.mark.parametrize("written", ["[1e-5, 3e-3]", "[0.00001, 0.003]", "[1.0e-5, 3.0E-3]",
                                     "[10e-6, 0.3e-2]"])
def test_a_levels_name_writes_its_value_as_yaml_does_however_the_file_spells_it(tmp_path,
                                                                                  written):
    """``lr: [1e-5, 3e-3]`` named its levels ``1e-05`` and ``0.003`` (Python's str)."""
    assert _labels(tmp_path, written) == ["1e-5", "3e-3"]


def test_a_level_of_several_factors_names_each_value_as_yaml_does():
    spec = validate(compare_spec(
        space={"lr": [1e-5, 0.02], "weight_decay": [0.0, 1e-4], "clip_grad_norm": [None, 1e-8],
               "batch_size": [32, 64]},
        compare={"factor": ["lr", "weight_decay", "clip_grad_norm"], "tune_trials": 1}))
    labels = [lv.label for lv in compare.Comparison.of(spec).levels]
    assert labels[:4] == ["lr=1e-5,weight_decay=0.0,clip_grad_norm=null",
                          "lr=1e-5,weight_decay=0.0,clip_grad_norm=1e-8",
                          "lr=1e-5,weight_decay=1e-4,clip_grad_norm=null",
                          "lr=1e-5,weight_decay=1e-4,clip_grad_norm=1e-8"]
    assert labels[-1] == "lr=0.02,weight_decay=1e-4,clip_grad_norm=1e-8"


def test_the_comparisons_summary_names_its_levels_as_the_file_wrote_them():
    """The sentence, the table and the notes of ``sweep run``'s end and ``sweep report``."""
    spec = validate(compare_spec(space={"lr": [1e-5, 3e-3, 1e-4], "batch_size": [32, 64]},
                                 compare={"factor": "lr", "tune_trials": 2, "seeds": 3}))
    c = compare.Comparison.of(spec)
    values = {"1e-5": {1: 0.50, 2: 0.60, 3: 0.55}, "1e-4": {1: 0.70, 2: 0.74, 3: math.nan},
              "3e-3": {1: 0.90, 2: 0.92, 3: 0.95}}
    assert {lv.label for lv in c.levels} == set(values)
    results = stats.compare_paired(values, direction=c.direction, seeds=c.seeds,
                                   factor=c.factor)
    s = summary.of_comparison(c, values, results)
    text = "\n".join(s.lines())
    assert "e-0" not in text, text
    assert [row[1] for row in s.rows] == ["3e-3", "1e-4", "1e-5"]  # ranked by their means
    assert "best mean 3e-3" in s.sentence and "than 1e-5 by" in s.sentence, s.sentence
    assert any(n.startswith("1e-4 gave no finite val_acc on 1 of 3 seeds") for n in s.notes)


def test_a_trials_settings_and_run_name_write_an_exponent_plainly():
    assert params_text({"lr": 1e-5, "batch_size": 64, "wd": 0.0031622776}) == \
        "lr=1e-5, batch_size=64, wd=0.003162"
    assert config_name({"optimizer": "sgd", "lr": 1e-5, "clip_grad_norm": 1e-8,
                        "weight_decay": 2.5e-5}) == "sgd lr=1e-5 wd=2.5e-5 clip1e-8"


# -------------------------------------------------------------- the report's terminal tables


def _one_seed_grid() -> pd.DataFrame:
    """A grid over lr, one trial a level, as the report's trial table holds it."""
    return pd.DataFrame({"trial": range(3), "state": "COMPLETE", "value": [0.13, 0.22, 0.84],
                         "repeat": 0, "params.lr": [1e-5, 1e-4, 3e-3], "searched": "lr"})


def test_a_one_seed_grids_level_table_shows_a_dash_and_why_once_never_nan():
    table = factor_table(_one_seed_grid(), ["lr"])
    lines = table_lines(table, no_level_spread)
    assert "NaN" not in "\n".join(lines) and "nan" not in "\n".join(lines)
    header, *rows, why = lines
    assert header.split() == ["factor", "level", "mean", "std", "ci_low", "ci_high", "n"]
    assert [r.split() for r in rows] == [["lr", "1e-5", "0.13", "-", "-", "-", "1"],
                                         ["lr", "1e-4", "0.22", "-", "-", "-", "1"],
                                         ["lr", "3e-3", "0.84", "-", "-", "-", "1"]]
    assert why.startswith(f"{MISSING}: 1 trial at a level: its spread and interval need 2")


def test_a_table_says_each_reason_once_and_nothing_where_no_number_is_missing():
    """lr 1e-5 and 1e-4 one trial each, batch 32 two trials alike: two reasons, each once."""
    trials = pd.DataFrame({"trial": range(4), "state": "COMPLETE",
                           "value": [0.5, 0.5, 0.6, 0.7], "repeat": [0, 0, 0, 1],
                           "params.lr": [1e-5, 1e-4, 3e-3, 3e-3],
                           "params.batch_size": [32, 32, 64, 64], "searched": "lr,batch_size"})
    lines = table_lines(factor_table(trials, ["lr", "batch_size"]), no_level_spread)
    assert "NaN" not in "\n".join(lines)
    reasons = [line for line in lines if line.startswith(f"{MISSING}: ")]
    assert len(lines) == 1 + 5 + 2 and reasons == lines[-2:], lines
    assert reasons[0].startswith(f"{MISSING}: 1 trial at a level")
    assert reasons[1] == f"{MISSING}: every trial at a level gave the same value: no spread, " \
                         f"no interval"
    x = np.array([0.6, 0.7])  # lr 3e-3 and batch 64: a spread and an interval, as scipy says
    low, high = scipy_stats.t.interval(0.95, 1, loc=x.mean(), scale=scipy_stats.sem(x))
    figures = [f"{v:.4g}" for v in (x.mean(), x.std(ddof=1), low, high)]
    assert lines[3].split() == ["lr", "3e-3", *figures, "2"]
    assert lines[5].split() == ["batch_size", "64", *figures, "2"]
    assert lines[4].split() == ["batch_size", "32", "0.5", "0", "-", "-", "2"]
    full = factor_table(trials[trials["params.lr"] == 3e-3], ["lr"])
    assert [line.split() for line in table_lines(full, no_level_spread)[1:]] == \
        [lines[3].split()]  # nothing missing: no reason said


def test_a_paired_table_without_spread_shows_a_dash_and_why_once():
    """Two levels paired over 3 seeds, every pair 0.1 apart: a difference, no interval."""
    trials = pd.DataFrame({"trial": range(6), "state": "COMPLETE",
                           "value": [0.5, 0.6, 0.7, 0.6, 0.7, 0.8], "repeat": [0, 1, 2] * 2,
                           "params.lr": [1e-5] * 3 + [3e-3] * 3, "searched": "lr"})
    paired = paired_differences(trials, ["lr"], direction="maximize")
    columns = ["factor", "a", "b", "pairs", "mean_diff_b_minus_a", "ci_low", "ci_high",
               "verdict"]
    header, row, why = table_lines(paired, no_pair_interval, columns)
    assert header.split()[:5] == columns[:5]
    assert row.split()[:7] == ["lr", "1e-5", "3e-3", "3", "0.1", "-", "-"]
    assert why == f"{MISSING}: every pair differed by the same amount: no spread, no interval"


@pytest.mark.slow  # a real 3-trial sweep and its report
def test_a_one_seed_grid_sweeps_end_and_report_show_levels_as_written_and_no_nan(tmp_path):
    spec = tiny_spec(name="g1", sampler={"name": "grid"}, trials=None,
                     train={"dataset": "digits", "model": "mlp", "epochs": 1},
                     space={"lr": "LR"})
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec).replace("LR", "[1e-5, 3e-3, 1e-4]"))
    ran = run_cli("run", "g.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "lr=1e-5" in ran.stdout and "e-0" not in ran.stdout, ran.stdout
    report = run_cli("report", "g1", cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    out = report.stdout
    assert "NaN" not in out and "e-0" not in out, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["lr"]]
    assert [r[1] for r in rows] == ["1e-5", "1e-4", "3e-3"] and all(r[3:6] == ["-"] * 3
                                                                    for r in rows), out
    assert sum(line.startswith(f"{MISSING}: ") for line in out.splitlines()) == 1, out
