"""The messages between ``sweep run`` and its training workers: an enum of ops and one frozen
dataclass per message, sent as pickled dicts of plain types.

Contract:

* Transport: one socketpair per worker (see :mod:`orchestrator.running.pool`). A message travels as
  one pickled dict whose ``"op"`` is an :class:`Op` value and whose other keys are the message's
  fields, all plain types (str, int, float, bool, None, list, tuple, dict). Never a torch object:
  the ``sweep run`` process must not import torch to unpickle one (``torch.__version__`` is a
  ``TorchVersion``: send ``str(...)``).
* The worker sends :class:`Ready` once, when torch is imported; then it answers one request at
  a time, and the runner sends the next request only once the answer arrived:

  - :class:`Train` -> one :class:`Epoch` per epoch, each answered by the runner's
    :class:`Decision` (stop now, or go on) before the worker trains on; then :class:`Done`
    (complete or pruned) or :class:`Failed`;
  - :class:`Test` -> :class:`Tested`; :class:`Export` -> :class:`Exported`;
    :class:`Preflight` -> :class:`Checked`; :class:`Warm` -> :class:`Warmed` (sent to a worker
    left without a trial at the end of a sweep; the runner takes the answer whenever it comes);
  - :class:`Stop` -> no answer: the worker exits.
* A message that is not a dict, an unknown op, a missing or unexpected field, or an op the
  receiving side does not take raises :class:`ProtocolError` where it is decoded: the runner
  stops the sweep (``sweep`` reports a bug, exit 3); a worker exits with code 2 and trains
  nothing.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from typing import Any, ClassVar


class ProtocolError(Exception):
    """A message between the runner and a worker that breaks the contract of this module: a bug
    in sweep, never bad input (``sweep`` says it as one, with the file holding the traceback)."""


class Op(enum.Enum):
    """What a message is; its value is the ``"op"`` on the wire."""

    READY = "ready"
    TRAIN = "train"
    EPOCH = "epoch"
    DECISION = "decision"
    DONE = "done"
    FAILED = "failed"
    TEST = "test"
    TESTED = "tested"
    EXPORT = "export"
    EXPORTED = "exported"
    PREFLIGHT = "preflight"
    CHECKED = "checked"
    WARM = "warm"
    WARMED = "warmed"
    STOP = "stop"


class Message:
    """The base of every message: its :class:`Op` and how its fields come off the wire."""

    op: ClassVar[Op]

    @classmethod
    def from_fields(cls, values: dict[str, Any]) -> Message:
        return cls(**values)


# ----------------------------------------------------------------------------- worker -> runner

@dataclass(frozen=True)
class Ready(Message):
    """The worker imported torch and takes requests; what it runs on (tags of its trial runs)."""

    op: ClassVar[Op] = Op.READY
    pid: int
    torch_version: str
    torch_threads: int
    cuda_visible_devices: str
    cuda_available: bool
    cuda_version: str
    cudnn_version: str
    device_name: str

    @property
    def device(self) -> str:
        """The device a trial with ``device: auto`` runs on."""
        return "cuda" if self.cuda_available else "cpu"


@dataclass(frozen=True)
class Epoch(Message):
    """One epoch of the running trial; the worker waits for a :class:`Decision`."""

    op: ClassVar[Op] = Op.EPOCH
    epoch: int
    metrics: dict[str, float]
    lr_steps: list  # (global step, lr) pairs
    resumed: bool  # restored from a checkpoint: it already passed the pruner
    warnings: tuple[str, ...] = ()  # distinct warnings new since the last message
    # the worker's use of the machine sampled since the last message: (number, unix ms,
    # {system/* metric: value}) (see orchestrator.running.usage)
    system: tuple = ()


@dataclass(frozen=True)
class Exported(Message):
    """An export's outcome (a failed export never fails its trial)."""

    op: ClassVar[Op] = Op.EXPORTED
    report: dict[str, Any] | None  # trainers' ExportReport.to_dict()
    metrics: dict[str, float]
    error: str | None
    dir: str  # where the exported files are

    @classmethod
    def failed(cls, error: str, dir: str) -> Exported:
        return cls(report=None, metrics={}, error=error, dir=dir)

    def result(self) -> dict[str, Any]:
        """The fields as the dict :meth:`Tracker.log_export` and ``export_line`` read."""
        return {"report": self.report, "metrics": self.metrics, "error": self.error,
                "dir": self.dir}


@dataclass(frozen=True)
class Done(Message):
    """The trial trained to its end (``complete``) or was stopped by a :class:`Decision`
    (``pruned``)."""

    op: ClassVar[Op] = Op.DONE
    state: str  # complete | pruned
    epochs: int
    train_seconds: float
    device: str
    resumed_from: int  # the checkpoint's epoch it continued from (0: a fresh start)
    weights: str  # path of the final state dict
    export: Exported | None = None  # with export_for: all
    warnings: tuple[str, ...] = ()
    discarded_checkpoint: str = ""  # why a damaged checkpoint made it start over, if one did
    system: tuple = ()  # samples since the last epoch, as in Epoch
    val_items: int = 0  # the validation items its val_* metrics count (their resolution)

    @classmethod
    def from_fields(cls, values: dict[str, Any]) -> Done:
        export = values.pop("export", None)
        return cls(**values, export=None if export is None else decode(export, Exported))


@dataclass(frozen=True)
class Failed(Message):
    """The trial raised; ``retryable`` when running it again may succeed (I/O trouble)."""

    op: ClassVar[Op] = Op.FAILED
    reason: str
    retryable: bool
    warnings: tuple[str, ...] = ()
    system: tuple = ()  # samples since the last epoch, as in Epoch


@dataclass(frozen=True)
class Tested(Message):
    """Test-split metrics of saved weights; ``metrics`` is None when the dataset has no test
    split, ``error`` set when the evaluation raised."""

    op: ClassVar[Op] = Op.TESTED
    metrics: dict[str, float] | None
    error: str | None = None


@dataclass(frozen=True)
class Checked(Message):
    """The preflight report of one configuration (``PreflightReport.to_dict()``)."""

    op: ClassVar[Op] = Op.CHECKED
    report: dict[str, Any]


# ----------------------------------------------------------------------------- runner -> worker

@dataclass(frozen=True)
class Train(Message):
    """Train trial ``number``; with ``export_formats``, export its final model too."""

    op: ClassVar[Op] = Op.TRAIN
    number: int
    settings: dict[str, Any]  # TrainSettings.to_dict()
    checkpoint_dir: str
    output_dir: str  # the final weights (and an export) go here
    export_formats: tuple[str, ...] = ()
    export_dir: str = ""


@dataclass(frozen=True)
class Decision(Message):
    """The runner's answer to an :class:`Epoch`: stop the trial now (pruned), or go on."""

    op: ClassVar[Op] = Op.DECISION
    stop: bool


@dataclass(frozen=True)
class Test(Message):
    """Evaluate ``weights`` on the test split of ``settings``' dataset."""

    op: ClassVar[Op] = Op.TEST
    weights: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class Export(Message):
    """Export ``weights`` in ``formats`` into ``dir`` and check each file against the model."""

    op: ClassVar[Op] = Op.EXPORT
    weights: str
    settings: dict[str, Any]
    formats: tuple[str, ...]
    dir: str


@dataclass(frozen=True)
class Preflight(Message):
    """Run the trainer's preflight checks of one configuration, images into ``dir``."""

    op: ClassVar[Op] = Op.PREFLIGHT
    settings: dict[str, Any]
    dir: str
    overfit_steps: int
    lr_range_test: bool
    lr_search: tuple[float, float] | None


@dataclass(frozen=True)
class Warm(Message):
    """Get ready to export in ``formats``: the first export of a process spends seconds
    importing and setting up the exporters, which a worker with nothing left to train does
    ahead of the export of the best trial."""

    op: ClassVar[Op] = Op.WARM
    formats: tuple[str, ...]


@dataclass(frozen=True)
class Warmed(Message):
    """The answer to :class:`Warm`."""

    op: ClassVar[Op] = Op.WARMED
    seconds: float


@dataclass(frozen=True)
class Stop(Message):
    """Exit now (the sweep is over); no answer."""

    op: ClassVar[Op] = Op.STOP


Request = Train | Test | Export | Preflight | Warm | Stop
Reply = Tested | Exported | Checked
REQUESTS = (Train, Test, Export, Preflight, Warm, Stop)  # what a worker takes between trials
FROM_WORKER = (Ready, Epoch, Done, Failed, Tested, Exported, Checked, Warmed)  # the runner's
MESSAGES = {cls.op: cls for cls in (*FROM_WORKER, *REQUESTS, Decision)}
REPLY_TO = {Test: Tested, Export: Exported, Preflight: Checked}  # a request -> its answer


def encode(message: Message) -> dict[str, Any]:
    """``message`` as the dict of plain types that travels."""
    out: dict[str, Any] = {"op": message.op.value}
    for f in fields(message):
        value = getattr(message, f.name)
        out[f.name] = encode(value) if isinstance(value, Message) else value
    return out


def decode(raw: Any, *accepted: type[Message]) -> Message:
    """The message ``raw`` (a dict from :func:`encode`) stands for.

    Args:
        accepted: the message types the receiving side takes here (default: any).

    Raises:
        ProtocolError: not a message, an unknown op, a field missing or unexpected, or a type
            not in ``accepted``.
    """
    if not isinstance(raw, dict) or "op" not in raw:
        raise ProtocolError(f"not a message (a dict with an op): {raw!r:.200}")
    try:
        cls = MESSAGES[Op(raw["op"])]
    except ValueError:
        raise ProtocolError(f"unknown op {raw['op']!r}; known: "
                            f"{', '.join(op.value for op in Op)}") from None
    if accepted and cls not in accepted:
        raise ProtocolError(f"unexpected {cls.op.value} message here; expected "
                            f"{' or '.join(c.op.value for c in accepted)}")
    try:
        return cls.from_fields({k: v for k, v in raw.items() if k != "op"})
    except TypeError as e:
        raise ProtocolError(f"bad {cls.op.value} message: {e}") from None


def send(conn: Connection, message: Message) -> None:
    """Send ``message`` on ``conn`` (raises what the connection raises when its peer is gone)."""
    conn.send(encode(message))


def receive(conn: Connection, *accepted: type[Message]) -> Message:
    """The next message on ``conn``, decoded (see :func:`decode`); EOFError when the peer is
    gone."""
    return decode(conn.recv(), *accepted)
