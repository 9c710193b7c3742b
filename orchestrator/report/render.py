"""The report's files: Markdown and self-contained HTML with the same content (a headline
first, rounded tables with units, captioned plots), the trial table as CSV and Parquet, the
plots as PNG, a comparison's ``comparison.csv``; and their copy on the sweep's parent run."""
from __future__ import annotations

import base64
import html
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..answer import budget as tuning_budget
from ..answer import objectives
from ..answer.words import spread
from ..core import keys
from .comparison import Comparison, compare, settings_text, tolerance_words
from .comparison_plots import comparison_plots
from .front import best_rows, value_columns
from .load import SweepData
from .plots import Figure, plots
from .scaling import scaling
from .stats import (
    MIN_PAIRS,
    configuration,
    continuous,
    export_table,
    factor_table,
    missing,
    paired_differences,
    trend_table,
)

STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
COMPARISON_FILE = Path(keys.COMPARISON_CSV).name  # report/comparison.csv on the parent run
EXPECTED_BEST_FILE = Path(keys.EXPECTED_BEST_CSV).name  # report/expected_best.csv
PAIRED_HEADERS = {"factor": "setting", "a": "a", "b": "b", "pairs": "pairs",
                  "mean_diff_b_minus_a": "b - a", "ci_low": "95% CI low",
                  "ci_high": "95% CI high", "ci_level": "level", "ci_method": "method",
                  "t_test_p": "t-test p", "wilcoxon_p": "Wilcoxon p", "p_holm": "Holm p",
                  "friedman_p": "Friedman p", "verdict": "verdict"}
P_COLUMNS = {"t_test_p", "wilcoxon_p", "p_holm", "friedman_p", "p"}


def number(v, digits: int = 4) -> str:
    """A table cell: floats to ``digits`` significant digits, a missing value as a dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def p_value(p) -> str:
    """A p-value in a table's cell, as the answer writes it
    (:func:`orchestrator.answer.words.p_figure`)."""
    from ..answer.words import p_figure

    return p_figure(None if p is None else float(p))


@dataclass(frozen=True)
class Table:
    """A table as the reader sees it: a caption, a header and cells already written out."""

    caption: str
    header: list[str]
    rows: list[list[str]]


@dataclass
class Document:
    """The report's content, written out once as HTML and once as Markdown."""

    title: str
    headline: list[str]
    # ("h2", text), ("p", text), a Table or (file name, Figure)
    blocks: list = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def say(self, text: str) -> None:
        self.blocks.append(("p", text))


@dataclass
class Report:
    """What :func:`build_report` computed, and the files it wrote into ``out_dir``."""

    out_dir: Path
    factors: pd.DataFrame
    paired: pd.DataFrame
    missing: list[str]
    files: list[Path]
    headline: str = ""
    comparison: Comparison | None = None


def build_report(data: SweepData, out_dir: str | os.PathLike, by: str | None = None) -> Report:
    """Write report.html, report.md, trials.csv, trials.parquet, plots/*.png and, for a
    comparison, comparison.csv into ``out_dir``."""
    from ..answer.stats import METRIC_BOUNDS, difference_bounds

    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    factors = data.factors
    by = by or ("optimizer" if "optimizer" in factors else (factors[0] if factors else None))
    comparison = compare(data)
    # a comparison's levels are compared on their confirmation seeds (its own section): the
    # tables of any sweep would mix tuning and confirmation trials
    trials = data.trials.iloc[0:0] if comparison is not None else data.trials
    bounds, ranges = METRIC_BOUNDS.get(data.spec.objective.metric), continuous(data.spec)
    ftable = factor_table(trials, factors, ranges=ranges, bounds=bounds)
    trends = trend_table(trials, factors, ranges)
    paired = paired_differences(trials, factors, direction=data.spec.objective.goal,
                                bounds=difference_bounds(data.spec.objective.metric),
                                ranges=ranges)
    gaps = missing(data) if comparison is None else comparison_gaps(data, comparison)
    if data.parent_tags.get(keys.STOP_REASON):  # stop_when ended it: nothing is missing
        gaps = [f"ended early by {data.parent_tags[keys.STOP_REASON]}"] + \
            [g for g in gaps if "trials finished" not in g]
    figures, notes = plots(data, by)
    if comparison is not None:
        figures = {**comparison_plots(comparison, data), **figures}
    files = []
    for name, figure in figures.items():
        (out / "plots" / name).write_bytes(figure.png)
        files.append(out / "plots" / name)
    table = trial_table(data)
    table.to_csv(out / "trials.csv", index=False)
    table.astype({c: str for c in table.columns if table[c].dtype == object}).to_parquet(
        out / "trials.parquet", index=False)
    if comparison is not None:
        comparison.table().to_csv(out / COMPARISON_FILE, index=False)
        files.append(out / COMPARISON_FILE)
    if comparison is not None and comparison.expected_best:
        pd.DataFrame(tuning_budget.rows(comparison.expected_best),
                     columns=list(tuning_budget.CSV_COLUMNS)).to_csv(out / EXPECTED_BEST_FILE,
                                                                     index=False)
        files.append(out / EXPECTED_BEST_FILE)
    doc = _document(data, ftable, paired, gaps, export_table(data.trials), comparison, trends)
    _plots_section(doc, figures, notes)
    _trials_section(doc, data)
    (out / "report.md").write_text(markdown(doc))
    (out / "report.html").write_text(to_html(doc))
    files += [out / "report.md", out / "report.html", out / "trials.csv", out / "trials.parquet"]
    return Report(out, ftable, paired, gaps, files, doc.headline[0], comparison)


