"""The report's files: Markdown, self-contained HTML (plots embedded), the trial table as CSV and
Parquet, the plots as PNG; and their copy on the sweep's parent run."""
from __future__ import annotations

import base64
import html
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import keys
from .load import SweepData
from .plots import plots
from .stats import (
    MIN_PAIRS,
    configuration,
    export_table,
    factor_table,
    missing,
    paired_differences,
)

STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return str(v)


@dataclass
class Report:
    """What :func:`build_report` computed, and the files it wrote into ``out_dir``."""

    out_dir: Path
    factors: pd.DataFrame
    paired: pd.DataFrame
    missing: list[str]
    files: list[Path]


def build_report(data: SweepData, out_dir: str | os.PathLike, by: str | None = None) -> Report:
    """Write report.html, report.md, trials.csv, trials.parquet and plots/*.png into
    ``out_dir``."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    factors = data.factors
    by = by or ("optimizer" if "optimizer" in factors else (factors[0] if factors else None))
    ftable = factor_table(data.trials, factors)
    paired = paired_differences(data.trials, factors, direction=data.spec.objective.direction)
    gaps = missing(data)
    pictures = plots(data, by)
    files = []
    for name, png in pictures.items():
        (out / "plots" / name).write_bytes(png)
        files.append(out / "plots" / name)
    table = data.trials.drop(columns=[c for c in data.trials.columns if c.startswith("tags.")])
    table.to_csv(out / "trials.csv", index=False)
    table.astype({c: str for c in table.columns if table[c].dtype == object}).to_parquet(
        out / "trials.parquet", index=False)
    exports = export_table(data.trials)
    md = _markdown(data, ftable, paired, gaps, exports, pictures)
    (out / "report.md").write_text(md)
    (out / "report.html").write_text(_html(data, ftable, paired, gaps, exports, pictures))
    files += [out / "report.md", out / "report.html", out / "trials.csv", out / "trials.parquet"]
    return Report(out, ftable, paired, gaps, files)


def _summary_lines(data: SweepData) -> list[str]:
    t = data.trials
    counts = {s: int((t["state"] == s).sum()) for s in STATES if len(t)}
    objective = data.spec.objective
    states = ", ".join(f"{v} {k.lower()}" for k, v in counts.items() if v)
    lines = [f"Sweep `{data.study_name}`: {states}; "
             f"objective {objective.metric} ({objective.direction}, {objective.reduce} epoch)."]
    done = t[t["state"] == "COMPLETE"] if len(t) else t
    if len(done):
        best = done.sort_values("value", ascending=objective.direction == "minimize").iloc[0]
        lines.append(f"Best trial {int(best['trial'])}: {best['value']:.4f} "
                     f"({configuration(best, data.factors)}).")
    if "test_acc" in data.parent_metrics:
        std = data.parent_metrics.get("test_acc_std")
        lines.append(f"Held-out test split (never used for selection): test_acc "
                     f"{data.parent_metrics['test_acc']:.4f}"
                     f"{f' +- {std:.4f}' if std is not None else ''} over trial(s) "
                     f"{data.parent_tags.get(keys.TEST_TRIALS, '?')}.")
    return lines


def _markdown(data, ftable, paired, gaps, exports, pictures) -> str:
    parts = [f"# Sweep report: {data.study_name}\n", *[f"{line}\n" for line in
                                                       _summary_lines(data)]]
    if gaps:
        parts.append("\n**Incomplete:** " + "; ".join(gaps) + "\n")
    parts += ["\n## Objective per level (complete trials, over repeats)\n\n", _md_table(ftable),
              "\n## Paired differences (same other settings, same seed)\n\n",
              "Paired t-test (its 95% CI shown) and Wilcoxon signed-rank test; fewer than "
              f"{MIN_PAIRS} pairs: insufficient evidence, no p-value.\n\n", _md_table(paired)]
    if not exports.empty:
        parts += ["\n## Export parity\n\n", _md_table(exports)]
    parts.append("\n## Plots\n\n" + "".join(f"![{n}](plots/{n})\n" for n in pictures))
    return "".join(parts)


def _html(data, ftable, paired, gaps, exports, pictures) -> str:
    def table(df):
        return "<p>(none)</p>" if df.empty else df.to_html(index=False, na_rep="",
                                                           float_format=lambda v: f"{v:.4g}")

    imgs = "".join(f'<figure><img alt="{n}" src="data:image/png;base64,'
                   f'{base64.b64encode(png).decode()}"><figcaption>{n}</figcaption></figure>'
                   for n, png in pictures.items())
    trials = data.trials[[c for c in ("trial", "state", "value", "repeat", "epochs",
                                      "fail_reason", *[f"params.{f}" for f in data.factors])
                          if c in data.trials]]
    body = "".join(f"<p>{html.escape(line)}</p>" for line in _summary_lines(data))
    if gaps:
        body += f"<p><b>Incomplete:</b> {html.escape('; '.join(gaps))}</p>"
    body += ("<h2>Objective per level</h2>" + table(ftable) +
             "<h2>Paired differences (same other settings, same seed)</h2>"
             f"<p>Paired t-test (95% CI) and Wilcoxon signed-rank; fewer than {MIN_PAIRS} pairs: "
             "insufficient evidence.</p>" + table(paired))
    if not exports.empty:
        body += "<h2>Export parity</h2>" + table(exports)
    body += "<h2>Plots</h2>" + imgs + "<h2>Trials</h2>" + table(trials)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Sweep report: "
            f"{html.escape(data.study_name)}</title><style>{style}</style></head><body>"
            f"<h1>Sweep report: {html.escape(data.study_name)}</h1>{body}</body></html>")


def log_report(data: SweepData, report: Report) -> None:
    """The report's files on the sweep's parent run, under ``report/``, through the store
    :func:`~orchestrator.report.load_sweep` read them from."""
    if data.parent_id is None or data.tracker is None:
        return
    data.tracker.log_report(data.parent_id, report.out_dir)
