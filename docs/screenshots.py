"""The README's screenshots, made from a real sweep so that they show what the code does today.

Runs a small sweep with repeats (4 configurations x 3 seeds on the digits images, a few minutes on
2 CPU cores) in a temporary folder, then writes into docs/:

- ``live-view.png``: ``sweep run`` on a real terminal (tmux, 100x30) while trials train, read
  with ``tmux capture-pane -e`` (its colours kept) and drawn by Chromium in a monospace font;
- ``mlflow-grouped.png``: the MLflow UI that ``sweep ui`` serves, its runs table grouped by the
  tag ``sweep.config`` and its val_acc chart: one line per configuration, its band over seeds;
- ``report.png``: the top of the HTML report ``sweep report`` writes (its headline first);
- ``mlflow-comparison.png``: the link ``sweep ui`` prints for a comparison (a second, smaller
  sweep: 2 optimizers x clipping on or off, 3 confirmation seeds, each level tuned anew by 2
  trials for each seed): a row per level with the mean of its confirmation runs, best first.

Needs tmux and Debian's chromium (the README's test command installs both); offline: the
browser is refused anything but the local MLflow UI. Each image is a PNG under 300 KB.

Usage: .venv/bin/python docs/screenshots.py [--keep DIR] [--only NAME.png]
(DIR: keep the sweeps' folder; --only: make that image alone, and run only its sweep)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic"]
MAX_BYTES = 300_000
WAIT_MS = 120_000  # a React app on a busy machine: each element is waited for up to this
SWEEP_S = 1800  # the sweep must end within this
NAME = "seeds"
SPEC = {
    "name": NAME,
    "description": "Adam against SGD, with and without gradient clipping, three seeds each",
    "objective": {"metric": "val_acc", "direction": "maximize"},
    "sampler": {"name": "grid"},
    "repeats": 3,
    "workers": 2,
    "export_for": "none",
    "preflight": False,
    "train": {"dataset": "digits", "model": "small_cnn", "epochs": 6, "batch_size": 64,
              "schedule": "warmup_cosine", "warmup_epochs": 1},
    "space": {"optimizer": {"adam": {"lr": 0.002}, "sgd": {"lr": 0.05, "momentum": 0.9}},
              "clip_grad_norm": [None, 1.0]},
}
CONFIGURATIONS = len(SPEC["space"]["optimizer"]) * len(SPEC["space"]["clip_grad_norm"])
# a running trial's row: its number, configuration, then epoch k/E
ROW = re.compile(r"^\s*\d+\s+\S.*\s(\d+)/(\d+)\s")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# one colour per configuration's group (MLflow's own may repeat one for two groups)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
COMPARISON = {
    "name": "clipping",
    "description": "Adam against SGD, with and without gradient clipping, each level tuned",
    "objective": {"metric": "val_acc", "direction": "maximize"},
    "sampler": {"name": "tpe", "seed": 0},
    "workers": 2,
    "export_for": "none",
    "preflight": False,
    "train": {"dataset": "digits", "model": "small_cnn", "epochs": 3, "batch_size": 64},
    "space": {"optimizer": {"adam": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}},
                            "sgd": {"lr": {"low": 1e-2, "high": 0.3, "log": True},
                                    "momentum": 0.9}},
              "clip_grad_norm": [None, 1.0]},
    "compare": {"factor": ["optimizer", "clip_grad_norm"], "tune_trials": 2, "seeds": 3,
                "max_seeds": 3},
}
IMAGES = ("live-view.png", "mlflow-grouped.png", "report.png", "mlflow-comparison.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="run the sweep in DIR and keep it")
    parser.add_argument("--only", choices=IMAGES, help="make this image alone")
    args = parser.parse_args(argv)
    images = [args.only] if args.only else list(IMAGES)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / f"{NAME}.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
        screen = live_view(work) if set(images) - {"mlflow-comparison.png"} else ""
        if "mlflow-comparison.png" in images:
            run_comparison(work)
        with browser() as context:
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            if "live-view.png" in images:
                terminal_png(page, screen, DOCS / "live-view.png")
            if "mlflow-grouped.png" in images:
                grouped_chart_png(page, work, DOCS / "mlflow-grouped.png")
            if "report.png" in images:
                report_png(page, work, DOCS / "report.png")
            if "mlflow-comparison.png" in images:
                comparison_png(page, work, DOCS / "mlflow-comparison.png")
    for name in images:
        size = (DOCS / name).stat().st_size
        print(f"docs/{name}: {size / 1000:.0f} KB")
        if size > MAX_BYTES:
            print(f"docs/{name} is over {MAX_BYTES // 1000} KB", file=sys.stderr)
            return 1
    return 0


def sweep_command(*args: str) -> list[str]:
    """``sweep ARGS`` of this checkout, whatever is installed."""
    return [sys.executable, "-m", "orchestrator", *args]


def sweep_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return {**env, "PYTHONPATH": str(ROOT)}


# ------------------------------------------------------------------------------ the live view

def live_view(work: Path) -> str:
    """Runs the sweep under tmux (100x30) to its end; returns the screen (with its colour
    escapes) of the moment the most trials were past their first epoch, with an ETA."""
    socket_name = f"sweep-screenshots-{os.getpid()}"
    run = " ".join(shlex.quote(a) for a in sweep_command("run", f"{NAME}.yaml"))
    command = (f"cd {shlex.quote(str(work))} && env -u MLFLOW_TRACKING_URI "
               f"PYTHONPATH={shlex.quote(str(ROOT))} {run}; echo EXIT=$?; sleep 3600")

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-L", socket_name, *args], capture_output=True,
                              text=True, check=True).stdout

    tmux("new-session", "-d", "-s", "sweep", "-x", "100", "-y", "30", command)
    best, best_score, end = "", None, time.monotonic() + SWEEP_S
    try:
        while time.monotonic() < end:
            screen = tmux("capture-pane", "-p", "-e", "-t", "sweep")
            plain = ANSI.sub("", screen)
            if "EXIT=" in plain:
                if "EXIT=0" not in plain:
                    raise SystemExit(f"sweep run failed:\n{plain}")
                break
            score = moment(plain)
            if score is not None and (best_score is None or score > best_score):
                best, best_score = screen, score
            time.sleep(0.5)
        else:
            raise SystemExit(f"sweep run did not end within {SWEEP_S} s")
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
    if best_score is None:
        raise SystemExit("the live view never showed a training trial's row with an ETA")
    return best


def moment(screen: str) -> tuple[int, float, int] | None:
    """How telling a screen of the live view is: the trials it shows between two epochs, how
    near the sweep is to its middle (a best so far, time left), then how far those trials are
    into their training; None without an ETA."""
    rows = [m for m in map(ROW.match, screen.splitlines()) if m]
    epochs = [int(m.group(1)) for m in rows if 1 <= int(m.group(1)) < int(m.group(2))]
    done = re.search(r"(\d+)/(\d+) done", screen)
    if "ETA" not in screen or not epochs or not done:
        return None
    middle = abs(int(done.group(1)) / int(done.group(2)) - 0.5)
    return len(epochs), -round(middle, 1), sum(epochs)


def terminal_png(page, screen: str, out: Path) -> None:
    """The screen as the terminal drew it: rich renders the escapes to HTML (a dark theme,
    colours inline), Chromium draws it in a monospace font."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    console = Console(record=True, width=100, file=io.StringIO(), color_system="truecolor")
    for line in screen.rstrip().split("\n"):  # the blank rows under the view left out
        console.print(Text.from_ansi(line), no_wrap=True, overflow="crop")
    html = console.export_html(theme=MONOKAI, inline_styles=True)
    html = html.replace("<body", '<body style="margin:0"', 1).replace(
        "<pre ", '<pre id="screen" ', 1)
    page.set_viewport_size({"width": 1000, "height": 700})
    page.set_content(html)
    page.add_style_tag(content="#screen{display:inline-block;margin:0;padding:12px 16px;"
                               "font-size:13px;line-height:1.2}")
    page.locator("#screen").screenshot(path=str(out))
    shrink(out)