def trial_table(data: SweepData) -> pd.DataFrame:
    """The table of ``trials.csv``: a row per trial joined with its run (its tags left out)."""
    return data.trials.drop(columns=[c for c in data.trials.columns if c.startswith("tags.")])


def comparison_gaps(data: SweepData, c: Comparison) -> list[str]:
    """What an unfinished comparison lacks: tuning trials, or confirmation seeds short of
    ``compare.seeds`` (its trial count is a most: it stops adding seeds once decided)."""
    t = data.trials
    out = []
    ran = t[t["phase"] == "tune"]["state"].isin(["COMPLETE", "PRUNED", "FAIL"]).sum() \
        if "phase" in t else 0
    planned = int(data.compare.get("tune_trials") or 0) * max(1, len(c.levels))
    if ran < planned:
        out.append(f"{ran} of {planned} tuning trials finished (`sweep run` again resumes it)")
    seeds = min((len(v) for v in c.confirm.values()), default=0)
    if ran >= planned and seeds < int(data.compare.get("seeds") or 0):
        out.append(f"{seeds} of {data.compare['seeds']} confirmation seeds finished for every "
                   f"level (`sweep run` again resumes it)")
    out += [line for line in missing(data) if "RUNNING" in line or "failed" in line]
    return out


def _summary_lines(data: SweepData) -> list[str]:
    t = data.trials
    counts = {s: int((t["state"] == s).sum()) for s in STATES if len(t)}
    states = ", ".join(f"{v} {k.lower()}" for k, v in counts.items() if v)
    several = len(data.spec.objectives) > 1
    lines = [f"Sweep {data.study_name}: {states or 'no trials'}; "
             f"objective{'s' if several else ''} {_objectives_text(data)}."]
    copied = int((t["state"] == "COPIED").sum()) if len(t) else 0
    if copied:
        lines.append(f"{copied} trials copied from {data.spec.warm_start} by warm_start are "
                     f"the sampler's history only: no table or best here counts them.")
    if data.spec.constraints:
        bounds = ", ".join(objectives.constraint_name(c) for c in data.spec.constraints)
        lines.append(f"Constraints at each trial's last epoch: {bounds}; only the trials "
                     f"meeting them all can be best.")
    if "test_acc" in data.parent_metrics:
        std = data.parent_metrics.get("test_acc_std")
        lines.append(f"Held-out test split (never used for selection): test_acc "
                     f"{spread(data.parent_metrics['test_acc'], std)} over trial(s) "
                     f"{data.parent_tags.get(keys.TEST_TRIALS, '?')}.")
    return lines


def headline(data: SweepData) -> str:
    """The report's first line: a comparison's verdict, else its best complete trial. It reads
    the trials alone, so ``load_sweep(..., curves=False)`` gives it all it needs."""
    comparison = compare(data)
    if comparison is None and (found := scaling(data)) is not None:
        return found.headline
    return comparison.headline if comparison is not None else _best_line(data)


