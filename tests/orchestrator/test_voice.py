"""The answer's one voice: every word and figure of a comparison's answer is written by
orchestrator/answer/words.py and orchestrator/answer/finding.py, and a level is a tuple of
values until it is shown there (a value holding ``,clip_grad_norm=`` breaks nothing)."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState, create_trial
from scipy import stats as scipy_stats

from orchestrator.answer import compare, summary
from orchestrator.answer import stats as st
from orchestrator.answer.words import Words
from orchestrator.core import keys
from orchestrator.report import render, status
from orchestrator.report.comparison import Comparison as ReportComparison

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "orchestrator"
VOICE = {"answer/words.py", "answer/finding.py"}
# verdict words and the forms of an interval and a p-value
WORDS = ("better than", "worse than", "equivalent within", "equivalent to", "undecided after",
         "±", "+-", "p = ", "p < ")
# (module, the whole string) -> why it is no answer's text
ALLOWED = {
    ("report/display.py", " ± "): "the live view's ETA and its spread: a time, not an answer",
    ("running/submit.py", r"\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+(:\d{2}(:\d{2})?)?"):
        "a Slurm --time pattern, whose `+-` is a regular expression's, not text",
}


def _texts(path: Path) -> list[tuple[int, str]]:
    """Every string a module writes (an f-string's literal parts included), docstrings left
    out: (line, string)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def spoken_outside_the_voice(root: Path = ORCHESTRATOR) -> list[str]:
    """``module:line: word in 'string'`` for each verdict word or interval form outside the
    voice and the allow-list."""
    out = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where in VOICE:
            continue
        for line, text in _texts(path):
            if (where, text) in ALLOWED:
                continue
            out += [f"{where}:{line}: {word!r} in {text!r}" for word in WORDS if word in text]
    return out


def test_no_module_but_the_voice_writes_a_verdict_word_or_an_interval_form():
    assert spoken_outside_the_voice() == []


def test_every_allowed_string_is_still_there():
    """An entry of the allow-list whose string is gone goes too: the list stays short."""
    present = {(p.relative_to(ORCHESTRATOR).as_posix(), text)
               for p in ORCHESTRATOR.rglob("*.py") for _, text in _texts(p)}
    assert set(ALLOWED) <= present


def test_the_grep_finds_a_verdict_word_planted_in_another_module(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "x.py").write_text(
        '"""A docstring may say better than."""\n'
        'def f(a, p):\n    """So may this: p = 0.5."""\n'
        '    return f"{a} better than b (p = {p:.2g}); ±1"\n')
    (tmp_path / "answer").mkdir()
    (tmp_path / "answer" / "words.py").write_text('X = "a better than b"\n')
    assert spoken_outside_the_voice(tmp_path) == [
        "report/x.py:4: 'better than' in ' better than b (p = '",
        "report/x.py:4: 'p = ' in ' better than b (p = '",
        "report/x.py:4: '±' in '); ±1'"]


def test_a_precision_is_said_as_plus_or_minus_its_amount_in_the_unit_of_differences():
    acc, loss = Words.of(["optimizer"], "val_acc"), Words.of(["optimizer"], "val_loss")
    assert [acc.precision(p) for p in (0.01, 0.005, 0.02)] == \
        ["±1 point", "±0.5 points", "±2 points"]
    assert loss.precision(0.02) == "±0.02 val_loss"


# ------------------------------------------------- a level's values, never its label read back

FACTORS = ("model", "clip_grad_norm")
ODD = "mlp,clip_grad_norm=2"  # a string value holding a comma and the other factor's name


def _comparison() -> compare.Comparison:
    """Two factors of two levels each, one of whose values reads as a label's separator, built
    as Comparison.of builds its levels (compare.level_label, the parameters as values)."""
    cells = [(m, c) for m in (ODD, "cnn") for c in (None, 1.0)]
    levels = tuple(compare.Level(compare.level_label(FACTORS, cell), dict(zip(FACTORS, cell)))
                   for cell in cells)
    return compare.Comparison(",".join(FACTORS), levels, 0, 4, 4, 0.01, 0, "maximize",
                              "val_acc", compare.ONCE, "pairs")


def _values(c: compare.Comparison) -> dict[str, dict[int, float]]:
    """val_acc by level and seed: clipping adds 20 points, the odd model 0.5, plus noise."""
    rng = np.random.default_rng(5)
    out = {}
    for lv in c.levels:
        base = 0.7 + 0.2 * (lv.params["clip_grad_norm"] is not None) + \
            0.005 * (lv.params["model"] == ODD)
        out[lv.label] = {s: float(base + rng.normal(0, 0.003)) for s in range(1, 5)}
    return out


def test_a_value_holding_another_factors_name_is_shown_whole_through_summary_and_report():
    c = _comparison()
    label = compare.level_label(FACTORS, (ODD, 1.0))
    assert label == "model=mlp,clip_grad_norm=2,clip_grad_norm=1.0"  # no longer splittable
    values = _values(c)
    results = st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4,
                                precision=0.01)
    s = summary.of_comparison(c, values, results, finished=False)
    cells = {row[1] for row in s.rows}
    assert cells == {"mlp,clip_grad_norm=2, null", "mlp,clip_grad_norm=2, 1.0", "cnn, null",
                     "cnn, 1.0"}
    text = "\n".join(s.lines())
    assert "(mlp,clip_grad_norm=2, 1.0)" in text and "model=" not in text
    # the report's table of levels and its lines, as report.md writes them
    report = ReportComparison(c.factor, c.metric, c.direction, [lv.label for lv in c.levels],
                              list(results), {}, values, {}, pd.DataFrame(), None, "",
                              summary=s, words=summary.words_of(c))
    blocks = render.summary_blocks(report)
    assert sorted(row[1] for row in blocks[0].rows) == sorted(cells)
    assert all("model=" not in line for kind, line in blocks[1:])


