"""Every command the tool prints for the user to run next works when pasted into a shell: it is
built from the argument vector it would run (quoted), names the study that ran (``NAME-2``
after ``--new``) and the stores that were used, whatever their paths hold."""
import argparse
import os
import re
import shlex
import signal
import subprocess
import urllib.request
from io import StringIO

import pytest
import yaml
from rich.console import Console

from orchestrator.commands.handlers import print_summary
from orchestrator.commands.parser import build_parser
from orchestrator.config.spec import validate
from orchestrator.core.errors import ExitCode
from orchestrator.report.display import command_line, option, sweep_argv
from orchestrator.running.runner import Outcome
from tests.conftest import free_port, run_cli, tiny_spec

# a path a shell would split, expand or choke on unquoted: a space, both quotes, a `$`, a
# backslash, non-ASCII letters, what rich would read as markup
AWKWARD = ["st ore", "it's", 'say "hi"', "$HOME", "a\\b", "é ü 名", "-x", "a;b", "*",
           "[red]x[/red]"]


# a whole option value argparse would not take after its flag as a separate word (it begins
# with a dash), or that looks like a flag, an '=' or nothing
DASHED = ["-dash.journal", "-", "--storage", "--tracking-uri=x", "-x y.journal", "-1e-5", "-1",
          "-é ü 名", "-it's \"q\" $HOME", "a=b.journal", "=", ""]
# a value of exactly "--" is no case: CPython's argparse drops it in any form before 3.11.8 and
# 3.12.2 (gh-109475), so no printed form of it can be pasted there


@pytest.mark.parametrize("arg", AWKWARD)
def test_a_printed_command_splits_back_into_the_arguments_it_was_built_from(arg):
    argv = ["report", "tiny-2", "--tracking-uri", f"sqlite:///{arg}/mlflow.db",
            "--storage", f"{arg}/optuna.journal"]
    assert shlex.split(command_line(*argv)) == [*sweep_argv(), *argv]


def _parsed(line: str) -> argparse.Namespace:
    """A printed command line as the shell splits it and ``sweep``'s own parser reads it."""
    words = shlex.split(line)
    assert words[:len(sweep_argv())] == sweep_argv(), line
    return build_parser().parse_args(words[len(sweep_argv()):])


@pytest.mark.parametrize("value", [*DASHED, *AWKWARD, *(f"{a}/optuna.journal" for a in AWKWARD)])
@pytest.mark.parametrize("command", ["report", "status"])
def test_a_printed_command_parses_back_into_the_values_it_was_built_from(command, value):
    """Pasted, ``sweep report r4p2 --storage -dash.journal`` exited 2 (argparse: expected one
    argument); ``--storage=-dash.journal`` is read as the value."""
    line = command_line(command, "tiny-2", *option("--tracking-uri", value),
                        *option("--storage", value))
    args = _parsed(line)
    name = args.spec if command == "report" else args.name
    assert (args.command, name, args.tracking_uri, args.storage) == \
        (command, "tiny-2", value, value), line


@pytest.mark.parametrize("value", ["-dash.journal", "--", "-x y", "a b"])
def test_an_option_value_takes_the_equals_form_only_when_it_begins_with_a_dash(value):
    words = option("--storage", value)
    assert words == ([f"--storage={value}"] if value.startswith("-") else ["--storage", value])


def _printed(tmp_path, uri: str, storage: str) -> dict[str, list[str]]:
    """The next commands print_summary prints for a sweep that ran on these stores, split as
    a shell splits them, by what they show."""
    out = Console(file=StringIO(), width=40, color_system=None)  # narrow, as when piped
    print_summary(out, validate(tiny_spec()),
                  Outcome(ExitCode.OK, {"complete": 2, "pruned": 0, "fail": 0}, [], "7",
                          "p" * 32, uri, storage, 1.0, study_name="tiny-3"))
    lines = out.file.getvalue().splitlines()
    return {line.split(": ", 1)[0]: line.split(": ", 1)[1].split("   (then")[0]
            for line in lines if line.startswith(("the report: ", "the trials: ", "browse it: "))}


@pytest.mark.parametrize("uri, storage", [
    *((f"sqlite:///{folder}/mlflow.db", f"{folder} j/optuna.journal") for folder in AWKWARD),
    *((f"sqlite:///{start}/mlflow.db", f"{start}optuna.journal")
      for start in ["-", "--", "-dash.", "--storage=", "-1", "-é ü 名", "-it's $HOME/"])])