def answer_lines(data: SweepData) -> list[str]:
    """The answer as terminal lines: a comparison's summary (its sentence, table and lines:
    :meth:`orchestrator.answer.summary.Summary.lines`), else the headline; from the trials
    alone, as :func:`headline`."""
    comparison = compare(data)
    if comparison is None and (found := scaling(data)) is not None:
        return found.sentences
    if comparison is None:
        return [_best_line(data)]
    return comparison.summary.lines() if comparison.summary is not None else \
        [comparison.headline]


def summary_blocks(c: Comparison) -> list:
    """A comparison's summary after its sentence (the headline): its table, then its lines
    and the report's other sentences as paragraphs."""
    if c.summary is None:
        return [("p", line) for line in c.sentences[1:]]
    s = c.summary
    return [Table(s.caption, list(s.header), [list(row) for row in s.rows]),
            *(("p", line) for line in (*s.notes, *c.sentences[1:]))]


def _objectives_text(data: SweepData) -> str:
    """``val_acc (maximize, last epoch)``, one such per objective."""
    def one(o) -> str:
        how = (f"epochs to reach {o.target:g}" if o.target is not None else
               f"mean of the last {o.k} epochs" if o.reduce == "mean_last_k" else
               f"{o.reduce} epoch")
        return f"{o.metric} ({o.goal}, {how})"
    return "; ".join(one(o) for o in data.spec.objectives)


def _best_line(data: SweepData) -> str:
    t, objective = data.trials, data.spec.objective
    best = best_rows(data)
    feasible = " feasible" if data.spec.constraints else ""
    if not len(best):
        return f"No{feasible} trial of {data.study_name} has completed yet."
    if len(data.spec.objectives) > 1:
        names = ", ".join(o.label for o in data.spec.objectives)
        return (f"Pareto front ({names}): {len(best)} trials, "
                f"{', '.join(str(int(n)) for n in sorted(best['trial']))}"
                f"{f' of {len(t)}' if len(t) else ''}.")
    if data.spec.repeats > 1 and data.best_group:
        return _best_configuration_line(data, feasible)
    first = best.iloc[0]
    return (f"Best{feasible} trial {int(first['trial'])}: {objective.label} "
            f"{first['value']:.4f} ({configuration(first, data.factors, digits=4)}).")


def _best_configuration_line(data: SweepData, feasible: str) -> str:
    """With repeats: the configuration of the best mean over its seeds (see
    :func:`orchestrator.answer.objectives.best_configuration`), not the luckiest single seed."""
    rows = data.trials[data.trials["trial"].isin(data.best_group)].sort_values("trial")
    values = rows["value"]
    return (f"Best{feasible} configuration: {data.spec.objective.label} mean "
            f"{spread(values.mean(), values.std() if len(values) > 1 else None)} over "
            f"{len(values)} seed(s) "
            f"({configuration(rows.iloc[0], data.factors, digits=4)}; trials "
            f"{', '.join(str(int(n)) for n in rows['trial'])}).")


def _front_section(doc: Document, data: SweepData) -> None:
    """Several objectives: the Pareto front's trials, their values and settings."""
    best, columns = best_rows(data), value_columns(data)
    doc.heading("Pareto front")
    doc.blocks.append(Table(
        "The complete" + (" feasible" if data.spec.constraints else "") + " trials no other "
        "trial beats in every objective, best on the first objective first.",
        ["trial", *(o.label for o in data.spec.objectives), "settings"],
        [[str(int(r["trial"])), *(number(r[c]) for c in columns),
          configuration(r, data.factors, digits=4)] for _, r in best.iterrows()]))


def _document(data, ftable, paired, gaps, exports, comparison, trends=None) -> Document:
    headline = [comparison.headline] if comparison is not None else [_best_line(data)]
    found = scaling(data) if comparison is None else None
    headline = [found.headline] if found is not None else headline
    doc = Document(f"Sweep report: {data.study_name}", headline)
    if found is not None:  # a scaling grid: its other sentences and a row per batch size
        doc.blocks += [("p", line) for line in found.sentences[1:]] + [Table(*found.shown())]
    if comparison is not None:
        doc.blocks += summary_blocks(comparison)
    for line in _summary_lines(data):
        doc.say(line)
    if gaps:
        doc.say("Incomplete: " + "; ".join(gaps) + ".")
    if len(data.spec.objectives) > 1:
        _front_section(doc, data)
    if comparison is not None:
        _comparison_section(doc, comparison, data)
    if comparison is not None:
        return doc
    _search_sections(doc, data, ftable, trends, paired)
    if not exports.empty:
        doc.heading("Export parity")
        doc.blocks.append(Table(
            "Each exported format against the eager model on the validation images: largest "
            "absolute output difference, top-1 agreement, accuracy change, ms per image.",
            list(exports.columns), [[number(v) for v in row] for row in
                                    exports.itertuples(index=False)]))
    return doc


