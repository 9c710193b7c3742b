"""The checks of ``bench/gpu_check.sh`` on one CUDA GPU, one step per process, and the pure pieces
they share (the table, nvidia-smi's CSV, pytest's summary, the throughput ratio, the AMP verdict).

The shell script finds a Python with a CUDA torch, then runs each step under its own ``timeout``::

    python bench/gpu_check.py probe             # exit 0: a GPU; 10: the no-GPU line; 11: no torch
    python bench/gpu_check.py step NAME WORK [--rehearse]   # writes WORK/rows/NAME.json
    python bench/gpu_check.py table WORK [--out DIR]        # the table; DIR/gpu_check.md

``--rehearse`` runs every step on the CPU with a small model and a few hundred images: the same
code paths in a few minutes, so a GPU's short loan is not lost to a typo. It measures nothing.

The data are made here (``module:function`` datasets the workers import from the repository
root): CIFAR-sized 3 x 32 x 32 images of 10 classes, each class a fixed smooth pattern under
noise, a tenth of the labels drawn at random: a few hundred steps learn them, and accuracy and
loss level off short of perfect (about 0.91), so fp32 and bf16 can be compared on both.
Only the standard library is imported at the top: ``probe`` and ``table`` stay cheap.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "sweeps" / "cifar10_resnet18.yaml"
STEPS = ("tests", "sweep", "packing", "parity", "export")
STATUSES = ("PASS", "FAIL", "SKIP")
NO_GPU_EXIT = 10  # probe: no usable GPU, the line is printed
NO_TORCH_EXIT = 11  # probe: torch does not import with this Python
CLASSES = 10
SIGNAL = 0.3  # a class pattern's amplitude against noise of std 1
LABEL_NOISE = 0.1  # share of labels drawn at random: accuracy tops out near 0.91, loss above 0
PACKED = 4  # trials packed on one GPU (workers_per_gpu) in the packing step
PACKING_SETS = {"alone": ("train.epochs=1", "preflight=false"),
                "packed": ("train.epochs=1", "preflight=false", f"workers_per_gpu={PACKED}")}
MIN_PACKING_RATIO = 1.0  # packing must give at least one-at-a-time's throughput
MAX_ACC_DIFF = 0.02  # AMP parity: |val_acc(bf16) - val_acc(fp32)|
MAX_LOSS_DIFF = (0.05, 0.05)  # AMP parity: |val_loss diff| <= a + b * val_loss(fp32)
MIN_LEARNED_ACC = 0.5  # both runs must have learned (chance is 1 / CLASSES)
MIN_CUDA_AGREEMENT = 0.99  # export: top-1 of the CUDA model and of the exported file on the CPU


@dataclass(frozen=True)
class Sizes:
    """What the steps train: the full check on a GPU, or the CPU rehearsal of its code paths."""

    model: str
    sweep_images: tuple[int, int]  # training, validation
    sweep_epochs: int
    sweep_batch: int
    parity_images: tuple[int, int]
    parity_batch: int
    export_images: tuple[int, int]


GPU = Sizes("resnet18", (45_000, 5_000), 2, 512, (38_400, 5_000), 128, (4_096, 512))
REHEARSAL = Sizes("small_cnn", (512, 128), 2, 64, (1_024, 256), 32, (256, 64))


@dataclass(frozen=True)
class Row:
    """One line of the table: a step, its status, what it measured, and its seconds."""

    name: str
    status: str
    figures: str
    seconds: float


# --------------------------------------------------------------------------- data (workers)

def _images(train: int, val: int):
    import torch
    from torch.nn import functional as F
    from torch.utils.data import TensorDataset

    coarse = torch.randn(CLASSES, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    patterns = F.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)

    def split(n: int, seed: int) -> TensorDataset:
        g = torch.Generator().manual_seed(seed)
        drawn = torch.randint(0, CLASSES, (n,), generator=g)
        noise = torch.randn(n, 3, 32, 32, generator=g).add_(patterns[drawn], alpha=SIGNAL)
        relabel = torch.rand(n, generator=g) < LABEL_NOISE
        labels = torch.where(relabel, torch.randint(0, CLASSES, (n,), generator=g), drawn)
        return TensorDataset(noise, labels)

    return split(train, 1), split(val, 2), CLASSES


def _sizes() -> Sizes:
    return REHEARSAL if os.environ.get("GPU_CHECK_REHEARSE") == "1" else GPU


def sweep_images():
    """CIFAR-10's split (45,000 training, 5,000 validation images; a few hundred to rehearse)."""
    return _images(*_sizes().sweep_images)


