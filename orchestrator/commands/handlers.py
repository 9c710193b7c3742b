"""What each ``sweep`` command does (:data:`HANDLERS`, by name): it calls the API or the module
behind it and prints the result; its flags are :mod:`orchestrator.commands.parser`'s."""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from ..answer.objectives import values_text
from ..config.reading import tag_overrides
from ..config.space import grid_size
from ..config.spec import data_downloads, data_problems, load_spec
from ..core import outputs, paths, urls
from ..core.errors import ExitCode, SweepError
from ..report.display import (
    command_line,
    no_level_spread,
    no_pair_interval,
    option,
    params_text,
    table_lines,
)
from ..running.server import (
    artifacts_destination,
    check_address,
    serve,
    server_command,
    storage_proxy,
    ui_command,
)
from ..stores import reach
from . import api
from .parser import completion_script


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise SweepError(f"{flag} must be >= 1, got {value}")


def cmd_validate(args, console: Console) -> ExitCode:
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    for w in [*spec.warnings, *data_problems(spec)]:
        console.print(f"warning: {w}", soft_wrap=True)
    kind = (f"grid of {grid_size(spec.space)} configurations x {spec.repeats} repeats"
            if spec.is_grid else f"{spec.sampler.name} sampler")
    console.print(f"{args.spec}: ok: sweep {spec.name!r}, {spec.trials} trials, {kind}",
                  soft_wrap=True)
    return ExitCode.OK


def cmd_run(args, console: Console) -> ExitCode:
    _positive("--trials", args.trials)
    _positive("--workers", args.workers)
    workers, gpus = _slurm_slots(args) if args.slurm else (args.workers, args.gpus)
    try:
        result = api.run(args.spec, trials=args.trials, workers=workers, gpus=gpus,
                         new=args.new, force=args.force,
                         set=args.overrides + tag_overrides(args.spec, args.tags),
                         tracking_uri=args.tracking_uri, storage=args.storage,
                         max_grid=args.max_grid, console=console)
    except api.SweepInterrupted as e:  # stopped by Ctrl-C: what it got so far
        result = e.result
    print_summary(console, result.spec, result.outcome)
    return result.outcome.exit_code


def _slurm_slots(args) -> tuple[int, list]:
    """``sweep run --slurm``: the worker slots of this Slurm task's allocation."""
    from ..running.submit import task_slots

    if args.workers or args.gpus is not None:
        raise SweepError("--slurm takes the workers and GPUs from the Slurm allocation; drop "
                         "--workers and --gpus (or --slurm)")
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    slots = task_slots(os.environ, spec.workers_per_gpu, spec.train.get("devices_per_trial", 1))
    return slots.workers, slots.gpus


def print_summary(console: Console, spec, outcome) -> None:
    """How the sweep ended; with repeats or a comparison, the report's answer (before any run
    id); its best configurations (with repeats: mean +- std over seeds; a comparison's
    accuracy in percent, as its answer shows it) or trials, every shown trial's full MLflow
    run id on a line of its own (a table would cut it on a narrow or piped console), then the
    commands that look at it."""
    c = outcome.counts
    name = outcome.study_name or spec.name  # NAME-2... after --new: the study that ran
    state = "interrupted" if outcome.exit_code.stopped else "finished"
    console.print(f"sweep {name!r} {state} in {outcome.elapsed:.1f} s: {c['complete']} "
                  f"complete, {c['pruned']} pruned, {c['fail']} failed", soft_wrap=True)
    answer = _report_answer(name, outcome) if outcome.configurations else None
    if answer:  # repeats or a comparison: the report's answer (a comparison's table too)
        console.print(f"sweep report: {answer[0]}", soft_wrap=True, markup=False,
                      highlight=False)
        for line in answer[1:]:
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    objective = "; ".join(f"{o.label}, {o.goal}" for o in spec.objectives)
    if outcome.configurations:
        console.print(_configurations_table(spec, outcome.configurations, objective))
        # each configuration's runs under its name (a comparison's level), as its table rows
        ids = [(conf["name"], n, run) for conf in outcome.configurations[:SUMMARY_ROWS]
               for n, run in zip(conf["trials"], conf["run_ids"])]
    elif outcome.best:
        console.print(_best_table(spec, outcome.best, objective))
        ids = [(None, b["number"], b["run_id"]) for b in outcome.best]
    else:
        ids = []
    if any(run for *_, run in ids):
        console.print("their MLflow runs:", soft_wrap=True)
        named = None
        for configuration, number, run in ids:
            if configuration is not None and configuration != named:
                console.print(f"  {configuration}:", soft_wrap=True, markup=False,
                              highlight=False)
                named = configuration
            console.print(f"  trial {number}: {run or '(none)'}", soft_wrap=True,
                          highlight=False)
    console.print(_browse_lines(name, outcome), soft_wrap=True, markup=False,
                  highlight=False)


