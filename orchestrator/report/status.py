"""``sweep status``: the sweeps a study storage holds, or one sweep's trials.

Read from the Optuna storage alone (the MLflow run ids are in the trials' user attrs), so it
answers while a sweep runs and writes nothing; a storage that does not exist yet is empty.
"""
from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..answer import objectives
from ..answer.words import Words
from ..core import keys, paths
from ..core.errors import ExitCode, SweepError, did_you_mean
from ..core.urls import RDB_SCHEMES, mask
from ..stores.storages import default_storage, open_storage
from ..stores.study import state_counts
from .display import clock, params_text

NUMERIC = {"trials", "complete", "running", "pruned", "failed", "#", "epochs", "value"}
NUMERIC_SUFFIX = " %"  # a comparison's accuracy column (val_acc %) is a number too
WRAPS = {"sweep", "best", "started", "last activity", "params", "note"}


def storage_url(tracking_uri: str | None, storage: str | None) -> str:
    """The study storage the other commands would use for these flags."""
    return storage or default_storage(tracking_uri or paths.default_tracking_uri())


def show(console: Console, name: str | None, url: str) -> ExitCode:
    """Print the sweeps in ``url`` (``name`` None) or the trials of sweep ``name``.

    Raises:
        SweepError: no sweep ``name`` in the storage.
    """
    storage = _open(url)
    names = sorted(optuna.get_all_study_names(storage)) if storage is not None else []
    now = datetime.now()
    if name is None:
        if not names:
            console.out(f"no sweeps in the study storage {mask(url)}; start one with "
                        f"`sweep run sweeps/quickstart.yaml`", highlight=False)
            return ExitCode.OK
        rows = [sweep_row(optuna.load_study(study_name=n, storage=storage), now) for n in names]
        _table(console, f"sweeps in {mask(url)}", rows)
        return ExitCode.OK
    study = load_named(name, url, storage, names)
    console.out(summary_line(study), highlight=False)
    edges = (study.user_attrs.get(keys.ANSWER) or {}).get("edges")
    if edges:  # a tuned optimum on the edge of its range, as the answer's notes say it
        console.out(edges, highlight=False)
    trials = study.get_trials(deepcopy=False)
    if trials:
        _table(console, f"trials of {name}", trial_rows(study, now))
    return ExitCode.OK


def load_named(name: str, url: str, storage=None, names: list[str] | None = None
               ) -> optuna.Study:
    """Sweep ``name``'s study in the study storage at ``url`` (``storage`` and its study
    ``names`` when the caller has them open already).

    Raises:
        SweepError: no sweep ``name`` there: the line names the closest sweep there is.
    """
    if names is None:
        storage = _open(url)
        names = sorted(optuna.get_all_study_names(storage)) if storage is not None else []
    if name not in names:
        raise SweepError(f"no sweep named {name!r} in the study storage {mask(url)}"
                         f"{did_you_mean(name, names)}; `sweep status` lists the sweeps there, "
                         f"or pass --storage / --tracking-uri")
    return optuna.load_study(study_name=name, storage=storage)


def _open(url: str):
    """The storage, or None when it does not exist yet (opening would create it)."""
    scheme = urlsplit(url).scheme.split("+")[0]
    db = paths.sqlite_file(url)
    if db is not None:
        if not db.exists():
            return None
    elif scheme not in RDB_SCHEMES:
        path = Path(url[len("journal:"):] if url.startswith("journal:") else url)
        if len(scheme) <= 1 and not path.exists():  # a path (a Windows drive letter too)
            return None
    return open_storage(url)


# ---------------------------------------------------------------------------------- rows

def sweep_row(study: optuna.Study, now: datetime) -> dict[str, str]:
    """One study as the columns of the sweep list."""
    trials = study.get_trials(deepcopy=False)
    c = state_counts(trials)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    activity = [d for t in trials for d in (t.datetime_start, t.datetime_complete) if d]
    best = _best(study, trials)
    front = best_trials(study, trials)
    found = study.user_attrs.get(keys.ANSWER)  # a finished comparison names a level
    return {"sweep": study.study_name, "trials": str(len(trials)),
            "complete": str(c["complete"]), "running": str(c["running"]),
            "pruned": str(c["pruned"]), "failed": str(c["fail"]),
            "best": f"{_words(study, found).name(found['level'])}: "
                    f"{mean_text(study, found)} (mean of {found['seeds']})" if found else
            f"{_metric(study)} {best.value:.4f} ({_direction(study)[:3]})" if best
            else f"Pareto front: {len(front)} trials" if front else "-",
            "started": _age(min(starts), now) if starts else "-",
            "last activity": _age(max(activity), now) if activity else "-"}


