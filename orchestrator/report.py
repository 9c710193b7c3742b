"""``sweep report``: the answer of a sweep, with error bars.

Reads the study (Optuna) and the trial runs (MLflow, ``search_runs`` into pandas), then writes a
self-contained HTML report (plots embedded), a Markdown summary, the trial table as CSV and
Parquet, and the plots as PNG; all are also logged on the sweep's parent run under ``report/``.

Statistics: per searched setting, the objective per level over complete trials (mean, standard
deviation, 95% t confidence interval, count); for two-level settings, the paired difference
between the levels over trials that share every other setting and the repeat index (so the same
seed), with its 95% confidence interval, a paired t-test and a Wilcoxon signed-rank test. Fewer
than 3 pairs: the evidence is called insufficient and no p-value is printed.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import paths
from . import space as sp
from .errors import SweepError
from .spec import SweepSpec, load_spec, validate
from .study import IDENTITY, REPEAT, RUN_ID, default_storage, open_storage

MIN_PAIRS = 3
MAX_LEVELS = 12  # a setting with more distinct values is continuous: see the importances
STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


@dataclass
class SweepData:
    """One sweep as tables: ``trials`` (a row per Optuna trial, joined with its MLflow run),
    ``curves`` (trial, epoch, metric, value) and the parent run's metrics and tags."""

    spec: SweepSpec
    study_name: str
    trials: pd.DataFrame
    curves: pd.DataFrame
    lr: pd.DataFrame
    parent_id: str | None
    parent_metrics: dict[str, float] = field(default_factory=dict)
    parent_tags: dict[str, str] = field(default_factory=dict)

    @property
    def factors(self) -> list[str]:
        """The searched settings (the space's non-fixed nodes), in YAML order."""
        out = []
        for _, node in sp.walk(self.spec.space):
            if not isinstance(node, sp.Fixed) and node.setting not in out:
                out.append(node.setting)
        return out


# ---------------------------------------------------------------------------------- reading

def load_sweep(spec_or_name: str, tracking_uri: str | None = None,
               storage: str | None = None) -> SweepData:
    """The study and runs of a sweep given by its YAML file or its name.

    Raises:
        SweepError: no such sweep in the stores.
    """
    import optuna
    from mlflow.tracking import MlflowClient

    tracking_uri = tracking_uri or paths.default_tracking_uri()
    storage = storage or default_storage(tracking_uri)
    is_file = os.path.isfile(spec_or_name)
    name = load_spec(spec_or_name).name if is_file else spec_or_name
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        raise SweepError(f"no sweep {name!r} in the study storage {storage}; run it first, or "
                         f"pass --storage / --tracking-uri") from None
    spec = load_spec(spec_or_name) if is_file else _spec_from_study(name, study)
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(spec.name)
    runs = _runs(client, exp.experiment_id, name) if exp else pd.DataFrame()
    trials = _trial_table(study, runs)
    curves, lr = _curves(client, trials)
    parent = _parent(client, exp.experiment_id, name) if exp else None
    return SweepData(spec, name, trials, curves, lr, parent.info.run_id if parent else None,
                     dict(parent.data.metrics) if parent else {},
                     dict(parent.data.tags) if parent else {})


def _spec_from_study(name: str, study) -> SweepSpec:
    identity = json.loads(study.user_attrs.get(IDENTITY, "{}"))
    if not identity:
        raise SweepError(f"study {name!r} was not made by sweep run; pass its YAML file instead")
    raw = {**identity, "name": identity.get("name", name)}
    if raw.get("sampler", {}).get("name") != "grid":
        raw["trials"] = max(1, len(study.trials))
        raw["trials"] += (-raw["trials"]) % raw.get("repeats", 1)
    return validate(raw, f"study {name}")


def _runs(client, experiment_id: str, study_name: str) -> pd.DataFrame:
    import mlflow

    mlflow.set_tracking_uri(client.tracking_uri)
    return mlflow.search_runs(
        [experiment_id], output_format="pandas", max_results=50000,
        filter_string=f"tags.`sweep.role` = 'trial' and tags.`sweep.study` = '{study_name}'")


def _parent(client, experiment_id: str, study_name: str):
    found = client.search_runs([experiment_id], max_results=1, filter_string=(
        f"tags.`sweep.role` = 'parent' and tags.`sweep.study` = '{study_name}'"))
    return found[0] if found else None


