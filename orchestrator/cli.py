"""The ``sweep`` command line: one subcommand per entry of :data:`COMMANDS`.

Exit codes (:data:`EXIT_CODES`): 0 done, 1 done with a negative answer (trials failed for good),
2 bad input (one line naming the field, the value and the fix), 3 the command could not finish
(a full disk, or a bug: one line naming the file with the traceback), 130 interrupted (SIGINT),
143 stopped (SIGTERM).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from trainers import DEFAULT_EXPORT_FORMATS, EXPORT_FORMATS

from . import api, paths, reach
from .display import params_text, sweep_command
from .errors import SweepError, disk_full
from .objectives import values_text
from .server import (
    artifacts_destination,
    check_address,
    serve,
    server_command,
    storage_proxy,
    ui_command,
)
from .space import grid_size
from .spec import MAX_GRID, data_downloads, data_problems, load_spec, tag_overrides

# 0, 1, 130 and 143 are also what a sweep run ends with (orchestrator.runner: a test ties them)
EXIT_OK, EXIT_FAILED_TRIALS, EXIT_BAD_INPUT, EXIT_ERROR = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM
EXIT_CODES = {  # in `sweep --help` and the README's table (a test compares them)
    EXIT_OK: "done",
    EXIT_FAILED_TRIALS: "done, with a negative answer: trials failed for good (run), curves "
                        "differ (reproduce), a format fails its parity check (export)",
    EXIT_BAD_INPUT: "bad input, one line naming the field, the value and the fix; or a "
                    "preflight check FAILed (doctor, and run before any trial)",
    EXIT_ERROR: "the command could not finish: a full disk (one line saying what to free) or a "
                "bug in sweep (one line naming the file that holds the traceback)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
    EXIT_TERMINATED: "stopped by SIGTERM",
}
FREE_SPACE = ("free space there (or move the stores with --tracking-uri and --storage), then run "
              "the same command again: a sweep resumes where it stopped, its finished trials kept")
COMPLETION_SHELLS = ("bash", "zsh")


@dataclass(frozen=True)
class Command:
    """One subcommand: its line in ``sweep --help``, its description, the examples its
    ``--help`` ends with (a test runs them as written), the function that adds its arguments
    and the one that runs it (returning the exit code)."""

    summary: str
    description: str
    examples: tuple[str, ...]
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console], int]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (and exit 2), not a usage dump."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(EXIT_BAD_INPUT)


def _tracking_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                                          "else sqlite:///mlflow.db here)")


def _store_flags(p: argparse.ArgumentParser) -> None:
    _tracking_flag(p)
    p.add_argument("--storage", help="Optuna storage: a journal file path, sqlite:///..., "
                                     "postgresql://..., grpc://HOST:PORT (a storage proxy) "
                                     "(default: optuna.journal next to the MLflow database)")


def _set_flag(p: argparse.ArgumentParser, example: str = "") -> None:
    """``--set KEY=VALUE``; ``example`` is said after the help, e.g. ``, e.g. --set a=1``."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override any YAML value{example} (repeatable)")
    # every command that takes --set reads a sweep YAML, so it takes the grid cap too
    p.add_argument("--max-grid", type=int, default=MAX_GRID, metavar="N",
                   help=f"the most configurations a grid sweep may have (default {MAX_GRID})")