def trial_rows(study: optuna.Study, now: datetime) -> list[dict[str, str]]:
    """The study's trials as the columns of the trial table."""
    trials = study.get_trials(deepcopy=False)
    retried = objectives.retried_numbers(trials)
    best = _best(study, trials)
    front = {t.number for t in best_trials(study, trials)} if best is None else set()
    found = study.user_attrs.get(keys.ANSWER)
    words = _words(study, found)
    percent = _percent(study)  # a comparison's accuracy: in %, as its answer shows it
    value = f"{_metric(study)} %" if percent else "value"
    rows = []
    for t in trials:
        notes = []
        if found and t.number == found["trial"]:
            notes.append(f"the answer: {words.name(found['level'])}'s run")
        elif best is not None and t.number == best.number and not found:
            notes.append("best")
        if t.number in front:
            notes.append("Pareto front")
        notes += _study_notes(t)
        if t.user_attrs.get(keys.RETRY_OF) is not None:
            notes.append(f"retry of {t.user_attrs[keys.RETRY_OF]}")
        if t.number in retried:
            notes.append("retried")
        if t.state == TrialState.FAIL and t.user_attrs.get(keys.FAIL_REASON):
            notes.append(_first_line(t.user_attrs[keys.FAIL_REASON]))
        rows.append({"#": str(t.number), "state": t.state.name,
                     value: objectives.values_text(t.values) if not percent else
                     ", ".join(words.figure(v) for v in t.values or ()),
                     "epochs": str(objectives.epochs_of(t) or ""),
                     "params": params_text(t.params), "duration": _duration(t, now),
                     "MLflow run": t.user_attrs.get(keys.RUN_ID, ""), "note": "; ".join(notes)})
    return rows


def summary_line(study: optuna.Study) -> str:
    """``sweep 'NAME': 8 trials: 6 complete, ...; best val_acc 0.9722 (maximize) at trial 3``."""
    trials = study.get_trials(deepcopy=False)
    c = state_counts(trials)
    parts = [f"{c['complete']} complete", f"{c['pruned']} pruned", f"{c['fail']} failed",
             f"{c['running']} running"]
    if c["retried"]:
        parts.append(f"{c['retried']} retried")
    if c["waiting"]:
        parts.append(f"{c['waiting']} queued")
    if c["copied"]:
        parts.append(f"{c['copied']} copied by warm_start")
    best = _best(study, trials)
    front = best_trials(study, trials) if len(study.directions) > 1 else []
    feasible = " feasible" if objectives.is_constrained(trials) else ""
    found = study.user_attrs.get(keys.ANSWER)
    tail = (f"; the comparison names {answer_text(study, found)}" if found else
            f"; best{feasible} {_metric(study)} {best.value:.4f} ({_direction(study)}) at trial "
            f"{best.number}" if best else
            f"; Pareto front ({_objectives_text(study)}): {len(front)} trials: "
            f"{', '.join(f'#{t.number}' for t in sorted(front, key=lambda t: t.number))}"
            if front else f"; no complete{feasible} trial yet")
    return f"sweep {study.study_name!r}: {len(trials)} trials: {', '.join(parts)}{tail}"


def answer_text(study: optuna.Study, found: dict) -> str:
    """A decided comparison's answer (:data:`keys.ANSWER`): ``adamw: val_loss 0.472, the mean
    of 2 confirmation seeds (its weights: trial 4)``."""
    n = found["seeds"]
    return (f"{_words(study, found).name(found['level'])}: {mean_text(study, found)}, the mean "
            f"of {n} confirmation seed{'s' if n != 1 else ''} (its weights: trial "
            f"{found['trial']})")


def mean_text(study: optuna.Study, found: dict) -> str:
    """A comparison's mean as its answer writes it (:class:`orchestrator.answer.words.Words`):
    ``val_acc 96.12%`` (an accuracy), ``val_loss 0.472``, rounded to its interval as the
    answer's table rounds it (3 significant digits in a record without it)."""
    half = found.get("half")
    return _words(study, found).mean(found["mean"], math.nan if half is None else half)


def _words(study: optuna.Study, found: dict | None) -> Words:
    """How a comparison's answer writes its levels and amounts: the compared factors (from
    :data:`keys.COMPARE`), the metric and the named level's values (from the answer record;
    a record without them: the level as its label)."""
    factor = json.loads(study.user_attrs.get(keys.COMPARE) or "{}").get("factor") or ()
    factors = [factor] if isinstance(factor, str) else list(factor)
    cells = {found["level"]: found["values"]} if found and "values" in found else {}
    return Words.of(factors, _metric(study), cells)