def parity_images():
    """300 steps of batch 128 in one epoch, and CIFAR-10's 5,000 validation images."""
    return _images(*_sizes().parity_images)


def export_images():
    """A short training run and 512 validation images for the export's parity checks."""
    return _images(*_sizes().export_images)


# --------------------------------------------------------------------------- pure pieces

def no_gpu_line(torch_version: str | None, cuda_build: str | None) -> str:
    """The one line said where there is no GPU to check."""
    if torch_version is None:
        return "no CUDA GPU on this machine: nothing to check (torch not installed)"
    return (f"no CUDA GPU on this machine: nothing to check (torch {torch_version}, CUDA build "
            f"{cuda_build or 'none'})")


def format_table(rows: list[Row], heading: list[str]) -> str:
    """A Markdown table of ``rows`` under the ``heading`` lines, ending with the overall result."""
    for row in rows:
        if row.status not in STATUSES:
            raise ValueError(f"row {row.name}: status {row.status!r} is not one of {STATUSES}")
    cells = [(r.name, r.status, r.figures.replace("|", "/").replace("\n", " "),
              f"{r.seconds:.1f}") for r in rows]
    lines = [*heading, "", "| step | status | figures | s |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(c)} |" for c in cells]
    failed = [r.name for r in rows if r.status == "FAIL"]
    lines += ["", f"result: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}, "
                  f"{sum(r.seconds for r in rows):.0f} s of steps"]
    return "\n".join(lines) + "\n"


def parse_utilisation(text: str) -> list[float]:
    """GPU utilisation samples (percent) from ``nvidia-smi --query-gpu=utilization.gpu
    --format=csv[,noheader][,nounits]`` output: header lines and ``[N/A]`` values are skipped."""
    samples = []
    for line in text.splitlines():
        value = line.split(",")[0].strip().removesuffix("%").strip()
        try:
            samples.append(float(value))
        except ValueError:  # the header ("utilization.gpu [%]"), [N/A], a cut last line
            continue
    return samples


