"""The phases that borrow a worker (preflight, test split, export): they never keep the other
workers idle, every request has a deadline, and a grid sweep's first run is checked too."""
import re
import time

import pytest

from tests.conftest import ROOT, run_cli, tiny_spec

pytestmark = pytest.mark.slow

USER_CODE = {"PYTHONPATH": str(ROOT)}  # the user models live in tests/datasets.py


def overlapping(intervals) -> bool:
    return any(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(intervals)
               for b0, b1 in intervals[i + 1:])


def test_a_two_worker_sweep_with_preflight_trains_its_trials_side_by_side(stores, cli,
                                                                          write_spec):
    # the preflight takes one worker while the other finishes starting: its Ready must count
    path = write_spec(tiny_spec(trials=4, workers=2, preflight={"overfit_steps": 40}))
    done = cli(path)
    assert done.returncode == 0, done.stderr
    parent = stores.runs("tiny", "parent")[0]
    assert parent.data.tags["sweep.preflight"] in ("PASS", "WARN")
    runs = stores.runs("tiny", "trial")
    assert len(runs) == 4
    assert {r.data.tags["sweep.worker"] for r in runs} == {"0", "1"}
    assert overlapping([(r.info.start_time, r.info.end_time) for r in runs])
    trials = stores.study("tiny").trials
    assert overlapping([(t.datetime_start, t.datetime_complete) for t in trials])


def test_a_grid_sweeps_first_run_runs_the_preflight(stores, write_spec):
    # a grid enqueues its trials before the preflight: waiting trials are not a resumed sweep
    spec = tiny_spec(sampler={"name": "grid"}, trials=None, workers=1,
                     preflight={"overfit_steps": 20}, space={"batch_size": [64, 128]},
                     train={"dataset": "digits", "model": "tests.datasets:softmax_model",
                            "epochs": 1})
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env=USER_CODE, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "loss_wiring FAIL" in done.stderr and "Traceback" not in done.stderr
    assert stores.runs("tiny", "parent")[0].data.tags["sweep.preflight"] == "FAIL"
    assert {t.state.name for t in stores.study("tiny").trials} == {"WAITING"}


def test_a_hanging_model_fails_the_preflight_at_its_deadline(stores, write_spec):
    # one worker: the preflight borrows one, and no trial starts (a second worker would only
    # start torch to be stopped)
    spec = tiny_spec(preflight={"overfit_steps": 5, "timeout_s": 3}, workers=1,
                     train={"dataset": "digits", "model": "tests.datasets:hanging_model",
                            "epochs": 1})
    t0 = time.monotonic()
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env=USER_CODE, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "deadline FAIL" in x)
    assert "preflight" in line and "3 s" in line
    assert stores.study("tiny").trials == []  # no trial was started
    assert time.monotonic() - t0 < 100  # it did not wait for the model (an hour)


def test_sweep_doctor_names_a_hanging_model_as_a_fail_at_its_deadline(tmp_path, write_spec):
    spec = tiny_spec(preflight={"overfit_steps": 5, "timeout_s": 3},
                     train={"dataset": "digits", "model": "tests.datasets:hanging_model",
                            "epochs": 1})
    done = run_cli("doctor", str(write_spec(spec)), "--out", str(tmp_path / "e"), cwd=tmp_path,
                   env=USER_CODE, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "deadline FAIL" in x)
    assert "tests.datasets:hanging_model" in line and "3 s" in line


def test_a_test_split_or_export_that_hangs_ends_at_its_deadline_and_the_sweep_finishes(
        stores, write_spec):
    # the model hangs once saved weights are loaded into it: the test split's evaluation and
    # the export both do, training does not
    spec = tiny_spec(trials=1, workers=1, export_for="best", export=["onnx"],
                     test_timeout_s=2, export_timeout_s=2,
                     train={"dataset": "fake", "model": "tests.datasets:hangs_once_loaded",
                            "epochs": 1})
    t0 = time.monotonic()
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, env=USER_CODE, timeout=300)
    assert done.returncode == 0, done.stderr  # the trial's result stands
    assert "Traceback" not in done.stdout + done.stderr
    (run,) = stores.runs("tiny", "trial")
    assert run.info.status == "FINISHED"
    test_error = run.data.tags["sweep.test_error"]
    assert "test split evaluation did not finish within its deadline of 2 s" in test_error
    assert "the export did not finish within its deadline of 2 s" in \
        run.data.tags["sweep.export_error"]
    assert "test_acc" not in run.data.metrics
    assert [t.state.name for t in stores.study("tiny").trials] == ["COMPLETE"]
    assert time.monotonic() - t0 < 250  # it did not wait for the model (an hour)