def _command(sub, name: str) -> argparse.ArgumentParser:
    """Subcommand ``name`` of :data:`COMMANDS`, its ``--help`` ending with its examples."""
    command = COMMANDS[name]
    heading = "example:" if len(command.examples) == 1 else "examples:"
    return sub.add_parser(name, help=command.summary,
                          description=textwrap.fill(command.description, 79),
                          epilog="\n".join([heading, *(f"  {e}" for e in command.examples)]),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _spec_arg(p: argparse.ArgumentParser, metavar: str = "SPEC",
              help: str = "sweep YAML file") -> None:
    import shtab

    p.add_argument("spec", metavar=metavar, help=help).complete = shtab.FILE


def build_parser() -> argparse.ArgumentParser:
    """The ``sweep`` parser: one subcommand per entry of :data:`COMMANDS`, in its order."""
    codes = [f"  {code:<3}  {line}" for code, meaning in EXIT_CODES.items()
             for line in [textwrap.fill(meaning, 72, subsequent_indent=" " * 7)]]
    parser = _Parser(prog="sweep", description=textwrap.fill(
                         "Run PyTorch hyperparameter sweeps described in YAML with Optuna, "
                         "tracked in MLflow. Each command's --help ends with examples.", 79),
                     epilog="\n".join(["exit codes:", *codes, "", "examples:",
                                       "  sweep run sweeps/quickstart.yaml",
                                       "  sweep status quickstart", "  sweep ui quickstart"]),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in COMMANDS.items():
        command.arguments(_command(sub, name))
    return parser


def _run_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    p.add_argument("--trials", type=int, help="finished trials to reach (overrides trials:)")
    p.add_argument("--workers", type=int, help="trials run at once (overrides workers:)")
    p.add_argument("--gpus", type=_gpu_list, metavar="IDS",
                   help="GPU ids for the worker slots, e.g. 0,1 (overrides gpus: and the "
                        "GPUs found)")
    p.add_argument("--new", action="store_true",
                   help="start a fresh study and parent run (NAME-2, NAME-3...) instead of "
                        "resuming")
    _set_flag(p, ", e.g. --set train.epochs=1")
    p.add_argument("--tag", dest="tags", action="append", default=[], metavar="KEY=VALUE",
                   help="an MLflow tag of the parent run and every trial run, added to the "
                        "YAML's tags (repeatable)")
    p.add_argument("--force", action="store_true",
                   help="start the trials even when a preflight check FAILs")
    p.add_argument("--slurm", action="store_true",
                   help="workers and GPUs from this Slurm job's allocation (SLURM_CPUS_PER_TASK, "
                        "CUDA_VISIBLE_DEVICES), as the job script of sweep submit --slurm runs it")
    _store_flags(p)


def _status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", metavar="NAME", help="a sweep (study) name")
    _store_flags(p)


def _doctor_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    p.add_argument("--lr-range-test", action="store_true",
                   help="also sweep the lr exponentially and suggest a search range")
    p.add_argument("--out", metavar="DIR",
                   help="where preflight.json, preflight.md and the images go (default "
                        ".sweep/NAME/preflight next to the MLflow database)")
    _set_flag(p, ", e.g. --set train.model=mlp")


def _validate_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    _set_flag(p)


def _schema_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead of printing it")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN_ID", help="the trial's MLflow run id")
    p.add_argument("--formats", type=_formats, default=list(DEFAULT_EXPORT_FORMATS),
                   help=f"comma-separated, from {','.join(EXPORT_FORMATS)} "
                        f"(default {','.join(DEFAULT_EXPORT_FORMATS)})")
    p.add_argument("--out", help="folder for the files (default: export-RUN_ID here)")
    _tracking_flag(p)


def _report_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p, "SPEC_OR_NAME", "the sweep's YAML file or its name")
    p.add_argument("others", nargs="*", metavar="MORE",
                   help="more sweeps of the same stores: compared with the first, trial by "
                        "trial (same configuration and seed), in one report")
    p.add_argument("--out", help="folder for the report (default: report-NAME here)")
    p.add_argument("--by", help="setting whose levels colour the curves (default: optimizer)")
    _store_flags(p)


def _reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN_ID")
    _tracking_flag(p)


def _ui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="sweep name: print the URL of its runs table")
    p.add_argument("--port", type=_port, default=5000)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    _store_flags(p)


def _server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend-store-uri", metavar="URI",
                   help="where runs are kept: postgresql://..., mysql://... or sqlite:///FILE "
                        "(default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
    p.add_argument("--artifacts-destination", default="mlartifacts", metavar="DIR",
                   help="where the server stores artifacts it receives: a folder (default "
                        "./mlartifacts) or an object store, s3://BUCKET/PATH, gs://...")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 for "
                        "every interface, behind your firewall)")
    p.add_argument("--port", type=_port, default=5000)
    p.add_argument("--workers", type=int, default=2, help="server worker processes")
    p.add_argument("--allowed-hosts", metavar="HOSTS",
                   help="Host headers the server accepts besides localhost (MLflow's DNS "
                        "rebinding protection), e.g. 'trainbox:5000,10.0.0.5:5000'")
    p.add_argument("--storage-proxy", action="store_true",
                   help="also start Optuna's gRPC storage proxy in front of the study storage "
                        "(--storage): many machines then share one study through it, with "
                        "--storage grpc://HOST:PORT, instead of a database connection each")
    p.add_argument("--storage", metavar="URL",
                   help="with --storage-proxy: the study storage it serves, postgresql://... "
                        "(or mysql://, sqlite:///FILE); a journal file cannot be proxied")
    p.add_argument("--proxy-port", type=_port, default=13000,
                   help="with --storage-proxy: its port (default 13000), on --host")


