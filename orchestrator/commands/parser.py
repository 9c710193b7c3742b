"""The ``sweep`` parser: the flags of every command (:data:`COMMANDS`, in ``sweep --help``
order), their help and examples, the exit codes it lists, and the shell completion script."""
from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

from trainers import DEFAULT_EXPORT_FORMATS, EXPORT_FORMATS

from ..config.spec import MAX_GRID
from ..core.errors import ExitCode

COMPLETION_SHELLS = ("bash", "zsh")


@dataclass(frozen=True)
class Command:
    """One subcommand: its line in ``sweep --help``, its description, the examples its
    ``--help`` ends with (a test runs them as written) and the function that adds its
    arguments (what it does: :data:`orchestrator.commands.handlers.HANDLERS`)."""

    summary: str
    description: str
    examples: tuple[str, ...]
    arguments: Callable[[argparse.ArgumentParser], None]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (and exit 2), not a usage dump."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(ExitCode.BAD_INPUT)


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
    codes = [f"  {code:<3}  {line}" for code in ExitCode
             for line in [textwrap.fill(code.meaning, 72, subsequent_indent=" " * 7)]]
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


def completion_script(shell: str) -> str:
    """The tab-completion script of ``sweep`` for ``shell`` (one of :data:`COMPLETION_SHELLS`),
    generated from :func:`build_parser`."""
    import shtab

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for choice in commands._get_subactions():  # zsh lists each command with its description
        commands.choices[choice.dest].description = choice.help  # : the one-line help there
    return shtab.complete(parser, shell=shell)


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


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    _spec_arg(p, help="sweep YAML file with a compare: block")
    p.add_argument("--pilot-seeds", type=int, metavar="N",
                   help="paired seeds of each level the pilot runs (default 3), in its own "
                        "stores under .sweep/NAME/plan/")
    p.add_argument("--from", dest="source", metavar="FOLDER_OR_STORE",
                   help="no pilot: read a finished sweep of the same settings, its folder (with "
                        "optuna.journal) or its study storage")
    p.add_argument("--draws", type=int, default=1000, metavar="N",
                   help="simulated comparisons per design (default 1000)")


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
    _tracking_flag(p)  # the UI reads MLflow's store alone: no --storage to ignore


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


# every command, in its order in `sweep --help`
COMMANDS: dict[str, Command] = {
    "run": Command(
        "run or resume a sweep",
        "Run a sweep, or resume it where it stopped: the study continues until it holds "
        "`trials` finished trials. Exit 0 when it finished, 1 when some trials failed for "
        "good, 2 on bad input or a failed preflight, 3 when it could not finish (a full disk, "
        "a store that broke, a bug), 130 when interrupted.",
        ("sweep run sweeps/quickstart.yaml",
         "sweep run sweeps/quickstart.yaml --set train.epochs=2 --trials 4"),
        _run_arguments),
    "status": Command(
        "the sweeps in the study storage, or one sweep's trials",
        "Without NAME, list the sweeps in the Optuna study storage: trials complete, running, "
        "pruned and failed, the best value, when the first trial started and the last "
        "activity. With NAME, that sweep's trials: state, value, params, duration and MLflow "
        "run id. Reads the storage only: safe while a sweep runs.",
        ("sweep status", "sweep status quickstart"),
        _status_arguments),
    "doctor": Command(
        "check data, devices, model and loss before a sweep",
        "Run the preflight checks of a sweep without running it: data (shapes, dtypes, ranges, "
        "labels, class balance, a sample grid), devices, parameter registration, gradients, "
        "loss wiring, overfitting one batch and gradient health. Exit 2 when a check FAILs.",
        ("sweep doctor sweeps/quickstart.yaml --lr-range-test",),
        _doctor_arguments),
    "validate": Command(
        "check a sweep YAML without running it",
        "Check a sweep YAML without running it or touching the stores: every problem is one "
        "line naming the field, the value and the fix (exit 2).",
        ("sweep validate sweeps/adam_vs_sgd.yaml --set repeats=1",),
        _validate_arguments),
    "plan": Command(
        "size a comparison's seeds from a pilot",
        "Size a comparison's design from a pilot: a few paired seeds of each level at the "
        "spec's settings (run in stores of their own, or a finished sweep with --from). The "
        "shipped procedure is simulated from the pilot's means and spread for a grid of "
        "designs: the chance of a decided answer, the seeds, trials and wall time expected, "
        "and the cheapest design that reaches 80%.",
        ("sweep plan sweeps/clipping.yaml --pilot-seeds 3",
         "sweep plan sweeps/clipping.yaml --from runs/clipping   # a finished sweep's folder"),
        _plan_arguments),
    "schema": Command(
        "print the JSON Schema of the sweep YAML (for editors)",
        "Print the JSON Schema of the sweep YAML, generated from the models that validate it, "
        "for editors (VS Code's YAML extension: see README).",
        ("sweep schema --out sweep.schema.json",),
        _schema_arguments),
    "export": Command(
        "export a finished trial's model and check parity",
        "Export a trial's final weights in the given formats, check each file against the "
        "eager model, log the files and figures into the trial's run and copy them to --out.",
        ("sweep export RUN_ID --formats onnx,int8   # RUN_ID: see sweep status NAME",),
        _export_arguments),
    "report": Command(
        "the sweep's answer: statistics per setting, plots",
        "Write an HTML report (plots embedded), a Markdown summary and the trial table (CSV, "
        "Parquet) of a sweep, and log them on its parent run. Several sweeps of the same stores "
        "and objective: one report comparing them trial by trial (same configuration and "
        "seed), with paired tests.",
        ("sweep report sweeps/adam_vs_sgd.yaml --out report/", "sweep report quickstart",
         "sweep report quickstart quickstart-2   # two sweeps side by side"),
        _report_arguments),
    "reproduce": Command(
        "train a trial again from its run and compare curves",
        "Rebuild a trial from its MLflow run alone (settings, seed, thread count), train it "
        "again in a run tagged as its reproduction, and compare the per-epoch curves. Exit 0 "
        "when they match, 1 when they differ (with what differs in the environment).",
        ("sweep reproduce RUN_ID   # RUN_ID: see sweep status NAME",),
        _reproduce_arguments),
    "ui": Command(
        "open the MLflow UI on this machine's store (127.0.0.1)",
        "Start the MLflow UI on this machine's store, wait until it answers and print its URL: "
        "with NAME, the sweep's runs table. Ctrl-C stops it.",
        ("sweep ui quickstart", "sweep ui quickstart --port 5001"),
        _ui_arguments),
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
        _server_arguments),
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
        _submit_arguments),
    "completion": Command(
        "print a shell completion script (bash or zsh)",
        "Print a tab-completion script for bash or zsh, generated from this command line "
        "(commands, flags, YAML file names). Load it from your shell's startup file or its "
        "completion folder.",
        ("sweep completion bash > ~/.local/share/bash-completion/completions/sweep",
         "sweep completion zsh > ~/.zfunc/_sweep"),
        _completion_arguments),
}