def _share(folder, fmt: str, file: str, passed: bool = True):
    from orchestrator.running.protocol import Exported

    folder.mkdir()
    (folder / file).write_bytes(fmt.encode())
    (folder / "input_example.npy").write_bytes(b"same example")
    (folder / "export.json").write_text("{}")
    report = {"files": {fmt: str(folder / file)}, "formats": {fmt: {"passed": passed}},
              "eager_latency": {"ms_per_image_b1": 2.0}, "meta": {"classes": 10}}
    return Exported(report=report, metrics={f"export_{fmt}_passed": float(passed),
                                            "export_eager_ms_per_image_b1": 2.0},
                    error=None, dir=str(folder))


def test_the_shares_of_an_export_are_merged_and_a_lost_share_fails_only_its_formats(tmp_path):
    import json

    from orchestrator.running.phases import Lost, export_line, merge_exports
    from orchestrator.stores.tracking import export_tags

    shares = [("torch_export",), ("onnx", "int8")]
    both = merge_exports(shares[::-1], [_share(tmp_path / "b", "onnx", "model.onnx",
                                               passed=False),
                                        _share(tmp_path / "a", "torch_export", "model.pt2")],
                         tmp_path / "both", order=("torch_export", "onnx", "int8"))
    assert sorted(p.name for p in (tmp_path / "both").iterdir()) == [
        "export.json", "input_example.npy", "model.onnx", "model.pt2"]
    written = json.loads((tmp_path / "both" / "export.json").read_text())
    assert written["formats"] == {"torch_export": {"passed": True}, "onnx": {"passed": False}}
    assert list(written["formats"]) == ["torch_export", "onnx"]  # the sweep's order
    # named relative to the folder (the scratch folder is deleted once the files are logged)
    assert written["files"] == {"torch_export": "model.pt2", "onnx": "model.onnx"}
    assert str(tmp_path) not in (tmp_path / "both" / "export.json").read_text()
    assert both["metrics"] == {"export_torch_export_passed": 1.0, "export_onnx_passed": 0.0,
                               "export_eager_ms_per_image_b1": 2.0}
    assert export_line(both) == "torch_export passed parity; onnx FAILED parity"

    lost = merge_exports(shares, [_share(tmp_path / "c", "torch_export", "model.pt2"),
                                  Lost("worker 1 died: killed by SIGKILL")], tmp_path / "lost")
    tags = export_tags(lost)
    assert tags["sweep.export.torch_export"] == "passed"
    onnx = tags["sweep.export.onnx"]
    assert onnx.startswith("error: ") and "SIGKILL" in onnx
    assert tags["sweep.export.int8"] == tags["sweep.export.onnx"]
    assert "sweep.export_error" not in tags

    every = merge_exports(shares, [Lost("worker 0 died"), Lost("worker 1 died")],
                          tmp_path / "none")
    assert "worker 0 died" in every["error"] and every["report"] is None


def test_a_worker_left_without_a_trial_sets_up_the_export_while_it_waits(
        stores, cli, write_spec):
    # 1 trial on 2 workers: one worker has nothing to train, and no trial has finished yet
    done = cli(write_spec(tiny_spec(trials=1, workers=2, export_for="best",
                                    export=["onnx"])))
    assert done.returncode == 0, done.stderr
    logs = {p.name: p.read_text() for p in (stores.dir / ".sweep" / "tiny" / "logs").iterdir()}
    warmed = [name for name, text in logs.items()
              if "prepared the export (onnx) while idle" in text]
    assert len(warmed) >= 1, logs
    (best,) = [r for r in stores.runs("tiny", "trial")
               if r.data.tags.get("sweep.exported") == "true"]
    assert best.data.tags["sweep.export.onnx"] == "passed"


def _exported_ahead(stores) -> list[tuple[str, int, int]]:
    """(formats, trial, share) of each export share a worker ran ahead of the end, from the
    workers' logs."""
    logs = "".join(p.read_text() for p in (stores.dir / ".sweep" / "tiny" / "logs").iterdir())
    return sorted((formats, int(n), int(share)) for formats, n, share in re.findall(
        r"exported ([\w, ]+) into \S*export-ahead-(\d+)/part-(\d+)", logs))


# lr 1e-5 learns nothing, 0.03 learns digits; a 1-epoch trial trains 23 batches, a 4-epoch
# one waits at its 61st (tests.datasets.waits_for_an_export_ahead) until a worker's log says it
# exported the best trial ahead: the last trial is still training when that export ends,
# however fast or loaded the machine (the sweep's end stops a worker still exporting a trial
# that is no longer the best, and its export is never logged). The random sampler's seed 142
# draws (lr, epochs) (0.03, 1), (1e-5, 1), (1e-5, 4) for trials 0-2; seed 61 draws (1e-5, 1),
# (1e-5, 1), (0.03, 4)
AHEAD = {"trials": 3, "workers": 2, "export_for": "best", "export": ["torch_export"],
         "space": {"lr": [1e-5, 0.03], "epochs": [1, 4]},
         "train": {"dataset": "digits", "model": "tests.datasets:waits_for_an_export_ahead"}}


