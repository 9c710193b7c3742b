"""The end of a ``sweep run``: whether this process does it (not while other machines' trials
run, nor when another process of the study claimed it), and what the parent run gets then: a
comparison's pairs and verdict, the report's headline as its description, its end."""
from __future__ import annotations

import csv
import posixpath
import tempfile
from pathlib import Path

from ..answer import budget, compare, stats, summary
from ..core import keys
from ..core.errors import SweepError
from .book import TrialBook


def claim_sweep_end(book: TrialBook, ran_trials: bool) -> bool:
    """Whether the end of the sweep (held-out test, export, parent run end) is this
    process's to do: not while other machines' trials run (the last machine does it), nor
    when another process of the study claimed it first
    (:meth:`~orchestrator.stores.machines.Machines.claim_end`; ``ran_trials``: whether this
    process started a trial)."""
    study = book.study
    if study.running():
        book.say(f"{study.running()} trial(s) still run on other machines; the "
                 f"last of them ends the sweep (held-out test, export, parent run)")
        return False
    held = study.machines.claim_end(study.counts()["finished"], ran_trials=ran_trials)
    if held is None:
        return True
    owner = held["owner"]
    done = "was done" if held.get("done") else "is done"
    book.say(f"the end of the sweep (held-out test, export, parent run) {done} by the "
             f"other sweep run process (host {owner['host']}, pid {owner['pid']})")
    if held.get("done") and \
            book.tracker.client.get_run(book.parent_id).info.status == "RUNNING":
        book.runs.end_parent("FINISHED")  # resumed here after that end
    return False


def close_sweep(book: TrialBook) -> None:
    """Once the held-out test and the export are done: the parent run's best recorded once
    more from the storage as it is, after every trial ended (a comparison's answer, whatever
    trial ended last and whichever process recorded before: :meth:`TrialBook.record_best`), a
    decided comparison's pairs and verdict, the parent run's description, the parent run
    FINISHED, and this process's claim of the end marked done."""
    book.study.fresh()
    book.record_best(again=True)
    log_comparison(book)
    note_parent(book)
    book.runs.end_parent("FINISHED")
    book.study.machines.end_done()


def log_comparison(book: TrialBook) -> str | None:
    """At the end of a decided comparison: its pairs as ``report/comparison.csv`` and its
    answer's sentence (:mod:`orchestrator.answer.summary`) as the tag ``sweep.verdict`` on the
    parent run (``sweep report`` writes both again from the stores), and on each confirmation
    run its level's mean as the table of levels rounds it (:func:`log_level_means`). Says
    nothing: the end of ``sweep run`` prints the answer once (its sentence and table, read back
    as ``sweep report`` reads it). Returns the sentence; None when the sweep is no comparison,
    or undecided."""
    plan = book.study.plan()
    if plan is None or not isinstance(plan.action, compare.Done):
        return None
    found = compare.final_answer(book.study.comparison, book.study.trials())
    sentence = summary.of_comparison(book.study.comparison, plan.action.values,
                                     plan.action.results, found,
                                     effects=plan.action.effects).sentence
    folder, name = posixpath.split(keys.COMPARISON_CSV)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(stats.CSV_COLUMNS))
            writer.writeheader()
            writer.writerows(r.as_row() for r in plan.action.results)
        book.tracker.client.log_artifact(book.parent_id, str(path), folder)
        curves = budget.of_comparison(book.study.comparison, book.study.trials())
        path = Path(tmp) / posixpath.basename(keys.EXPECTED_BEST_CSV)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(budget.CSV_COLUMNS))
            writer.writeheader()
            writer.writerows(budget.rows(curves))
        book.tracker.client.log_artifact(book.parent_id, str(path), folder)
    log_level_means(book, plan.action.values)
    book.tracker.log_final(book.parent_id, {}, tags={keys.VERDICT: sentence})
    return sentence


def log_level_means(book: TrialBook, values: dict[str, dict[int, float]]) -> None:
    """Each confirmation run of the comparison gets its level's mean over ``values`` (level ->
    {seed: value}, the decided plan's) with the digits of the report's table of levels
    (:data:`keys.LEVEL_MEAN`, :func:`summary.shown_means`). The MLflow view of the comparison
    shows it a row a level, as the largest of the level's runs' (``server.runs_view``): MLflow
    prints its own mean of the seeds' values with all its digits, even of equal rounded values
    (0.97 three times: 0.9700000000000001), and the largest of equal values is that value."""
    means = summary.shown_means(book.study.comparison.metric, values)
    for t in book.study.trials():
        level, run_id = t.user_attrs.get(keys.LEVEL), t.user_attrs.get(keys.RUN_ID)
        if t.user_attrs.get(keys.PHASE) == compare.CONFIRM and level in means and run_id:
            book.tracker.log_final(run_id, {keys.LEVEL_MEAN: means[level]})


def note_parent(book: TrialBook) -> None:
    """The parent run's description, shown on its MLflow page: the report's headline (for a
    comparison, the answer: its sentence, its table of levels and the lines under it), read
    back from the stores as ``sweep report`` reads them."""
    from ..report import load_sweep, log_note

    try:  # a comparison's sentences on time to target read the curves
        log_note(load_sweep(book.study.name, book.tracking_uri, book.storage,
                            curves=book.study.comparison is not None))
    except SweepError as e:  # the sweep itself is done and stored: say why, go on
        book.say(f"the parent run's description was not written: {e}")