def _submit_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--slurm", action="store_true", help="submit a Slurm job array")
    where.add_argument("--k8s", action="store_true",
                       help="write a Kubernetes Indexed Job manifest (never applied)")
    p.add_argument("--jobs", type=int, required=True, metavar="N",
                   help="array tasks (pods), each a sweep run joining the study")
    p.add_argument("--gpus-per-job", type=int, default=0, metavar="G", help="GPUs per task")
    p.add_argument("--cpus-per-job", type=int, metavar="C",
                   help="CPUs per task (default 4 per GPU, else 2)")
    p.add_argument("--partition", metavar="P", help="Slurm partition")
    p.add_argument("--time", metavar="T", help="Slurm time limit per task, e.g. 2-00:00:00")
    p.add_argument("--image", help="--k8s: the container image with this project installed")
    p.add_argument("--volume-claim", metavar="PVC",
                   help="--k8s: a ReadWriteMany volume claim, each pod's working folder")
    p.add_argument("--secret", help="--k8s: the Secret holding SWEEP_STORAGE and "
                                    "MLFLOW_TRACKING_URI (default sweep-NAME-stores)")
    p.add_argument("--dry-run", action="store_true",
                   help="write and print the job file; create and submit nothing")
    _set_flag(p, ", e.g. --set train.epochs=3")
    _store_flags(p)


def _completion_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=COMPLETION_SHELLS)


def _terminate(signum, frame):
    """SIGTERM stops a command as Ctrl-C does (its default would end the process at once,
    nothing closed, no line said)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=False, highlight=False)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return COMMANDS[args.command].run(args, console)
    except SweepError as e:
        if disk_full(e) is not None:  # a store that could not be opened for want of space
            sys.stderr.write(f"sweep: {e.lines[0]}; {FREE_SPACE}\n")
            return EXIT_ERROR
        for line in e.lines:
            sys.stderr.write(f"sweep: {line}\n")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        sys.stderr.write("sweep: interrupted\n")
        return stop_code(e)
    except Exception as e:  # the last guard: one line, the traceback in a file
        sys.stderr.write(f"sweep: {unexpected_line(e, args)}\n")
        return EXIT_ERROR


def stop_code(interrupt: KeyboardInterrupt) -> int:
    """130 for Ctrl-C (SIGINT), 143 for SIGTERM: what the handlers that raised it name."""
    return EXIT_TERMINATED if "SIGTERM" in interrupt.args else EXIT_INTERRUPTED


def unexpected_line(error: Exception, args: argparse.Namespace) -> str:
    """What ``sweep`` says about an exception nothing else caught: a full disk as what to do,
    anything else as a bug; either way the full traceback goes to a file the line names."""
    log = paths.write_traceback(error)
    where = f"the traceback is in {log}" if log else "the traceback could not be written"
    full = disk_full(error)
    if full is not None:
        from .storages import default_storage

        uri = getattr(args, "tracking_uri", None) or paths.default_tracking_uri()
        storage = getattr(args, "storage", None) or default_storage(uri)
        return f"{paths.store_of(full, uri, storage)}: no space left on the disk; {FREE_SPACE} " \
               f"({where})"
    text = next((line for line in str(error).splitlines() if line.strip()), "")
    return (f"unexpected error {type(error).__name__}: {text}; this is a bug in sweep, "
            f"{where} (attach it to a bug report)")


def _gpu_list(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU ids like 0,1, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected GPU ids like 0,1, got {text!r}")
    if len(set(ids)) != len(ids):  # one slot per GPU id: workers_per_gpu shares a GPU
        raise argparse.ArgumentTypeError(f"lists a GPU twice, got {text!r}; use "
                                         f"workers_per_gpu to put several workers on one")
    return ids


def _formats(text: str) -> list[str]:
    chosen = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in chosen if f not in EXPORT_FORMATS]
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"expected formats from {','.join(EXPORT_FORMATS)}, "
                                         f"got {text!r}")
    return list(dict.fromkeys(chosen))


def _port(text: str) -> int:
    """A TCP port a server can listen on (0 would pick one the link could not name)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: a port is a number from 1 to 65535")
    return port


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise SweepError(f"{flag} must be >= 1, got {value}")


