import optuna
import pytest

from orchestrator.answer import compare
from orchestrator.config.spec import validate
from orchestrator.core.errors import SweepError
from orchestrator.core.urls import mask
from orchestrator.stores.storages import default_storage, open_storage
from orchestrator.stores.study import SweepStudy
from tests.conftest import tiny_spec


@pytest.mark.parametrize("direction, reduce, expected", [
    ("minimize", "best", 1.0), ("maximize", "best", 3.0), ("minimize", "last", 2.0)])
def test_trial_value_reduces_the_curve(direction, reduce, expected):
    spec = validate(tiny_spec(objective={"metric": "val_loss", "direction": direction,
                                         "reduce": reduce}))
    study = SweepStudy(spec, optuna.create_study(direction=direction))
    assert study.values([{"val_loss": v} for v in (3.0, 1.0, 2.0)]) == [expected]


def test_repeats_enqueue_copies_with_the_next_seeds(tmp_path):
    spec = validate(tiny_spec(trials=6, repeats=3, seed=10))
    study = SweepStudy.open(spec, str(tmp_path / "j.journal"))
    pending = [study.next_trial() for _ in range(6)]
    assert [p.repeat for p in pending] == [0, 1, 2, 0, 1, 2]
    assert [p.seed for p in pending] == [10, 11, 12, 10, 11, 12]
    assert pending[0].settings == pending[1].settings | {"seed": 10}
    assert pending[0].settings["lr"] != pending[3].settings["lr"]


def test_grid_is_enqueued_once_seed_by_seed(tmp_path):
    spec = validate(tiny_spec(sampler={"name": "grid"}, trials=None, repeats=2,
                              space={"batch_size": [32, 64, 128]}))
    path = str(tmp_path / "j.journal")
    first = SweepStudy.open(spec, path)
    again = SweepStudy.open(spec, path)  # a second `sweep run` on the same study enqueues nothing
    trials = again.trials()
    assert [(t.params.get("batch_size") or t.system_attrs["fixed_params"]["batch_size"],
             t.user_attrs["sweep.repeat"]) for t in trials] == [
        (32, 0), (64, 0), (128, 0), (32, 1), (64, 1), (128, 1)]
    seen = [first.next_trial() for _ in range(6)]
    assert [p.settings["batch_size"] for p in seen] == [32, 64, 128, 32, 64, 128]
    assert first.next_trial() is None


def test_resumed_sampler_does_not_redraw_the_first_trials(tmp_path):
    spec = validate(tiny_spec(trials=4, sampler={"name": "random", "seed": 0}))
    path = str(tmp_path / "j.journal")
    a = SweepStudy.open(spec, path)
    first = [a.next_trial().settings["lr"] for _ in range(2)]
    b = SweepStudy.open(spec, path)
    assert b.next_trial().settings["lr"] not in first


def test_journal_is_the_default_next_to_the_mlflow_db(tmp_path):
    assert default_storage(f"sqlite:///{tmp_path}/mlflow.db") == str(tmp_path / "optuna.journal")


def test_passwords_are_masked():
    assert mask("postgresql://user:secret@127.0.0.1/db") == "postgresql://user:***@127.0.0.1/db"


@pytest.mark.parametrize("url, expected", [
    ("ftp://x/y", "unknown storage scheme 'ftp'"),
    ("/no/such/folder/j.journal", "folder /no/such/folder does not exist"),
])
def test_bad_storage_urls_are_one_line(url, expected):
    with pytest.raises(SweepError, match=expected):
        open_storage(url)


def _journal_with_trials(tmp_path, n=2):
    spec = validate(tiny_spec(trials=n))
    path = tmp_path / "j.journal"
    study = SweepStudy.open(spec, str(path))
    for _ in range(n):
        pending = study.next_trial()
        study.complete(pending, [{"val_acc": 0.5}])
    return spec, path