def _search_sections(doc: Document, data: SweepData, ftable, trends, paired) -> None:
    """What a search says per setting: levels, trends and paired differences."""
    metric = data.spec.objective.metric
    observational = (" Observational: the trials of a level differ in their other settings "
                     "too (a search chose them), so a gap between levels is not the setting's "
                     "effect alone; a comparison (compare:) or the paired table below is what "
                     "to cite.")
    if len(ftable):
        doc.heading("Objective per level (observational)")
        doc.blocks.append(Table(
            f"{metric} of the complete trials per level of each setting chosen from levels, "
            f"over the trials that searched it (repeats included); the interval is Student's t "
            f"at 95%, clipped to the metric's range, and needs 2 trials." + observational,
            ["setting", "level", f"mean {metric}", "std", "95% CI low", "95% CI high",
             "trials"],
            [[r.factor, r.level, number(r.mean), number(r.std), number(r.ci_low),
              number(r.ci_high), str(r.n)] for r in ftable.itertuples()]))
    if trends is not None and len(trends):
        doc.heading("Trends of ranged settings (observational)")
        doc.blocks.append(Table(
            f"Each setting searched over a range: Spearman's rank correlation of its value with "
            f"{metric} over the complete trials that searched it (positive: higher values went "
            f"with higher {metric}), with an approximate 95% interval (Fisher's z, variance "
            f"1.06 / (n - 3); none below 5 trials)." + observational,
            ["setting", "trials", "Spearman rho", "95% CI low", "95% CI high", "lowest tried",
             "highest tried"],
            [[r.factor, str(r.n), number(r.spearman_rho, 3), number(r.ci_low, 3),
              number(r.ci_high, 3), number(r.low, 3), number(r.high, 3)]
             for r in trends.itertuples()]))
    if len(paired):
        doc.heading("Paired differences (same other settings, same seed)")
        doc.blocks.append(Table(
            f"Level b minus level a in {metric}, over trials equal in every other setting and "
            f"seed: paired t-test with its 95% Student t interval (clipped to the range a "
            f"difference can take where the method says so), Wilcoxon signed-rank, Holm over "
            f"the pairs of a setting; pairs of levels with fewer than {MIN_PAIRS} such pairs "
            f"are left out.",
            [PAIRED_HEADERS.get(c, c) for c in paired.columns],
            [[p_value(row[c]) if c in P_COLUMNS else number(row[c]) for c in paired.columns]
             for _, row in paired.iterrows()]))
    elif len(data.trials):
        doc.say(f"No paired differences: no two complete trials differ in one setting alone "
                f"with the same seed ({MIN_PAIRS} such pairs are needed for a pair of levels); "
                f"a sampler searching the space rarely makes them. A grid with repeats, or a "
                f"comparison (compare:), does.")


def _pairs_table(c: Comparison, words) -> Table:
    """Every pair of levels in the report's units (points for an accuracy), rounded to each
    pair's interval."""
    from ..answer.words import method_text

    better, within, undecided = words.verdicts(c.results[0].precision)
    return Table(
        f"Every pair of levels over their paired confirmation seeds: b minus a in "
        f"{words.unit}, its interval with its level and method, the paired t-test's p and "
        f"Holm's over the pairs, and the verdict ({better}, {within}, or {undecided}). Also "
        f"in {COMPARISON_FILE}, in the metric's units.",
        ["a", "b", "pairs", f"b - a ({words.unit})", "interval", "level, method", "p",
         "Holm p", "verdict"],
        [[words.cell(r.a), words.cell(r.b), str(r.pairs), words.amount(r.diff, half),
          words.span(r.ci_low, r.ci_high, half) if not math.isnan(r.ci_low) else "-",
          method_text(r), p_value(r.p), p_value(r.p_holm),
          f"{words.cell(r.winner)} better" if r.winner else r.verdict]
         for r in c.results for half in [(r.ci_high - r.ci_low) / 2]])