# ------------------------------------------------------------------------------ the MLflow UI

def grouped_chart_png(page, work: Path, out: Path) -> None:
    """`sweep ui` in its own process group; the printed link, grouped by sweep.config, then
    the chart view's val_acc chart, full screen."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    with sweep_ui(work) as url:
        page.set_viewport_size({"width": 1400, "height": 860})
        page.goto(url)
        expect(page.get_by_text(re.compile(r"\d+ matching runs"))).to_be_visible()
        close_assistant(page)
        page.get_by_role("button", name=re.compile(r"^Group by")).click()
        page.get_by_role("menuitemcheckbox", name="sweep.config", exact=True).click()
        page.keyboard.press("Escape")
        groups = page.locator(".ag-row").filter(has_text="Group: ")
        expect(groups).to_have_count(CONFIGURATIONS)
        color_groups(groups)
        page.locator("label").filter(has=page.locator('input[value="CHART"]')).click(force=True)
        page.get_by_placeholder("Search metric charts").fill("val_acc")
        card = page.get_by_test_id("experiment-view-compare-runs-card").filter(
            has_text=re.compile(r"^val_acc"))
        expect(card.locator("path.js-fill")).not_to_have_count(0)
        # the card's corner handle, dragged: a chart the width of the view
        handle = page.get_by_test_id("draggable-card-resize-handle").first.bounding_box()
        page.mouse.move(handle["x"] + 4, handle["y"] + 4)
        page.mouse.down()
        page.mouse.move(handle["x"] + 560, handle["y"] + 90, steps=12)
        page.mouse.up()
        page.wait_for_timeout(1500)  # the redraw and the lines' transition
        page.screenshot(path=str(out))
    shrink(out)


def color_groups(groups) -> None:
    """A colour of :data:`COLORS` for each group row (MLflow's own may repeat one)."""
    for i in range(groups.count()):
        # the swatch's colour input is styled invisible: set it as its picker would
        groups.nth(i).locator('input[type="color"]').fill(COLORS[i % len(COLORS)], force=True)


def run_comparison(work: Path) -> None:
    """``sweep run`` of :data:`COMPARISON` in ``work``, to its end."""
    (work / "clipping.yaml").write_text(yaml.safe_dump(COMPARISON, sort_keys=False))
    done = subprocess.run(sweep_command("run", "clipping.yaml"), cwd=work, env=sweep_env(),
                          capture_output=True, text=True, timeout=SWEEP_S)
    if done.returncode != 0:
        raise SystemExit(f"sweep run clipping.yaml failed:\n{done.stdout}{done.stderr}")


def comparison_png(page, work: Path, out: Path) -> None:
    """The link `sweep ui` prints for the comparison: a row per level, the mean of its
    confirmation runs, best first, MLflow's Assistant panel closed."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    levels = len(COMPARISON["space"]["optimizer"]) * len(COMPARISON["space"]["clip_grad_norm"])
    with sweep_ui(work, COMPARISON["name"]) as url:
        page.set_viewport_size({"width": 1280, "height": 520})  # a laptop's window
        page.goto(url)
        groups = page.locator(".ag-row").filter(has_text="Group: ")
        expect(groups).to_have_count(levels)
        close_assistant(page)
        color_groups(groups)
        page.screenshot(path=str(out))
    shrink(out)


def close_assistant(page) -> None:
    """Closes the Assistant panel that MLflow 3.18 opens at a browser's first visit to a UI on
    this machine (docs/mlflow-ui.md says so); once closed, the table widens into its place."""
    from playwright.sync_api import expect

    close = page.locator('[data-component-id="mlflow.assistant.chat_panel.close"]')
    expect(close).to_be_visible()
    close.click()
    expect(close).to_have_count(0)
    page.wait_for_timeout(1000)  # the table's columns laid out again


@contextlib.contextmanager
def sweep_ui(work: Path, name: str = NAME):
    """``sweep ui NAME`` on a free port; yields the link it prints; stops it and its server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(sweep_command("ui", name, "--port", str(port)), cwd=work,
                            env=sweep_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        lines = [proc.stdout.readline()]
        while lines[-1] and not lines[-1].startswith("MLflow UI:"):
            lines.append(proc.stdout.readline())
        if not lines[-1]:
            raise SystemExit("sweep ui stopped:\n" + "".join(lines))
        yield next(w for w in lines[-1].split() if w.startswith("http"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C: it stops its server too
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------------------ the report

def report_png(page, work: Path, out: Path) -> None:
    """`sweep report NAME`, its report.html opened from the file: the top of the page."""
    subprocess.run(sweep_command("report", NAME, "--out", "report"), cwd=work, env=sweep_env(),
                   check=True, capture_output=True)
    page.set_viewport_size({"width": 1100, "height": 1300})
    page.goto((work / "report" / "report.html").as_uri())
    page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth)")
    page.screenshot(path=str(out))
    shrink(out)


# ------------------------------------------------------------------------------ shared

@contextlib.contextmanager
def browser():
    """Debian's chromium, headless, refused everything but local pages."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"{CHROMIUM} not found: apt-get install -y chromium (as root)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        context = chromium.new_context(device_scale_factor=1)
        context.route(re.compile(r"^(?!(http://127\.0\.0\.1:|file:|about:|data:))"),
                      lambda route: route.abort())
        try:
            yield context
        finally:
            chromium.close()


def shrink(path: Path) -> None:
    """A palette of 256 colours: screenshots of text and flat charts lose nothing visible,
    and the file a third of its size."""
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG", optimize=True)
    path.write_bytes(buffer.getvalue())


if __name__ == "__main__":
    sys.exit(main())