def utilisation_figure(samples: list[float]) -> str:
    if not samples:
        return "no utilisation samples"
    return f"util mean {statistics.fmean(samples):.0f}% max {max(samples):.0f}%"


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``2 passed, 1 skipped, 800 deselected in 9s``)."""
    for line in reversed(text.strip().splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)",
                           line)
        if found and re.search(r" in [\d.]+s", line):
            return {kind.rstrip("s") if kind == "errors" else kind: int(n) for n, kind in found}
    return {}


def span_seconds(times_ms: list[tuple[int, int]]) -> float:
    """Seconds from the first start to the last end of (start, end) times in milliseconds."""
    return (max(end for _, end in times_ms) - min(start for start, _ in times_ms)) / 1000


def throughput_ratio(packed: tuple[int, float], alone: tuple[int, float]) -> float:
    """Samples per second of the packed trials over those of trials run one at a time, each
    given as (samples trained, seconds from the first trial's start to the last one's end)."""
    (packed_samples, packed_s), (alone_samples, alone_s) = packed, alone
    if packed_s <= 0 or alone_s <= 0 or alone_samples <= 0:
        raise ValueError(f"spans and samples must be > 0, got {packed} and {alone}")
    return (packed_samples / packed_s) / (alone_samples / alone_s)


def amp_verdict(fp32: dict[str, float], bf16: dict[str, float]) -> tuple[bool, str]:
    """Whether bf16 autocast trained like fp32 (final ``val_acc`` and ``val_loss`` within the
    tolerances, both runs above chance), and the figures saying so."""
    acc_diff = bf16["val_acc"] - fp32["val_acc"]
    loss_diff = bf16["val_loss"] - fp32["val_loss"]
    loss_tol = MAX_LOSS_DIFF[0] + MAX_LOSS_DIFF[1] * fp32["val_loss"]
    learned = min(fp32["val_acc"], bf16["val_acc"]) >= MIN_LEARNED_ACC
    ok = learned and abs(acc_diff) <= MAX_ACC_DIFF and abs(loss_diff) <= loss_tol
    text = (f"val_acc fp32 {fp32['val_acc']:.4f} bf16 {bf16['val_acc']:.4f} "
            f"(diff {acc_diff:+.4f}, tol {MAX_ACC_DIFF}); val_loss fp32 {fp32['val_loss']:.4f} "
            f"bf16 {bf16['val_loss']:.4f} (diff {loss_diff:+.4f}, tol {loss_tol:.3f})")
    if not learned:
        text += f"; a run stayed under val_acc {MIN_LEARNED_ACC}"
    return ok, text


def missing_row(name: str, rc_text: str | None, log_tail: str) -> Row:
    """The row of a step that wrote none: skipped for lack of time, timed out, or crashed."""
    if rc_text is None:
        return Row(name, "SKIP", "not run", 0.0)
    rc, limit, seconds = rc_text.split()
    if rc == "skip":
        return Row(name, "SKIP", f"no time left (needs {limit} s)", 0.0)
    if rc in ("124", "137"):
        return Row(name, "FAIL", f"timed out after {limit} s; log: {log_tail}", float(seconds))
    return Row(name, "FAIL", f"exit {rc}; log: {log_tail}", float(seconds))


# --------------------------------------------------------------------------- steps

_children: list[subprocess.Popen] = []  # process groups to kill if this step is killed


def _on_sigterm(signum, frame) -> None:
    """``timeout`` ends a step with SIGTERM: its sweeps (own process groups) end with it."""
    for proc in _children:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(124)


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[int, str]:
    """Run ``cmd`` from the repository root in its own process group, output to ``log``; the
    group is killed at ``timeout`` (the workers of a sweep with it). The stores are the ones
    the command names: ``MLFLOW_TRACKING_URI`` is left out of its environment."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        _children.append(proc)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = 124
    return rc, log.read_text(errors="replace")


def step_tests(work: Path, rehearse: bool) -> Row:
    """``pytest -m gpu``: the gpu-marked tests."""
    t0 = time.perf_counter()
    rc, text = _run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                     "tests"], work / "pytest.log", timeout=600)  # the shell's timeout is less
    counts = pytest_counts(text)
    figures = ", ".join(f"{n} {k}" for k, n in counts.items() if k != "deselected") or "no summary"
    ok = rc == 0 and counts.get("passed", 0) + (counts.get("skipped", 0) if rehearse else 0) > 0
    return Row("tests", "PASS" if ok else "FAIL", f"pytest -m gpu: {figures} (exit {rc})",
               time.perf_counter() - t0)