def _comparison_section(doc: Document, c: Comparison, data: SweepData) -> None:
    from ..answer.stats import mean_interval

    words = c.words
    doc.heading(f"The comparison of {words.header}")
    doc.say(c.rule)
    if c.results:
        doc.blocks.append(_pairs_table(c, words))
    if len(c.budget):
        doc.blocks.append(Table(
            "What each level was given: the settings its tuning trials searched (its "
            "sub-space), its tuning trials and the epochs they trained (a pruned trial stops "
            "early), how many were pruned or failed, and the seeds its tuned configuration was "
            "confirmed on.", list(c.budget.columns),
            [[words.cell(row[0]), *(number(v) for v in row[1:])]
             for row in c.budget.itertuples(index=False)]))
    rows = []
    bounds = _bounds(c.metric)
    for level in c.levels:
        seeds = c.confirm.get(level, {})
        values = [v for v in seeds.values() if math.isfinite(v)]
        mean, low, high, method = mean_interval(values, bounds)
        half = (high - low) / 2
        rows.append([words.cell(level), settings_text(c.tuned.get(level, {})) or "-",
                     words.amount(mean, half),
                     f"[{words.amount(low, half)}, {words.amount(high, half)}]"
                     if not math.isnan(low) else "-",
                     words.amount(float(pd.Series(values).std()), half)
                     if len(values) > 1 else "-",
                     f"{len(values)}" + (f" (+{len(seeds) - len(values)} without a value)"
                                         if len(seeds) > len(values) else "")])
    doc.blocks.append(Table(
        f"Each level's best tuning trial (its settings) and that configuration retrained on "
        f"fresh seeds: mean of {c.metric} over them{' (in %)' if words.percent else ''} with "
        f"its 95% Student t interval (clipped to the metric's range), standard deviation and "
        f"seeds.",
        [words.header, "tuned settings", f"mean {c.metric}", "95% t interval", "std", "seeds"],
        rows))
    if c.sensitivity:
        doc.blocks.append(Table(
            f"Learning rates within {tolerance_words(c.metric)} of each level's best tuning "
            f"trial, around it. Each tuning trial ran one seed and the best is the luckiest of "
            f"them, so these ranges are descriptive, not a claim about sensitivity.",
            ["level", "best lr", "lowest lr", "highest lr", "range", "tuning trials in it"],
            [[words.cell(s.level), number(s.best_lr, 3), number(s.low, 3), number(s.high, 3),
              f"{s.ratio:.2g}x", f"{s.within} of {s.trials}"]
             for s in c.sensitivity.values()]))
    if c.target is not None and len(c.reach):
        per = c.reach.groupby("level")
        doc.blocks.append(Table(
            f"Time for the confirmation runs to reach {c.metric} {c.target:g}: means over the "
            f"seeds that reached it (the comparison over paired seeds is in the sentences "
            f"above).",
            ["level", "seeds that reached it", "mean epochs", "mean seconds"],
            [[words.cell(level), f"{int(g['epochs'].count())} of {len(g)}",
              number(g["epochs"].mean(), 3), number(g["seconds"].mean(), 3)]
             for level, g in per]))


def _bounds(metric: str):
    from ..answer.stats import METRIC_BOUNDS

    return METRIC_BOUNDS.get(metric)


def _plots_section(doc: Document, figures: dict[str, Figure], notes: list[str]) -> None:
    doc.heading("Plots")
    for name, figure in figures.items():
        doc.blocks.append((name, figure))
    for note in notes:
        doc.say(note)


def _trials_section(doc: Document, data: SweepData) -> None:
    t = data.trials
    columns = [c for c in ("trial", "state", "value", "phase", "level", "seed", "repeat",
                           "epochs") if c in t and t[c].notna().any()]
    params = [f"params.{f}" for f in data.factors if f"params.{f}" in t]
    doc.heading("Trials")
    doc.blocks.append(Table(
        f"Every trial of the sweep; value is its {data.spec.objective.metric}. The full table "
        f"is trials.csv.",
        [*columns, *[p[len("params."):] for p in params], "note"],
        [[number(row[c]) for c in (*columns, *params)] +
         [number(row.get("fail_reason")) if isinstance(row.get("fail_reason"), str) else ""]
         for _, row in t.iterrows()]))


# ------------------------------------------------------------------------------ writing out