def test_the_lines_after_a_run_name_the_study_that_ran_and_its_stores_as_single_arguments(
        tmp_path, uri, storage):
    """Each line read by ``sweep``'s own parser: the study, and each store's value whole, one
    that begins with a dash (``--storage=-dash.optuna.journal``) included."""
    steps = _printed(tmp_path, uri, storage)
    for step, command in [("the report", "report"), ("the trials", "status")]:
        args = _parsed(steps[step])
        assert args.command == command and (args.spec if command == "report" else args.name) \
            == "tiny-3"
        assert (args.tracking_uri, args.storage) == (uri, storage), steps[step]
    args = _parsed(steps["browse it"])
    assert (args.command, args.name, args.tracking_uri) == ("ui", "tiny-3", uri)


def test_the_default_stores_are_left_out_of_the_lines_after_a_run(tmp_path, monkeypatch):
    from orchestrator.core import paths
    from orchestrator.stores.storages import default_storage

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = paths.default_tracking_uri()
    steps = {step: shlex.split(line) for step, line in
             _printed(tmp_path, uri, default_storage(uri)).items()}
    start = len(sweep_argv())
    assert steps["the report"][start:] == ["report", "tiny-3"]
    assert steps["browse it"][start:] == ["ui", "tiny-3"]


# ---------------------------------------------------------------- pasted into bash, for real

STORE_DIR = "st ore 'q' $x é"  # the MLflow database's folder
# the Optuna journal's folder: begins with a dash, so `--storage -jo...` would not parse
JOURNAL_DIR = '-jo\'urnal"d"$HOMEü'


@pytest.fixture(scope="module")
def awkward_done(tmp_path_factory):
    """A 2-trial sweep run with --new (its study is tiny-2, in experiment tiny) on stores in
    folders a shell would split and expand; the lines it printed. (The perceptron: the lines are
    the same for any model.)"""
    d = tmp_path_factory.mktemp("pasted")
    (d / STORE_DIR).mkdir()
    (d / JOURNAL_DIR).mkdir()
    spec = d / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(trials=2, workers=1, train={
        "dataset": "digits", "model": "mlp", "epochs": 1})))
    out = run_cli("run", str(spec), "--new", "--tracking-uri", f"sqlite:///{STORE_DIR}/mlflow.db",
                  f"--storage={JOURNAL_DIR}/optuna.journal", cwd=d)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sweep 'tiny-2' finished" in out.stdout, out.stdout
    steps = {line.split(": ", 1)[0]: line.split(": ", 1)[1].split("   (then")[0]
             for line in out.stdout.splitlines()
             if line.startswith(("the report: ", "the trials: ", "browse it: "))}
    assert set(steps) == {"the report", "the trials", "browse it"}, out.stdout
    return d, steps


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


def bash(line: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow  # a real sweep
def test_the_printed_status_line_pasted_into_bash_lists_the_new_studys_trials(awkward_done):
    d, steps = awkward_done
    done = bash(steps["the trials"], d)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trials of tiny-2" in done.stdout and done.stdout.count("COMPLETE") == 2, done.stdout
    assert not (d / "mlflow.db").exists() and not (d / "optuna.journal").exists()  # no others


@pytest.mark.slow  # a real sweep
def test_the_printed_report_line_pasted_into_bash_reports_the_new_study(awkward_done):
    d, steps = awkward_done
    done = bash(steps["the report"], d)
    assert done.returncode == 0, done.stdout + done.stderr
    table = (d / "report-tiny-2" / "trials.csv").read_text().splitlines()
    assert len(table) == 1 + 2, table  # a header and the study's two trials
    assert not (d / "mlflow.db").exists() and not (d / "optuna.journal").exists()


@pytest.mark.slow  # a real sweep and MLflow's UI server
def test_the_printed_ui_line_pasted_into_bash_opens_the_new_studys_experiment(awkward_done):
    """``sweep ui tiny-2`` finds study tiny-2 in experiment tiny (its parent run's tag)."""
    d, steps = awkward_done
    port = free_port()  # the default 5000 may be another test's
    proc = subprocess.Popen(["bash", "-c", f"{steps['browse it']} --port {port}"], cwd=d,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith(f"MLflow UI: http://127.0.0.1:{port}/#/experiments/"), \
            first + proc.stderr.read()
        experiment = re.search(r"/experiments/(\d+)/", first).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/"
                                    f"get?experiment_id={experiment}", timeout=30) as r:
            assert r.status == 200 and b'"name": "tiny"' in r.read().replace(b'":"', b'": "')
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0, proc.returncode