def sweep_command(work: Path, name: str, trials: int, workers: int, rehearse: bool,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """``sweep run`` of ``sweeps/cifar10_resnet18.yaml`` shortened by ``--set``, on the made
    data, with its stores in ``work``; ``extra`` are more ``--set`` values."""
    sizes = REHEARSAL if rehearse else GPU
    overrides = [f"name={name}", f"trials={trials}", "repeats=1", "pruner={name: none}",
                 "export=[]", "train.dataset=bench.gpu_check:sweep_images",
                 f"train.model={sizes.model}", f"train.epochs={sizes.sweep_epochs}",
                 f"train.batch_size={sizes.sweep_batch}", "train.warmup_epochs=1", *extra]
    gpus = [] if rehearse else ["--gpus", "0"]
    return [sys.executable, "-m", "orchestrator", "run", str(SPEC), "--workers", str(workers),
            *gpus, "--tracking-uri", f"sqlite:///{work / 'mlflow.db'}",
            "--storage", str(work / "optuna.journal"), *[f"--set={o}" for o in overrides]]


def _sweep(work: Path, name: str, trials: int, workers: int, rehearse: bool,
           extra: tuple[str, ...] = ()) -> tuple[int, list]:
    """Run one shortened sweep in ``work``; its exit code and its trial runs (MLflow)."""
    work.mkdir(parents=True, exist_ok=True)
    rc, _ = _run(sweep_command(work, name, trials, workers, rehearse, extra),
                 work / "sweep.log", timeout=600)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    runs = [] if exp is None else client.search_runs(
        [exp.experiment_id], "tags.`sweep.role` = 'trial'", max_results=100)
    histories = []
    for run in runs:
        keys = ("epoch_seconds", "samples_per_second", "peak_memory_mb")
        histories.append((run, {k: [m.value for m in sorted(client.get_metric_history(
            run.info.run_id, k), key=lambda m: m.step)] for k in keys}))
    return rc, histories


def step_sweep(work: Path, rehearse: bool) -> Row:
    """A shortened cifar10_resnet18 sweep (bf16, channels-last, preflight on): the last epoch's
    time, samples/s and peak memory of each trial."""
    t0 = time.perf_counter()
    rc, trials = _sweep(work, "gpu-check-sweep", 2, 1, rehearse)
    done = [h for run, h in trials if run.info.status == "FINISHED" and h["epoch_seconds"]]
    if not done:
        return Row("sweep", "FAIL", f"sweep run exit {rc}, no finished trial (see "
                                    f"gpu_check_logs/sweep.sweep.log)", time.perf_counter() - t0)
    epoch = statistics.median(h["epoch_seconds"][-1] for h in done)
    rate = statistics.median(h["samples_per_second"][-1] for h in done)
    first = statistics.median(h["epoch_seconds"][0] for h in done)
    peaks = [max(h["peak_memory_mb"]) for h in done if h["peak_memory_mb"]]
    peak = f"{max(peaks):,.0f} MiB" if peaks else "not logged (no CUDA)"
    figures = (f"{len(done)}/2 trials; last epoch {epoch:.2f} s (first {first:.2f} s), "
               f"{rate:,.0f} samples/s, peak memory {peak}; exit {rc}")
    ok = rc == 0 and len(done) == 2 and (rehearse or bool(peaks))
    return Row("sweep", "PASS" if ok else "FAIL", figures, time.perf_counter() - t0)


class Sampler:
    """``nvidia-smi`` sampling GPU 0's utilisation every 200 ms into a file while in use."""

    def __init__(self, path: Path):
        self.path, self.proc = path, None

    def __enter__(self) -> Sampler:
        if shutil.which("nvidia-smi"):
            self.file = open(self.path, "wb")
            self.proc = subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=utilization.gpu",
                                          "--format=csv", "-lms", "200"], stdout=self.file,
                                         stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.file.close()

    def samples(self) -> list[float]:
        return parse_utilisation(self.path.read_text()) if self.path.exists() else []


def _throughput(trials: list, images: int) -> tuple[int, float]:
    finished = [run for run, h in trials if run.info.status == "FINISHED"]
    if not finished:
        return 0, 0.0
    epochs = sum(len(h["epoch_seconds"]) for run, h in trials if run.info.status == "FINISHED")
    return images * epochs, span_seconds([(r.info.start_time, r.info.end_time) for r in finished])


def step_packing(work: Path, rehearse: bool) -> Row:
    """Four trials packed on GPU 0 (workers_per_gpu 4) against the same four one at a time:
    throughput over the trials' span, and nvidia-smi's utilisation during each."""
    t0 = time.perf_counter()
    sizes = REHEARSAL if rehearse else GPU
    results = {}
    for label, workers in (("alone", 1), ("packed", PACKED)):
        with Sampler(work / f"{label}.nvidia-smi.csv") as sampler:
            rc, trials = _sweep(work / label, f"gpu-check-{label}", PACKED, workers, rehearse,
                                PACKING_SETS[label])
        results[label] = (rc, _throughput(trials, sizes.sweep_images[0]), sampler.samples())
    (rc1, alone, util1), (rc4, packed, util4) = results["alone"], results["packed"]
    if not (alone[1] > 0 and packed[1] > 0):
        return Row("packing", "FAIL", f"a sweep finished no trial (exit {rc1} alone, {rc4} "
                                      f"packed)", time.perf_counter() - t0)
    ratio = throughput_ratio(packed, alone)
    figures = (f"{PACKED} packed {packed[0] / packed[1]:,.0f} samples/s over {packed[1]:.1f} s "
               f"({utilisation_figure(util4)}); one at a time {alone[0] / alone[1]:,.0f} "
               f"samples/s over {alone[1]:.1f} s ({utilisation_figure(util1)}); ratio "
               f"{ratio:.2f} (goal >= {MIN_PACKING_RATIO})")
    ok = rc1 == rc4 == 0 and alone[0] == packed[0] and (rehearse or ratio >= MIN_PACKING_RATIO)
    return Row("packing", "PASS" if ok else "FAIL", figures, time.perf_counter() - t0)


