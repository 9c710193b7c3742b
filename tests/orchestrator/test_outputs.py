"""Output folders: a command writes only names that are its own (the folder's mark names
them) or into a folder it creates; a user's file of a name it writes is refused, untouched,
and nothing is half-written (orchestrator.core.outputs)."""
import json

import pytest

from orchestrator.core import outputs
from orchestrator.core.errors import SweepError


def _write(staging, **files):
    for name, text in files.items():
        (staging / name).write_text(text)


def test_a_folder_it_creates_gets_the_files_and_a_mark_naming_them(tmp_path):
    out = tmp_path / "new"
    with outputs.writing(out, "sweep report") as staging:
        _write(staging, **{"report.md": "r", "trials.csv": "t"})
        (staging / "plots").mkdir()
        (staging / "plots" / "a.png").write_bytes(b"png")
    assert sorted(p.name for p in out.iterdir()) == [".sweep-out", "plots", "report.md",
                                                      "trials.csv"]
    assert outputs.own_names(out) == {"plots": "sweep report", "report.md": "sweep report",
                                      "trials.csv": "sweep report"}
    assert (out / "plots" / "a.png").read_bytes() == b"png"


def test_an_empty_existing_folder_is_written_into(tmp_path):
    with outputs.writing(tmp_path, "sweep export") as staging:
        _write(staging, **{"export.json": "{}"})
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sweep-out", "export.json"]


@pytest.mark.parametrize("name", ["report.md", "plots"])
def test_a_users_file_of_a_name_it_writes_is_refused_and_left_byte_identical(tmp_path, name):
    mine = tmp_path / name
    if name == "plots":  # a folder of the user's of the same name
        mine.mkdir()
        (mine / "mine.png").write_bytes(b"\x89mine")
    else:
        mine.write_bytes(b"# my own notes\n\xc3\xa9")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SweepError) as e:
        with outputs.writing(tmp_path, "sweep report", "--out") as staging:
            _write(staging, **{"report.md": "new", "trials.csv": "new"})
            (staging / "plots").mkdir()
    assert str(e.value) == (f"--out {tmp_path}: {mine} is not a file sweep wrote (the "
                            f"folder's .sweep-out does not name it), so it is not replaced; "
                            f"move it away, or give another folder")
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # nothing half-written: no trials.csv, no mark, no staging folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_names_known_before_any_work_are_refused_before_the_block_runs(tmp_path):
    (tmp_path / "report.md").write_text("mine")
    ran = []
    with pytest.raises(SweepError, match="report.md is not a file sweep wrote"):
        with outputs.writing(tmp_path, "sweep report", names=["report.md"]):
            ran.append(True)
    assert ran == []


def test_an_unrelated_file_stays_byte_identical_beside_the_output(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"mine\x00")
    with outputs.writing(tmp_path, "sweep report") as staging:
        _write(staging, **{"report.md": "r"})
    assert (tmp_path / "notes.txt").read_bytes() == b"mine\x00"
    assert (tmp_path / "report.md").read_text() == "r"
    assert "notes.txt" not in outputs.own_names(tmp_path)


def test_a_rerun_replaces_its_own_files_and_drops_those_it_no_longer_writes(tmp_path):
    with outputs.writing(tmp_path, "sweep report") as staging:
        _write(staging, **{"report.md": "first", "comparison.csv": "first"})
    with outputs.writing(tmp_path, "sweep export") as staging:  # another command's files
        _write(staging, **{"export.json": "e"})
    (tmp_path / "notes.txt").write_text("mine")
    with outputs.writing(tmp_path, "sweep report") as staging:
        _write(staging, **{"report.md": "second"})
    assert (tmp_path / "report.md").read_text() == "second"
    assert not (tmp_path / "comparison.csv").exists()  # the earlier report's, no longer made
    assert (tmp_path / "export.json").read_text() == "e"  # sweep export's stays
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert outputs.own_names(tmp_path) == {"report.md": "sweep report",
                                           "export.json": "sweep export"}