def _trial_table(study, runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    by_run = runs.set_index("run_id") if len(runs) else None
    for t in study.get_trials(deepcopy=False):
        row = {"trial": t.number, "state": t.state.name, "value": t.value,
               "repeat": t.user_attrs.get(REPEAT), "run_id": t.user_attrs.get(RUN_ID),
               "retry_of": t.user_attrs.get("sweep.retry_of"),
               "fail_reason": t.user_attrs.get("sweep.fail_reason"),
               "epochs": len(t.intermediate_values)}
        if by_run is not None and row["run_id"] in by_run.index:
            run = by_run.loc[row["run_id"]]
            for col, value in run.items():
                if col.startswith(("params.", "metrics.")) or col in (
                        "tags.sweep.seed", "tags.sweep.export.onnx"):
                    row[col] = value
        rows.append(row)
    table = pd.DataFrame(rows)
    for col in [c for c in table.columns if c.startswith("params.")]:
        table[col] = table[col].map(_typed)
    return table


def _typed(text):
    """MLflow params are strings: numbers back to numbers, for sorting and plotting."""
    if not isinstance(text, str):
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _curves(client, trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, lr_rows = [], []
    for _, t in trials.dropna(subset=["run_id"]).iterrows():
        for key in ("val_acc", "val_loss", "train_loss"):
            for m in client.get_metric_history(t["run_id"], key):
                rows.append({"trial": t["trial"], "metric": key, "epoch": m.step,
                             "value": m.value})
        if t["state"] == "COMPLETE":
            for m in client.get_metric_history(t["run_id"], "lr"):
                lr_rows.append({"trial": t["trial"], "step": m.step, "lr": m.value})
    return (pd.DataFrame(rows, columns=["trial", "metric", "epoch", "value"]),
            pd.DataFrame(lr_rows, columns=["trial", "step", "lr"]))


# ------------------------------------------------------------------------------- statistics

def mean_ci(values: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, sample std, CI low, CI high) with a 95% Student t interval (NaN below 2 values)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(values.std(ddof=1))
    half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


def factor_table(trials: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """Objective per level of each searched setting over complete trials."""
    done = trials[trials["state"] == "COMPLETE"]
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done or done[col].nunique(dropna=False) > MAX_LEVELS:
            continue
        for level, group in done.groupby(done[col].map(str), sort=True):
            mean, std, low, high = mean_ci(group["value"].to_numpy())
            rows.append({"factor": factor, "level": level, "mean": mean, "std": std,
                         "ci95_low": low, "ci95_high": high, "n": len(group)})
    return pd.DataFrame(rows, columns=["factor", "level", "mean", "std", "ci95_low",
                                       "ci95_high", "n"])


def paired_differences(trials: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """For each two-level setting: level B minus level A over pairs of complete trials equal in
    every other searched setting and in the repeat index (the same seed)."""
    from scipy import stats

    done = trials[trials["state"] == "COMPLETE"].copy()
    rows = []
    for factor in factors:
        col = f"params.{factor}"
        if col not in done:
            continue
        levels = sorted(done[col].map(str).unique())
        if len(levels) != 2:
            continue
        others = [f"params.{f}" for f in factors if f != factor and f"params.{f}" in done]
        keys = [*others, "repeat"]
        done["_level"] = done[col].map(str)
        wide = done.pivot_table(index=[done[k].map(str) for k in keys], columns="_level",
                                values="value", aggfunc="first").dropna()
        diff = (wide[levels[1]] - wide[levels[0]]).to_numpy() if len(wide) else np.array([])
        row = {"factor": factor, "a": levels[0], "b": levels[1], "pairs": len(diff),
               "mean_diff_b_minus_a": float(diff.mean()) if len(diff) else math.nan,
               "ci95_low": math.nan, "ci95_high": math.nan, "t_test_p": math.nan,
               "wilcoxon_p": math.nan, "verdict": ""}
        if len(diff) < MIN_PAIRS:
            row["verdict"] = f"insufficient evidence ({len(diff)} pairs, need {MIN_PAIRS})"
        else:
            _, _, row["ci95_low"], row["ci95_high"] = mean_ci(diff)
            if np.allclose(diff, diff[0]):  # no spread: the tests are undefined
                row["verdict"] = "every pair differs by the same amount"
            else:
                row["t_test_p"] = float(stats.ttest_rel(wide[levels[1]], wide[levels[0]]).pvalue)
                row["wilcoxon_p"] = float(stats.wilcoxon(diff).pvalue)
            if row["verdict"] == "":
                row["verdict"] = _verdict(row)
        rows.append(row)
    return pd.DataFrame(rows, columns=["factor", "a", "b", "pairs", "mean_diff_b_minus_a",
                                       "ci95_low", "ci95_high", "t_test_p", "wilcoxon_p",
                                       "verdict"])


def _verdict(row: dict) -> str:
    low, high = row["ci95_low"], row["ci95_high"]
    if low > 0:
        return f"{row['b']} better than {row['a']} (95% CI excludes 0)"
    if high < 0:
        return f"{row['a']} better than {row['b']} (95% CI excludes 0)"
    return "no significant difference (95% CI includes 0)"


def missing(data: SweepData) -> list[str]:
    """What a partial sweep lacks: trials not finished, grid configurations short of repeats."""
    t = data.trials
    finished = int(t["state"].isin(["COMPLETE", "PRUNED", "FAIL"]).sum()) if len(t) else 0
    out = []
    target = data.spec.trials
    if finished < target:
        out.append(f"{finished} of {target} trials finished: {target - finished} missing "
                   f"(`sweep run` again resumes it)")
    running = int((t["state"] == "RUNNING").sum()) if len(t) else 0
    if running:
        out.append(f"{running} trial(s) still RUNNING")
    failed = int((t["state"] == "FAIL").sum()) if len(t) else 0
    if failed:
        out.append(f"{failed} trial(s) failed: they are listed, not used in the statistics")
    return out


# ------------------------------------------------------------------------------------ plots

def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plots(data: SweepData, by: str | None) -> dict[str, bytes]:
    """PNG bytes by file name."""
    import matplotlib

    matplotlib.use("Agg")
    out = {}
    metric = data.spec.objective.metric
    if len(data.curves):
        out["curves.png"] = _plot_curves(data, by, metric if metric in
                                         set(data.curves["metric"]) else "val_acc")
    if len(data.lr):
        out["lr_schedule.png"] = _plot_lr(data, by)
    if "batch_size" in data.factors and "params.lr_scaling" in data.trials:
        out["batch_scaling.png"] = _plot_scaling(data)
    out["history.png"] = _plot_history(data)
    importance = _plot_importance(data)
    if importance:
        out["importances.png"] = importance
    parallel = _plot_parallel(data)
    if parallel:
        out["parallel.png"] = parallel
    return out


def _configuration(row: pd.Series, factors: list[str]) -> str:
    return ", ".join(f"{f}={row.get(f'params.{f}')}" for f in factors)


def _plot_curves(data: SweepData, by: str | None, metric: str) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    curves = data.curves[data.curves["metric"] == metric]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ran = t[t["state"].isin(["COMPLETE", "PRUNED"])]
    levels = sorted(ran[f"params.{by}"].map(str).unique()) if by else [""]
    colors = {lvl: plt.cm.tab10(i % 10) for i, lvl in enumerate(levels)}
    configs: dict[str, list[int]] = {}
    for number, row in t.iterrows():
        if row["state"] in ("COMPLETE", "PRUNED"):
            configs.setdefault(_configuration(row, data.factors), []).append(number)
    labelled = set()
    for numbers in configs.values():
        level = str(t.loc[numbers[0], f"params.{by}"]) if by else ""
        wide = curves[curves["trial"].isin(numbers)].pivot_table(
            index="epoch", columns="trial", values="value")
        if wide.empty:
            continue
        mean = wide.mean(axis=1)
        label = f"{by}={level}" if by and level not in labelled else None
        labelled.add(level)
        ax.plot(mean.index, mean.values, color=colors[level], label=label, lw=1.5)
        if wide.shape[1] > 1:
            ax.fill_between(mean.index, wide.min(axis=1), wide.max(axis=1), color=colors[level],
                            alpha=0.15, lw=0)
        pruned = [n for n in numbers if t.loc[n, "state"] == "PRUNED"]
        for n in pruned:
            last = curves[curves["trial"] == n].sort_values("epoch").tail(1)
            ax.plot(last["epoch"], last["value"], "x", color=colors[level], ms=7)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per configuration: mean over seeds, band = min..max; x = pruned")
    if by:
        ax.legend()
    return _png(fig)


def _plot_lr(data: SweepData, by: str | None) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials.set_index("trial")
    fig, ax = plt.subplots(figsize=(8, 3.5))
    shown = set()
    for number, group in data.lr.groupby("trial"):
        level = str(t.loc[number, f"params.{by}"]) if by else str(number)
        if level in shown:
            continue
        shown.add(level)
        ax.plot(group["step"], group["lr"], label=f"trial {number} ({by}={level})" if by
                else f"trial {number}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("lr")
    ax.set_title("learning rate as logged, one trial per level")
    ax.legend(fontsize=8)
    return _png(fig)


def _plot_scaling(data: SweepData) -> bytes:
    import matplotlib.pyplot as plt

    done = data.trials[data.trials["state"] == "COMPLETE"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for rule, group in done.groupby("params.lr_scaling"):
        stats_ = group.groupby("params.batch_size")["value"].agg(["mean", "std", "count"])
        ax.errorbar(stats_.index, stats_["mean"], yerr=stats_["std"].fillna(0), marker="o",
                    capsize=3, label=f"lr_scaling={rule}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch_size")
    ax.set_ylabel(data.spec.objective.metric)
    ax.set_title("objective vs batch size per scaling rule (mean +- std over seeds)")
    ax.legend()
    return _png(fig)


def _plot_history(data: SweepData) -> bytes:
    import matplotlib.pyplot as plt

    t = data.trials
    fig, ax = plt.subplots(figsize=(8, 3.5))
    marks = {"COMPLETE": ("o", "tab:blue"), "PRUNED": ("x", "tab:orange"),
             "FAIL": ("s", "tab:red")}
    for state, (marker, color) in marks.items():
        rows = t[t["state"] == state]
        if state == "COMPLETE":
            y = rows["value"]
        else:  # no objective value: placed at the last reported one, or at the bottom
            col = f"metrics.{data.spec.objective.metric}"
            y = rows[col] if col in rows else pd.Series(np.nan, index=rows.index)
            y = y.fillna(t["value"].min() if t["value"].notna().any() else 0)
        if len(rows):
            ax.scatter(rows["trial"], y, marker=marker, color=color,
                       label=f"{state.lower()} ({len(rows)})")
    done = t[t["state"] == "COMPLETE"].sort_values("trial")
    if len(done):
        best = (done["value"].cummax() if data.spec.objective.direction == "maximize"
                else done["value"].cummin())
        ax.step(done["trial"], best, where="post", color="k", lw=1, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(data.spec.objective.metric)
    ax.set_title("optimization history (pruned and failed trials marked)")
    ax.legend(fontsize=8)
    return _png(fig)


def _complete_study(data: SweepData):
    import optuna

    done = data.trials[data.trials["state"] == "COMPLETE"]
    if len(done) < 2:
        return None
    study = optuna.create_study(direction=data.spec.objective.direction)
    for _, row in done.iterrows():
        params = {f: row[f"params.{f}"] for f in data.factors if f"params.{f}" in row}
        dists = {}
        for f, v in params.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and \
                    done[f"params.{f}"].nunique() > MAX_LEVELS:
                dists[f] = optuna.distributions.FloatDistribution(
                    float(done[f"params.{f}"].min()), float(done[f"params.{f}"].max()))
                params[f] = float(v)
            else:
                choices = tuple(sorted(done[f"params.{f}"].map(str).unique()))
                dists[f] = optuna.distributions.CategoricalDistribution(choices)
                params[f] = str(v)
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                  value=float(row["value"])))
    return study


def _plot_importance(data: SweepData) -> bytes | None:
    import matplotlib.pyplot as plt
    import optuna

    study = _complete_study(data)
    if study is None:
        return None
    varying = [f for f in data.factors if f"params.{f}" in data.trials
               and data.trials[f"params.{f}"].nunique() > 1]
    if not varying:
        return None
    try:
        importances = optuna.importance.get_param_importances(study, params=varying)
    except (RuntimeError, ValueError):  # too few trials for the evaluator
        return None
    fig, ax = plt.subplots(figsize=(6, 0.5 + 0.4 * len(importances)))
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names])
    ax.set_xlabel("importance (Optuna's default evaluator)")
    ax.set_title("which settings mattered")
    return _png(fig)


def _plot_parallel(data: SweepData) -> bytes | None:
    import warnings

    import optuna

    study = _complete_study(data)
    if study is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental-API warnings
        ax = optuna.visualization.matplotlib.plot_parallel_coordinate(study)
    return _png(ax.figure)


# ----------------------------------------------------------------------------------- output

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


def export_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Export parity of the trials that have it: a row per (trial, format)."""
    rows = []
    for _, t in trials.iterrows():
        for col in t.index:
            if col.startswith("metrics.export_") and col.endswith("_passed") and \
                    not pd.isna(t[col]):
                fmt = col[len("metrics.export_"):-len("_passed")]
                rows.append({"trial": t["trial"], "format": fmt,
                             "parity": "passed" if t[col] else "FAILED",
                             **{k: t.get(f"metrics.export_{fmt}_{k}", math.nan)
                                for k in ("max_abs_diff", "top1_agreement", "accuracy_delta",
                                          "ms_per_image_b1")}})
    return pd.DataFrame(rows)


@dataclass
class Report:
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
    paired = paired_differences(data.trials, factors)
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
                     f"({_configuration(best, data.factors)}).")
    if "test_acc" in data.parent_metrics:
        std = data.parent_metrics.get("test_acc_std")
        lines.append(f"Held-out test split (never used for selection): test_acc "
                     f"{data.parent_metrics['test_acc']:.4f}"
                     f"{f' +- {std:.4f}' if std is not None else ''} over trial(s) "
                     f"{data.parent_tags.get('sweep.test_trials', '?')}.")
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


def log_report(data: SweepData, report: Report, tracking_uri: str) -> None:
    """The report's files on the sweep's parent run, under ``report/``."""
    if data.parent_id is None:
        return
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=tracking_uri).log_artifacts(data.parent_id, str(report.out_dir),
                                                          "report")