def _configurations_table(spec, configurations: list[dict], objective: str) -> Table:
    """The best configurations of a sweep with repeats or a comparison: each one's mean and
    std over its seeds (a comparison's accuracy in percent, as its answer shows it)."""
    from ..answer.words import Words

    # a comparison's accuracy as its answer writes it: means in %, their spread in points
    scale = 100 if spec.compare is not None and Words.of((), spec.objective.metric).percent \
        else 1
    table = Table(title=f"best configurations ({objective}; mean and std over seeds"
                        f"{', in %' if scale == 100 else ''})")
    for col in ("configuration", "mean", "std", "n", "trials"):
        table.add_column(col, overflow="fold")
    digits = 2 if scale == 100 else 4
    for conf in configurations[:SUMMARY_ROWS]:
        table.add_row(conf["name"], f"{scale * conf['mean']:.{digits}f}",
                      f"{scale * conf['std']:.{digits}f}", str(conf["n"]),
                      " ".join(map(str, conf["trials"])))
    return table


def _best_table(spec, best: list[dict], objective: str) -> Table:
    """The best trials of a sweep, or its Pareto front with several objectives."""
    several = spec.is_multi_objective
    table = Table(title=f"Pareto front: {len(best)} trials ({objective})" if several
                  else f"best trials ({objective})")
    for col in ("trial", "values" if several else "value", "settings"):
        table.add_column(col, overflow="fold")
    for b in best:
        table.add_row(str(b["number"]), values_text(b.get("values") or [b["value"]]),
                      params_text(b["settings"]))
    return table


def _report_answer(name: str, outcome) -> list[str] | None:
    """The answer ``sweep report`` gives the sweep (a comparison's sentence and table, else its
    best trial: :func:`orchestrator.report.answer_lines`), read back quickly: the study and
    one search of its runs, no per-epoch curves. None when a store file is missing (reading
    would create it)."""
    from ..report import answer_lines, load_sweep

    files = [paths.sqlite_file(outcome.tracking_uri), paths.sqlite_file(outcome.storage),
             paths.journal_file(outcome.storage)]
    if any(f is not None and not f.exists() for f in files):
        return None
    try:
        return answer_lines(load_sweep(name, outcome.tracking_uri, outcome.storage,
                                       curves=False))
    except SweepError as e:  # the sweep itself is done and stored: say why, go on
        return [f"(not read: {e})"]


SUMMARY_ROWS = 5  # configurations or trials in the table at the end of `sweep run`


def _browse_lines(name: str, outcome) -> str:
    """What to do next with a finished sweep: its report, its trials here, and MLflow's runs
    table of its experiment in the sweep's view (a bare experiment link may land on MLflow's
    GenAI views). Each command is built from the arguments it runs (:func:`command_line`):
    the study that ran and the stores it used, quoted, so that it works when pasted."""
    from ..core.urls import mask
    from ..running.server import sweep_view
    from ..stores.storages import default_storage

    uri, runs = outcome.tracking_uri, sweep_view(outcome.experiment_id)
    uri_flags = [] if uri == paths.default_tracking_uri() else option("--tracking-uri", mask(uri))
    storage_flags = [] if outcome.storage == default_storage(uri) else \
        option("--storage", mask(outcome.storage))
    lines = [f"the report: {command_line('report', name, *uri_flags, *storage_flags)}",
             f"the trials: {command_line('status', name, *uri_flags, *storage_flags)}"]
    if uri.startswith(("http://", "https://")):  # a tracking server serves the UI itself
        lines.append(f"browse it: {mask(uri).rstrip('/')}{runs}")
    else:
        lines.append(f"browse it: {command_line('ui', name, *uri_flags)}   (then "
                     f"http://127.0.0.1:5000{runs}, the runs table of the trials)")
    return "\n".join(lines)


