"""`sweep reproduce` trains a trial again from its run alone and compares the curves."""
import math
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tests.conftest import Stores, run_cli, tiny_spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept(tmp_path_factory, mlflow_template) -> Stores:
    """One finished 1-trial sweep named ``again`` for the tests of this module: 2 epochs of the
    perceptron (a reproduction trains them again; the CNN would cost several times the CPU)."""
    stores = Stores(tmp_path_factory.mktemp("reproduce"))
    shutil.copyfile(mlflow_template, stores.dir / "mlflow.db")
    spec = stores.dir / "s.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(name="again", trials=1, workers=1,
                                             train={"model": "mlp", "epochs": 2})))
    done = run_cli("run", str(spec), cwd=stores.dir)
    assert done.returncode == 0, done.stderr
    return stores


def test_a_trial_reproduces_bit_for_bit_and_an_edited_record_does_not(swept):
    stores = swept
    (run,) = stores.runs("again", "trial")
    assert run.data.tags["sweep.torch_threads"] and run.data.tags["sweep.device_name"]
    client = stores.client()
    packages = client.download_artifacts(run.info.run_id, "environment/packages.txt",
                                         str(stores.dir))
    assert any(line.startswith("torch==") for line in open(packages))

    ok = run_cli("reproduce", run.info.run_id, "--tracking-uri", stores.tracking_uri,
                 cwd=stores.dir)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ("reproduced: its 6 curves (train_loss, train_acc, val_loss, val_acc, grad_norm, "
            "clipped_fraction) match bit for bit") in " ".join(ok.stdout.split())
    copies = stores.runs("again")
    reproduction = [r for r in copies if r.data.tags.get("sweep.role") == "reproduction"]
    assert [r.data.tags["sweep.reproduces"] for r in reproduction] == [run.info.run_id]

    # edit the tracked settings artifact: the reproduction must fail and say why
    folder = Path(urlparse(run.info.artifact_uri).path)
    settings = yaml.safe_load((folder / "settings.yaml").read_text())
    settings["lr"] = settings["lr"] * 2
    (folder / "settings.yaml").write_text(yaml.safe_dump(settings))
    bad = run_cli("reproduce", run.info.run_id, "--tracking-uri", stores.tracking_uri,
                  cwd=stores.dir)
    assert bad.returncode == 1
    assert "NOT reproduced" in bad.stdout
    assert "settings.yaml differs from the run's logged params: lr" in bad.stdout


def test_reproduce_refuses_a_run_that_is_not_a_trial(swept):
    parent = swept.runs("again", "parent")[0]
    out = run_cli("reproduce", parent.info.run_id, "--tracking-uri", swept.tracking_uri,
                  cwd=swept.dir)
    assert out.returncode == 2 and "is not a trial run" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_curves_compare_bit_for_bit_without_a_tolerance_and_relatively_with_one():
    from orchestrator.commands.reproduce import COMPARED, compare

    original = {k: {} for k in COMPARED}
    original["val_loss"] = {1: 1.0, 2: 0.5}
    same, rows = compare(original, [{"val_loss": 1.0}, {"val_loss": 0.5}], tol=0.0)
    assert same and rows == [("val_loss", 1, 1.0, 1.0, 0.0), ("val_loss", 2, 0.5, 0.5, 0.0)]
    assert not compare(original, [{"val_loss": 1.0}, {"val_loss": 0.5000001}], tol=0.0)[0]
    assert compare(original, [{"val_loss": 1.0}, {"val_loss": 0.5000001}], tol=1e-3)[0]
    # a reproduction that stopped early lacks the later epochs: NaN, never equal
    same, rows = compare(original, [{"val_loss": 1.0}], tol=1e-3)
    assert not same and math.isnan(rows[1][3])


def test_a_reproduction_whose_training_raises_leaves_no_run_running(swept):
    (run,) = swept.runs("again", "trial")
    path = Path(urlparse(run.info.artifact_uri).path) / "settings.yaml"
    recorded = path.read_text()
    settings = yaml.safe_load(recorded)
    settings["model"] = "tests.corpus:raises_in_backward"  # the user's code raises in training
    path.write_text(yaml.safe_dump(settings))
    try:
        out = run_cli("reproduce", run.info.run_id, "--tracking-uri", swept.tracking_uri,
                      cwd=swept.dir)
    finally:
        path.write_text(recorded)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    mine = [r for r in swept.runs("again") if r.data.tags.get("sweep.role") == "reproduction"
            and r.info.status != "FINISHED"]
    assert [r.info.status for r in mine] == ["FAILED"]
