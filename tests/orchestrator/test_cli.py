"""The command line as a whole: every command's help ends with examples that parse, and the
shell completion scripts generated from the same parser."""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.commands.cli import main
from orchestrator.commands.handlers import HANDLERS
from orchestrator.commands.parser import COMMANDS, COMPLETION_SHELLS, build_parser
from orchestrator.core import keys
from orchestrator.core.errors import ExitCode
from tests.conftest import ROOT, VENV_BIN, WITHOUT_VENV, run_cli, tiny_spec


def subcommands() -> list[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]  # argparse has no public list
    return list(sub.choices)


def examples(help_text: str) -> list[str]:
    """The indented lines after the last `example:` / `examples:` heading, which must close the
    help text."""
    lines = help_text.rstrip("\n").splitlines()
    start = max(i for i, line in enumerate(lines) if line in ("example:", "examples:"))
    body = lines[start + 1:]
    assert body and all(line.startswith("  sweep ") for line in body), help_text
    return [line.strip() for line in body]


def test_the_parser_knows_the_commands_the_readme_lists():
    assert set(subcommands()) == {"run", "status", "doctor", "validate", "plan", "schema",
                                  "export",
                                  "report", "reproduce", "ui", "server", "submit", "completion"}
    table = re.findall(r"^\| `sweep (\w+)[ `]", (ROOT / "README.md").read_text(), re.M)
    assert sorted(table) == sorted(subcommands()), table