def test_a_torn_last_journal_line_is_cut_and_kept_aside(tmp_path, capsys):
    spec, path = _journal_with_trials(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code": 5, "worker_id": "torn-write')  # a write cut short
    study = SweepStudy.open(spec, str(path))
    assert [t.state.name for t in study.trials()] == ["COMPLETE", "COMPLETE"]
    repaired = path.read_bytes()
    assert repaired.startswith(whole) and b'torn-write' not in repaired
    (backup,) = tmp_path.glob("j.journal.damaged-*")
    assert backup.read_bytes().endswith(b'torn-write')
    assert "cut a torn last entry" in capsys.readouterr().err
    # and the journal takes new entries again (a third trial: the sweep resumed with trials=3)
    more = SweepStudy.open(validate(tiny_spec(trials=3)), str(path))
    more.complete(more.next_trial(), [{"val_acc": 0.7}])
    assert len(SweepStudy.open(spec, str(path)).trials()) == 3


def test_damage_in_the_middle_of_the_journal_is_refused(tmp_path):
    spec, path = _journal_with_trials(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + [b"garbage\n"] + lines[2:]))
    with pytest.raises(SweepError, match="damaged at byte .* with entries after it"):
        SweepStudy.open(spec, str(path))


def test_a_changed_sweep_is_refused_naming_the_change(tmp_path):
    spec, path = _journal_with_trials(tmp_path)
    changed = validate(tiny_spec(train={"dataset": "digits", "model": "small_cnn", "epochs": 5}))
    with pytest.raises(SweepError, match=r"train\.epochs was 2, now 5.*--new"):
        SweepStudy.open(changed, str(path))
    more = validate(tiny_spec(trials=10, workers=1, retries=3, description="more"))
    assert SweepStudy.open(more, str(path)).name == "tiny"  # what may change, may


def test_new_starts_a_fresh_numbered_study(tmp_path):
    spec, path = _journal_with_trials(tmp_path)
    fresh = SweepStudy.open(spec, str(path), new=True)
    assert fresh.name == "tiny-2" and fresh.trials() == []
    assert SweepStudy.open(spec, str(path), new=True).name == "tiny-3"


def test_only_the_process_that_fails_a_trial_queues_its_retry(tmp_path):
    spec = validate(tiny_spec(trials=2, retries=1))
    path = str(tmp_path / "j.journal")
    owner = SweepStudy.open(spec, path)
    pending = owner.next_trial()
    first, second = SweepStudy.open(spec, path), SweepStudy.open(spec, path)
    orphan = first.trials()[pending.number]
    assert first.fail(orphan, "owner gone", "crash", retry=True) is True
    assert second.fail(orphan, "owner gone", "crash", retry=True) is False
    trials = second.trials()
    retries = [t for t in trials if t.user_attrs.get("sweep.retry_of") == pending.number]
    assert len(retries) == 1 and retries[0].state.name == "WAITING"
    counts = second.counts()
    assert counts["retried"] == 1 and counts["fail"] == 0 and counts["finished"] == 0
    assert second.crashes(pending.number) == 1


def test_a_process_that_read_the_trials_before_another_started_one_starts_no_trial_past_trials(
        tmp_path):
    """Two processes each see one trial left (their last reads predate the other's start):
    the one that asks second gets Wait, not a third trial; a retry queued later still runs."""
    spec = validate(tiny_spec(trials=2, retries=1))
    path = str(tmp_path / "j.journal")
    a, b = SweepStudy.open(spec, path), SweepStudy.open(spec, path)
    assert a.counts()["running"] == b.counts()["running"] == 0  # both read: nothing started
    first = a.next_trial()
    second = b.next_trial()
    assert not isinstance(second, compare.Wait)
    assert isinstance(a.next_trial(), compare.Wait) and isinstance(b.next_trial(), compare.Wait)
    assert len(a.trials()) == 2
    a.fail(first, "crashed", "crash", retry=True)  # its retry replaces it: asked, not refused
    retry = b.next_trial()
    assert retry.trial.user_attrs.get("sweep.retry_of") == first.number
    assert isinstance(b.next_trial(), compare.Wait)
    assert len(b.trials()) == 3


def _ask_until_full(path: str, trials: int, out) -> None:
    study = SweepStudy.open(validate(tiny_spec(trials=trials)), path)
    asked = 0
    while asked < 3 * trials and not isinstance(study.next_trial(), compare.Wait):
        asked += 1
    out.put(asked)


@pytest.mark.parametrize("store", ["journal", "sqlite"])
def test_processes_asking_at_once_start_exactly_trials_trials(tmp_path, store):
    """Three processes ask for trials at the same moment until told to wait: together they
    start exactly ``trials`` trials, numbered without gaps or duplicates."""
    import multiprocessing as mp

    path = str(tmp_path / "j.journal") if store == "journal" else \
        f"sqlite:///{tmp_path}/optuna.db"
    SweepStudy.open(validate(tiny_spec(trials=5)), path)  # created once, as a first run does
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_ask_until_full, args=(path, 5, out)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    asked = [out.get(timeout=5) for _ in procs]
    assert sum(asked) == 5
    numbers = [t.number for t in SweepStudy.open(validate(tiny_spec(trials=5)), path).trials()]
    assert numbers == list(range(5))


