"""Several sweeps of the same question side by side (``sweep report A B [...]``): another
dataset, an added level, a new version of the code.

Rules the numbers follow:

- *matching*: a complete trial is matched with the complete trials of the other sweeps that ran
  the same configuration (the same values of every setting any of the sweeps searched) with the
  same seed. What the sweeps fixed differently (``train.epochs``, the dataset, the code) is what
  is compared. Within a sweep, a second trial of a configuration and seed is left out (listed).
- *all matched trials*: every two sweeps, b minus a over the configurations and seeds both ran,
  by :func:`orchestrator.answer.stats.compare_paired` (paired t-test and its 95% t interval, clipped
  to the range of a bounded metric's difference; Wilcoxon signed-rank; Holm over the pairs of
  sweeps), the verdict turned the way of the objective. Fewer than
  :data:`~orchestrator.report.stats.MIN_PAIRS` pairs support no interval and no verdict: no row
  (the report names what was left out, and says why there is no table when nothing is left).
- *per configuration*: the same over that configuration's seeds (each configuration on its own:
  Holm over its pairs of sweeps, not across configurations).
- a trial of one sweep that no other sweep matched is listed with why.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..answer import stats, words
from ..core import keys
from ..core.errors import SweepError
from .load import SweepData
from .plots import Figure, png_bytes
from .render import Document, Table, markdown, number, p_value, to_html
from .stats import MIN_PAIRS

COLUMNS = ["scope", "a", "b", "pairs", "diff_b_minus_a", "ci_low", "ci_high", "ci_level",
           "ci_method", "t_test_p", "wilcoxon_p", "p_holm", "verdict", "winner"]
ALL = "all matched trials"


@dataclass
class Many:
    """Several sweeps compared: ``pairs`` holds a row per configuration and seed (a value and a
    trial column per sweep), ``results`` a row per scope (:data:`ALL`, then each configuration)
    and pair of sweeps with at least :data:`MIN_PAIRS` matched trials, ``too_few`` those with
    some but fewer (scope, a, b, pairs: no interval, no verdict), ``unmatched`` the trials left
    out and why."""

    names: list[str]
    metric: str
    direction: str
    factors: list[str]
    pairs: pd.DataFrame
    results: pd.DataFrame
    unmatched: pd.DataFrame
    differences: list[str]
    overall: list[stats.PairResult] = field(default_factory=list)
    too_few: list[tuple[str, str, str, int]] = field(default_factory=list)

    def sentences(self) -> list[str]:
        """A sentence per pair of sweeps over all their matched trials (the headline first)."""
        return [pair_sentence(self, r) for r in self.overall] or [
            f"No configuration and seed was run by two of {', '.join(self.names)}: nothing to "
            f"compare."]


def check_same_question(datas: list[SweepData]) -> None:
    """Refuse sweeps that cannot be compared (one line each: what differs, and what to do).

    Raises:
        SweepError: a sweep named twice, another objective, or a comparison sweep.
    """
    names = [d.study_name for d in datas]
    if len(set(names)) < len(names):
        raise SweepError(f"sweep report {' '.join(names)}: a sweep is named twice; name each "
                         f"sweep once")
    first = datas[0].spec.objective
    for d in datas[1:]:
        o = d.spec.objective
        if (o.metric, o.direction) != (first.metric, first.direction):
            raise SweepError(f"sweep report: {d.study_name}'s objective is {o.metric} "
                             f"({o.direction}), {names[0]}'s {first.metric} ({first.direction}); "
                             f"only sweeps of the same objective compare")
    for d in datas:
        if d.compare:
            raise SweepError(f"sweep report: {d.study_name} is a comparison (compare:), which "
                             f"is not compared with other sweeps; report it alone")


def compare_sweeps(datas: list[SweepData]) -> Many:
    """The sweeps in ``datas`` (the first is the baseline a) compared trial by trial."""
    check_same_question(datas)
    names = [d.study_name for d in datas]
    objective = datas[0].spec.objective
    factors = list(dict.fromkeys(f for d in datas for f in d.factors))
    values, unmatched = _values(datas, factors)
    pairs = _pairs_table(values, names)
    bounds = stats.difference_bounds(objective.metric)
    label = {str(i): name for i, name in enumerate(names)}  # "0" < "1" < ...: the given order

    def by_sweep(frame: pd.DataFrame, key) -> dict[str, dict]:
        return {str(i): {k: v for k, v in zip(key(frame), frame[f"value:{n}"]) if not
                         pd.isna(v)} for i, n in enumerate(names)}

    every = by_sweep(pairs, lambda f: zip(f["configuration"], f["seed"]))
    bounds = stats.bounds_holding(bounds, every)  # a metric on another scale: not clipped
    overall = [_named(r, label) for r in stats.compare_paired(
        every, factor="sweep", direction=objective.direction, bounds=bounds,
        min_pairs=MIN_PAIRS)]
    scoped = [(ALL, overall)]
    for config, group in pairs.groupby("configuration", sort=False):
        if group[[f"value:{n}" for n in names]].notna().sum(axis=1).max() < 2:
            continue  # one sweep alone ran it: listed as unmatched
        scoped.append((config, [_named(r, label) for r in stats.compare_paired(
            by_sweep(group, lambda f: f["seed"]), factor="sweep",
            direction=objective.direction, bounds=bounds, min_pairs=MIN_PAIRS)]))
    unmatched += _alone(pairs, names)
    rows, too_few = _rows(scoped)
    return Many(names, objective.metric, objective.direction, factors, pairs,
                pd.DataFrame(rows, columns=COLUMNS),
                pd.DataFrame(unmatched, columns=["sweep", "trial", "configuration", "seed",
                                                 "why"]),
                differences(datas, factors), overall, too_few)


def configuration_text(row: pd.Series, factors: list[str]) -> str:
    """A trial's configuration in the union of the sweeps' searched settings."""
    return ", ".join(f"{f}={_text(row.get(f'params.{f}'))}" for f in factors)


def _text(value) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else str(value)


def _values(datas: list[SweepData], factors: list[str]) -> tuple[dict, list[dict]]:
    """(configuration, seed) -> {sweep: (trial, value)} over complete trials, and the trials
    left out (not complete; a second trial of a configuration and seed)."""
    values: dict[tuple[str, int], dict[str, tuple[int, float]]] = {}
    unmatched = []
    for d in datas:
        if d.trials.empty:  # a sweep without trials yet
            continue
        for _, t in d.trials.sort_values("trial").iterrows():
            config = configuration_text(t, factors)
            seed = t["seed"] if not pd.isna(t.get("seed")) else t.get("repeat")
            seed = int(seed) if not pd.isna(seed) else -1
            row = {"sweep": d.study_name, "trial": int(t["trial"]), "configuration": config,
                   "seed": seed}
            if t["state"] != "COMPLETE":
                unmatched.append({**row, "why": f"not complete ({t['state'].lower()})"})
                continue
            cell = values.setdefault((config, seed), {})
            if d.study_name in cell:
                unmatched.append({**row, "why": f"the same configuration and seed as trial "
                                                f"{cell[d.study_name][0]}"})
                continue
            cell[d.study_name] = (int(t["trial"]), float(t["value"]))
    return values, unmatched


def _pairs_table(values: dict, names: list[str]) -> pd.DataFrame:
    rows = []
    for (config, seed), cell in values.items():
        row = {"configuration": config, "seed": seed}
        for n in names:
            trial, value = cell.get(n, (None, math.nan))
            row[f"trial:{n}"], row[f"value:{n}"] = trial, value
        row["matched"] = sum(n in cell for n in names) >= 2
        rows.append(row)
    columns = ["configuration", "seed", *[f"{k}:{n}" for n in names for k in ("trial", "value")],
               "matched"]
    return pd.DataFrame(rows, columns=columns)


def _alone(pairs: pd.DataFrame, names: list[str]) -> list[dict]:
    """The complete trials no other sweep matched."""
    out = []
    for _, row in pairs[~pairs["matched"]].iterrows():
        for n in names:
            if not pd.isna(row[f"value:{n}"]):
                others = ", ".join(m for m in names if m != n)
                out.append({"sweep": n, "trial": int(row[f"trial:{n}"]),
                            "configuration": row["configuration"], "seed": int(row["seed"]),
                            "why": f"no trial of {others} ran this configuration with seed "
                                   f"{int(row['seed'])}"})
    return out


def _named(r: stats.PairResult, label: dict[str, str]) -> stats.PairResult:
    """A result with the sweeps' names for its level labels."""
    from dataclasses import replace

    return replace(r, a=label[r.a], b=label[r.b],
                   winner=label.get(r.winner) if r.winner is not None else None)


