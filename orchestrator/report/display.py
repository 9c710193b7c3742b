"""What ``sweep run`` shows: a live progress panel on a terminal, plain lines elsewhere; the
commands and tables a command prints for a person to read or paste."""
from __future__ import annotations

import heapq
import math
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.numbers import plain_exponent


def clock(seconds: float) -> str:
    """Whole seconds as a clock: ``M:SS``, from an hour on ``H:MM:SS``."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def sweep_command(argv0: str | None = None, executable: str | None = None) -> str:
    """How to call ``sweep`` again the way this process was started, as a shell command line
    (:func:`sweep_argv` quoted)."""
    return shlex.join(sweep_argv(argv0, executable))


def sweep_argv(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """How to call ``sweep`` again the way this process was started, for the commands it
    prints: ``sweep`` when that name on PATH is this program, else its path (``.venv/bin/sweep``
    with the venv not activated), and ``python -m orchestrator``
    when started that way.
    ``argv0`` and ``executable`` default to this process's."""
    argv0 = argv0 if argv0 is not None else sys.argv[0]
    executable = executable or sys.executable
    # python -m orchestrator (or the module itself, python -m orchestrator.commands.cli)
    if argv0.endswith((os.path.join("orchestrator", "__main__.py"),
                       os.path.join("orchestrator", "commands", "cli.py"))):
        return [_as_typed(executable, "python"), "-m", "orchestrator"]
    if os.path.basename(argv0) == "sweep":
        return [_as_typed(argv0, "sweep")]
    return ["sweep"]  # called in-process (a notebook, the tests): the installed command


def command_line(*args: str) -> str:
    """The line a user pastes to run ``sweep ARGS...``: every command the tool prints is built
    here from the argument vector it would run, each argument quoted for a POSIX shell (a path
    with a space, a quote or a ``$`` stays one argument). Give an option with a value as
    ``*option(flag, value)``, so that a value beginning with a dash stays its value."""
    return shlex.join([*sweep_argv(), *map(str, args)])


def option(flag: str, value) -> list[str]:
    """``flag`` and its ``value`` as a command's words: ``["--storage", "a.journal"]``, or the
    one word ``--storage=-a.journal`` where the value begins with a dash (argparse reads a
    separate ``-a.journal`` as an option: ``expected one argument``)."""
    value = str(value)
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


def _as_typed(path: str, name: str) -> str:
    """``name`` when PATH finds ``path`` by it, else ``path`` relative to here when below."""
    found = shutil.which(name)
    if found and os.path.abspath(found) == os.path.abspath(path):
        return name
    full = os.path.abspath(path)
    here = os.path.relpath(full)
    return full if here.startswith("..") else here if os.sep in here else f".{os.sep}{here}"