def cmd_validate(args, console: Console) -> int:
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    for w in [*spec.warnings, *data_problems(spec)]:
        console.print(f"warning: {w}", soft_wrap=True)
    kind = (f"grid of {grid_size(spec.space)} configurations x {spec.repeats} repeats"
            if spec.is_grid else f"{spec.sampler.name} sampler")
    console.print(f"{args.spec}: ok: sweep {spec.name!r}, {spec.trials} trials, {kind}",
                  soft_wrap=True)
    return 0


def cmd_run(args, console: Console) -> int:
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
    from .submit import task_slots

    if args.workers or args.gpus is not None:
        raise SweepError("--slurm takes the workers and GPUs from the Slurm allocation; drop "
                         "--workers and --gpus (or --slurm)")
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    slots = task_slots(os.environ, spec.workers_per_gpu, spec.train.get("devices_per_trial", 1))
    return slots.workers, slots.gpus


def print_summary(console: Console, spec, outcome) -> None:
    """How the sweep ended, its best configurations (with repeats: mean +- std over seeds) or
    trials, every shown trial's full MLflow run id on a line of its own (a table would cut it
    on a narrow or piped console), then the commands that look at it."""
    c = outcome.counts
    name = outcome.study_name or spec.name  # NAME-2... after --new: the study that ran
    state = "interrupted" if outcome.exit_code in (EXIT_INTERRUPTED, EXIT_TERMINATED) else \
        "finished"
    console.print(f"sweep {name!r} {state} in {outcome.elapsed:.1f} s: {c['complete']} "
                  f"complete, {c['pruned']} pruned, {c['fail']} failed", soft_wrap=True)
    objective = "; ".join(f"{o.label}, {o.goal}" for o in spec.objectives)
    if outcome.configurations:
        table = Table(title=f"best configurations ({objective}; mean ± std over seeds)")
        for col in ("configuration", "mean", "± std", "n", "trials"):
            table.add_column(col, overflow="fold")
        for conf in outcome.configurations[:SUMMARY_ROWS]:
            table.add_row(conf["name"], f"{conf['mean']:.4f}", f"{conf['std']:.4f}",
                          str(conf["n"]), " ".join(map(str, conf["trials"])))
        console.print(table)
        ids = [(n, run) for conf in outcome.configurations[:SUMMARY_ROWS]
               for n, run in zip(conf["trials"], conf["run_ids"])]
    elif outcome.best:
        several = spec.is_multi_objective
        table = Table(title=f"Pareto front: {len(outcome.best)} trials ({objective})" if several
                      else f"best trials ({objective})")
        for col in ("trial", "values" if several else "value", "settings"):
            table.add_column(col, overflow="fold")
        for b in outcome.best:
            table.add_row(str(b["number"]), values_text(b.get("values") or [b["value"]]),
                          params_text(b["settings"]))
        console.print(table)
        ids = [(b["number"], b["run_id"]) for b in outcome.best]
    else:
        ids = []
    if any(run for _, run in ids):
        console.print("their MLflow runs:", soft_wrap=True)
        for number, run in ids:
            console.print(f"  trial {number}: {run or '(none)'}", soft_wrap=True,
                          highlight=False)
    headline = _report_headline(name, outcome) if outcome.configurations else None
    if headline:  # repeats or a comparison: the report's answer
        console.print(f"sweep report: {headline}", soft_wrap=True, markup=False,
                      highlight=False)
    console.print(_browse_lines(name, outcome), soft_wrap=True, highlight=False)


def _report_headline(name: str, outcome) -> str | None:
    """The headline ``sweep report`` gives the sweep (a comparison's verdict, else its best
    trial), read back quickly: the study and one search of its runs, no per-epoch curves.
    None when a store file is missing (reading would create it)."""
    from .report import headline, load_sweep

    files = [paths.sqlite_file(outcome.tracking_uri), paths.sqlite_file(outcome.storage),
             paths.journal_file(outcome.storage)]
    if any(f is not None and not f.exists() for f in files):
        return None
    try:
        return headline(load_sweep(name, outcome.tracking_uri, outcome.storage, curves=False))
    except SweepError as e:  # the sweep itself is done and stored: say why, go on
        return f"(not read: {e})"


