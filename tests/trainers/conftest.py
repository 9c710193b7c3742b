"""The trainer tests train in the test process itself: one torch thread each, as a sweep's
worker on a shared core has (tests/conftest.py's pace is measured so too)."""
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """A test module trains on one thread (its module fixtures too: an autouse fixture of
    module scope is set up before them); the count is restored after it. Two test processes on
    two cores with two threads each spend most of their CPU time waiting on one another's
    cores (an epoch of the digits CNN: about 4 CPU-seconds against 0.3 on one thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