def params_text(params: dict) -> str:
    """``lr=0.01, batch_size=64, wd=1e-5``: floats to four significant digits."""
    return ", ".join(f"{k}={plain_exponent(f'{v:.4g}')}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())


MISSING = "-"  # a number a table cannot give, as the report's own tables write it


def table_lines(frame, why, columns: list[str] | None = None) -> list[str]:
    """A table (a pandas DataFrame) as the terminal shows it: numbers to four significant
    digits and a missing one as :data:`MISSING`, never ``NaN``; under it, once each, why
    numbers are missing: ``-: <why(row)>`` for each row with one.

    Args:
        frame: the table.
        why: a row (a pandas Series, every column of ``frame``) -> why its missing numbers are
            missing, in a few words.
        columns: the columns shown (default: all).
    """
    shown = frame[list(frame.columns if columns is None else columns)]
    numeric = [c for c in shown.columns if shown[c].dtype.kind == "f"]
    text = shown.astype({c: object for c in numeric})
    for c in numeric:
        text[c] = [MISSING if math.isnan(v) else plain_exponent(f"{v:.4g}") for v in shown[c]]
    gaps = shown[numeric].isna().any(axis=1).to_numpy() if numeric else [False] * len(frame)
    reasons = dict.fromkeys(why(row) for _, row in frame[gaps].iterrows())
    return [*text.to_string(index=False).splitlines(), *(f"{MISSING}: {r}" for r in reasons)]


def no_level_spread(row) -> str:
    """Why a row of :func:`~orchestrator.report.stats.factor_table` has no spread or interval."""
    if row["n"] < 2:
        return (f"{row['n']} trial at a level: its spread and interval need 2 or more (more "
                f"trials; in a grid, repeats: 2 trains each configuration on 2 seeds)")
    return "every trial at a level gave the same value: no spread, no interval"


def no_pair_interval(row) -> str:
    """Why a row of paired differences (its ``ci_method``, e.g. ``t, none: 1 finite pair``)
    has no interval."""
    method = str(row.get("ci_method", ""))
    if "no spread" in method:
        return "every pair differed by the same amount: no spread, no interval"
    return f"no interval: {method.partition('none: ')[2] or method}"


# how a run's name says its configuration: the settings in this order first, each shortened
NAME_ORDER = ("optimizer", "lr", "momentum", "weight_decay", "batch_size", "schedule",
              "warmup_epochs", "clip_grad_norm")
SHORT_KEYS = {"optimizer": "", "schedule": "", "model": "", "dataset": "", "momentum": "m",
              "weight_decay": "wd", "batch_size": "bs", "warmup_epochs": "wu",
              "label_smoothing": "ls", "grad_accum_steps": "acc"}
SHORT_VALUES = {"warmup_cosine": "cos", "warmup_linear": "lin", "constant": "const"}
MAX_NAME = 80


def config_name(settings: dict) -> str:
    """A configuration in a few words, stable for the same settings: ``sgd lr=0.05 m=0.9 cos
    clip1`` (the searched settings of a trial; a fixed setting says nothing about a run)."""
    order = [k for k in NAME_ORDER if k in settings] + sorted(k for k in settings
                                                              if k not in NAME_ORDER)
    words = [_word(k, settings[k]) for k in order]
    name = " ".join(w for w in words if w) or "default"
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 1] + "…"


def _word(key: str, value) -> str:
    if isinstance(value, dict):  # a user optimizer's (schedule's...) keywords, each a word
        return " ".join(_word(k, v) for k, v in value.items())
    if key == "clip_grad_norm":
        return "noclip" if value is None else f"clip{plain_exponent(f'{value:g}')}"
    if isinstance(value, bool):
        return key if value else f"no-{key}"
    text = plain_exponent(f"{value:.3g}") if isinstance(value, float) else \
        SHORT_VALUES.get(str(value), str(value))
    short = SHORT_KEYS.get(key, key)
    return f"{short}={text}" if short else text


# ---------------------------------------------------------------------------- the live view

WINDOW = 30  # the pace is the mean over this many most recent measured epochs
SETTLE_S = 5.0  # the shown ETA moves off its countdown by at most its uncertainty per 5 s


@dataclass
class TrialRow:
    """One running trial as the view shows it, kept by the runner from its Epoch messages."""

    number: int
    config: str  # :func:`config_name` of its searched settings
    epochs: int  # planned
    started: float  # time.monotonic() when it was handed to its worker
    epoch: int = 0  # last reported
    value: float | None = None  # the objective at its last epoch
    best: float | None = None  # its best objective so far
    samples_per_second: float | None = None
    last_epoch_at: float | None = None  # time.monotonic() of its last epoch


@dataclass
class Snapshot:
    """What ``sweep run`` shows, as the runner last saw it (the view reads no store)."""

    counts: dict[str, int]  # by state, as :func:`orchestrator.stores.study.state_counts`
    total: int  # trials planned
    started: float  # time.monotonic() when the sweep started
    metric: str
    best: tuple[float, int, str] | None  # value, trial number, configuration
    rows: list[TrialRow] = field(default_factory=list)
    workers: int = 1
    epoch_seconds: tuple[float, ...] = ()  # the last WINDOW measured epochs, wall seconds
    measured: int = 0  # epochs measured in all
    tracking: bool = True  # the MLflow store is open
    front: int | None = None  # several objectives: the Pareto front's size (best is None)


