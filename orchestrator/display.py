"""What ``sweep run`` shows: a live progress panel on a terminal, plain lines elsewhere."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table


def clock(seconds: float) -> str:
    """Whole seconds as a clock: ``M:SS``, from an hour on ``H:MM:SS``."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def params_text(params: dict) -> str:
    """``lr=0.01, batch_size=64``: floats to four significant digits."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in params.items())


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
    if key == "clip_grad_norm":
        return "noclip" if value is None else f"clip{value:g}"
    if isinstance(value, bool):
        return key if value else f"no-{key}"
    text = f"{value:.3g}" if isinstance(value, float) else SHORT_VALUES.get(str(value),
                                                                             str(value))
    short = SHORT_KEYS.get(key, key)
    return f"{short}={text}" if short else text


class Progress:
    """Trials done / running / pruned / failed of the total, best so far, elapsed and remaining.

    On a terminal a live panel redraws in place; otherwise (CI, logs) each finished trial prints
    one line, so output stays readable when captured.
    """

    def __init__(self, console: Console, name: str):
        self.console = console
        self.name = name
        self.live: Live | None = None
        self.snapshot: dict | None = None
        self._last = 0.0

    def __enter__(self):
        if self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4,
                             transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self._render())
            self.live.__exit__(*exc)

    def update(self, snapshot: dict) -> None:
        self.snapshot = snapshot
        now = time.monotonic()
        if self.live is not None and now - self._last > 0.25:
            self._last = now
            self.live.update(self._render())

    def trial_done(self, line: str) -> None:
        self.console.print(line, highlight=False)

    def show(self, renderable) -> None:
        """A table (or any rich renderable) above the live panel."""
        self.console.print(renderable)

    def _render(self) -> Table:
        table = Table.grid(padding=(0, 2))
        s = self.snapshot
        if s is None:
            table.add_row(f"[bold]{self.name}[/]", "starting workers...")
            return table
        c = s["counts"]
        done = c["finished"]
        table.add_row(f"[bold]{self.name}[/]",
                      f"{done}/{s['total']} finished ({c['complete']} complete, "
                      f"{c['pruned']} pruned, {c['fail']} failed), {s['running']} running")
        if s["best"]:
            value, params = s["best"]
            table.add_row("best", f"{value:.4f}  {params_text(params)}")
        elapsed = s["elapsed"]
        remaining = "?"
        if 0 < done < s["total"]:
            remaining = clock(elapsed / done * (s["total"] - done))
        elif done >= s["total"]:
            remaining = "0:00"
        table.add_row("time", f"{clock(elapsed)} elapsed, ~{remaining} remaining")
        return table
