"""What the ``sweep run`` processes of one study know of each other (orchestrator.stores.machines):
whose running trials are orphans, and which process ends the sweep."""
import os
import socket

from optuna.trial import TrialState

from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.stores.machines import Owner, process_start
from orchestrator.stores.study import SweepStudy
from tests.conftest import tiny_spec

DEAD = {"host": socket.gethostname(), "pid": os.getpid(), "started": -2}  # not this start
PARENT = Owner(socket.gethostname(), os.getppid(), process_start(os.getppid()))  # alive
ELSEWHERE = {"host": "another-machine", "pid": 1, "started": 1}  # not ours to judge


def _study(tmp_path, trials=4) -> SweepStudy:
    return SweepStudy.open(validate(tiny_spec(trials=trials)), str(tmp_path / "j.journal"))


def claim_end(study: SweepStudy, ran_trials: bool):
    """This process's claim of the end, at the trials the study has finished now."""
    return study.machines.claim_end(study.counts()["finished"], ran_trials)


def test_a_process_is_alive_only_with_its_pid_and_start():
    assert Owner.me().is_alive() and PARENT.is_alive()
    assert not Owner(**DEAD).is_alive()
    assert Owner(**ELSEWHERE).is_alive()
    assert process_start(2**22 + 7) == -1  # beyond pid_max: no such process


def test_orphans_are_running_trials_of_a_dead_owner_on_this_host_or_unowned_past_the_grace(
        tmp_path):
    study = _study(tmp_path)
    mine, dead, far = (study.next_trial() for _ in range(3))
    dead.set_attr(keys.OWNER, DEAD)
    far.set_attr(keys.OWNER, ELSEWHERE)
    unowned = study.study.ask()  # asked by a process not yet recorded as its owner
    assert [t.number for t in study.orphans()] == [dead.number]
    study.complete(mine, [{"val_acc": 0.5}])
    assert unowned.number not in [t.number for t in study.orphans()]  # within the grace


def test_the_end_is_claimed_by_one_process_and_again_when_its_claimer_died(tmp_path):
    study = _study(tmp_path, trials=1)
    study.complete(study.next_trial(), [{"val_acc": 0.5}])
    finished = study.counts()["finished"]

    def held_by(owner: dict, done: bool = False, at: int = finished) -> None:
        study.study.set_user_attr(keys.END_CLAIM, {"owner": owner, "finished": at,
                                                   "done": done})

    held_by(PARENT.as_dict())  # another live process claimed it at the same trial count
    assert claim_end(study, ran_trials=True)["owner"] == PARENT.as_dict()
    held_by(PARENT.as_dict(), at=finished - 1)  # claimed before the last trial ended
    assert claim_end(study, ran_trials=True) is None
    held_by(DEAD)  # its claimer died before it was done: this process takes it
    assert claim_end(study, ran_trials=True) is None
    assert study.study.user_attrs[keys.END_CLAIM]["owner"] == study.machines.owner.as_dict()
    study.machines.end_done()
    assert study.study.user_attrs[keys.END_CLAIM]["done"] is True
    held_by(PARENT.as_dict(), done=True)  # done by another: a rerun that ran no trial redoes it
    assert claim_end(study, ran_trials=True) is not None
    assert claim_end(study, ran_trials=False) is None


def test_without_a_store_lock_the_claim_read_back_after_it_settled_decides(tmp_path,
                                                                             monkeypatch):
    """Through a storage proxy (no lock), two processes may both read no claim and both write
    one: each reads the claim back once the writes settled, and only the last writer ends the
    sweep. A store with a lock needs no settling."""
    from orchestrator.stores import machines

    study = _study(tmp_path, trials=1)
    study.complete(study.next_trial(), [{"val_acc": 0.5}])
    finished = study.counts()["finished"]
    study.machines.storage_url = "grpc://127.0.0.1:1"  # through a proxy: no lock taken
    settled = []

    def other_process_writes_meanwhile():
        settled.append(True)
        study.study.set_user_attr(keys.END_CLAIM, {"owner": PARENT.as_dict(),
                                                   "finished": finished, "done": False})

    monkeypatch.setattr(machines, "_settle", other_process_writes_meanwhile)
    assert claim_end(study, ran_trials=True)["owner"] == PARENT.as_dict() and settled
    study.study.set_user_attr(keys.END_CLAIM, {})  # alone: it keeps its claim
    monkeypatch.setattr(machines, "_settle", lambda: settled.append(True))
    settled.clear()
    assert claim_end(study, ran_trials=True) is None and settled == [True]
    study.study.set_user_attr(keys.END_CLAIM, {})
    study.machines.storage_url = str(tmp_path / "j.journal")  # a file lock: under it
    settled.clear()
    assert claim_end(study, ran_trials=True) is None and settled == []


def test_a_process_marks_done_only_its_own_claim(tmp_path):
    study = _study(tmp_path, trials=1)
    study.study.set_user_attr(keys.END_CLAIM, {"owner": PARENT.as_dict(), "finished": 0,
                                               "done": False})
    study.machines.end_done()
    assert study.study.user_attrs[keys.END_CLAIM]["done"] is False


def test_a_journal_study_keeps_no_heartbeats_and_fails_no_stale_trial(tmp_path):
    study = _study(tmp_path)
    study.next_trial()
    assert not study.machines.heartbeat and study.machines.fail_stale() == []
    assert [t.state for t in study.trials()][:1] == [TrialState.RUNNING]