@dataclass(frozen=True)
class Estimate:
    """Time left to the last trial's end, its uncertainty and what it rests on."""

    seconds: float
    plus_minus: float
    epochs: int

    def text(self) -> str:
        return (f"ETA {clock(self.seconds)} ± {clock(self.plus_minus)} "
                f"from {self.epochs} epochs")


def makespan(loads: list[float], queued: int, trial_seconds: float, workers: int) -> float:
    """Seconds until every trial ends: the running trials' remaining ``loads`` on their
    workers, then ``queued`` trials of ``trial_seconds`` each, handed to whichever worker
    frees first."""
    free = sorted(loads + [0.0] * max(0, workers - len(loads)))
    heapq.heapify(free)
    for _ in range(queued):
        heapq.heappush(free, heapq.heappop(free) + trial_seconds)
    return max(free, default=0.0)


def raw_estimate(snapshot: Snapshot, now: float) -> tuple[float, float] | None:
    """The time left as measured now, unsmoothed, and its statistical uncertainty: one epoch
    (the step in which trials end) plus the standard error of the mean pace over the time
    left. None before the first measured epoch."""
    times = snapshot.epoch_seconds
    if not times:
        return None
    pace = statistics.fmean(times)
    spread = statistics.stdev(times) if len(times) > 1 else pace
    loads = [max(0.0, (r.epochs - r.epoch) * pace - (now - (r.last_epoch_at or r.started)))
             for r in snapshot.rows]
    epochs = max((r.epochs for r in snapshot.rows), default=1)
    queued = max(0, snapshot.total - snapshot.counts.get("finished", 0) - len(snapshot.rows))
    left = makespan(loads, queued, epochs * pace, max(1, snapshot.workers))
    return left, pace + left * spread / pace / math.sqrt(len(times))


class Eta:
    """The ETA shown: it counts down with the clock and moves toward the measured time left
    by at most its own uncertainty per :data:`SETTLE_S` (and at most half the gap per refresh),
    so that two consecutive refreshes never differ by more than the uncertainty they state,
    while a change of pace still comes through within seconds."""

    def __init__(self):
        self.shown: float | None = None
        self.at = 0.0

    def update(self, now: float, raw: float, stat: float, epochs: int) -> Estimate:
        if self.shown is None:
            shown = raw
        else:
            dt = max(0.0, now - self.at)
            counted = max(0.0, self.shown - dt)
            gap = raw - counted
            # the clamp: a step of at most max(stat, |gap|) * 1/2, never past the gap
            limit = max(stat, abs(gap)) * min(0.5, dt / SETTLE_S)
            shown = counted + max(-limit, min(limit, gap))
        self.shown, self.at = shown, now
        return Estimate(shown, max(stat, abs(raw - shown)), epochs)


def row_cells(row: TrialRow, now: float) -> tuple[str, ...]:
    """One running trial's cells: number, configuration, epoch k/E, objective now and at
    best, samples/s, time since it started."""
    def value(v):
        return "" if v is None else f"{v:.4f}"
    speed = "" if row.samples_per_second is None else f"{row.samples_per_second:,.0f}"
    return (str(row.number), row.config, f"{row.epoch}/{row.epochs}", value(row.value),
            value(row.best), speed, clock(now - row.started))


def row_headers(metric: str) -> tuple[str, ...]:
    """The columns of :func:`row_cells`; ``metric``: the objective's name."""
    return ("trial", "configuration", "epoch", metric, "best", "samples/s", "elapsed")


