"""`sweep run` as a user sees it: the live view on a real terminal (tmux), the plain output
when piped."""
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from tests.conftest import AS_STARTED, ROOT, tiny_spec

pytestmark = pytest.mark.slow  # end to end: the live view of a real sweep

ETA = re.compile(r"ETA (\d+):(\d\d) ± (\d+):(\d\d) from (\d+) epochs")
ROW = re.compile(r"^\s*(\d+)\s+lr=\S+ bs=\d+\s+(\d)/2\s")
HEX32 = re.compile(r"\b[0-9a-f]{32}\b")


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True,
                          check=True).stdout


def screens(socket: str, done, deadline_s: float) -> list[tuple[float, str]]:
    """What the terminal shows, read every 0.2 s until ``done(screen)`` or the deadline:
    (time read, screen) each time it changed."""
    reads, end = [], time.monotonic() + deadline_s
    while time.monotonic() < end:
        screen = tmux(socket, "capture-pane", "-p", "-t", "sweep")
        if not reads or reads[-1][1] != screen:
            reads.append((time.monotonic(), screen))
        if done(screen):
            return reads
        time.sleep(0.2)
    raise AssertionError("sweep run did not end in time; last screen:\n" + reads[-1][1])


def seconds(m, first: int) -> int:
    return int(m.group(first)) * 60 + int(m.group(first + 1))


def test_the_live_view_on_a_terminal_shows_each_trial_the_export_and_a_steady_eta(stores,
                                                                                   tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux not found: the live-view test needs a real terminal; install it as "
                    "root with `apt-get install -y tmux` (the README's test command does)",
                    pytrace=False)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(trials=4, export_for="best", export=["onnx"],
                                             train={"dataset": "digits", "model": "small_cnn",
                                                    "epochs": 2})))
    command = (f"cd {shlex.quote(str(stores.dir))} && env -u MLFLOW_TRACKING_URI "
               f"PYTHONPATH={shlex.quote(str(ROOT))} {shlex.quote(sys.executable)} -m "
               f"orchestrator.commands.cli run {shlex.quote(str(spec))}; echo EXIT=$?; sleep 600")
    socket = f"sweep-test-{tmp_path.name}"
    tmux(socket, "new-session", "-d", "-s", "sweep", "-x", "100", "-y", "30", command)
    try:
        reads = screens(socket, lambda screen: "EXIT=" in screen, deadline_s=180)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    assert "EXIT=0" in reads[-1][1], reads[-1][1]
    rows = [ROW.match(line) for _, screen in reads for line in screen.splitlines()]
    epochs_seen = {int(m.group(2)) for m in rows if m}
    assert 1 in epochs_seen, "no row of a running trial with its epoch k/2"
    assert any("phase: export" in screen for _, screen in reads)
    etas = [(t, ETA.search(screen)) for t, screen in reads if ETA.search(screen)]
    assert len(etas) >= 2, "\n\n".join(screen for _, screen in reads)
    for (t1, a), (t2, b) in zip(etas, etas[1:]):
        stated = max(seconds(a, 3), seconds(b, 3)) + 1  # both read in whole seconds
        counted_down = seconds(a, 1) - (t2 - t1)
        assert abs(seconds(b, 1) - counted_down) <= stated + 1, (a.group(0), b.group(0),
                                                                 t2 - t1)


def test_piped_output_holds_the_best_trials_full_run_ids(quickstart):
    stores, out = quickstart
    ids = {r.info.run_id for r in stores.runs("quickstart", "trial")}
    assert len(ids) == 8
    # the end's table of the 5 best complete trials, by hand: each one's run id in full
    complete = [t for t in stores.study("quickstart").trials if t.state.name == "COMPLETE"]
    best = sorted(complete, key=lambda t: (-t.value, t.number))[:5]
    shown = [m.group(1) for m in re.finditer(r"^  trial \d+: ([0-9a-f]{32})$", out.stdout, re.M)]
    assert shown == [t.user_attrs["sweep.mlflow_run_id"] for t in best], out.stdout
    assert set(shown) <= ids and set(HEX32.findall(out.stdout)) <= ids
    assert f"the report: {AS_STARTED} report quickstart" in out.stdout