SUMMARY_ROWS = 5  # configurations or trials in the table at the end of `sweep run`


def _browse_lines(name: str, outcome) -> str:
    """What to do next with a finished sweep: its report, its trials here, and MLflow's runs
    table of its experiment in the sweep's view (a bare experiment link may land on MLflow's
    GenAI views)."""
    from .paths import mask
    from .server import sweep_view
    from .storages import default_storage

    uri, runs = outcome.tracking_uri, sweep_view(outcome.experiment_id)
    uri_flag = "" if uri == paths.default_tracking_uri() else f" --tracking-uri {mask(uri)}"
    storage_flag = "" if outcome.storage == default_storage(uri) else \
        f" --storage {mask(outcome.storage)}"
    sweep = sweep_command()
    lines = [f"the report: {sweep} report {name}{uri_flag}{storage_flag}",
             f"the trials: {sweep} status {name}{uri_flag}{storage_flag}"]
    if uri.startswith(("http://", "https://")):  # a tracking server serves the UI itself
        lines.append(f"browse it: {mask(uri).rstrip('/')}{runs}")
    else:
        lines.append(f"browse it: {sweep} ui {name}{uri_flag}   (then "
                     f"http://127.0.0.1:5000{runs}, the runs table of the trials)")
    return "\n".join(lines)


def cmd_status(args, console: Console) -> int:
    from .status import show, storage_url

    url = storage_url(args.tracking_uri, args.storage)
    reach.check_store(url, "--storage", create=False, missing_ok=True)  # none yet: no sweeps
    return show(console, args.name, url)


def cmd_schema(args, console: Console) -> int:
    import json

    from .schema import json_schema

    if args.out:  # before any work
        reach.check_out(args.out, folder=False)
    text = json.dumps(json_schema(), indent=2) + "\n"
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = reach.check_out(args.out, folder=False)
    out.write_text(text)
    console.print(f"wrote {out} (editors: see README, The sweep YAML)", soft_wrap=True)
    return 0


def cmd_submit(args, console: Console) -> int:
    from .submit import Job, secret_command, secret_name, submit

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
        return 0
    follow = f"{sweep_command()} status {spec.name} --storage {paths.mask(args.storage)}"
    say(f"study {done.study!r} and its parent run {done.parent_run_id} are ready")
    if kind == "slurm":
        say(f"submitted job {done.job_id}: {args.jobs} array tasks ({done.file})")
        say(f"follow it: {follow}   (and squeue -j {done.job_id}; task logs "
            f"{done.file.parent}/slurm-{done.job_id}_*.log)")
    else:
        say(f"wrote {done.file} ({args.jobs} pods; not applied)")
        say(f"once: {secret_command(secret_name(spec.name, job), args.storage, tracking)}")
        say(f"then: kubectl apply -f {done.file}; follow it: {follow}")
    return 0


def cmd_completion(args, console: Console) -> int:
    import shtab

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for choice in commands._get_subactions():  # zsh lists each command with its description
        commands.choices[choice.dest].description = choice.help  # : the one-line help there
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0


def cmd_doctor(args, console: Console) -> int:
    from . import preflight as pf
    from .phases import check_in_worker
    from .spec import PreflightSpec

    if args.out:
        reach.check_out(args.out, folder=True)
    spec = load_spec(args.spec, args.overrides, args.max_grid)
    missing = data_problems(spec)
    if missing:
        raise SweepError(*missing)
    options = spec.preflight or PreflightSpec()
    if args.lr_range_test:
        options = options.model_copy(update={"lr_range_test": True})
    spec = spec.model_copy(update={"preflight": options})
    out = Path(args.out) if args.out else \
        paths.work_dir(paths.default_tracking_uri(), spec.name) / "preflight"
    shutil.rmtree(out, ignore_errors=True)
    logs = paths.work_dir(paths.default_tracking_uri(), spec.name) / "logs"
    # the checks run in a worker (a model or dataset that hangs is a FAIL at its deadline), so a
    # download's progress bar goes to the worker's log
    api.say_downloads(console, data_downloads(spec),
                      f"its progress bar is in {logs}/worker-*.log")
    with console.status(f"preflight of {spec.name!r}: data, devices, model, loss, one batch..."):
        results = check_in_worker(spec, out, logs)
    pf.show(console, results)
    pf.write(out, results)
    console.print(f"evidence: {out}/preflight.md (and .json, sample images)", soft_wrap=True)
    for line in pf.failures(results, "ERROR"):  # the checker's fault: said, never a FAIL
        console.print(f"[magenta]{line}[/]", soft_wrap=True, markup=True, highlight=False)
    if pf.status_of(results) == "FAIL":
        raise SweepError(*pf.failures(results))
    return 0


