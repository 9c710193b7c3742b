"""README.md's marked commands, run as written, so that README and code cannot drift.

A block marked ``<!-- readme-test: NAME -->`` (in README.md or a page of docs/, each NAME once)
holds one command a line. They run in a folder holding a fresh copy of ``sweeps/``, with
``.venv/bin/sweep`` as this venv's own script; the quickstart's ``python3 -m venv`` and ``pip
install`` steps are left out (CI runs README's test command, which proves them). The quickstart
itself is the run every test that reads a finished quickstart shares (``quickstart_once``).
"""
import os
import re
import shlex
import socket
import subprocess
import urllib.request

import pytest

from tests.conftest import QUICKSTART, ROOT, SWEEPS, Stores, as_typed, serve

pytestmark = pytest.mark.slow  # end to end: README's commands run as written

MARKED = re.compile(r"<!-- readme-test: (\w+) -->\n```\w*\n(.*?)```", re.S)
SETUP = ("python3 -m venv ", ".venv/bin/pip install ")


def documents() -> list:
    """README.md and the pages of the docs site: where marked commands and images may be."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def marked_blocks() -> dict[str, list[str]]:
    """NAME -> the commands of the block marked NAME (continued lines joined), over README.md
    and docs/; a NAME marked twice is an error (which block would the test run?)."""
    found: dict[str, list[str]] = {}
    for path in documents():
        for name, body in MARKED.findall(path.read_text()):
            assert name not in found, f"{path.name}: readme-test {name!r} is marked twice"
            found[name] = [line.strip() for line in body.replace("\\\n", " ").splitlines()
                           if line.strip()]
    return found


def run(command: str, cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(as_typed(command), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=readme_env())


def readme_env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}


@pytest.fixture(scope="module")
def blocks():
    found = marked_blocks()
    assert set(found) >= {"quickstart", "status", "ui", "report"}, sorted(found)
    return found


@pytest.fixture(scope="module")
def quickstart_run(blocks, quickstart_once):
    """The quickstart block, as written, in a folder holding a fresh copy of sweeps/: the
    run the other tests read too (quickstart_once runs QUICKSTART; this checks it is what
    README says)."""
    (line,) = blocks["quickstart"]
    steps = [s.strip() for s in line.split("&&") if not s.strip().startswith(SETUP)]
    assert steps == [QUICKSTART]  # what README promises
    stores, out = quickstart_once
    return stores.dir, [out]


def test_the_quickstart_runs_as_written(quickstart_run):
    folder, (out,) = quickstart_run
    assert out.returncode == 0, out.stderr
    study = Stores(folder).study("quickstart")
    assert len(study.trials) == 8
    assert "sweep 'quickstart' finished in" in out.stdout
    assert out.files == [".sweep", "mlartifacts", "mlflow.db", "optuna.journal", "sweeps"]
    assert "sweep status quickstart" in out.stdout and "sweep ui quickstart" in out.stdout


def test_the_status_commands_show_the_quickstart_and_its_8_trials(blocks, quickstart_run):
    folder, _ = quickstart_run
    listing, trials = blocks["status"]
    out = run(listing, folder)
    assert out.returncode == 0, out.stderr
    (row,) = [line for line in out.stdout.splitlines() if line.startswith("quickstart ")]
    assert row.split()[1] == "8"
    out = run(trials, folder)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sweep 'quickstart': 8 trials: ")
    numbers = [line.split()[0] for line in out.stdout.splitlines()
               if re.match(r"\d+ +(COMPLETE|PRUNED|FAIL) ", line)]
    assert numbers == [str(n) for n in range(8)]


def test_the_report_command_writes_the_quickstart_report(blocks, quickstart_run):
    folder, _ = quickstart_run
    (command,) = blocks["report"]
    out = run(command, folder)
    assert out.returncode == 0, out.stderr
    html = (folder / "report-quickstart" / "report.html").read_text()
    assert "quickstart" in html
    assert "report: report-quickstart/report.html" in out.stdout


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_ui_command_serves_the_runs_table_and_stops_on_ctrl_c(blocks, quickstart_run):
    folder, _ = quickstart_run
    (command,) = blocks["ui"]
    words = shlex.split(command)[1:]  # after .venv/bin/sweep
    # a shared machine: another UI may hold README's port 5000, then a free one is added
    with serve(*words, cwd=folder, prefix="MLflow UI:",
               port=None if port_taken(5000) else 5000) as ui:  # printed once it answers
        found = re.search(r"http://127\.0\.0\.1:\d+/#/experiments/(\d+)/runs", ui.line)
        assert found, ui.line
        exp = Stores(folder).client().get_experiment_by_name("quickstart")
        assert found.group(1) == exp.experiment_id
        with urllib.request.urlopen(ui.url, timeout=30) as r:
            assert r.status == 200 and "<html" in r.read().decode().lower()
        ui.stop()


def test_every_image_the_readme_and_the_docs_show_is_a_small_png_its_script_makes():
    from PIL import Image

    images = [(doc.parent / path).resolve() for doc in documents()
              for path in re.findall(r"!\[[^\]]+\]\(([^)\s]+)\)", doc.read_text())]
    assert images, "neither the README nor the docs show an image"
    script = (ROOT / "docs" / "screenshots.py").read_text()
    assert "docs/screenshots.py" in (ROOT / "docs" / "development.md").read_text()  # how to remake
    for path in images:
        with Image.open(path) as image:
            assert image.format == "PNG", path
        assert path.stat().st_size < 300_000, path
        assert f'"{path.name}"' in script, f"{path}: not made by docs/screenshots.py"


def test_the_docs_and_the_quickstart_say_the_workers_default_the_code_uses():
    from orchestrator.config.slots import plan_slots

    assert len(plan_slots(None, gpus=[], cores=3)) == 3  # no GPU: one per CPU core
    assert len(plan_slots(None, gpus=["0", "1"], cores=8, workers_per_gpu=2)) == 4
    said = "`workers_per_gpu` per visible GPU, else one per CPU core"
    (row,) = [line for line in (ROOT / "docs" / "yaml.md").read_text().splitlines()
              if line.startswith("| `workers` |")]
    (comment,) = [line for line in (SWEEPS / "quickstart.yaml").read_text().splitlines()
                  if line.startswith("workers:")]
    assert said in row and said.replace("`", "") in comment, (row, comment)
