"""The command line as a whole: every command's help ends with examples that parse, and the
shell completion scripts generated from the same parser."""
import shlex
import subprocess

import pytest

from orchestrator.cli import COMPLETION_SHELLS, build_parser
from tests.conftest import ROOT, run_cli


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
    assert set(subcommands()) == {"run", "status", "doctor", "validate", "schema", "export",
                                  "report", "reproduce", "ui", "server", "completion"}


@pytest.mark.parametrize("command", [None, *subcommands()])
def test_help_exits_0_and_ends_with_examples_that_parse(command):
    args = [command, "--help"] if command else ["--help"]
    out = run_cli(*args, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    for example in examples(out.stdout):
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