def header_line(name: str, s: Snapshot) -> str:
    """``NAME  3/8 done, 2 running, 1 pruned, 0 failed  best 0.9712 (trial 2: sgd lr=0.05)``."""
    c = s.counts
    line = (f"[bold]{name}[/]  {c.get('finished', 0)}/{s.total} done, {len(s.rows)} running, "
            f"{c.get('pruned', 0)} pruned, {c.get('fail', 0)} failed")
    if s.best is not None:
        value, number, config = s.best
        line += f"   best {s.metric} {value:.4f} (trial {number}: {escape(config)})"
    elif s.front:
        line += f"   Pareto front: {s.front} trial{'s' if s.front > 1 else ''}"
    return line


class Progress:
    """The trials done, running, pruned and failed of the total, the best so far, a row per
    running trial, the phase and the ETA.

    On a terminal a live panel redraws in place (4 times a second, from the last snapshot:
    the clock and the ETA move on while the runner waits in a phase); otherwise (CI, logs)
    each finished trial prints one line, so output stays readable when captured.
    """

    def __init__(self, console: Console, name: str):
        self.console = console
        self.name = name
        self.live: Live | None = None
        self.snapshot: Snapshot | None = None
        self.phase_text: str | None = None
        self.detail: str | None = None  # the last line said during the phase
        self.eta = Eta()
        self.created = time.monotonic()
        self._lock = threading.Lock()

    def __enter__(self):
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False,
                             get_renderable=self._render)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.phase_text = None
            self.live.refresh()
            self.live.__exit__(*exc)

    def update(self, snapshot: Snapshot) -> None:
        """Show ``snapshot`` from the next refresh on."""
        self.snapshot = snapshot

    def phase(self, text: str | None) -> None:
        """Name what the sweep does while it trains no trial (None: training again)."""
        self.phase_text, self.detail = text, None
        if self.live is not None:
            self.live.refresh()

    def trial_done(self, line: str) -> None:
        self.console.print(line, highlight=False, soft_wrap=True)
        if self.phase_text is not None:
            self.detail = line

    def show(self, renderable) -> None:
        """A table (or any rich renderable) above the live panel."""
        self.console.print(renderable)

    def _render(self) -> Group:
        return self.render(time.monotonic())

    def render(self, now: float) -> Group:
        """The panel at ``now`` (a ``time.monotonic()`` value); each call is one refresh of
        the ETA."""
        with self._lock:  # the refresh thread and the runner's refresh() both render
            return self._render_now(now)

    def _render_now(self, now: float) -> Group:
        s = self.snapshot
        if s is None:  # no trial asked for yet: the workers import torch meanwhile
            parts = [Text.from_markup(f"[bold]{escape(self.name)}[/]  starting workers "
                                      f"(importing torch) {clock(now - self.created)}")]
            return Group(*parts, *self._status_lines(None))
        parts = [Text.from_markup(header_line(self.name, s))]
        timing = f"elapsed {clock(now - s.started)}"
        raw = raw_estimate(s, now)
        if self.phase_text is None and raw is not None and (s.rows or raw[0] > 0):
            timing += "   " + self.eta.update(now, raw[0], raw[1], s.measured).text()
        elif self.phase_text is None and s.rows:
            timing += "   ETA after the first epoch"
        parts.append(Text(timing))
        parts += self._status_lines(s)
        if s.rows:
            table = Table(box=None, padding=(0, 1), show_edge=False)
            for header in row_headers(s.metric):
                table.add_column(header, no_wrap=header != "configuration",
                                 overflow="fold", justify="left" if header == "configuration"
                                 else "right")
            for row in s.rows:
                table.add_row(*row_cells(row, now))
            parts.append(table)
        return Group(*parts)

    def _status_lines(self, s: Snapshot | None) -> list[Text]:
        if self.phase_text is not None:
            line = f"phase: {self.phase_text}" + (f": {self.detail}" if self.detail else "...")
            return [Text(line, style="bold")]
        if s is None:
            return []
        if not s.rows and not s.counts.get("finished"):
            opening = "" if s.tracking else "; the first trials start while MLflow opens"
            return [Text(f"starting workers (importing torch){opening}")]
        if not s.tracking:
            return [Text("the first trials start while MLflow opens (their runs follow)")]
        return []