def cmd_status(args, console: Console) -> ExitCode:
    from ..report.status import show, storage_url

    url = storage_url(args.tracking_uri, args.storage)
    reach.check_store(url, "--storage", create=False, missing_ok=True)  # none yet: no sweeps
    return show(console, args.name, url)


def cmd_plan(args, console: Console) -> ExitCode:
    planned = api.plan(args.spec, pilot_seeds=args.pilot_seeds, source=args.source,
                       draws=args.draws, console=console)
    for line in planned.lines():
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    return ExitCode.OK


def cmd_schema(args, console: Console) -> ExitCode:
    import json

    from ..config.schema import json_schema

    if args.out:  # before any work; only a schema it wrote, unchanged since, is replaced
        reach.check_out(args.out, folder=False)
        outputs.check_file(args.out, "sweep schema")
    schema = json_schema()
    if not args.out:
        sys.stdout.write(json.dumps(schema, indent=2) + "\n")
        return ExitCode.OK
    out = outputs.write_json(args.out, schema, "sweep schema")  # stamped: an edit shows
    console.print(f"wrote {out} (editors: see README, The sweep YAML)", soft_wrap=True)
    return ExitCode.OK


def cmd_submit(args, console: Console) -> ExitCode:
    from ..running.submit import Job, secret_command, secret_name, submit

    spec = load_spec(args.spec, args.overrides, args.max_grid)
    kind = "slurm" if args.slurm else "k8s"
    job = Job(args.jobs, args.gpus_per_job, args.cpus_per_job, args.partition, args.time,
              args.image, args.secret, args.volume_claim)
    tracking = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    folder = paths.work_dir(tracking or paths.default_tracking_uri(), spec.name) / "submit"
    done = submit(spec, kind, job, args.storage, tracking, args.overrides, folder,
                  args.dry_run, args.max_grid)
    say = lambda line: console.print(line, soft_wrap=True, markup=False, highlight=False)  # noqa: E731
    if args.dry_run:
        sys.stdout.write(done.text)
        say(f"(dry run: wrote {done.file}; nothing created or submitted)")
        return ExitCode.OK
    follow = command_line("status", spec.name, *option("--storage", urls.mask(args.storage)))
    say(f"study {done.study!r} and its parent run {done.parent_run_id} are ready")
    if kind == "slurm":
        say(f"submitted job {done.job_id}: {args.jobs} array tasks ({done.file})")
        say(f"follow it: {follow}   (and squeue -j {done.job_id}; task logs "
            f"{done.file.parent}/slurm-{done.job_id}_*.log)")
    else:
        say(f"wrote {done.file} ({args.jobs} pods; not applied)")
        say(f"once: {secret_command(secret_name(spec.name, job), args.storage, tracking)}")
        say(f"then: {shlex.join(['kubectl', 'apply', '-f', str(done.file)])}; follow it: "
            f"{follow}")
    return ExitCode.OK


def cmd_completion(args, console: Console) -> ExitCode:
    sys.stdout.write(completion_script(args.shell))
    return ExitCode.OK