def _percent(study: optuna.Study) -> bool:
    """Whether the study is a comparison of a metric in [0, 1]: shown in percent, as its
    answer shows it (:class:`orchestrator.answer.words.Words`)."""
    return keys.COMPARE in study.user_attrs and Words.of((), _metric(study)).percent


def best_trials(study: optuna.Study, trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The sweep's best trials (:func:`objectives.best_trials`): its own complete feasible
    trials, best first; with several objectives, the Pareto front."""
    return objectives.best_trials(trials, [d.name.lower() for d in study.directions])


def _best(study: optuna.Study, trials: list[FrozenTrial]) -> FrozenTrial | None:
    """A single objective's best trial; None with several (their best is a front)."""
    if len(study.directions) != 1:
        return None
    best = best_trials(study, trials)
    return best[0] if best else None


def _study_notes(t: FrozenTrial) -> list[str]:
    """What a trial's row says of the study's rules: copied, enqueued, infeasible, stopped."""
    notes = []
    if objectives.is_copied(t):
        notes.append(f"copied from {t.user_attrs[keys.COPIED_FROM]}")
    if t.user_attrs.get(keys.ENQUEUED):
        notes.append("enqueued")
    if not objectives.is_feasible(t):
        notes.append("infeasible: " + ", ".join(f"{k} {v:+.4g}" for k, v in t.constraints.items()
                                                if v > 0))
    if t.user_attrs.get(keys.STOPPED_EARLY):
        notes.append(f"stopped early ({t.user_attrs[keys.STOPPED_EARLY]})")
    return notes


def _identity_objectives(study: optuna.Study) -> list[dict]:
    identity = json.loads(study.user_attrs.get(keys.IDENTITY) or "{}")
    return objectives.stored_objectives(identity) if identity else []


def _metric(study: optuna.Study) -> str:
    found = _identity_objectives(study)
    if not found:
        return "value"  # a study not made by sweep run
    first = found[0]
    metric = first.get("metric", "val_acc")
    return metric if first.get("target") is None else f"epochs to {metric} {first['target']:g}"


def _objectives_text(study: optuna.Study) -> str:
    """``val_acc max, train_loss min``: each objective's metric and the study's direction."""
    found = _identity_objectives(study)
    names = [o.get("metric", "val_acc") for o in found] if len(found) == \
        len(study.directions) else [f"value {i}" for i in range(len(study.directions))]
    return ", ".join(f"{n} {d.name.lower()[:3]}" for n, d in zip(names, study.directions))


def _direction(study: optuna.Study) -> str:
    return ", ".join(d.name.lower() for d in study.directions)


def _duration(t: FrozenTrial, now: datetime) -> str:
    if t.datetime_start is None:
        return ""
    end = t.datetime_complete
    text = _elapsed((end or now) - t.datetime_start)
    return text if end or t.state != TrialState.RUNNING else f"{text} so far"


def _elapsed(delta) -> str:
    """Under a minute in tenths of a second, longer as a :func:`clock`."""
    seconds = max(0.0, delta.total_seconds())
    return f"{seconds:.1f} s" if seconds < 60 else clock(seconds)


def _age(when: datetime, now: datetime) -> str:
    s = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit} ago"
    return f"{s} s ago"


def _first_line(text: str, limit: int = 80) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


# ---------------------------------------------------------------------------------- output

def _numeric(header: str) -> bool:
    """Whether a column holds numbers (aligned right)."""
    return header in NUMERIC or header.endswith(NUMERIC_SUFFIX)


def _table(console: Console, title: str, rows: list[dict[str, str]]) -> None:
    """A rich table on a terminal; elsewhere (pipes, logs, CI) plain aligned columns that do
    not wrap, one line per row, so that the output stays readable and greppable."""
    headers = [h for h in rows[0] if h != "note" or any(r["note"] for r in rows)]
    if console.is_terminal:
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                      padding=(0, 1, 0, 0))
        for h in headers:
            wraps = h in WRAPS  # numbers, states and run ids (copied whole) stay on one line
            table.add_column(h, justify="right" if _numeric(h) else "left",
                             overflow="fold", no_wrap=not wraps)
        for r in rows:
            table.add_row(*(Text(r[h]) for h in headers))  # Text: a "[64, 128]" is no markup
        console.print(table)
        return
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in headers}

    def line(cells: dict[str, str]) -> str:
        return "  ".join(cells[h].rjust(widths[h]) if _numeric(h) else cells[h].ljust(widths[h])
                         for h in headers).rstrip()

    console.out("\n".join([title, line({h: h for h in headers}),
                           line({h: "-" * widths[h] for h in headers}),
                           *(line(r) for r in rows)]), highlight=False)
