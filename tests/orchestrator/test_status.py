"""`sweep status`: the sweeps of a study storage and one sweep's trials, read from Optuna alone."""
import io
import json
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from rich.console import Console

from orchestrator.core import keys
from orchestrator.report import status
from tests.conftest import AS_STARTED, run_cli, tiny_spec

pytestmark = pytest.mark.slow  # end to end: sweep status on real sweeps


def rows_of(text: str, header: str) -> list[list[str]]:
    """The rows of a plain (non-terminal) table: the lines after the header and its dashes."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        body.append(line)
    return body


def test_status_lists_the_finished_sweep_with_its_counts_and_best(quickstart):
    stores, _ = quickstart
    out = run_cli("status", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    study = stores.study("quickstart")
    best = max(t.value for t in study.trials if t.state == TrialState.COMPLETE)
    lines = out.stdout.splitlines()
    assert lines[0] == f"sweeps in {stores.journal}"
    assert lines[1].split() == ["sweep", "trials", "complete", "running", "pruned", "failed",
                                "best", "started", "last", "activity"]
    (row,) = rows_of(out.stdout, "sweep ")
    counts = {s: sum(t.state == s for t in study.trials) for s in TrialState}
    assert row.split()[:6] == ["quickstart", str(len(study.trials)),
                               str(counts[TrialState.COMPLETE]), "0",
                               str(counts[TrialState.PRUNED]), str(counts[TrialState.FAIL])]
    assert f"val_acc {best:.4f} (max)" in row
    assert row.endswith(" ago") and row.count(" ago") == 2


def test_status_name_shows_every_trial_with_its_mlflow_run(quickstart):
    stores, _ = quickstart
    out = run_cli("status", "quickstart", cwd=stores.dir)
    assert out.returncode == 0, out.stderr
    study = stores.study("quickstart")
    best = max((t for t in study.trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert out.stdout.splitlines()[0].startswith(f"sweep 'quickstart': {len(study.trials)} "
                                                 f"trials: ")
    assert f"best val_acc {best.value:.4f} (maximize) at trial {best.number}" in out.stdout
    rows = rows_of(out.stdout, "#  state")
    assert len(rows) == len(study.trials) >= 4
    run_ids = {r.info.run_id for r in stores.runs("quickstart", role="trial")}
    for t, row in zip(study.trials, rows):
        cells = row.split()
        assert cells[:2] == [str(t.number), t.state.name]
        assert t.user_attrs[keys.RUN_ID] in cells and t.user_attrs[keys.RUN_ID] in run_ids
        assert f"batch_size={t.params['batch_size']}" in row
        if t.state == TrialState.COMPLETE:
            assert cells[2] == f"{t.value:.4f}"
        assert (row.endswith("best")) == (t.number == best.number)


def test_status_on_a_terminal_draws_a_rich_table(quickstart):
    stores, _ = quickstart
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    assert status.show(console, "quickstart", str(stores.journal)) == 0
    text = buffer.getvalue()
    assert "─" in text  # rich's rule under the header, which the plain table draws with dashes
    for t in stores.study("quickstart").trials:
        assert t.user_attrs[keys.RUN_ID] in text


def test_status_of_an_unknown_sweep_is_one_line_and_exit_2(quickstart):
    stores, _ = quickstart
    out = run_cli("status", "quickstrat", cwd=stores.dir)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr == (f"sweep: no sweep named 'quickstrat' in the study storage "
                          f"{stores.journal} (did you mean `quickstart`?); `sweep status` lists "
                          f"the sweeps there, or pass --storage / --tracking-uri\n")


def test_status_of_an_empty_store_says_so_and_creates_nothing(tmp_path):
    out = run_cli("status", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"no sweeps in the study storage {tmp_path}/optuna.journal; ")
    db = tmp_path / "optuna.db"
    out = run_cli("status", "--storage", f"sqlite:///{db}", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("no sweeps in the study storage sqlite")
    out = run_cli("status", "quickstart", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # a status is read-only: no journal, no database


def test_status_shows_running_failed_retried_and_queued_trials(tmp_path):
    """A study as a sweep in progress leaves it (written through Optuna itself): a running
    trial, a complete one, a crash retried by a queued trial."""
    journal = tmp_path / "optuna.journal"
    study = optuna.create_study(study_name="live", direction="minimize",
                                storage=JournalStorage(JournalFileBackend(str(journal))))
    study.set_user_attr(keys.IDENTITY, json.dumps({"objective": {"metric": "val_loss",
                                                            "direction": "minimize"}}))
    done = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
    done.set_user_attr(keys.RUN_ID, "a" * 32)
    done.report(0.9, 1)
    done.report(0.5, 2)
    study.tell(done, 0.5)
    crashed = study.ask()
    crashed.set_user_attr(keys.FAIL_REASON, "worker died (signal 9)\nlast lines: ...")
    crashed.set_user_attr(keys.WILL_RETRY, True)
    study.tell(crashed, state=TrialState.FAIL)
    study.enqueue_trial({}, user_attrs={keys.RETRY_OF: crashed.number})
    study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})  # runs

    out = run_cli("status", "--storage", str(journal), cwd=tmp_path)
    (row,) = rows_of(out.stdout, "sweep ")
    # the crash is retried (by trial 2, now running): not a failure for good
    assert row.split()[:6] == ["live", "3", "1", "1", "0", "0"]
    assert "val_loss 0.5000 (min)" in row

    out = run_cli("status", "live", "--storage", str(journal), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == ("sweep 'live': 3 trials: 1 complete, 0 pruned, "
                                          "0 failed, 1 running, 1 retried; best val_loss "
                                          "0.5000 (minimize) at trial 0")
    rows = rows_of(out.stdout, "#  state")
    assert rows[0].split()[:4] == ["0", "COMPLETE", "0.5000", "2"]
    assert rows[0].rstrip().endswith(f"{'a' * 32}  best")
    assert rows[1].split()[:2] == ["1", "FAIL"]
    assert rows[1].endswith("retried; worker died (signal 9)")
    assert rows[2].split()[:2] == ["2", "RUNNING"]
    assert " so far" in rows[2] and rows[2].endswith("retry of 1")


def test_the_end_of_sweep_run_says_how_to_browse_the_trials(quickstart):
    stores, out = quickstart
    exp = stores.client().get_experiment_by_name("quickstart")
    lines = out.stdout.splitlines()
    assert lines[-2] == f"the trials: {AS_STARTED} status quickstart"
    assert lines[-1] == (f"browse it: {AS_STARTED} ui quickstart   (then http://127.0.0.1:5000/#/"
                         f"experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
                         f"&viewStateShareKey=sweep, the runs table of the trials)")


def journal_with(tmp_path, line: str) -> tuple:
    """A real journal of one study (written by Optuna) with ``line`` appended to it."""
    journal = tmp_path / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    optuna.create_study(study_name="first", storage=storage)
    with open(journal, "a") as f:
        f.write(line + "\n")
    return journal, storage


@pytest.mark.parametrize("line", ['[1, 2]', '"an entry"', 'null', '{"sweep": 1}',
                                  '{"op_code": 5}'])
def test_a_journal_line_that_is_json_but_no_entry_is_one_line_and_exit_2(tmp_path, line):
    journal, _ = journal_with(tmp_path, line)
    with open(journal, "a") as f:  # an entry after it: the damage is not a torn tail
        f.write('{"op_code": 0, "worker_id": "w", "study_name": "second", "directions": [1]}\n')
    before = journal.read_bytes()
    out = run_cli("status", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith(f"sweep: {journal}: the Optuna journal ")
    assert said.endswith("restore it from a backup or start a fresh sweep with --storage NEW_FILE")
    assert journal.read_bytes() == before  # nothing cut, nothing written
    assert not list(tmp_path.glob("optuna.journal.*"))  # no backup of a file left whole


@pytest.mark.parametrize("tail", [b"[1, 2]\n", b'{"op_code": 5, "worker_id": "torn-wr'])
def test_status_refuses_a_journal_whose_last_write_was_cut_and_sweep_runs_opening_repairs_it(
        tmp_path, tail):
    """A read-only command never rewrites a store: it names the file and `sweep run`; the
    storage as `sweep run` opens it (repair=True) cuts the tail, keeping the damaged file."""
    journal, _ = journal_with(tmp_path, "")
    whole = journal.read_bytes().removesuffix(b"\n")  # journal_with appended an empty line
    journal.write_bytes(whole + tail)
    out = run_cli("status", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith(f"sweep: {journal}: the last write to the Optuna journal was cut "
                           f"short (at byte {len(whole)}: ")
    assert "`sweep run` of the sweep repairs the journal" in said
    assert journal.read_bytes() == whole + tail  # nothing cut, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["optuna.journal"]

    from orchestrator.stores.storages import open_storage

    assert optuna.get_all_study_names(open_storage(str(journal), repair=True)) == ["first"]
    assert journal.read_bytes() == whole
    (backup,) = tmp_path.glob("optuna.journal.damaged-*")
    assert backup.read_bytes() == whole + tail
    out = run_cli("status", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert rows_of(out.stdout, "sweep ")[0].split()[:2] == ["first", "0"]


@pytest.mark.parametrize("text", [b"hello\n", b"hello", b"hello\nworld\n", b'{"a": 1}',
                                  b'{"a": 1}\n', b"\n\n"])
def test_a_file_that_is_no_journal_is_refused_by_status_untouched(tmp_path, text):
    journal = tmp_path / "j.journal"
    journal.write_bytes(text)
    out = run_cli("status", "--storage", str(journal), cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    (said,) = out.stderr.splitlines()
    assert said == (f"sweep: {journal}: not an Optuna journal (no line of it is a journal "
                    f"entry); pass --storage the journal file a sweep wrote, or a new file's path")
    assert journal.read_bytes() == text
    assert [p.name for p in tmp_path.iterdir()] == ["j.journal"]


def test_sweep_run_refuses_a_file_that_is_no_journal_untouched(stores, write_spec):
    journal = stores.dir / "notes.txt"
    journal.write_text("my notes\n")
    # one worker: the refusal comes as the store opens, before any trial (a second worker
    # would only start torch to be stopped)
    out = run_cli("run", str(write_spec(tiny_spec(workers=1))), "--storage", str(journal),
                  cwd=stores.dir)
    assert out.returncode == 2, out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith(f"sweep: {journal}: not an Optuna journal ")
    assert journal.read_text() == "my notes\n"
    assert not list(stores.dir.glob("notes.txt.*"))


def test_sweep_run_on_a_journal_with_a_line_that_is_no_entry_is_one_line_and_exit_2(
        stores, write_spec):
    journal_with(stores.dir, '{"sweep": 1}')
    with open(stores.journal, "a") as f:
        f.write('{"op_code": 0, "worker_id": "w", "study_name": "second", "directions": [1]}\n')
    before = stores.journal.read_bytes()
    at = before.index(b'{"sweep"')
    # one worker: the refusal comes as the store opens, before any trial (a second worker
    # would only start torch to be stopped)
    out = run_cli("run", str(write_spec(tiny_spec(workers=1))), cwd=stores.dir)
    assert out.returncode == 2, out.stderr
    (said,) = out.stderr.splitlines()
    assert said == (f"sweep: {stores.journal}: the Optuna journal is damaged at byte {at} "
                    f"with entries after it; restore it from a backup or start a fresh sweep "
                    f"with --storage NEW_FILE")
    assert stores.journal.read_bytes() == before


def test_an_unexpected_error_is_one_line_naming_the_file_with_its_traceback(tmp_path):
    """A study whose identity attribute is not JSON (written by another tool) makes `sweep
    status` fail where nobody expected it: the last guard says so in one line, exit 3."""
    journal = tmp_path / "optuna.journal"
    study = optuna.create_study(study_name="odd",
                                storage=JournalStorage(JournalFileBackend(str(journal))))
    study.set_user_attr(keys.IDENTITY, "{not json")
    trial = study.ask()
    study.tell(trial, 0.5)  # a best value: its metric's name is read from the identity
    out = run_cli("status", cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    (said,) = out.stderr.splitlines()
    assert said.startswith("sweep: unexpected error JSONDecodeError: ")
    assert "this is a bug in sweep, the traceback is in " in said
    log = Path(said.split("the traceback is in ")[1].split()[0])
    try:
        text = log.read_text()
        assert text.startswith("Traceback (most recent call last):")
        assert "json.decoder.JSONDecodeError" in text and "orchestrator/report/status.py" in text
    finally:
        log.unlink()
