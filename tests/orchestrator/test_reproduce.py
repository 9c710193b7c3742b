"""`sweep reproduce` trains a trial again from its run alone and compares the curves."""
from pathlib import Path
from urllib.parse import urlparse

import yaml

from tests.conftest import run_cli, tiny_spec


def test_a_trial_reproduces_bit_for_bit_and_an_edited_record_does_not(stores, cli,
                                                                       write_spec):
    spec = write_spec(tiny_spec(name="again", trials=1, workers=1, train={"epochs": 2}))
    assert cli(spec).returncode == 0
    (run,) = stores.runs("again", "trial")
    assert run.data.tags["sweep.torch_threads"] and run.data.tags["sweep.device_name"]
    client = stores.client()
    packages = client.download_artifacts(run.info.run_id, "environment/packages.txt",
                                         str(stores.dir))
    assert any(line.startswith("torch==") for line in open(packages))

    ok = run_cli("reproduce", run.info.run_id, "--tracking-uri", stores.tracking_uri,
                 cwd=stores.dir)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "every curve matches bit for bit" in ok.stdout
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


def test_reproduce_refuses_a_run_that_is_not_a_trial(stores, cli, write_spec):
    assert cli(write_spec(tiny_spec(name="p", trials=1, workers=1,
                                    train={"epochs": 1}))).returncode == 0
    parent = stores.runs("p", "parent")[0]
    out = run_cli("reproduce", parent.info.run_id, "--tracking-uri", stores.tracking_uri,
                  cwd=stores.dir)
    assert out.returncode == 2 and "is not a trial run" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