def cmd_reproduce(args, console: Console) -> int:
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
        console.print(f"reproduced: every curve matches {rule}", soft_wrap=True)
        return 0
    console.print(f"NOT reproduced ({rule} expected)", soft_wrap=True)
    for reason in verdict.reasons or ["nothing recorded differs: the training is not "
                                      "deterministic here (GPU kernels, data order)"]:
        console.print(f"  differs: {reason}", soft_wrap=True)
    return 1


def cmd_report(args, console: Console) -> int:
    if args.others:
        return _report_many(args, console)
    report = api.report(args.spec, out=args.out, by=args.by, tracking_uri=args.tracking_uri,
                        storage=args.storage, console=console)
    out = report.out_dir
    lines = report.comparison.sentences if report.comparison is not None else [report.headline]
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for line in report.missing:
        console.print(f"incomplete: {line}", soft_wrap=True)
    if report.comparison is not None and report.comparison.results:
        console.print(report.comparison.table().drop(columns="factor").to_string(
            index=False, float_format=lambda v: f"{v:.4g}"), soft_wrap=True)
    else:
        t95 = {"ci_low": "95% t low", "ci_high": "95% t high"}
        if len(report.factors):
            console.print("observational (a search: other settings differ too):",
                          soft_wrap=True)
            console.print(report.factors.rename(columns=t95).to_string(
                index=False, float_format=lambda v: f"{v:.4g}"), soft_wrap=True)
        if len(report.paired):
            console.print(report.paired[["factor", "a", "b", "pairs", "mean_diff_b_minus_a",
                                         "ci_low", "ci_high", "verdict"]].rename(
                columns=t95).to_string(index=False, float_format=lambda v: f"{v:.4g}"),
                soft_wrap=True)
    console.print(f"report: {out / 'report.html'} (also on the parent run under report/)",
                  soft_wrap=True)
    return 0


def _report_many(args, console: Console) -> int:
    """``sweep report A B [...]``: the sweeps side by side (see orchestrator.report.many)."""
    from .report import build_many_report, load_sweep

    if args.by:
        raise SweepError("--by colours one sweep's curves; with several sweeps, leave it out")
    if args.out:
        reach.check_out(args.out, folder=True)
    api.check_stores(args.tracking_uri, args.storage, create=False)
    uri = args.tracking_uri or paths.default_tracking_uri()
    with console.status("reading the studies and their runs..."):
        datas = [load_sweep(s, uri, args.storage, curves=False)  # matched by value alone
                 for s in (args.spec, *args.others)]
    out = Path(args.out or "report-" + "-vs-".join(d.study_name for d in datas))
    with console.status("building the report..."):
        report = build_many_report(datas, out)
    for line in report.many.sentences():
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(report.many.results.to_string(index=False, float_format=lambda v: f"{v:.4g}"),
                  soft_wrap=True, markup=False, highlight=False)
    if len(report.many.unmatched):
        console.print(f"{len(report.many.unmatched)} trial(s) without a match: see "
                      f"{out / 'unmatched.csv'}", soft_wrap=True)
    console.print(f"report: {out / 'report.html'}", soft_wrap=True)
    return 0


def cmd_export(args, console: Console) -> int:
    from .phases import export_line

    exported = api.export(args.run_id, formats=args.formats, out=args.out,
                          tracking_uri=args.tracking_uri, console=console)
    console.print(export_line({"report": exported.report}), soft_wrap=True)
    console.print(f"files in {exported.out}/ and in the run's artifacts under export/",
                  soft_wrap=True)
    return 1 if exported.failed else 0