def test_a_failing_block_leaves_no_folder_it_created_and_no_partial_files(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with outputs.writing(out, "sweep report") as staging:
            _write(staging, **{"report.md": "half"})
            raise RuntimeError("the report failed")
    assert not out.exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(RuntimeError):
        with outputs.writing(tmp_path / "kept", "sweep report") as staging:
            _write(staging, **{"report.md": "half"})
            raise RuntimeError("the report failed")
    assert list((tmp_path / "kept").iterdir()) == []


def test_a_folder_marked_by_an_earlier_doctor_is_its_own(tmp_path):
    (tmp_path / ".sweep-doctor").write_text(json.dumps(
        {"written_by": "sweep doctor", "names": ["preflight.md", "0-digits-mlp", "../x"]}))
    (tmp_path / "preflight.md").write_text("old")
    (tmp_path / "0-digits-mlp").mkdir()
    assert outputs.own_names(tmp_path) == {"preflight.md": "sweep doctor",
                                           "0-digits-mlp": "sweep doctor"}  # not ../x
    outputs.claim(tmp_path, ["preflight.md", "0-digits-small_cnn"], "sweep doctor")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".sweep-out"]  # old mark merged
    assert outputs.own_names(tmp_path) == {"preflight.md": "sweep doctor",
                                           "0-digits-small_cnn": "sweep doctor"}


def test_a_mark_naming_paths_outside_the_folder_is_not_followed(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".sweep-out").write_text(json.dumps(
        {"written_by": {"../precious.txt": "sweep report", "/etc/passwd": "sweep report"}}))
    outputs.claim(out, ["report.md"], "sweep report")
    assert outside.read_text() == "mine"


def test_a_single_output_file_is_replaced_only_when_its_content_says_sweep_wrote_it(tmp_path):
    own = lambda text: json.loads(text).get("description") == "sweep's"  # noqa: E731
    path = tmp_path / "s.json"
    outputs.check_own_file(path, own)  # none yet
    path.write_text(json.dumps({"description": "sweep's"}))
    outputs.check_own_file(path, own)
    for text in ("my notes", json.dumps({"description": "mine"}), "[1]"):
        path.write_text(text)
        with pytest.raises(SweepError, match=f"--out {path}: the file exists and is not one "
                                             f"sweep wrote"):
            outputs.check_own_file(path, own)
        assert path.read_text() == text


# ---------------------------------------------------------------- each command, for real

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-trial sweep of one epoch a trial, its stores in a folder of their own. The
    perceptron: what these tests check is the same for any model, and its training and export
    cost a fraction of the CNN's."""
    import yaml

    from tests.conftest import Stores, run_cli, tiny_spec

    d = tmp_path_factory.mktemp("outputs")
    spec = d / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(trials=2, workers=1, train={
        "dataset": "digits", "model": "mlp", "epochs": 1})))
    done = run_cli("run", str(spec), cwd=d)
    assert done.returncode == 0, done.stdout + done.stderr
    return Stores(d)


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _refused(stores, *args) -> str:
    from tests.conftest import run_cli

    before = _files(stores.dir)
    done = run_cli(*args, cwd=stores.dir)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert _files(stores.dir) == before  # the user's files byte-identical, nothing added
    return line


def _user_folder(stores, name: str, **files) -> None:
    folder = stores.dir / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).write_bytes(text.encode() + b"\n\xc3\xa9 mine")


@pytest.mark.slow  # a real sweep, the CLI as a process
@pytest.mark.parametrize("how", ["--out", "default folder"])
def test_sweep_report_writes_beside_a_users_files_replaces_its_own_and_refuses_theirs(
        finished, how):
    from tests.conftest import run_cli

    out = "mine" if how == "--out" else "report-tiny"
    args = ["report", "tiny", *(["--out", out] if how == "--out" else [])]
    _user_folder(finished, out, **{"notes.txt": "unrelated"})
    for _ in range(2):  # the second: a rerun replaces its own files
        done = run_cli(*args, cwd=finished.dir)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (finished.dir / out / "report.md").is_file()
    assert (finished.dir / out / "notes.txt").read_bytes() == b"unrelated\n\xc3\xa9 mine"
    assert not any(p.name.startswith(".sweep-writing-") for p in (finished.dir / out).iterdir())
    import shutil

    shutil.rmtree(finished.dir / out)
    _user_folder(finished, out, **{"report.md": "my report", "trials.csv": "my,trials"})
    line = _refused(finished, *args)
    assert line.startswith(f"sweep: {'--out' if how == '--out' else 'report folder'} {out}: "
                           f"{out}/report.md is not a file sweep wrote"), line
    shutil.rmtree(finished.dir / out)


