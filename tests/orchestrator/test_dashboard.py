"""Optuna Dashboard on a sweep's study storage: the storage opened exactly the way
``optuna-dashboard STORAGE`` opens it (optuna_dashboard's ``get_storage``: a path that is a file
is a journal, anything else an RDB URL read without creating tables) holds the sweep's study."""
import os

import optuna
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from tests.conftest import run_cli, tiny_spec


def assert_holds_the_sweep(storage, name: str, trials: int, epochs: int) -> None:
    assert name in optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    assert len(study.trials) == trials
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    for t in study.trials:  # what the dashboard plots: values, curves, params
        assert t.state in (TrialState.COMPLETE, TrialState.PRUNED)
        assert t.params and t.user_attrs["sweep.mlflow_run_id"]
        if t.state == TrialState.COMPLETE:
            assert 0 <= t.value <= 1 and sorted(t.intermediate_values) == list(range(1, epochs + 1))


def test_dashboard_opens_the_default_journal_file(quickstart):
    stores, _ = quickstart
    path = str(stores.journal)
    assert os.path.isfile(path)  # how optuna-dashboard tells a journal file from a URL
    assert_holds_the_sweep(JournalStorage(JournalFileBackend(path)), "quickstart", trials=8,
                           epochs=6)


def test_dashboard_opens_an_rdb_storage_url(stores, cli, write_spec):
    url = f"sqlite:///{stores.dir / 'optuna.db'}"
    out = cli(write_spec(tiny_spec()), "--storage", url)
    assert out.returncode == 0, out.stderr
    # optuna-dashboard's RDB storage: no schema check, no table creation
    dashboard = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    assert_holds_the_sweep(dashboard, "tiny", trials=2, epochs=2)
    assert_holds_the_sweep(optuna.storages.get_storage(url), "tiny", trials=2, epochs=2)
    listed = run_cli("status", "--storage", url, cwd=stores.dir)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[3].split()[:3] == ["tiny", "2", "2"]