def _run_ahead(stores, write_spec, seed: int, **overrides):
    """``sweep run`` of :data:`AHEAD` with the random sampler's ``seed``."""
    marks = stores.dir / "marks"
    marks.mkdir()
    spec = tiny_spec(sampler={"name": "random", "seed": seed}, **{**AHEAD, **overrides})
    logs = stores.dir / ".sweep" / "tiny" / "logs"  # where the workers say what they exported
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir, timeout=300,
                   env={**USER_CODE, "SWEEP_TEST_MARKS": str(marks), "SWEEP_TEST_LOGS": str(logs)})
    assert done.returncode == 0, done.stderr
    runs = {int(r.data.tags["sweep.trial_number"]): r for r in stores.runs("tiny", "trial")}
    return done, runs


def test_the_best_trial_exported_while_the_last_trial_trains_is_logged_at_the_end(
        stores, write_spec):
    # two formats, two workers: the idle one takes the heavier share (onnx) while trial 2
    # trains; the other share is asked of whichever worker is free first
    done, runs = _run_ahead(stores, write_spec, 142, export=["torch_export", "onnx"])
    assert [(runs[n].data.params["lr"], runs[n].data.params["epochs"]) for n in range(3)] == [
        ("0.03", "1"), ("1e-05", "1"), ("1e-05", "4")]
    assert _exported_ahead(stores) == [("onnx", 0, 0), ("torch_export", 0, 1)]  # once each
    logs = [p.read_text() for p in (stores.dir / ".sweep" / "tiny" / "logs").iterdir()]
    assert any("warmed up for training while idle" in text for text in logs), logs
    assert ("trial 0 export (begun while the last trials trained): torch_export passed "
            "parity; onnx passed parity") in done.stdout
    assert [n for n, r in runs.items() if r.data.tags.get("sweep.exported") == "true"] == [0]
    assert runs[0].data.metrics["export_seconds"] > 0
    assert {"export/model.pt2", "export/model.onnx"} <= {
        f.path for f in stores.client().list_artifacts(runs[0].info.run_id, "export")}


def test_an_export_ahead_that_hangs_is_stopped_at_the_exports_deadline(stores, cli, write_spec):
    """User code hanging in an exporter while other trials train: the worker is killed at the
    export's deadline and replaced, not held (with its GPU) till the sweep ends."""
    # the 1-epoch trial ends first; its worker then exports it ahead while the other trains
    spec = tiny_spec(sampler={"name": "grid"}, trials=2, workers=2, export_for="best",
                     export=["torch_export"], export_timeout_s=1, test_timeout_s=1,
                     space={"epochs": [1, 30]},
                     train={"model": "tests.datasets:hangs_once_loaded", "lr": 0.03})
    # the 30-epoch trial waits, past its second epoch, till a process loads saved weights
    marks = stores.dir / "marks"
    marks.mkdir()
    done = run_cli("run", str(write_spec(spec)), cwd=stores.dir,
                   env={**USER_CODE, "SWEEP_TEST_MARKS": str(marks)}, timeout=300)
    assert done.returncode == 0, done.stderr
    stopped = [x for x in done.stdout.splitlines() if "was stopped: its " in x]
    # once: the worker that replaces it warms the exporters up (no user code), not on 1 s
    assert len(stopped) == 1, done.stdout
    assert "its export ahead of the end did not answer within 1 s" in stopped[0]
    assert [t.state.name for t in stores.study("tiny").trials] == ["COMPLETE"] * 2
    # the export the sweep logs at the end names the deadline, whichever trial is best
    assert "export" in done.stdout and "did not finish within its deadline of 1 s" in done.stdout


def test_an_export_run_ahead_for_a_trial_that_is_not_the_best_at_the_end_is_dropped(
        stores, write_spec):
    done, runs = _run_ahead(stores, write_spec, 61)
    assert [(runs[n].data.params["lr"], runs[n].data.params["epochs"]) for n in range(3)] == [
        ("1e-05", "1"), ("1e-05", "1"), ("0.03", "4")]
    assert max(runs, key=lambda n: runs[n].data.metrics["val_acc"]) == 2
    ahead = _exported_ahead(stores)
    assert ahead and ahead[0][1] in (0, 1), (ahead, done.stdout)  # the best while 2 trained
    assert "while the last trials trained" not in done.stdout
    assert "trial 2 export: torch_export passed" in done.stdout
    assert [n for n, r in runs.items() if r.data.tags.get("sweep.exported") == "true"] == [2]
    assert not list((stores.dir / ".sweep" / "tiny").rglob("export-ahead-*"))


def test_the_sweep_process_starts_its_workers_before_it_imports_mlflow():
    # run_sweep starts the workers first: importing MLflow (a second) and opening the store
    # happen in a thread while the workers import torch, never on the way to starting them
    import subprocess
    import sys

    code = ("import sys, orchestrator.running.runner; "
            "print(sorted(m for m in sys.modules if m == 'mlflow'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr
