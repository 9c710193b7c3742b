"""The frame the preflight checks share: a check's verdict, the report they fill, the context
each check reads and writes (settings, data, device, the model's run, one batch), and how an
exception inside a check becomes a finding about the user's code or an ERROR of the checker."""
from __future__ import annotations

import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from .datasets import Data
from .settings import TrainSettings
from .verdicts import ERROR, FAIL, worst


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``status`` PASS / WARN / FAIL (or SKIP when an earlier FAIL made it
    meaningless, ERROR when the check itself raised), one line of evidence, and for WARN/FAIL
    the likely cause and the fix."""

    name: str
    status: str
    evidence: str
    cause: str = ""
    fix: str = ""


@dataclass
class PreflightReport:
    """Every check in the order run, the files written (sample grid, lr range plot) and the lr
    range suggested by the range test, when it ran."""

    checks: list[Check] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    suggested_lr: tuple[float, float] | None = None
    seconds: float = 0.0
    # the names of the metrics an epoch reports, where user metric functions (train.metrics)
    # ran on a batch; None otherwise (the built-in names are known without running anything)
    metrics: list[str] | None = None

    @property
    def status(self) -> str:
        return worst(c.status for c in self.checks)

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "checks": [asdict(c) for c in self.checks],
                "files": dict(self.files), "seconds": round(self.seconds, 2),
                "suggested_lr": list(self.suggested_lr) if self.suggested_lr else None,
                "metrics": self.metrics}


class Stop(Exception):
    """An earlier check failed in a way that makes the later ones meaningless."""


@dataclass
class Context:
    settings: TrainSettings
    report: PreflightReport
    out: Path | None
    overfit_steps: int
    data: Data | None = None
    device: torch.device | None = None
    run: Any = None
    batch: tuple[torch.Tensor, torch.Tensor] | None = None
    labels_change: str = ""

    def add(self, name: str, status: str, evidence: str, cause: str = "", fix: str = "") -> None:
        self.report.checks.append(Check(name, status, evidence, cause, fix))

    def isolated(self, name: str, fn, *args) -> Any:
        """``fn(*args)``; an exception (other than a check's own stop) becomes an ERROR row of
        check ``name``, so that the other checks still run (then None is returned)."""
        try:
            return fn(*args)
        except Stop:
            raise
        except Exception as e:  # noqa: BLE001 - the checker's own failure, reported as such
            user = user_frame(e)
            if user is not None:  # the user's model, data or loss raised: a finding
                self.add(name, FAIL, f"{type(e).__name__}: {first_line(e)} (at "
                                     f"{Path(user.filename).name}:{user.lineno} in {user.name})",
                         "your code raised", "fix the error above, then run sweep doctor again")
                raise Stop from e
            where = traceback.extract_tb(e.__traceback__)[-1]
            self.add(name, ERROR, f"{type(e).__name__}: {first_line(e)} (at "
                                  f"{Path(where.filename).name}:{where.lineno} in {where.name})",
                     "the check itself raised: a fault of the checker, not a verdict on your "
                     "code", "the other checks still ran; sweep run does not stop on an ERROR")
            return None

    def guarded(self, name: str, fn) -> Any:
        """``fn()``, turning an exception into a FAIL of check ``name`` that stops the rest."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - any error here is the finding
            self.add(name, FAIL, f"{type(e).__name__}: {first_line(e)}",
                     "the code under test raised", "fix the error above, then run sweep doctor "
                                                   "again")
            raise Stop from e


# the trainer's own files and the installed libraries: a frame elsewhere is the user's code
NOT_USER = tuple({str(Path(__file__).resolve().parent), sys.prefix, sys.base_prefix,
                   sys.exec_prefix})


def user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``e``'s traceback in the user's own files (a model or dataset of
    theirs), or None when only the trainer and libraries ran."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not str(Path(f.filename).resolve()).startswith(NOT_USER)
              and not f.filename.startswith("<")]
    return frames[-1] if frames else None


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else "(no message)"


def read_items(dataset: Dataset, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Items ``indices`` of ``dataset`` read one by one (as a DataLoader worker would) and
    collated."""
    if isinstance(dataset, TensorDataset):
        x, y = dataset.tensors
        idx = torch.tensor(indices)
        return x[idx], y[idx]
    xs, ys = zip(*(dataset[i] for i in indices))
    shapes = {tuple(getattr(x, "shape", ())): i for i, x in zip(indices, xs)}
    if len(shapes) > 1:  # default_collate would fail with a message about stacking
        (a, i), (b, j) = list(shapes.items())[:2]
        raise ValueError(f"items differ in size (item {i} is {a}, item {j} is {b}), so they "
                         f"cannot form a batch: resize them to one size in the dataset "
                         f"(torchvision.transforms.Resize)")
    return default_collate(list(xs)), default_collate(list(ys))