def test_pruned_and_failed_for_good_trials_count_toward_trials_and_a_retried_one_does_not(
        tmp_path):
    """``trials: 4`` counts every trial that ended (complete, pruned, failed for good) and every
    one running; a failure whose retry is queued is not counted (its retry stands for it)."""
    spec = validate(tiny_spec(trials=4, retries=1))
    study = SweepStudy.open(spec, str(tmp_path / "j.journal"))
    kept, pruned, lost, crashed = (study.next_trial() for _ in range(4))
    assert isinstance(study.next_trial(), compare.Wait)  # 4 running
    study.complete(kept, [{"val_acc": 0.5, "val_loss": 1.0}])
    study.prune(pruned, [{"val_acc": 0.1, "val_loss": 2.0}])
    study.fail(lost, "diverged", "deterministic", retry=False)
    study.fail(crashed, "worker killed", "crash", retry=True)
    counts = study.counts()
    assert {k: counts[k] for k in ("complete", "pruned", "fail", "retried", "waiting",
                                   "running", "finished")} == \
        {"complete": 1, "pruned": 1, "fail": 1, "retried": 1, "waiting": 1, "running": 0,
         "finished": 3}
    retry = study.next_trial()  # the queued retry runs (3 ended, none running)
    assert retry.trial.user_attrs["sweep.retry_of"] == crashed.number
    assert isinstance(study.next_trial(), compare.Wait)  # 3 ended + the retry running = 4
    study.prune(retry)
    assert study.counts()["finished"] == 4 and isinstance(study.next_trial(), compare.Wait)


@pytest.mark.parametrize("end", ["prune", "fail"])
def test_a_trial_pruned_or_failed_for_good_leaves_room_for_no_extra_trial(tmp_path, end):
    """Two trials allowed, one ended without completing: the next ask starts the second, the
    one after waits (neither a pruned nor a failed trial is run again)."""
    study = SweepStudy.open(validate(tiny_spec(trials=2, retries=0)),
                            str(tmp_path / "j.journal"))
    first = study.next_trial()
    if end == "prune":
        study.prune(first)
    else:
        study.fail(first, "diverged", "deterministic", retry=False)
    assert study.counts()["finished"] == 1
    second = study.next_trial()
    assert second.number == first.number + 1
    assert isinstance(study.next_trial(), compare.Wait)


def test_asking_waits_for_the_stores_lock_and_counts_what_its_holder_started(tmp_path):
    """One trial left: a process asking while another holds the store's lock waits for it,
    then counts on a read made under the lock: the trial the holder started meanwhile counts,
    and the asker is told to wait instead of starting a third."""
    import threading

    from orchestrator.stores.locks import store_lock

    path = str(tmp_path / "j.journal")
    spec = validate(tiny_spec(trials=2))
    asker, holder = SweepStudy.open(spec, path), SweepStudy.open(spec, path)
    asker.next_trial()
    got = []
    with store_lock(path):
        thread = threading.Thread(target=lambda: got.append(asker.next_trial()), daemon=True)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and not got, "asked without waiting for the store's lock"
        holder.study.ask()  # the holder's last trial, asked under the lock it holds
    thread.join(30)
    assert len(got) == 1 and isinstance(got[0], compare.Wait)
    assert len(holder.trials()) == 2


def test_the_count_under_the_lock_is_a_fresh_read_not_an_earlier_cached_one(tmp_path):
    """ask_within_trials reads the storage again once it holds the lock: a read cached before
    (here one that would serve for an hour) misses the trial another process started since."""
    from orchestrator.core import compat

    path = str(tmp_path / "j.journal")
    spec = validate(tiny_spec(trials=2))
    asker, other = SweepStudy.open(spec, path), SweepStudy.open(spec, path)
    asker.next_trial()
    compat.storage_of(asker.study)._read_s = 3600.0
    asker.fresh()
    assert len(asker.trials()) == 1  # the read cached from now on
    other.next_trial()
    assert len(asker.trials()) == 1  # the cache does not see it ...
    assert isinstance(asker.ask_within_trials(), compare.Wait)  # ... the count under the lock does
    assert len(other.trials()) == 2
