"""The preflight of a sweep: which configurations to check, how to show and log the verdicts.

The checks themselves are the trainer's (:func:`trainers.preflight.preflight`); they run in a
worker before the first trial of ``sweep run``, or in the CLI process for ``sweep doctor``.
Requests travel as :class:`~orchestrator.running.protocol.Preflight` messages and reports as plain
dicts (``PreflightReport.to_dict()``), so this module never imports torch.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.table import Table

from trainers import CUDA_METRICS, TrainSettings
from trainers.verdicts import ERROR, FAIL, PASS, SKIP, WARN, worst

from ..config import space as sp
from ..config.spec import SweepSpec, settings_of
from .protocol import Preflight

STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red", SKIP: "dim", ERROR: "magenta"}
VARIES = ("dataset", "model")  # a check per distinct pair: that is where the bugs live
REPORT_FILES = ("preflight.json", "preflight.md")  # what :func:`write` writes


def checked_configurations(spec: SweepSpec) -> list[dict[str, Any]]:
    """The trainer settings to check: the sweep's first configuration, once per distinct
    dataset and model the space can choose."""
    base = {**settings_of(spec, sp.first_values(spec.space)), "seed": spec.seed}
    choices = {name: [base.get(name, getattr(TrainSettings(), name))] for name in VARIES}
    for _, node in sp.walk(spec.space):
        if node.setting in VARIES:
            values = node.choices if isinstance(node, sp.Choice) else \
                [o for o, _ in node.options] if isinstance(node, sp.Options) else [node.value]
            choices[node.setting] += [v for v in values if v not in choices[node.setting]]
    out = []
    for dataset in choices["dataset"]:
        for model in choices["model"]:
            out.append({**base, "dataset": dataset, "model": model})
    return out


def lr_search(spec: SweepSpec) -> tuple[float, float] | None:
    """The lowest and highest ``lr`` the space can give (None when lr is not searched)."""
    values = []
    for _, node in sp.walk(spec.space):
        if node.setting != "lr":
            continue
        if isinstance(node, sp.Range):
            values += [node.low, node.high]
        elif isinstance(node, sp.Choice):
            values += [float(v) for v in node.choices]
    return (min(values), max(values)) if values else None


def label(settings: dict[str, Any]) -> str:
    return f"{settings['dataset']} / {settings['model']}"


def request(spec: SweepSpec, settings: dict[str, Any], out_dir: Path) -> Preflight:
    """What a worker (or ``sweep doctor``) needs to run the checks of one configuration."""
    options = spec.preflight
    return Preflight(settings=settings, dir=str(out_dir),
                     overfit_steps=options.overfit_steps if options else 300,
                     lr_range_test=bool(options and options.lr_range_test),
                     lr_search=lr_search(spec))


def failed_report(check: str, evidence: str, cause: str, fix: str,
                  status: str = FAIL) -> dict[str, Any]:
    """The report of a configuration whose checks could not run: one row of ``check``, FAIL
    (the user's settings or code) or ERROR (the checker's own fault)."""
    return {"status": status, "files": {}, "seconds": 0.0, "suggested_lr": None,
            "checks": [{"name": check, "status": status, "evidence": evidence, "cause": cause,
                        "fix": fix}]}


def run_checks(req: Preflight) -> dict[str, Any]:
    """Run the trainer's checks for one :func:`request`: the report as a dict, or a FAIL of the
    ``settings`` check when the settings themselves are unusable (an ERROR report when the
    checker itself raised: never an exception)."""
    import trainers
    from trainers.preflight import preflight

    try:
        settings = trainers.TrainSettings.from_dict(req.settings)
    except trainers.SettingsError as e:
        return failed_report("settings", str(e), "a setting cannot be used", e.fix)
    except Exception as e:  # noqa: BLE001 - the checker's fault, not the user's: no FAIL
        return failed_report("settings", f"{type(e).__name__}: {e}"[:500], "the checks could "
                             "not start: a fault of the checker", "", status=ERROR)
    lr_search_range = tuple(req.lr_search) if req.lr_search else None
    try:
        return preflight(settings, out_dir=req.dir, overfit_steps=req.overfit_steps,
                         lr_range_test=req.lr_range_test, lr_search=lr_search_range).to_dict()
    except Exception as e:  # noqa: BLE001 - each check is isolated; this is the frame's fault
        return failed_report("preflight", f"{type(e).__name__}: {e}"[:500], "the checks "
                             "themselves raised: a fault of the checker", "", status=ERROR)


def check_all(spec: SweepSpec, out_dir: Path,
              ask: Callable[[Preflight], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Every configuration's checks, asked of ``ask`` (a worker, or :func:`run_checks` in
    process); stops early when ``ask`` returns None (the worker died, a signal came).

    Returns:
        One ``{"label", "folder", "settings", "report"}`` per configuration checked; the images
        of each are in ``out_dir / folder``.
    """
    results = []
    for folder, settings in zip(folders(spec), checked_configurations(spec)):
        report = ask(request(spec, settings, out_dir / folder))
        if report is None:
            break
        results.append({"label": label(settings), "folder": folder, "settings": settings,
                        "report": objectives_logged(spec, report)})
    return results