def cmd_doctor(args, console: Console) -> ExitCode:
    from ..config.slots import thread_cap
    from ..config.spec import PreflightSpec
    from ..running import preflight as pf
    from ..running.phases import check_in_worker

    threads = thread_cap()  # before any work: an OMP_NUM_THREADS that is no count
    if args.out:  # before any work
        reach.check_out(args.out, folder=True)
        outputs.check(args.out, pf.REPORT_FILES)
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    if args.out:  # and the configurations' folders, once known
        outputs.check(args.out, [*pf.REPORT_FILES, *pf.folders(spec)])
    missing = data_problems(spec)
    if missing:
        raise SweepError(*missing)
    options = spec.preflight or PreflightSpec()
    if args.lr_range_test:
        options = options.model_copy(update={"lr_range_test": True})
    spec = spec.model_copy(update={"preflight": options})
    if args.out:  # the user's folder: made aside, then only sweep's own unchanged files go
        out = Path(args.out)
        into = outputs.writing(out, "sweep doctor", names=[*pf.REPORT_FILES, *pf.folders(spec)])
    else:  # the sweep's own folder
        out = paths.work_dir(paths.default_tracking_uri(), spec.name) / "preflight"
        shutil.rmtree(out, ignore_errors=True)
        into = contextlib.nullcontext(out)
    logs = paths.work_dir(paths.default_tracking_uri(), spec.name) / "logs"
    # the checks run in a worker (a model or dataset that hangs is a FAIL at its deadline), so a
    # download's progress bar goes to the worker's log
    api.say_downloads(console, data_downloads(spec),
                      f"its progress bar is in {logs}/worker-*.log")
    with into as staging, console.status(f"preflight of {spec.name!r}: data, devices, model, "
                                         f"loss, one batch..."):
        results = check_in_worker(spec, staging, logs, max_threads=threads)
        for r in results:  # the images' paths once moved into out
            r["report"]["files"] = {k: str(out / Path(p).relative_to(staging)) for k, p in
                                    r["report"].get("files", {}).items()}
        pf.write(staging, results)
    pf.show(console, results)
    console.print(f"evidence: {out}/preflight.md (and .json, sample images)", soft_wrap=True)
    for line in pf.failures(results, "ERROR"):  # the checker's fault: said, never a FAIL
        console.print(f"[magenta]{line}[/]", soft_wrap=True, markup=True, highlight=False)
    if pf.status_of(results) == "FAIL":
        raise SweepError(*pf.failures(results))
    return ExitCode.OK


def cmd_reproduce(args, console: Console) -> ExitCode:
    verdict = api.reproduce(args.run_id, tracking_uri=args.tracking_uri,
                            progress=lambda e, n: console.print(f"  epoch {e}/{n}",
                                                                soft_wrap=True))
    table = Table(title=f"reproduction {verdict.reproduction_id} of {args.run_id}")
    for col in ("metric", "epoch", "original", "reproduced", "difference"):
        table.add_column(col)
    for metric, epoch, old, new, diff in verdict.rows:
        if not verdict.identical and diff == 0:
            continue  # show what differs
        table.add_row(metric, str(epoch), f"{old:.9g}", f"{new:.9g}", f"{diff:.3g}")
    console.print(table)
    rule = "bit for bit" if verdict.tolerance == 0 else f"within rel. {verdict.tolerance:g}"
    if verdict.identical:
        from .reproduce import COMPARED  # imported by then (api.reproduce): not for a refusal

        curves = ", ".join(COMPARED)
        console.print(f"reproduced: its {len(COMPARED)} curves ({curves}) match {rule}",
                      soft_wrap=True)
        return ExitCode.OK
    console.print(f"NOT reproduced ({rule} expected)", soft_wrap=True)
    for reason in verdict.reasons or ["nothing recorded differs: the training is not "
                                      "deterministic here (GPU kernels, data order)"]:
        console.print(f"  differs: {reason}", soft_wrap=True)
    return ExitCode.NEGATIVE


def cmd_report(args, console: Console) -> ExitCode:
    if args.others:
        return _report_many(args, console)
    report = api.write_report(args.spec, out=args.out, by=args.by,
                              tracking_uri=args.tracking_uri, storage=args.storage,
                              console=console)
    out = report.out_dir
    lines = report.comparison.lines() if report.comparison is not None else [report.headline]
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for line in report.missing:
        console.print(f"incomplete: {line}", soft_wrap=True)
    if report.comparison is None:  # a comparison's table is in its lines
        t95 = {"ci_low": "95% t low", "ci_high": "95% t high"}
        if len(report.factors):
            console.print("observational (a search: other settings differ too):",
                          soft_wrap=True)
            for line in table_lines(report.factors.rename(columns=t95), no_level_spread):
                console.print(line, soft_wrap=True, markup=False, highlight=False)
        if len(report.paired):
            for line in table_lines(report.paired.rename(columns=t95), no_pair_interval, [
                    "factor", "a", "b", "pairs", "mean_diff_b_minus_a", *t95.values(),
                    "verdict"]):
                console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(f"report: {out / 'report.html'} (also on the parent run under report/)",
                  soft_wrap=True)
    return ExitCode.OK