def _rows(scoped: list[tuple[str, list[stats.PairResult]]]
          ) -> tuple[list[dict], list[tuple[str, str, str, int]]]:
    """The results rows (:data:`COLUMNS`) of the pairs with at least :data:`MIN_PAIRS` finite
    matched trials, and ``(scope, a, b, pairs)`` of those with fewer but some: too few for an
    interval and a verdict, so no row says one. Pairs of sweeps that matched nothing are in
    neither (the headline says so)."""
    rows, too_few = [], []
    for scope, results in scoped:
        for r in results:
            if r.finite_pairs >= MIN_PAIRS:
                rows.append(_row(scope, r))
            elif r.finite_pairs:
                too_few.append((scope, r.a, r.b, r.finite_pairs))
    return rows, too_few


def _row(scope: str, r: stats.PairResult) -> dict:
    return {"scope": scope, "a": r.a, "b": r.b, "pairs": r.pairs, "diff_b_minus_a": r.diff,
            "ci_low": r.ci_low, "ci_high": r.ci_high, "ci_level": r.ci_level,
            "ci_method": r.ci_method, "t_test_p": r.p, "wilcoxon_p": r.p_wilcoxon,
            "p_holm": r.p_holm, "verdict": r.verdict, "winner": r.winner or ""}


def differences(datas: list[SweepData], factors: list[str]) -> list[str]:
    """What the sweeps fixed differently: each setting none of them searched whose one value
    differs between them, and the commit of the code when it differs."""
    out = []
    columns = sorted({c for d in datas for c in d.trials.columns if c.startswith("params.")}
                     - {f"params.{f}" for f in factors})
    for col in columns:
        values = [d.trials[col].dropna().map(str).unique() if col in d.trials else [] for d in
                  datas]
        if all(len(v) == 1 for v in values) and len({v[0] for v in values}) > 1:
            out.append(f"{col.removeprefix('params.')}: " + ", ".join(
                f"{v[0]} ({d.study_name})" for v, d in zip(values, datas)))
    commits = [d.parent_tags.get(keys.GIT_COMMIT, "?")[:12] for d in datas]
    if len(set(commits)) > 1:
        out.append("code: commit " + ", ".join(f"{c} ({d.study_name})"
                                                for c, d in zip(commits, datas)))
    return out