def _device(rehearse: bool) -> str:
    return "cpu" if rehearse else "cuda"


def step_parity(work: Path, rehearse: bool) -> Row:
    """The same seed trained one epoch (a few hundred steps) in fp32 and in bf16 autocast."""
    from trainers import TrainSettings, train

    t0 = time.perf_counter()
    sizes = REHEARSAL if rehearse else GPU
    base = dict(dataset="bench.gpu_check:parity_images", model=sizes.model, epochs=1,
                batch_size=sizes.parity_batch, optimizer="sgd", lr=0.05, nesterov=True,
                weight_decay=5e-4, channels_last=True, seed=0, device=_device(rehearse))
    finals, seconds = {}, {}
    for amp in ("none", "bf16"):
        result = train(TrainSettings(**base, amp=amp))
        finals[amp], seconds[amp] = result.history[-1], result.train_seconds
    ok, text = amp_verdict(finals["none"], finals["bf16"])
    ok = ok or rehearse  # a rehearsal's few steps on a small model have not levelled off
    steps = sizes.parity_images[0] // sizes.parity_batch
    figures = (f"{steps} steps: {text}; train s fp32 {seconds['none']:.1f} bf16 "
               f"{seconds['bf16']:.1f}")
    return Row("parity", "PASS" if ok else "FAIL", figures, time.perf_counter() - t0)


def step_export(work: Path, rehearse: bool) -> Row:
    """Export of a model trained on CUDA (bf16, channels-last) from its saved weights, each
    format's own parity check, and the CUDA model against the ONNX file run on the CPU."""
    import numpy as np
    import torch

    from trainers import TrainSettings, save_weights, train
    from trainers.datasets import load_data
    from trainers.export import FILES, export, load_onnx, raw_pixels

    t0 = time.perf_counter()
    sizes = REHEARSAL if rehearse else GPU
    settings = TrainSettings(dataset="bench.gpu_check:export_images", model=sizes.model,
                             epochs=1, batch_size=128 if not rehearse else 32, amp="bf16",
                             channels_last=True, seed=0, device=_device(rehearse))
    result = train(settings)
    weights = save_weights(result.model, work / "weights.pt")
    report = export(settings, weights, work / "export")
    pixels, labels = raw_pixels(load_data(settings))
    model = result.model.eval()
    with torch.no_grad():
        x = pixels.to(result.device).contiguous(memory_format=torch.channels_last)
        trained = model(x).float().cpu().numpy()
    exported = load_onnx(work / "export" / FILES["onnx"])(pixels.numpy())
    agreement = float((trained.argmax(1) == exported.argmax(1)).mean())
    parts = [f"{fmt} {'ok' if r.get('passed') else 'FAILED'} (max diff "
             f"{r.get('max_abs_diff', float('nan')):.1e})" if r.get("error") is None
             else f"{fmt} FAILED: {r['error']}" for fmt, r in report.formats.items()]
    diff = float(np.abs(trained - exported).max())
    ok = all(r.get("passed") for r in report.formats.values()) and \
        agreement >= MIN_CUDA_AGREEMENT
    figures = (f"trained on {result.device}; {'; '.join(parts)}; {result.device} model vs "
               f"ONNX on the CPU: top-1 agreement {agreement:.4f} (goal >= "
               f"{MIN_CUDA_AGREEMENT}), max logit diff {diff:.1e}; val_acc "
               f"{float((exported.argmax(1) == labels.numpy()).mean()):.3f}")
    return Row("export", "PASS" if ok else "FAIL", figures, time.perf_counter() - t0)


STEP_FUNCTIONS = {"tests": step_tests, "sweep": step_sweep, "packing": step_packing,
                  "parity": step_parity, "export": step_export}