def _md_table(table: Table) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(table.header) + " |", "|" + "---|" * len(table.header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + f"\n\n*{table.caption}*\n" if table.rows else "(none)\n"


def markdown(doc: Document) -> str:
    """The document as Markdown (plots linked from ``plots/``)."""
    parts = [f"# {doc.title}\n\n", *[f"**{line}**\n\n" if i == 0 else f"{line}\n\n"
                                     for i, line in enumerate(doc.headline)]]
    for block in doc.blocks:
        if isinstance(block, Table):
            parts.append(_md_table(block) + "\n")
        elif block[0] == "h2":
            parts.append(f"## {block[1]}\n\n")
        elif block[0] == "p":
            parts.append(f"{block[1]}\n\n")
        else:
            name, figure = block
            parts.append(f"![{name}](plots/{name})\n\n*{figure.caption}*\n\n")
    return "".join(parts)


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222;"
         "line-height:1.45}h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}"
         ".headline{font-size:1.15em;background:#f3f7fb;border-left:4px solid #2a6fb0;"
         "padding:.8em 1em}table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
         "td,th{border-bottom:1px solid #e3e3e3;padding:4px 10px;text-align:left}"
         "td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#fafafa}"
         "caption,figcaption{caption-side:bottom;color:#555;font-size:.9em;text-align:left;"
         "padding-top:.4em}figure{margin:1.2em 0}img{max-width:100%}")


def _html_table(table: Table) -> str:
    def cell(text: str) -> str:
        numeric = text[:1].isdigit() or text[:1] in "-<" and text[1:2].strip().isdigit()
        return f"<td{' class=n' if numeric else ''}>{html.escape(text)}</td>"

    if not table.rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = "".join("<tr>" + "".join(cell(c) for c in row) + "</tr>" for row in table.rows)
    return (f"<table><caption>{html.escape(table.caption)}</caption><thead><tr>{head}</tr>"
            f"</thead><tbody>{body}</tbody></table>")


def to_html(doc: Document) -> str:
    """The document as one HTML file, plots embedded."""
    body = [f"<h1>{html.escape(doc.title)}</h1>", '<div class="headline">' + "".join(
        f"<p>{html.escape(line)}</p>" for line in doc.headline) + "</div>"]
    for block in doc.blocks:
        if isinstance(block, Table):
            body.append(_html_table(block))
        elif block[0] in ("h2", "p"):
            body.append(f"<{block[0]}>{html.escape(block[1])}</{block[0]}>")
        else:
            name, figure = block
            body.append(f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
                        f'{base64.b64encode(figure.png).decode()}"><figcaption>'
                        f"{html.escape(figure.caption)}</figcaption></figure>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(doc.title)}"
            f"</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>")


def log_report(data: SweepData, report: Report) -> None:
    """The report's files on the sweep's parent run, under ``report/``, through the store
    :func:`~orchestrator.report.load_sweep` read them from, and its headline as the parent's
    description (:func:`parent_note`); a comparison's headline becomes the parent's
    ``sweep.verdict`` tag."""
    if data.parent_id is None or data.tracker is None:
        return
    data.tracker.log_report(data.parent_id, report.out_dir)
    log_note(data, report.comparison)
    if report.comparison is not None:
        data.tracker.log_final(data.parent_id, {}, {keys.VERDICT: report.headline})


def parent_note(data: SweepData, comparison: Comparison | None = None) -> str:
    """The parent run's description (:data:`~orchestrator.core.keys.PARENT_NOTE`, shown on its
    MLflow page), in Markdown: the report's headline; for a comparison (``comparison``, else
    computed) its summary as the report has it (:func:`summary_blocks`)."""
    c = comparison if comparison is not None else compare(data)
    if c is None:
        parts = [f"**{_best_line(data)}**"]
    else:
        parts = [f"**{c.headline}**"] + [
            _md_table(block).rstrip("\n") if isinstance(block, Table) else block[1]
            for block in summary_blocks(c)]
    return "\n\n".join([*parts, f"`sweep report {data.study_name}` writes the whole report."])


def log_note(data: SweepData, comparison: Comparison | None = None) -> None:
    """:func:`parent_note` on the sweep's parent run."""
    if data.parent_id is not None and data.tracker is not None:
        data.tracker.log_final(data.parent_id, {},
                               {keys.PARENT_NOTE: parent_note(data, comparison)})