def cmd_ui(args, console: Console) -> int:
    from .server import sweep_table

    check_address(console, args.host, args.port)
    uri = args.tracking_uri or paths.default_tracking_uri()
    reach.check_store(uri, "--tracking-uri", create=False)  # the UI would make an empty one
    # the sweep is looked up by the server once it answers: this process then imports no
    # MLflow (4 s of CPU before the server could start)
    path = (lambda base: sweep_table(base, args.name, uri)) if args.name else ""
    return serve(console, ui_command(uri, args.host, args.port),
                 paths.work_dir(uri) / "mlflow-ui.log", "MLflow UI",
                 f"http://{args.host}:{args.port}", path)


def cmd_server(args, console: Console) -> int:
    check_address(console, args.host, args.port)
    backend = args.backend_store_uri or paths.default_tracking_uri()
    artifacts = artifacts_destination(args.artifacts_destination)
    sidecar = storage_proxy(args, console)
    cmd = server_command(backend, artifacts, args.host, args.port, args.workers,
                         args.allowed_hosts)
    from .paths import mask

    console.print(f"backend store {mask(backend)}, artifacts in {artifacts}", soft_wrap=True)
    return serve(console, cmd, Path.cwd() / ".sweep" / "mlflow-server.log",
                 "MLflow tracking server", f"http://{args.host}:{args.port}", "",
                 hint="   (sweep run ... --tracking-uri this URL on every machine)",
                 sidecar=sidecar)


