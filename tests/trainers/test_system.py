"""The process and file helpers: a lock another process holds is waited for, within a deadline."""
import subprocess
import sys
import time

import pytest

from trainers.system import LockTimeout, file_lock

HOLD = """
import sys, time
from trainers.system import file_lock
with file_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def held(tmp_path):
    """A lock file another process holds until the test ends."""
    path = tmp_path / "store.lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        yield path
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_held_past_the_timeout_raises_instead_of_waiting_for_ever(held):
    started = time.monotonic()
    with pytest.raises(LockTimeout, match="held by another process"):
        with file_lock(held, timeout=0.3):
            pass
    assert time.monotonic() - started < 30  # it gave up; it did not wait for the holder


def test_a_free_lock_is_taken_at_once(tmp_path):
    with file_lock(tmp_path / "free.lock", timeout=0.3):
        pass


def test_a_store_lock_held_too_long_is_one_line_naming_the_store(held, monkeypatch):
    from orchestrator.core.errors import SweepError
    from orchestrator.stores import locks

    monkeypatch.setattr(locks, "LOCK_TIMEOUT_S", 0.3)
    monkeypatch.setattr(locks, "lock_file", lambda path: held)
    with pytest.raises(SweepError, match="lock is held by another process") as err:
        with locks.store_lock(f"sqlite:///{held.parent}/mlflow.db"):
            pass
    assert "\n" not in str(err.value) and "mlflow.db" in str(err.value)


def test_a_timeout_inside_the_block_is_not_taken_for_the_lock(tmp_path):
    from orchestrator.stores import locks

    with pytest.raises(TimeoutError, match="the caller's own"):
        with locks.store_lock(f"sqlite:///{tmp_path}/mlflow.db"):
            raise TimeoutError("the caller's own")