def _report_many(args, console: Console) -> ExitCode:
    """``sweep report A B [...]``: the sweeps side by side (see orchestrator.report.many)."""
    from ..report import build_many_report, load_sweep

    if args.by:
        raise SweepError("--by colours one sweep's curves; with several sweeps, leave it out")
    if args.out:
        reach.check_out(args.out, folder=True)
        outputs.check(args.out, MANY_NAMES)
    api.check_stores(args.tracking_uri, args.storage, create=False)
    uri = args.tracking_uri or paths.default_tracking_uri()
    with console.status("reading the studies and their runs..."):
        datas = [load_sweep(s, uri, args.storage, curves=False)  # matched by value alone
                 for s in (args.spec, *args.others)]
    out = Path(args.out or "report-" + "-vs-".join(d.study_name for d in datas))
    with console.status("building the report..."), outputs.writing(
            out, "sweep report", "--out" if args.out else "report folder") as staging:
        report = build_many_report(datas, staging)
    for line in report.many.sentences():
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if len(report.many.results):  # else no pair had enough matched trials: the lines say why
        for line in table_lines(report.many.results, no_pair_interval):
            console.print(line, soft_wrap=True, markup=False, highlight=False)
    if len(report.many.unmatched):
        console.print(f"{len(report.many.unmatched)} trial(s) without a match: see "
                      f"{out / 'unmatched.csv'}", soft_wrap=True)
    console.print(f"report: {out / 'report.html'}", soft_wrap=True)
    return ExitCode.OK


# what a report of several sweeps writes (orchestrator.report.many): checked before any work
MANY_NAMES = ("report.md", "report.html", "comparison.csv", "pairs.csv", "unmatched.csv", "plots")


def cmd_export(args, console: Console) -> ExitCode:
    from ..running.phases import export_line

    exported = api.export(args.run_id, formats=args.formats, out=args.out,
                          tracking_uri=args.tracking_uri, console=console)
    console.print(export_line({"report": exported.report}), soft_wrap=True)
    console.print(f"files in {exported.out}/ and in the run's artifacts under export/",
                  soft_wrap=True)
    if exported.answer:  # a comparison's: whose weights, and why that run
        console.print(f"these are the weights of the comparison's answer: {exported.answer}",
                      soft_wrap=True, markup=False, highlight=False)
    return ExitCode.NEGATIVE if exported.failed else ExitCode.OK


def cmd_ui(args, console: Console) -> ExitCode:
    from ..running.server import sweep_table

    check_address(console, args.host, args.port)
    uri = args.tracking_uri or paths.default_tracking_uri()
    reach.check_store(uri, "--tracking-uri", create=False)  # the UI would make an empty one
    # the sweep is looked up by the server once it answers: this process then imports no
    # MLflow (4 s of CPU before the server could start)
    path = (lambda base: sweep_table(base, args.name, uri)) if args.name else ""
    return serve(console, ui_command(uri, args.host, args.port),
                 paths.work_dir(uri) / "mlflow-ui.log", "MLflow UI",
                 f"http://{args.host}:{args.port}", path)


def cmd_server(args, console: Console) -> ExitCode:
    check_address(console, args.host, args.port)
    backend = args.backend_store_uri or paths.default_tracking_uri()
    artifacts = artifacts_destination(args.artifacts_destination)
    sidecar = storage_proxy(args, console)
    cmd = server_command(backend, artifacts, args.host, args.port, args.workers,
                         args.allowed_hosts)
    from ..core.urls import mask

    console.print(f"backend store {mask(backend)}, artifacts in {artifacts}", soft_wrap=True)
    return serve(console, cmd, Path.cwd() / ".sweep" / "mlflow-server.log",
                 "MLflow tracking server", f"http://{args.host}:{args.port}", "",
                 hint="   (sweep run ... --tracking-uri this URL on every machine)",
                 sidecar=sidecar)


# what each command of orchestrator.commands.parser.COMMANDS does, by its name there
HANDLERS: dict[str, Callable[..., ExitCode]] = {
    "run": cmd_run, "status": cmd_status, "doctor": cmd_doctor, "validate": cmd_validate,
    "plan": cmd_plan, "schema": cmd_schema, "export": cmd_export, "report": cmd_report,
    "reproduce": cmd_reproduce, "ui": cmd_ui, "server": cmd_server, "submit": cmd_submit,
    "completion": cmd_completion,
}