def folders(spec: SweepSpec) -> list[str]:
    """The folder of each checked configuration's images, in :func:`checked_configurations`'
    order (``0-digits-small_cnn``...)."""
    return [f"{i}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{s['dataset']}-{s['model']}")
            for i, s in enumerate(checked_configurations(spec))]


def objectives_logged(spec: SweepSpec, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with a FAIL row ``objective`` when an objective or a constraint names a metric
    that the configuration's epochs do not report. Known once the user's metric functions
    (``train.metrics``) ran on a batch (the report's ``metrics``); without them validation
    has already refused any name the trainer does not log."""
    logged = report.get("metrics")
    if not logged:
        return report
    from ..stores.tracking import (
        metric_name_problem,  # MLflow's own check (MLflow loads in seconds)
    )

    refused = [{"name": "metric names", "status": FAIL,
                "evidence": f"a function of train.metrics returns {name!r}, which MLflow "
                            f"refuses as a metric name: {problem}",
                "cause": "every trial would fail when its first epoch is logged",
                "fix": f"rename {name!r} in the function that returns it"}
               for name in logged if (problem := metric_name_problem(name))]
    several = spec.is_multi_objective
    named = [(f"objective{f'.{i}' if several else ''}.metric", o.metric)
             for i, o in enumerate(spec.objectives)]
    named += [(f"constraints.{i}.metric", c.metric) for i, c in enumerate(spec.constraints)]
    # a CUDA metric on another device: validation has warned of it already
    missing = [(field, metric) for field, metric in named
               if metric not in logged and metric not in CUDA_METRICS]
    if not missing and not refused:
        return report
    rows = refused + [{"name": "objective", "status": FAIL,
             "evidence": f"{field} is {metric!r}, which an epoch of this configuration does not "
                         f"report (it reports {', '.join(logged)})",
             "cause": "no metric of that name: every trial would "
                      + ("be infeasible" if field.startswith("constraints") else
                         "fail at its first epoch"),
             "fix": f"set {field} to one of the names above, or return {metric!r} from a "
                    f"function of train.metrics"} for field, metric in missing]
    checks = [*report.get("checks", []), *rows]
    return {**report, "checks": checks, "status": worst(c["status"] for c in checks)}


def status_of(results: list[dict[str, Any]]) -> str:
    """The worst status of all configurations: PASS, WARN, ERROR or FAIL (only FAIL stops)."""
    return worst(r["report"]["status"] for r in results)


def table(name: str, report: dict[str, Any]) -> Table:
    """One configuration's checks, one row each."""
    t = Table(title=f"preflight {name}: {report['status']} ({report['seconds']:.1f} s)",
              title_justify="left", show_lines=False)
    for col in ("check", "status", "evidence", "cause / fix"):
        t.add_column(col, overflow="fold")
    for c in report["checks"]:
        advice = " -> ".join(x for x in (c["cause"], c["fix"]) if x)
        t.add_row(c["name"], f"[{STYLE[c['status']]}]{c['status']}[/]", c["evidence"], advice)
    return t


def show(console: Console, results: list[dict[str, Any]]) -> None:
    for r in results:
        console.print(table(r["label"], r["report"]))
        if r["report"].get("suggested_lr"):
            low, high = r["report"]["suggested_lr"]
            console.print(f"lr range test: search lr in [{low:.2g}, {high:.2g}]")


def failures(results: list[dict[str, Any]], status: str = FAIL) -> list[str]:
    """One line per check of ``status`` (FAIL: the user's code; ERROR: the checker's own):
    configuration, check, evidence, cause and fix."""
    return [f"preflight {r['label']}: {c['name']} {status}: {c['evidence']} ({c['cause']}; "
            f"fix: {c['fix']})" for r in results for c in r["report"]["checks"]
            if c["status"] == status]


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [f"# Preflight: {status_of(results)}", ""]
    for r in results:
        rep = r["report"]
        lines += [f"## {r['label']}: {rep['status']}", "",
                  "| check | status | evidence | cause | fix |", "|---|---|---|---|---|"]
        for c in rep["checks"]:
            cells = [c[k].replace("|", "\\|") for k in ("name", "status", "evidence", "cause",
                                                         "fix")]
            lines.append("| " + " | ".join(cells) + " |")
        if rep.get("suggested_lr"):
            lines += ["", f"Suggested lr range: [{rep['suggested_lr'][0]:.2g}, "
                          f"{rep['suggested_lr'][1]:.2g}]"]
        for kind, path in rep.get("files", {}).items():
            lines += ["", f"![{kind}]({r['folder']}/{Path(path).name})"]
        lines.append("")
    return "\n".join(lines)


def write(out_dir: Path, results: list[dict[str, Any]]) -> tuple[Path, Path]:
    """``preflight.json`` and ``preflight.md`` in ``out_dir`` (next to the per-configuration
    folders holding the images)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = (out_dir / name for name in REPORT_FILES)
    js.write_text(json.dumps({"status": status_of(results), "configurations": results},
                             indent=2))
    md.write_text(markdown(results))
    return js, md
