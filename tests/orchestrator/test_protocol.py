"""The runner-worker protocol: every message survives the wire as plain types, and anything else
is an error on both sides (a worker never trains on a message it does not understand)."""
from __future__ import annotations

import pickle
import socket
import time
from multiprocessing.connection import Connection

import pytest

from orchestrator.config.slots import Slot
from orchestrator.running import protocol  # its Test and Tested by name: pytest would collect them
from orchestrator.running.pool import Worker, WorkerPool
from orchestrator.running.protocol import (
    FROM_WORKER,
    MESSAGES,
    REQUESTS,
    Checked,
    Decision,
    Done,
    Epoch,
    Export,
    Exported,
    Failed,
    Op,
    Preflight,
    ProtocolError,
    Ready,
    Stop,
    Train,
    Warm,
    Warmed,
    decode,
    encode,
)

EXPORTED = Exported(report={"formats": {"onnx": {"passed": True}}}, metrics={"export_ms": 1.0},
                    error=None, dir="/tmp/x/export")
EXAMPLES = [
    Ready(pid=7, torch_version="2.4.0", torch_threads=2, cuda_visible_devices="0",
          cuda_available=True, cuda_version="12.4", cudnn_version="90100", device_name="H100"),
    Train(number=3, settings={"lr": 0.01, "model": "small_cnn"}, checkpoint_dir="/c",
          output_dir="/o", export_formats=("onnx",), export_dir="/o/export"),
    Epoch(epoch=1, metrics={"val_acc": 0.5}, lr_steps=[(1, 0.001), (2, 0.002)], resumed=False,
          warnings=("UserWarning: x",)),
    Decision(stop=True),
    Done(state="complete", epochs=2, train_seconds=1.5, device="cpu", resumed_from=1,
         weights="/o/weights.pt", export=EXPORTED, warnings=("UserWarning: y",)),
    Done(state="pruned", epochs=1, train_seconds=0.5, device="cpu", resumed_from=0,
         weights="/o/weights.pt"),
    Failed(reason="OSError: disk full", retryable=True),
    protocol.Test(settings={"lr": 0.01}, weights="/w.pt"),
    protocol.Tested(metrics={"test_acc": 0.9}),
    protocol.Tested(metrics=None, error="RuntimeError: no"),
    Export(settings={"lr": 0.01}, weights="/w.pt", formats=("onnx", "torchscript"), dir="/e"),
    EXPORTED,
    Exported.failed("ImportError: onnx", "/e"),
    Preflight(settings={"lr": 0.01}, dir="/p", overfit_steps=300, lr_range_test=False,
              lr_search=(0.001, 0.1)),
    Checked(report={"status": "PASS", "checks": []}),
    Warm(formats=("torch_export", "onnx")),
    Warmed(seconds=2.5),
    Stop(),
]
PLAIN = (str, int, float, bool, type(None))


def is_plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_plain(v) for v in value)
    return isinstance(value, PLAIN)


def test_every_op_has_one_message_and_an_example():
    assert set(MESSAGES) == set(Op)
    assert {type(m) for m in EXAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: f"{m.op.value}")
def test_every_message_round_trips_as_plain_types(message):
    wire = encode(message)
    assert wire["op"] == message.op.value and is_plain(wire)
    assert decode(pickle.loads(pickle.dumps(wire))) == message


@pytest.mark.parametrize("raw, error", [
    ({"op": "bogus"}, "unknown op 'bogus'"),
    ({"number": 1}, "not a message"),
    ("train", "not a message"),
    ({"op": "decision"}, "bad decision message"),  # a field missing
    ({"op": "decision", "stop": True, "why": "x"}, "bad decision message"),  # one too many
])
def test_what_is_not_a_message_raises_on_decode(raw, error):
    with pytest.raises(ProtocolError, match=error):
        decode(raw)


def test_a_message_the_receiving_side_does_not_take_raises():
    with pytest.raises(ProtocolError, match="unexpected train message here; expected ready"):
        decode(encode(EXAMPLES[1]), *FROM_WORKER)
    with pytest.raises(ProtocolError, match="unexpected ready message"):
        decode(encode(EXAMPLES[0]), *REQUESTS)


def test_the_pool_raises_on_an_unknown_op_from_a_worker(tmp_path):
    ours, theirs = socket.socketpair()
    worker = Worker(Slot(0, None, 1), proc=None, conn=Connection(ours.detach()),
                    log_path=tmp_path / "worker.log")
    pool = WorkerPool([worker.slot], tmp_path)
    pool.workers = [worker]
    with Connection(theirs.detach()) as peer:
        peer.send({"op": "bogus"})
        with pytest.raises(ProtocolError, match="unknown op 'bogus'"):
            pool.wait(timeout=5)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """One CPU slot for the cases below: each starts the worker again, forked by the one
    spawner that imported torch (orchestrator/running/spawner.py)."""
    pool = WorkerPool([Slot(0, None, 1)], tmp_path_factory.mktemp("pool") / "logs")
    pool.start()
    yield pool
    pool.stop()


def started_worker(pool: WorkerPool) -> Worker:
    """The pool's worker once it said it is ready: the one there, or a new one where the
    last case's has ended."""
    worker = pool.workers[0]
    if worker.info is not None:  # a case used it: it has ended (or ends now)
        worker.proc.kill()
        worker.exit_reason()
        worker = pool.restart(worker)
    deadline = time.monotonic() + 120
    while not worker.ready and time.monotonic() < deadline:
        for _, msg in pool.wait(timeout=0.5):
            assert isinstance(msg, Ready), msg
            worker.info = msg
    return worker


@pytest.mark.slow  # worker processes
@pytest.mark.parametrize("raw, error", [
    ({"op": "bogus", "number": 0}, "unknown op 'bogus'"),
    ({"op": "train", "number": 0}, "bad train message"),
    ({"op": "decision", "stop": False}, "unexpected decision message"),  # not between trials
])
def test_a_worker_sent_what_is_not_a_request_exits_without_training(pool, raw, error):
    worker = started_worker(pool)
    worker.conn.send(raw)  # as a runner with a bug would: past encode()
    replies = pool.wait(timeout=60)
    assert replies == [(worker, None)]  # its pipe closed: no epoch, no answer
    reason = worker.exit_reason()
    assert "exited with code 2" in reason and error in reason
