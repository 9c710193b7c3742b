"""The tests' clock: the deadlines of the tests that wait on real training scale with a pace
measured once a session and a CPU probe taken as each test starts, so load that comes mid-suite
lengthens them."""
import os
import subprocess
import sys

from tests.conftest import SLACK, Pace, cpu_probe_s


def test_a_slowed_pace_scales_every_budget():
    pace = Pace(startup_s=2.0, epoch_s=0.5)
    assert pace.budget(epochs=4, starts=2) == SLACK * (2 * 2.0 + 4 * 0.5)
    assert pace.slowed(3).budget(epochs=4, starts=2) == 3 * pace.budget(epochs=4, starts=2)


def test_the_probe_sees_load_that_comes_after_the_measurement():
    before = cpu_probe_s()
    busy = [subprocess.Popen([sys.executable, "-c", "print(flush=True)\nwhile True: pass"],
                             stdout=subprocess.PIPE, text=True)
            for _ in range(4 * os.cpu_count())]  # every core shared by five processes or more:
    # far more than the other test process (pytest-xdist) loads the machine with, before or after
    try:
        for p in busy:  # each is past its start and spinning
            p.stdout.readline()
        loaded = cpu_probe_s()
    finally:
        for p in busy:
            p.kill()
            p.wait()
            p.stdout.close()
    after = cpu_probe_s()
    # without the spinners: the lesser of the probes before and after them, as the other test
    # process's own load comes and goes (one full run saw 9.1 ms before and 7.5 ms loaded)
    assert loaded > 1.3 * min(before, after), (before, loaded, after)


def test_each_test_gets_the_measured_pace_or_a_slower_one(pace, measured_pace):
    measured, _ = measured_pace
    assert pace.startup_s >= measured.startup_s and pace.epoch_s >= measured.epoch_s