def test_the_answer_and_sweep_status_name_such_a_level_by_its_values():
    c = _comparison()
    values = _values(c)
    results = tuple(st.compare_paired(values, direction="maximize", bounds=(0.0, 1.0), seeds=4,
                                      precision=0.01))
    trials = []
    for lv in c.levels:
        for seed, value in values[lv.label].items():
            trial = create_trial(state=TrialState.COMPLETE, value=value, params={},
                                 distributions={},
                                 user_attrs={keys.PHASE: compare.CONFIRM, keys.LEVEL: lv.label,
                                             keys.SEED: seed})
            trial.number = len(trials)
            trials.append(trial)
    found = compare.answer(c, trials, compare.Done(results, values))
    assert found.level == compare.level_label(FACTORS, (ODD, 1.0))  # the best mean
    mine = list(values[found.level].values())
    half = 100 * scipy_stats.t.ppf(0.975, 3) * np.std(mine, ddof=1) / math.sqrt(4)
    shown = f"{100 * np.mean(mine):.{1 - math.floor(math.log10(half))}f}%"
    assert found.why.startswith(f"(mlp,clip_grad_norm=2, 1.0): val_acc {shown}, mean over 4 ")
    # sweep status reads the answer's record (the level's values beside its label)
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(keys.IDENTITY, json.dumps({"objective": {"metric": "val_acc"}}))
    study.set_user_attr(keys.COMPARE, json.dumps({"factor": list(FACTORS)}))
    study.set_user_attr(keys.ANSWER, {
        "level": found.level, "values": list(c.cells()[found.level]), "mean": found.mean,
        "half": found.half, "seeds": found.seeds, "trial": found.trial.number,
        "text": found.why})
    line = status.summary_line(study)
    assert line.endswith(f"; the comparison names (mlp,clip_grad_norm=2, 1.0): val_acc {shown}, "
                         f"the mean of 4 confirmation seeds (its weights: trial "
                         f"{found.trial.number})")


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_a_pairs_sentence_says_its_amount_interval_and_p_in_the_summarys_forms(direction):
    """The pair sentence of `sweep report A B`, the time to target and the scaling rules:
    points for an accuracy, 2 significant digits of the half-width, ``p = 0.0xx``, checked
    against scipy."""
    from orchestrator.answer.words import pair_sentence

    a = [0.80, 0.82, 0.81, 0.83, 0.80]
    b = [0.84, 0.85, 0.83, 0.86, 0.85]
    [r] = st.compare_paired({"a": dict(enumerate(a)), "b": dict(enumerate(b))},
                            direction=direction, bounds=(0.0, 1.0))
    d = np.subtract(b, a)
    half = 100 * scipy_stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    digits = 1 - math.floor(math.log10(half))
    p = scipy_stats.ttest_rel(b, a).pvalue
    winner, loser = ("b", "a") if direction == "maximize" else ("a", "b")
    assert pair_sentence(Words.of((), "val_acc"), r, direction, pairs="matched trial") == (
        f"{winner} better than {loser} by {100 * d.mean():.{digits}f} points "
        f"[{100 * d.mean() - half:.{digits}f}, {100 * d.mean() + half:.{digits}f}] (95% t "
        f"interval) over 5 matched trials; Holm p = {p:.2g}")