# every command, in its order in `sweep --help`
COMMANDS: dict[str, Command] = {
    "run": Command(
        "run or resume a sweep",
        "Run a sweep, or resume it where it stopped: the study continues until it holds "
        "`trials` finished trials. Exit 0 when it finished, 1 when some trials failed for "
        "good, 2 on bad input or a failed preflight, 3 when it could not finish (a full disk, "
        "a bug), 130 when interrupted.",
        ("sweep run sweeps/quickstart.yaml",
         "sweep run sweeps/quickstart.yaml --set train.epochs=2 --trials 4"),
        _run_arguments, cmd_run),
    "status": Command(
        "the sweeps in the study storage, or one sweep's trials",
        "Without NAME, list the sweeps in the Optuna study storage: trials complete, running, "
        "pruned and failed, the best value, when the first trial started and the last "
        "activity. With NAME, that sweep's trials: state, value, params, duration and MLflow "
        "run id. Reads the storage only: safe while a sweep runs.",
        ("sweep status", "sweep status quickstart"),
        _status_arguments, cmd_status),
    "doctor": Command(
        "check data, devices, model and loss before a sweep",
        "Run the preflight checks of a sweep without running it: data (shapes, dtypes, ranges, "
        "labels, class balance, a sample grid), devices, parameter registration, gradients, "
        "loss wiring, overfitting one batch and gradient health. Exit 2 when a check FAILs.",
        ("sweep doctor sweeps/quickstart.yaml --lr-range-test",),
        _doctor_arguments, cmd_doctor),
    "validate": Command(
        "check a sweep YAML without running it",
        "Check a sweep YAML without running it or touching the stores: every problem is one "
        "line naming the field, the value and the fix (exit 2).",
        ("sweep validate sweeps/adam_vs_sgd.yaml --set repeats=1",),
        _validate_arguments, cmd_validate),
    "schema": Command(
        "print the JSON Schema of the sweep YAML (for editors)",
        "Print the JSON Schema of the sweep YAML, generated from the models that validate it, "
        "for editors (VS Code's YAML extension: see README).",
        ("sweep schema --out sweep.schema.json",),
        _schema_arguments, cmd_schema),
    "export": Command(
        "export a finished trial's model and check parity",
        "Export a trial's final weights in the given formats, check each file against the "
        "eager model, log the files and figures into the trial's run and copy them to --out.",
        ("sweep export RUN_ID --formats onnx,int8   # RUN_ID: see sweep status NAME",),
        _export_arguments, cmd_export),
    "report": Command(
        "the sweep's answer: statistics per setting, plots",
        "Write an HTML report (plots embedded), a Markdown summary and the trial table (CSV, "
        "Parquet) of a sweep, and log them on its parent run. Several sweeps of the same stores "
        "and objective: one report comparing them trial by trial (same configuration and "
        "seed), with paired tests.",
        ("sweep report sweeps/adam_vs_sgd.yaml --out report/", "sweep report quickstart",
         "sweep report quickstart quickstart-2   # two sweeps side by side"),
        _report_arguments, cmd_report),
    "reproduce": Command(
        "train a trial again from its run and compare curves",
        "Rebuild a trial from its MLflow run alone (settings, seed, thread count), train it "
        "again in a run tagged as its reproduction, and compare the per-epoch curves. Exit 0 "
        "when they match, 1 when they differ (with what differs in the environment).",
        ("sweep reproduce RUN_ID   # RUN_ID: see sweep status NAME",),
        _reproduce_arguments, cmd_reproduce),
    "ui": Command(
        "open the MLflow UI on this machine's store (127.0.0.1)",
        "Start the MLflow UI on this machine's store, wait until it answers and print its URL: "
        "with NAME, the sweep's runs table. Ctrl-C stops it.",
        ("sweep ui quickstart", "sweep ui quickstart --port 5001"),
        _ui_arguments, cmd_ui),
    "server": Command(
        "an MLflow tracking server for several machines",
        "Start an MLflow tracking server with artifact proxying for a team or several "
        "machines, bound to 127.0.0.1 unless --host says otherwise; with --storage-proxy, "
        "Optuna's gRPC storage proxy beside it, in front of the study database (--storage), "
        "for many machines: they pass the grpc:// URL it prints as --storage.",
        ("sweep server --backend-store-uri postgresql://mlflow@db/mlflow --host 0.0.0.0 "
         "--allowed-hosts 'box1:5000,box2:5000'",
         "sweep server --backend-store-uri postgresql://mlflow@db/mlflow --storage-proxy "
         "--storage postgresql://optuna@db/sweeps --proxy-port 13000"),
        _server_arguments, cmd_server),
    "submit": Command(
        "run a sweep as a Slurm job array or a Kubernetes Indexed Job",
        "Check that the study storage and the MLflow server are shared and answer, create the "
        "study and its parent run once, then write a job file into .sweep/NAME/submit/: a "
        "Slurm array script, submitted, whose every task runs sweep run --slurm joining the "
        "study with its allocation's CPUs and GPUs; or (--k8s) an Indexed Job manifest, "
        "never applied. --dry-run writes and prints the file only.",
        ("sweep submit sweeps/quickstart.yaml --slurm --jobs 4 --cpus-per-job 2 "
         "--storage postgresql://postgres@db/sweeps --tracking-uri http://db:5000",
         "sweep submit sweeps/cifar10_resnet18.yaml --k8s --jobs 8 --gpus-per-job 1 "
         "--image registry.example.com/sweep:1.0 --volume-claim sweeps --storage "
         "postgresql://postgres@db/sweeps --tracking-uri http://db:5000 --dry-run"),
        _submit_arguments, cmd_submit),
    "completion": Command(
        "print a shell completion script (bash or zsh)",
        "Print a tab-completion script for bash or zsh, generated from this command line "
        "(commands, flags, YAML file names). Load it from your shell's startup file or its "
        "completion folder.",
        ("sweep completion bash > ~/.local/share/bash-completion/completions/sweep",
         "sweep completion zsh > ~/.zfunc/_sweep"),
        _completion_arguments, cmd_completion),
}


def entry() -> None:
    """The ``sweep`` command: :func:`main`, then an exit without the interpreter's teardown.

    By then every store is closed and every file written; what the teardown would do is
    unload MLflow's, SQLAlchemy's and Optuna's modules one by one (about 2 s on a 2-core
    machine, after every command). What a normal exit does first is done: threads are shut
    down as the interpreter would (thread pools told to end, then every non-daemon thread
    joined), then the exit hooks run (logging's flush among them). After a SIGINT or SIGTERM
    no thread is waited for (a store's client may be retrying for minutes), and a signal
    during the exit ends it with that signal's code, no traceback.
    """
    import atexit

    code = main()
    try:
        if code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            threading._shutdown()  # what Py_FinalizeEx calls first: pools' exit hooks, joins
            atexit._run_exitfuncs()
    except KeyboardInterrupt as e:
        sys.stderr.write("sweep: interrupted\n")
        code = stop_code(e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`sweep status | head`): nothing to say
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