def _trials(n: int) -> str:
    return f"{n} trial{'s' if n != 1 else ''}"


def pair_sentence(m: Many, r: stats.PairResult) -> str:
    """One pair of sweeps over all their matched trials, said the way of the objective; with
    fewer than :data:`MIN_PAIRS` matched trials, why there is no interval and no verdict."""
    if not r.finite_pairs:
        return (f"{r.b} against {r.a}: no paired difference, as no configuration was completed "
                f"with the same seed by both (trials are matched by "
                f"{', '.join(m.factors) or 'nothing searched'} and seed; unmatched.csv lists "
                f"each trial and why).")
    if r.finite_pairs < MIN_PAIRS:
        return (f"{r.b} against {r.a}: no interval and no verdict from {_trials(r.finite_pairs)} "
                f"matched (the same configuration and seed in both), fewer than the {MIN_PAIRS} "
                f"a paired comparison needs.")
    said = words.pair_sentence(words.Words.of((), m.metric), r, m.direction,
                               pairs="matched trial")
    return said + " (matched: the same configuration and seed)."  # a name, as written


# ------------------------------------------------------------------------------ the files

@dataclass
class ManyReport:
    """What :func:`build_many_report` computed, and the files it wrote into ``out_dir``."""

    out_dir: Path
    many: Many
    files: list[Path]


def build_many_report(datas: list[SweepData], out_dir: str | os.PathLike) -> ManyReport:
    """Write report.html, report.md, comparison.csv (:data:`COLUMNS`), pairs.csv (a row per
    configuration and seed, a trial and value per sweep), unmatched.csv and the plot."""
    many = compare_sweeps(datas)
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    files = [out / "comparison.csv", out / "pairs.csv", out / "unmatched.csv"]
    many.results.to_csv(files[0], index=False)
    many.pairs.to_csv(files[1], index=False)
    many.unmatched.to_csv(files[2], index=False)
    figures = {"matched.png": _plot_matched(many)} if many.pairs["matched"].any() else {}
    for name, figure in figures.items():
        (out / "plots" / name).write_bytes(figure.png)
        files.append(out / "plots" / name)
    doc = _document(many, datas, figures)
    (out / "report.md").write_text(markdown(doc))
    (out / "report.html").write_text(to_html(doc))
    return ManyReport(out, many, [*files, out / "report.md", out / "report.html"])