def test_help_exits_0_as_a_process():
    out = run_cli("--help", cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: sweep ") and examples(out.stdout)


@pytest.mark.parametrize("command", [None, *subcommands()])
def test_help_exits_0_and_ends_with_examples_that_parse(command, capsys, monkeypatch):
    # read in this process, as wide as a captured process prints it: a process a command cost
    # more than the rest of the file (the process's exit is tested above)
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as e:
        main([command, "--help"] if command else ["--help"])
    assert e.value.code == 0
    out = capsys.readouterr()
    for example in examples(out.out):
        words = shlex.split(example.split(" #")[0].split(" > ")[0])
        assert words[0] == "sweep"
        if command:
            assert words[1] == command
        parsed = build_parser().parse_args(words[1:])  # exits 2 on a flag that does not exist
        assert parsed.command == words[1]


def test_bash_completion_names_every_command_and_is_valid_bash(tmp_path):
    out = run_cli("completion", "bash", cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    script = tmp_path / "sweep.bash"
    script.write_text(out.stdout)
    (listed,) = [line for line in out.stdout.splitlines()
                 if line.startswith("_shtab_sweep_subparsers=(")]
    assert listed.split("(", 1)[1].rstrip(")").split() == subcommands()
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def complete(script, words: list[str]) -> list[str]:
    """What bash offers after ``words`` (the last one is being typed), through the script's own
    completion function, as bash calls it on TAB."""
    line = " ".join(words)
    probe = (f"source {shlex.quote(str(script))}\n"
             f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
             f"COMP_CWORD={len(words) - 1}; COMP_LINE={shlex.quote(line)}; "
             f"COMP_POINT={len(line)}\n"
             "_shtab_sweep sweep \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
             "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30,
                         cwd=script.parent)
    assert out.returncode == 0, out.stderr
    return sorted(w.strip() for w in out.stdout.splitlines() if w.strip())


def test_bash_completion_completes_commands_flags_and_yaml_files(tmp_path):
    script = tmp_path / "sweep.bash"
    script.write_text(run_cli("completion", "bash", cwd=tmp_path, timeout=60).stdout)
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    assert complete(script, ["sweep", ""]) == sorted(subcommands())
    assert complete(script, ["sweep", "st"]) == ["status"]
    assert complete(script, ["sweep", "status", "--st"]) == ["--storage"]
    assert complete(script, ["sweep", "run", "mi"]) == ["mine.yaml"]
    assert complete(script, ["sweep", "completion", ""]) == sorted(COMPLETION_SHELLS)


def test_zsh_completion_names_every_command():
    out = run_cli("completion", "zsh", cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("#compdef sweep")
    for command in subcommands():
        assert f"\n    {command}:'" in out.stdout, command


def test_completion_for_another_shell_is_one_line_and_exit_2():
    out = run_cli("completion", "fish", cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and "invalid choice: 'fish'" in out.stderr


def test_a_tracking_uri_or_storage_in_a_missing_folder_is_refused_before_anything_is_written(
        tmp_path, write_spec):
    spec = write_spec(tiny_spec())
    here = tmp_path / "here"
    here.mkdir()
    for flags, said in (
            (["--tracking-uri", f"sqlite:///{tmp_path}/nope/mlflow.db"],
             f"sweep: --tracking-uri sqlite:///{tmp_path}/nope/mlflow.db: folder "
             f"{tmp_path}/nope does not exist; create it first\n"),
            (["--storage", str(tmp_path / "nope" / "optuna.journal")],
             f"sweep: --storage {tmp_path}/nope/optuna.journal: folder {tmp_path}/nope does "
             f"not exist; create it first\n")):
        out = run_cli("run", str(spec), *flags, cwd=here, timeout=120)
        assert (out.returncode, out.stderr) == (2, said)
        assert not (tmp_path / "nope").exists() and list(here.iterdir()) == []


@pytest.mark.slow  # a real sweep on a full disk
def test_a_disk_that_fills_up_during_a_run_is_one_line_naming_the_stores(tmp_path, write_spec,
                                                                         mlflow_template):
    """A real full disk: the stores on a tmpfs with room for the first trials' bookkeeping
    only, mounted in a mount namespace of the test's own (gone with it: nothing to clean)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    # one worker: the first trial's checkpoint and bookkeeping fill the disk, with one worker
    # training or two
    spec = write_spec(tiny_spec(trials=6, workers=1))
    size_kb = mlflow_template.stat().st_size // 1024 + 160
    namespace = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace += ["--user", "--map-root-user"]
    script = (f"mount -t tmpfs -o size={size_kb}k tmpfs {disk} && cd {disk} && "
              f"cp {mlflow_template} mlflow.db && exec {sys.executable} -m orchestrator "
              f"run {spec}")
    out = subprocess.run([*namespace, "sh", "-c", script], capture_output=True, text=True,
                         timeout=600, env={k: v for k, v in os.environ.items()
                                           if k != "MLFLOW_TRACKING_URI"})
    assert out.returncode == 3, out.stdout + out.stderr  # could not finish: not failed trials
    (said,) = out.stderr.splitlines()
    assert said.startswith("sweep: ") and str(disk / "mlflow.db") in said, said
    assert ": no space left on the disk; free space there (or move the stores with " \
           "--tracking-uri and --storage), then run the same command again: a sweep resumes " \
           "where it stopped, its finished trials kept (the traceback is in " in said \
           or "database or disk is full; free space there" in said, said
    if "the traceback is in " in said:
        log = Path(said.split("the traceback is in ")[1].rstrip(")"))
        assert "No space left on device" in log.read_text() or \
            "database or disk is full" in log.read_text()
        log.unlink()


@pytest.mark.slow  # a real sweep's weights
def test_export_of_weights_that_do_not_load_is_one_line_and_exit_2(stores):
    """A trial run (made through MLflow as `sweep run` makes one) whose weights fail to load."""
    import torch
    import yaml

    from trainers import TrainSettings

    client = stores.client()
    exp = client.create_experiment("w", artifact_location=(stores.dir / "art").as_uri())
    run_id = client.create_run(exp, tags={keys.ROLE: "trial"}).info.run_id
    files = stores.dir / "files"
    (files / keys.WEIGHTS_DIR).mkdir(parents=True)
    (files / keys.SETTINGS_FILE).write_text(
        yaml.safe_dump(TrainSettings(model="mlp", dataset="digits").to_dict()))
    # a pickle of something else than tensors: what weights_only=True refuses
    torch.save({"model": TrainSettings()}, files / keys.WEIGHTS_DIR / keys.WEIGHTS_FILE)
    client.log_artifact(run_id, str(files / keys.SETTINGS_FILE))
    client.log_artifact(run_id, str(files / keys.WEIGHTS_DIR))
    out = run_cli("export", run_id, "--tracking-uri", stores.tracking_uri,
                  "--out", str(stores.dir / "out"), cwd=stores.dir, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith(f"sweep: RUN_ID {run_id}: its model/weights.pt cannot be exported: "
                           f"cannot read weights model/weights.pt: "), said
    assert said.endswith("; export another run (sweep status NAME lists them)")
    assert "weights_only=False" not in said  # never PyTorch's advice to unpickle anything
    assert not (stores.dir / "out").exists()
    assert not client.get_run(run_id).data.tags.get(keys.EXPORTED, "")


@pytest.mark.parametrize("command", ["ui", "server"])
@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_a_port_outside_1_to_65535_is_one_line_and_exit_2(tmp_path, command, port):
    out = run_cli(command, "--port", port, cwd=tmp_path)
    assert out.returncode == 2 and "a port is a number from 1 to 65535" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not any(tmp_path.iterdir())


def test_an_unexpected_error_exits_3_not_the_1_of_failed_trials(tmp_path, monkeypatch, capsys):
    """A study whose identity attribute is not JSON (written by another tool): `sweep report`
    fails where nobody expected it, and the last guard says so in one line naming the file that
    holds the traceback."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = tmp_path / "optuna.journal"
    study = optuna.create_study(study_name="odd",
                                storage=JournalStorage(JournalFileBackend(str(journal))))
    study.set_user_attr(keys.IDENTITY, "{not json")
    (tmp_path / "mlflow.db").touch()  # an empty SQLite database: report reads no missing store
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()  # Optuna's line about the study it created
    code = main(["report", "odd", "--storage", str(journal), "--tracking-uri",
                 f"sqlite:///{tmp_path / 'mlflow.db'}"])
    (said,) = capsys.readouterr().err.splitlines()
    assert code == 3 != 1
    assert said.startswith("sweep: unexpected error JSONDecodeError: ")
    log = Path(said.split("the traceback is in ")[1].split()[0])
    assert "JSONDecodeError" in log.read_text()
    log.unlink()


def test_sweep_help_and_the_docs_list_the_exit_codes_of_the_enum():
    meanings = {int(code): code.meaning for code in ExitCode}
    assert list(meanings) == [0, 1, 2, 3, 130, 143]
    epilog = build_parser().format_help().split("exit codes:\n")[1].split("\n\n")[0]
    listed = {int(m[0]): " ".join(m[1].split()) for m in re.findall(
        r"^  (\d+) +(.+(?:\n {7}.+)*)", epilog, re.M)}
    assert listed == meanings
    page = (ROOT / "docs" / "commands.md").read_text()
    table = dict(re.findall(r"^  \| (\d+) \| (.+) \|$", page, re.M))
    assert {int(k): v for k, v in table.items()} == meanings


def test_every_command_of_the_parser_has_its_handler():
    assert list(HANDLERS) == list(COMMANDS)


def test_a_worker_breaking_the_protocol_is_a_bug_in_one_line_and_exit_3(stores, write_spec,
                                                                       tmp_path):
    """A worker whose epochs carry an op no message has (a site hook of the worker processes
    alone): the runner stops the sweep as on a bug in sweep, never as on bad input."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "if {'orchestrator.running.worker', 'orchestrator.running.spawner'} & "
        "set(getattr(sys, 'orig_argv', [])):\n"
        "    from orchestrator.running import protocol\n"
        "    real = protocol.encode\n"
        "    def encode(message):\n"
        "        raw = real(message)\n"
        "        return {**raw, 'op': 'bogus'} if raw['op'] == 'epoch' else raw\n"
        "    protocol.encode = encode\n")
    spec = write_spec(tiny_spec(trials=1, workers=1))
    out = run_cli("run", str(spec), cwd=stores.dir, env={"PYTHONPATH": f"{hook}:{ROOT}"})
    assert out.returncode == ExitCode.COULD_NOT_FINISH == 3, out.stdout + out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith("sweep: unexpected error ProtocolError: unknown op 'bogus'"), said
    assert "this is a bug in sweep" in said, said
    log = Path(said.split("the traceback is in ")[1].split()[0])
    assert "ProtocolError" in log.read_text()
    log.unlink()


def _next_steps(stdout: str) -> dict[str, str]:
    """The commands the end of ``sweep run`` prints, by what they show (``report``...)."""
    return {line.split(":", 1)[0]: line.split(": ", 1)[1].split("   (")[0]
            for line in stdout.splitlines() if line.startswith(("the report: ", "the trials: ",
                                                                "browse it: "))}


@pytest.fixture(scope="module")
def tiny_done(tmp_path_factory, mlflow_template):
    """A finished one-trial sweep: rerunning it prints its end at once. (Its MLflow database
    is the session's migrated copy: a second of migrations saved.)"""
    d = tmp_path_factory.mktemp("tiny")
    shutil.copyfile(mlflow_template, d / "mlflow.db")
    spec = d / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(trials=1, workers=1, train={
        "dataset": "digits", "model": "small_cnn", "epochs": 1})))
    out = run_cli("run", str(spec), cwd=d)
    assert out.returncode == 0, out.stderr
    return d, spec


@pytest.mark.slow  # a real sweep (tiny_done)
@pytest.mark.parametrize("how", ["venv-not-activated", "venv-activated", "python-m"])
def test_the_next_steps_printed_by_sweep_run_work_as_printed(tiny_done, how):
    d, spec = tiny_done
    path = WITHOUT_VENV if how != "venv-activated" else f"{VENV_BIN}{os.pathsep}{WITHOUT_VENV}"
    env = {**os.environ, "PATH": path}
    env.pop("MLFLOW_TRACKING_URI", None)
    start = [sys.executable, "-m", "orchestrator"] if how == "python-m" else \
        [str(VENV_BIN / "sweep")]
    out = subprocess.run([*start, "run", str(spec)], cwd=d, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    steps = _next_steps(out.stdout)
    expected = {"venv-not-activated": str(VENV_BIN / "sweep"), "venv-activated": "sweep",
                "python-m": f"{sys.executable} -m orchestrator"}[how]
    assert steps["the trials"] == f"{expected} status tiny", out.stdout
    assert steps["browse it"] == f"{expected} ui tiny", out.stdout
    ran = subprocess.run(shlex.split(steps["the trials"]), cwd=d, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0 and "COMPLETE" in ran.stdout, ran.stdout + ran.stderr
    assert steps["the report"] == f"{expected} report tiny", out.stdout
    reported = subprocess.run([*shlex.split(steps["the report"]), "--out", f"report-{how}"],
                              cwd=d, env=env, capture_output=True, text=True, timeout=300)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert (d / f"report-{how}" / "report.md").is_file()


@pytest.mark.slow  # a real sweep (tiny_done)
def test_every_line_after_new_names_the_fresh_study(tiny_done):
    d, spec = tiny_done
    out = run_cli("run", str(spec), "--new", cwd=d)
    assert out.returncode == 0, out.stderr
    assert "starting a fresh study 'tiny-2' (--new)" in out.stdout
    assert "sweep 'tiny-2' finished" in out.stdout, out.stdout
    steps = _next_steps(out.stdout)
    assert steps["the report"].endswith(" report tiny-2"), out.stdout
    assert steps["the trials"].endswith(" status tiny-2") and steps["browse it"].endswith(
        " ui tiny-2"), out.stdout
    ran = subprocess.run(shlex.split(steps["the trials"]), cwd=d, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0 and "tiny-2" in ran.stdout, ran.stdout + ran.stderr