@pytest.mark.slow  # a real sweep, the CLI as a process, real exports
def test_an_export_records_its_split_and_the_onnx_model_scores_the_runs_val_acc_on_it(finished):
    """The exported ONNX model, run by onnxruntime on the validation items export wrote down
    (validation.json), gets exactly the val_acc the run logged; export.json names no
    temporary folder and parity.csv is in --out as on the run. A rerun into the same folder
    replaces its own files; a user's file of an export's name is refused."""
    import numpy as np
    import onnxruntime as ort
    from sklearn.datasets import load_digits

    import trainers
    from tests.conftest import run_cli

    client = finished.client()
    run = finished.runs("tiny", "trial")[0]
    _user_folder(finished, "exported", **{"notes.txt": "unrelated"})
    for _ in range(2):
        done = run_cli("export", run.info.run_id, "--formats", "onnx", "--out", "exported",
                       cwd=finished.dir)
        assert done.returncode == 0, done.stdout + done.stderr
    out = finished.dir / "exported"
    assert (out / "notes.txt").read_bytes() == b"unrelated\n\xc3\xa9 mine"
    report = json.loads((out / "export.json").read_text())
    assert report["files"] == {"onnx": "model.onnx"} and report["formats"]["onnx"]["file"] == \
        "model.onnx"
    text = (out / "export.json").read_text()
    assert "sweep-export-" not in text and str(finished.dir) not in text and "/tmp" not in text
    logged = client.download_artifacts(run.info.run_id, "export/parity.csv", str(finished.dir))
    assert (out / "parity.csv").read_text() == open(logged).read()
    assert "onnx" in (out / "parity.csv").read_text()

    split = json.loads((out / "validation.json").read_text())
    import yaml

    settings = trainers.TrainSettings.from_dict(yaml.safe_load(open(client.download_artifacts(
        run.info.run_id, "settings.yaml", str(finished.dir)))))
    assert split["indices"] == list(trainers.validation_split(settings).indices)
    assert split["items"] == len(split["indices"]) == 360
    digits = load_digits()
    pixels = digits.images.astype(np.uint8)[split["indices"]][:, None]  # raw 0..16
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"pixels": pixels})[0]
    correct = int((logits.argmax(1) == digits.target[split["indices"]]).sum())
    val_acc = client.get_metric_history(run.info.run_id, "val_acc")[-1].value
    assert correct == round(val_acc * 360) and abs(correct / 360 - val_acc) < 1e-9, \
        (correct, val_acc)

    (finished.dir / "theirs").mkdir()
    (finished.dir / "theirs" / "parity.csv").write_text("my figures")
    line = _refused(finished, "export", run.info.run_id, "--formats", "onnx", "--out", "theirs")
    assert line.startswith("sweep: --out theirs: theirs/parity.csv is not a file sweep wrote")


@pytest.mark.slow  # the CLI as a process
def test_sweep_schema_out_replaces_its_own_file_and_refuses_a_users(tmp_path):
    from tests.conftest import run_cli

    for _ in range(2):  # a new file, then its own again
        done = run_cli("schema", "--out", "s.json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "s.json").read_text())["type"] == "object"
    (tmp_path / "mine.json").write_text('{"my": "schema"}')
    done = run_cli("schema", "--out", "mine.json", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        "sweep: --out mine.json: the file exists and is not one sweep wrote, so it is not "
        "replaced; move it away, or give another file name"), done.stderr
    assert (tmp_path / "mine.json").read_text() == '{"my": "schema"}'


@pytest.mark.slow  # a real preflight, the CLI as a process
def test_sweep_doctor_writes_into_a_folder_holding_a_users_unrelated_file(tmp_path):
    import yaml

    from tests.conftest import run_cli, tiny_spec

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(preflight={"overfit_steps": 20}, train={
        "dataset": "digits", "model": "small_cnn", "epochs": 1})))
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "notes.txt").write_bytes(b"mine\xc3\xa9")
    done = run_cli("doctor", str(spec), "--out", "evidence", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "evidence" / "notes.txt").read_bytes() == b"mine\xc3\xa9"
    assert (tmp_path / "evidence" / "preflight.md").is_file()
    assert "notes.txt" not in outputs.own_names(tmp_path / "evidence")