# --------------------------------------------------------------------------- commands

def probe() -> int:
    """Exit 0 where torch sees a CUDA GPU; else print the no-GPU line and exit NO_GPU_EXIT, or
    NO_TORCH_EXIT where torch does not import."""
    try:
        import torch
    except ImportError:
        print(no_gpu_line(None, None))
        return NO_TORCH_EXIT
    if torch.cuda.is_available():
        print(f"cuda: {torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda})")
        return 0
    print(no_gpu_line(torch.__version__, torch.version.cuda))
    return NO_GPU_EXIT


def run_step(name: str, work: Path, rehearse: bool) -> int:
    """Run step ``name``; its row goes to ``work/rows/NAME.json`` (an exception is a FAIL row)."""
    os.environ["GPU_CHECK_REHEARSE"] = "1" if rehearse else "0"
    if str(ROOT) not in sys.path:  # the datasets are bench.gpu_check:..., as workers import them
        sys.path.insert(0, str(ROOT))
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    t0 = time.perf_counter()
    try:
        row = STEP_FUNCTIONS[name](folder, rehearse)
    except Exception as e:  # the table says what broke; the traceback is in the step's log
        import traceback

        traceback.print_exc()
        first = str(e).splitlines()[0][:300] if str(e) else ""
        row = Row(name, "FAIL", f"{type(e).__name__}: {first}", time.perf_counter() - t0)
    for log in folder.rglob("*.log"):  # the sweeps' and workers' logs, beside the step's own
        parts = [part.lstrip(".") for part in log.relative_to(folder).parts]
        shutil.copy(log, work / "logs" / ".".join((name, *parts)))
    (work / "rows").mkdir(exist_ok=True)
    (work / "rows" / f"{name}.json").write_text(json.dumps(asdict(row)))
    print(format_table([row], []))
    return 0 if row.status != "FAIL" else 1


def _heading(rehearse: bool) -> list[str]:
    import platform

    import torch

    if torch.cuda.is_available():
        memory = torch.cuda.get_device_properties(0).total_memory / 2**30
        gpu = f"{torch.cuda.get_device_name(0)}, {memory:.0f} GiB"
    else:
        gpu = "no GPU"
    kind = "CPU rehearsal of the code paths, figures mean nothing" if rehearse else "GPU check"
    return [f"# bench/gpu_check.sh: {kind}", "",
            f"{time.strftime('%Y-%m-%d %H:%M')}; {gpu}; torch {torch.__version__} (CUDA build "
            f"{torch.version.cuda}); Python {platform.python_version()}; {os.cpu_count()} cores"]


def table(work: Path, out: str | None, rehearse: bool) -> int:
    """Print the table of every step's row (a missing one said as skipped, timed out or
    crashed), write it to ``out/gpu_check.md`` with the steps' logs; exit 1 on a FAIL."""
    rows = []
    for name in STEPS:
        path, rc = work / "rows" / f"{name}.json", work / "rows" / f"{name}.rc"
        if path.exists():
            rows.append(Row(**json.loads(path.read_text())))
            continue
        log = work / "logs" / f"{name}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        rows.append(missing_row(name, rc.read_text() if rc.exists() else None,
                                tail[0][:200] if tail else "empty"))
    text = format_table(rows, _heading(rehearse))
    print(text, end="")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, "gpu_check.md").write_text(text)
        if (work / "logs").is_dir():
            shutil.copytree(work / "logs", Path(out, "gpu_check_logs"), dirs_exist_ok=True)
    return 1 if any(r.status == "FAIL" for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("probe")
    step = sub.add_parser("step")
    step.add_argument("name", choices=STEPS)
    step.add_argument("work", type=Path)
    step.add_argument("--rehearse", action="store_true")
    tab = sub.add_parser("table")
    tab.add_argument("work", type=Path)
    tab.add_argument("--out", default=None)
    tab.add_argument("--rehearse", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "probe":
        return probe()
    if args.command == "step":
        signal.signal(signal.SIGTERM, _on_sigterm)
        return run_step(args.name, args.work, args.rehearse)
    return table(args.work, args.out, args.rehearse)


if __name__ == "__main__":
    sys.exit(main())