def _document(m: Many, datas: list[SweepData], figures: dict[str, Figure]) -> Document:
    doc = Document(f"Sweeps side by side: {', '.join(m.names)}", m.sentences())
    for d in datas:
        counts = d.trials["state"].value_counts() if len(d.trials) else pd.Series(dtype=int)
        doc.say(f"{d.study_name}: " + (", ".join(f"{v} {k.lower()}" for k, v in counts.items())
                                       or "no trials") + ".")
    doc.say(f"Objective {m.metric} ({m.direction}); trials matched by "
            f"{', '.join(m.factors) or 'nothing searched'} and seed.")
    if m.differences:
        doc.say("What the sweeps fixed differently: " + "; ".join(m.differences) + ".")
    _paired_section(doc, m)
    doc.heading("Matched trials")
    value_cols = [f"value:{n}" for n in m.names]
    doc.blocks.append(Table(
        f"Every configuration and seed a sweep completed: its {m.metric} in each sweep (a dash: "
        f"that sweep did not run it). Also in pairs.csv.",
        ["configuration", "seed", *m.names],
        [[r["configuration"], str(r["seed"]), *[number(r[c]) for c in value_cols]]
         for _, r in m.pairs.iterrows()]))
    if len(m.unmatched):
        doc.heading("Left out")
        doc.blocks.append(Table(
            "Trials without a match, and why. Also in unmatched.csv.",
            ["sweep", "trial", "configuration", "seed", "why"],
            [[r.sweep, str(r.trial), r.configuration, str(r.seed), r.why]
             for r in m.unmatched.itertuples()]))
    if figures:
        doc.heading("Plots")
        doc.blocks += list(figures.items())
    return doc


def _paired_section(doc: Document, m: Many) -> None:
    """The paired differences table, a row per scope and pair of sweeps with at least
    :data:`MIN_PAIRS` matched trials, then what had fewer; with no such row, one line why there
    is no table."""
    if not len(m.results):
        most = max((n for *_, n in m.too_few), default=0)
        why = (f"at most {_trials(most)} matched (the same configuration and seed in two "
               f"sweeps), fewer than the {MIN_PAIRS} an interval and a verdict need; more seeds "
               f"(repeats) in each sweep make more" if most else
               "no configuration and seed was completed by two of the sweeps (unmatched.csv "
               "lists each trial and why)")
        doc.say(f"No paired differences: {why}.")
        return
    doc.heading("Paired differences")
    doc.blocks.append(Table(
        f"b minus a in {m.metric} over the configurations and seeds both sweeps ran (first row "
        f"per pair: all of them; then each configuration over its seeds): paired t-test and its "
        f"95% Student t interval (clipped to the range a difference of a bounded metric can "
        f"take, as the method column says), Wilcoxon signed-rank, Holm over the pairs of sweeps "
        f"within a row's scope; a pair with fewer than {MIN_PAIRS} matched trials has no row "
        f"(a line under the table names any). Also in comparison.csv.",
        ["scope", "a", "b", "pairs", "b - a", "95% CI low", "95% CI high", "method",
         "t-test p", "Wilcoxon p", "Holm p", "verdict"],
        [[r.scope, r.a, r.b, str(r.pairs), number(r.diff_b_minus_a), number(r.ci_low),
          number(r.ci_high), r.ci_method, p_value(r.t_test_p), p_value(r.wilcoxon_p),
          p_value(r.p_holm), f"{r.winner} better" if r.winner else r.verdict]
         for r in m.results.itertuples()]))
    if m.too_few:
        doc.say(f"No row, fewer than {MIN_PAIRS} matched trials (too few for an interval and a "
                f"verdict): " + "; ".join(f"{scope}, {b} against {a} ({_trials(n)})"
                                           for scope, a, b, n in m.too_few) + ".")


def _plot_matched(m: Many) -> Figure:
    """Each matched trial's objective in the first sweep (x) against each other sweep (y)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    base = f"value:{m.names[0]}"
    for i, n in enumerate(m.names[1:]):
        both = m.pairs[[base, f"value:{n}"]].dropna()
        ax.scatter(both[base], both[f"value:{n}"], color=plt.cm.tab10(i % 10), label=n, s=25)
    values = m.pairs[[f"value:{n}" for n in m.names]].stack()
    if len(values):
        low, high = float(values.min()), float(values.max())
        ax.plot([low, high], [low, high], color="black", lw=0.8)
    ax.set_xlabel(f"{m.metric} in {m.names[0]}")
    ax.set_ylabel(f"{m.metric} in the other sweep")
    ax.legend()
    return Figure(png_bytes(fig), (
        f"Each configuration and seed: {m.metric} in {m.names[0]} (x) and in the other sweep "
        f"(y); above the line the other sweep scored higher."))
