"""Preflight: the classic PyTorch training bugs, checked before a sweep spends hours on them.

The checks follow the order in which an experienced engineer debugs a training that does not
converge: the data first, then devices and dtypes, then whether every parameter is registered and
reached by the gradient, then the loss wiring, then whether one small batch can be overfit (if
not, the model or the loss is broken, not the hyperparameters), then the gradients of that run.
An optional learning-rate range test suggests where to search ``lr``.

:func:`preflight` is a plain function of the trainer settings, like :func:`trainers.train`.
"""
from __future__ import annotations

import itertools
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset, TensorDataset, default_collate

from . import seams
from .datasets import Data, load_data
from .loop import build_run, forward_loss, user_metrics
from .runtime import prepare_inputs, resolve_device, seed_everything
from .settings import CUDA_METRICS, EPOCH_METRICS, TrainSettings
from .verdicts import ERROR, FAIL, PASS, SKIP, WARN, worst

SAMPLE = 64          # items read for the data checks
BALANCE_ITEMS = 5000  # at most this many labels counted per split for the class balance
OVERFIT_BATCH = 32
OVERFIT_LR = 1e-3    # Adam at its default: a healthy model overfits one batch with it
OVERFIT_TARGET = 0.1  # cross-entropy a memorised batch gets under (2.3 = chance on 10 classes)
GRID = 16            # images in the sample grid
GRID_COLUMNS, GRID_TILE = 8, 64  # the sample grid: tiles per row, pixels per tile side


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


class _Stop(Exception):
    """An earlier check failed in a way that makes the later ones meaningless."""


def preflight(settings: TrainSettings, *, out_dir: str | Path | None = None,
              overfit_steps: int = 300, lr_range_test: bool = False,
              lr_search: tuple[float, float] | None = None) -> PreflightReport:
    """Run the preflight checks on the model and data of ``settings``.

    Args:
        settings: the run to check (its dataset, model, device and optimizer).
        out_dir: where the sample grid (and the lr range plot) are written; None writes none.
        overfit_steps: most Adam steps spent on one fixed batch of 32 items.
        lr_range_test: also sweep the lr exponentially with ``settings.optimizer``.
        lr_search: the sweep's lr search range, compared with the range test's suggestion.

    Returns:
        A :class:`PreflightReport`; ``report.status`` is FAIL when a sweep should not start.
    """
    if overfit_steps < 1:
        raise ValueError(f"overfit_steps must be >= 1, got {overfit_steps}")
    started = time.perf_counter()
    report = PreflightReport()
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    steps = [("data", _data_checks), ("devices", _device_check),
             ("registration", _registration_check), ("gradients", _gradient_check),
             ("loss_wiring", _loss_wiring_check), ("seams", _seams_check),
             ("last_batch", _last_batch_check),
             ("overfit", _overfit_checks)]
    if lr_range_test:
        steps.append(("lr_range", lambda ctx: _lr_range_check(ctx, lr_search)))
    ctx = _Context(settings, report, out, overfit_steps)
    for name, step in steps:
        if name not in ("data", "devices") and ctx.batch is None:
            break  # no model and batch to check: the rest are SKIP
        try:
            ctx.isolated(name, step, ctx)
        except _Stop:
            break
    names = ["data", "inputs", "labels", "class_balance", "devices", "registration",
             "gradients", "loss_wiring", "overfit", "gradient_health"]
    if lr_range_test:
        names.append("lr_range")
    done = {c.name for c in report.checks}
    report.checks += [Check(n, SKIP, "not run: an earlier check failed") for n in names
                      if n not in done]
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class _Context:
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
        except _Stop:
            raise
        except Exception as e:  # noqa: BLE001 - the checker's own failure, reported as such
            user = _user_frame(e)
            if user is not None:  # the user's model, data or loss raised: a finding
                self.add(name, FAIL, f"{type(e).__name__}: {_first_line(e)} (at "
                                     f"{Path(user.filename).name}:{user.lineno} in {user.name})",
                         "your code raised", "fix the error above, then run sweep doctor again")
                raise _Stop from e
            where = traceback.extract_tb(e.__traceback__)[-1]
            self.add(name, ERROR, f"{type(e).__name__}: {_first_line(e)} (at "
                                  f"{Path(where.filename).name}:{where.lineno} in {where.name})",
                     "the check itself raised: a fault of the checker, not a verdict on your "
                     "code", "the other checks still ran; sweep run does not stop on an ERROR")
            return None

    def guarded(self, name: str, fn) -> Any:
        """``fn()``, turning an exception into a FAIL of check ``name`` that stops the rest."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - any error here is the finding
            self.add(name, FAIL, f"{type(e).__name__}: {_first_line(e)}",
                     "the code under test raised", "fix the error above, then run sweep doctor "
                                                   "again")
            raise _Stop from e


# the trainer's own files and the installed libraries: a frame elsewhere is the user's code
_NOT_USER = tuple({str(Path(__file__).resolve().parent), sys.prefix, sys.base_prefix,
                   sys.exec_prefix})


def _user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``e``'s traceback in the user's own files (a model or dataset of
    theirs), or None when only the trainer and libraries ran."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not str(Path(f.filename).resolve()).startswith(_NOT_USER)
              and not f.filename.startswith("<")]
    return frames[-1] if frames else None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else "(no message)"


# ----------------------------------------------------------------------------------- data

def _read(dataset: Dataset, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
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


def _data_checks(ctx: _Context) -> None:
    s = ctx.settings
    data = ctx.data = ctx.guarded("data", lambda: load_data(s))
    n_train, n_val = len(data.train), len(data.val)
    order = torch.randperm(n_train, generator=torch.Generator().manual_seed(0)).tolist()
    sample = order[:SAMPLE]
    x, y = ctx.guarded("data", lambda: _read(data.train, sample))
    ctx.add("data", PASS, f"{n_train} training and {n_val} validation items, "
                          f"{data.num_classes} classes, images {data.in_channels}x"
                          f"{data.image_size[0]}x{data.image_size[1]}")
    # each check on its own: one that raises is an ERROR row and the others still run
    inputs_ok = ctx.isolated("inputs", _inputs_check, ctx, x, data) is not False
    labels_ok = ctx.isolated("labels", _labels_check, ctx, y, data, sample) is not False
    if labels_ok:  # counting classes needs one integer label per item
        ctx.isolated("class_balance", _class_balance_check, ctx, data)
    if ctx.out is not None and inputs_ok:
        path = ctx.isolated("samples", _sample_grid, x[:GRID], y[:GRID] if labels_ok else None,
                            data, ctx.out / "samples.png")
        if path is not None:
            ctx.report.files["samples"] = str(path)
    if not (inputs_ok and labels_ok):
        raise _Stop


def _inputs_check(ctx: _Context, x: torch.Tensor, data: Data) -> bool:
    shape = "x".join(map(str, x.shape))
    if not x.is_floating_point():
        lo, hi = int(x.min()), int(x.max())
        ctx.add("inputs", FAIL, f"a batch is {x.dtype} {shape}, values {lo}..{hi}",
                f"{x.dtype} pixels reach the model (raw image bytes, not normalised floats)",
                "convert to float32 and normalise in the dataset (e.g. transforms.ToTensor() "
                "then transforms.Normalize(mean, std))")
        return False
    xf = x.float()
    lo, hi, mean, std = float(xf.min()), float(xf.max()), float(xf.mean()), float(xf.std())
    evidence = (f"a batch is {x.dtype} {shape}, range [{lo:.3g}, {hi:.3g}], mean {mean:.3g}, "
                f"std {std:.3g}")
    if not all(map(math.isfinite, (lo, hi))):
        ctx.add("inputs", FAIL, evidence, "the images hold NaN or infinite values",
                "find the broken files or the division by zero in the dataset")
        return False
    if hi > 20 or abs(mean) > 5 or std > 10:
        ctx.add("inputs", WARN, evidence, "inputs are not normalised (pixel values around "
                                          f"0..{hi:.0f} reach the model)",
                "divide by 255 and normalise per channel (transforms.Normalize)")
    elif std < 1e-6:
        ctx.add("inputs", WARN, evidence, "every input value is the same",
                "check the image loading and the normalisation statistics")
    else:
        ctx.add("inputs", PASS, evidence)
    return True


def _labels_check(ctx: _Context, y: torch.Tensor, data: Data, sample: list[int]) -> bool:
    k = data.num_classes
    if isinstance(y, torch.Tensor) and y.ndim != 1:
        ctx.add("labels", FAIL, f"a batch of labels is {y.dtype} {tuple(y.shape)}, not "
                                f"({len(y)},)",
                "each label is a vector (one-hot?) rather than one class index",
                "return the class index as an integer (for one-hot labels: "
                "int(label.argmax()))")
        return False
    if not isinstance(y, torch.Tensor) or y.is_floating_point() or y.dtype == torch.bool:
        dtype = y.dtype if isinstance(y, torch.Tensor) else type(y).__name__
        ctx.add("labels", FAIL, f"labels are {dtype}",
                "CrossEntropyLoss reads float labels as class probabilities, not class indices",
                "return integer class indices (torch.long) from the dataset")
        return False
    lo, hi = int(y.min()), int(y.max())
    evidence = f"labels are {y.dtype}, values {lo}..{hi}, num_classes {k}"
    if lo < 0 or hi >= k:
        ctx.add("labels", FAIL, evidence, f"labels fall outside [0, {k}) (1-based class ids, "
                                          f"or a num_classes too small)",
                f"map labels to 0..{k - 1}, or return num_classes {hi + 1}")
        return False
    _, again = _read(data.train, sample)
    changed = int((torch.as_tensor(again) != y).sum())
    if changed:
        ctx.labels_change = (f"{changed} of {len(sample)} labels changed between two reads of "
                             f"the same items")
        ctx.add("labels", WARN, f"{evidence}; {ctx.labels_change}",
                "labels are not a fixed function of the item (drawn at random on access?)",
                "make __getitem__ return the item's stored label")
    else:
        ctx.add("labels", PASS, evidence)
    return True


def _split_labels(split: Dataset) -> torch.Tensor:
    if isinstance(split, TensorDataset):
        return split.tensors[1]
    n = min(len(split), BALANCE_ITEMS)
    return torch.as_tensor([int(split[i][1]) for i in range(n)])


def _class_balance_check(ctx: _Context, data: Data) -> None:
    k = data.num_classes
    parts, problems = [], []
    for name in ("train", "val"):
        y = _split_labels(getattr(data, name)).long()
        counts = torch.bincount(y.clamp(0, k - 1), minlength=k)
        parts.append(f"{name} {len(y)}: {int(counts.min())}..{int(counts.max())} per class")
        if int(counts.min()) == 0:
            missing = [data.classes[i] for i in (counts == 0).nonzero().flatten().tolist()][:5]
            problems.append(f"{name} has no items of class(es) {', '.join(missing)}")
        elif counts.max() > 10 * counts.min():
            problems.append(f"{name} classes differ more than tenfold in size")
    if problems:
        ctx.add("class_balance", WARN, "; ".join(parts), "; ".join(problems),
                "check the split; for real imbalance weigh the loss or resample, and read "
                "per-class accuracy rather than val_acc alone")
    else:
        ctx.add("class_balance", PASS, "; ".join(parts))


def _sample_grid(x: torch.Tensor, y: torch.Tensor | None, data: Data, path: Path) -> Path:
    """A PNG of the first images with their class names (``y`` None: labels unusable, the
    images alone), for a human to spot swapped labels. Drawn with PIL, tile by tile: the
    preflight runs before the first trial, where matplotlib's import and layout cost seconds."""
    from PIL import Image, ImageDraw

    x = x.float()
    if data.normalization is not None:
        mean = torch.tensor(data.normalization.mean).view(1, -1, 1, 1)
        std = torch.tensor(data.normalization.std).view(1, -1, 1, 1)
        x = x * std + mean
    else:
        flat = x.flatten(1)
        lo, hi = flat.min(1).values.view(-1, 1, 1, 1), flat.max(1).values.view(-1, 1, 1, 1)
        x = (x - lo) / (hi - lo).clamp_min(1e-8)
    pixels = (x.clamp(0, 1) * 255).round().to(torch.uint8)
    cols, rows = GRID_COLUMNS, max(1, math.ceil(len(x) / GRID_COLUMNS))
    side = GRID_TILE
    sheet = Image.new("RGB", (cols * (side + 8), rows * (side + 22)), "white")
    draw = ImageDraw.Draw(sheet)
    labels = [int(v) for v in y.tolist()] if y is not None else [None] * len(x)
    for i, (img, label) in enumerate(zip(pixels, labels)):
        array = img[0].numpy() if img.shape[0] != 3 else img.permute(1, 2, 0).numpy()
        tile = Image.fromarray(array).convert("RGB")
        scale = side / max(tile.size)  # small images (digits: 8x8) grow without blurring
        tile = tile.resize((max(1, round(tile.width * scale)), max(1, round(tile.height * scale))),
                           Image.NEAREST if scale >= 1 else Image.BILINEAR)
        left, top = (i % cols) * (side + 8) + 4, (i // cols) * (side + 22) + 2
        sheet.paste(tile, (left, top))
        title = "?" if label is None else \
            data.classes[label] if 0 <= label < len(data.classes) else str(label)
        draw.text((left, top + side + 3), str(title)[:14], fill="black")
    sheet.save(path)
    return path


# ---------------------------------------------------------------------------- the model

def _device_check(ctx: _Context) -> None:
    s = ctx.settings
    ctx.device = ctx.guarded("devices", lambda: resolve_device(s.device))
    ctx.run = ctx.guarded("model", lambda: build_run(s, ctx.device, ctx.data))
    step = ctx.guarded("devices", lambda: next(iter(ctx.run.train_batches.epoch(1))))
    x, y = step.micro_batches[0]
    ctx.batch = (x, y)
    params = sorted({f"{p.device} {p.dtype}".replace("torch.", "")
                     for p in ctx.run.model.parameters()})
    evidence = (f"model {', '.join(params) or 'no parameters'} | inputs {x.device} "
                f"{x.dtype} | labels {y.device} {y.dtype}".replace("torch.", ""))
    devices = {p.device for p in ctx.run.model.parameters()} | {x.device, y.device}
    if len(devices) > 1:
        ctx.add("devices", FAIL, evidence, "model, inputs and labels are not on one device",
                "move the model with model.to(device) and every batch's inputs and labels too")
        raise _Stop
    if y.dtype != torch.int64:
        ctx.add("devices", FAIL, evidence, "labels reach the loss as a non-long dtype",
                "labels must be torch.long class indices")
        raise _Stop
    ctx.add("devices", PASS, evidence)


def _registration_check(ctx: _Context) -> None:
    hidden = []
    for owner, module in ctx.run.model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            items = (value.values() if isinstance(value, dict) else
                     value if isinstance(value, (list, tuple, set)) else ())
            found = [v for v in items if isinstance(v, (nn.Module, nn.Parameter))]
            if found:
                n = sum(p.numel() for v in found for p in
                        (v.parameters() if isinstance(v, nn.Module) else [v]))
                kind = "dict" if isinstance(value, dict) else type(value).__name__
                hidden.append(f"{owner + '.' if owner else ''}{attr} (a plain {kind} of "
                              f"{len(found)} module(s), {n} parameters)")
    if hidden:
        ctx.add("registration", FAIL, "; ".join(hidden[:3]),
                "layers kept in a plain Python list or dict are invisible to "
                "model.parameters(): the optimizer never updates them and .to(device) never "
                "moves them", "use nn.ModuleList / nn.ModuleDict (nn.ParameterList for "
                              "parameters)")
    else:
        total = sum(p.numel() for p in ctx.run.model.parameters())
        ctx.add("registration", PASS, f"{total} parameters, all registered")


def _gradient_check(ctx: _Context) -> None:
    model, (x, y) = ctx.run.model, ctx.batch
    model.train()
    model.zero_grad(set_to_none=True)
    logits = ctx.guarded("gradients", lambda: model(x))
    if not isinstance(logits, torch.Tensor):
        ctx.add("gradients", FAIL, f"the model returned a {type(logits).__name__}, not a tensor",
                "the model must return one logits tensor (N x num_classes)",
                "return the logits alone; for a model returning (logits, aux) or a dict, wrap "
                "it in a module whose forward returns only the logits")
        raise _Stop
    loss = F.cross_entropy(logits.float(), y) if logits.shape[-1:] == (ctx.data.num_classes,) \
        else logits.float().sum()
    if not loss.requires_grad:
        ctx.add("gradients", FAIL, "the loss has no grad_fn",
                "the model's output is detached from its parameters (.detach(), .item(), "
                "torch.no_grad() or .data inside forward)",
                "keep the forward pass differentiable from input to logits")
        raise _Stop
    loss.backward()
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    dead = [n for n, p in named if p.grad is None or not bool(p.grad.ne(0).any())]
    if len(dead) == len(named):
        ctx.add("gradients", FAIL, f"none of {len(named)} parameter tensors got a gradient",
                "the output is detached from the parameters", "remove the detach in forward")
    elif dead:
        ctx.add("gradients", WARN, f"{len(dead)} of {len(named)} parameter tensors got no "
                                   f"gradient: {', '.join(dead[:4])}",
                "those layers are unused, frozen by a detach, or behind a dead ReLU",
                "remove unused layers, or the detach that cuts them off")
    else:
        ctx.add("gradients", PASS, f"all {len(named)} parameter tensors got a gradient")
    model.zero_grad(set_to_none=True)


def _loss_wiring_check(ctx: _Context) -> None:
    model, (x, _) = ctx.run.model, ctx.batch
    model.eval()
    with torch.no_grad():
        out = ctx.guarded("loss_wiring", lambda: model(x))  # eval mode: its own path
    if not isinstance(out, torch.Tensor):
        ctx.add("loss_wiring", FAIL, f"in eval mode the model returned a {type(out).__name__}, "
                                     f"not a tensor", "evaluation and export read one logits "
                                                      "tensor", "return the logits alone in "
                                                                "eval mode too")
        raise _Stop
    out = out.float()
    k = ctx.data.num_classes
    if out.ndim != 2 or out.shape[1] != k:
        ctx.add("loss_wiring", FAIL, f"logits shape {tuple(out.shape)}, expected "
                                     f"({len(x)}, {k})",
                "the model's head does not produce one logit per class",
                f"end the model with a layer of {k} outputs")
        raise _Stop
    sums = out.sum(1)
    if bool((out >= 0).all()) and torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        ctx.add("loss_wiring", FAIL, "every output row is non-negative and sums to 1",
                "the model ends in a softmax; CrossEntropyLoss applies log-softmax itself, so "
                "gradients shrink and training stalls", "return raw logits (drop the softmax)")
    elif bool((out <= 0).all()) and torch.allclose(out.logsumexp(1), torch.zeros_like(sums),
                                                   atol=1e-3):
        ctx.add("loss_wiring", FAIL, "every output row is a log-probability distribution",
                "the model ends in a log_softmax before CrossEntropyLoss (a double softmax)",
                "return raw logits (drop the log_softmax)")
    else:
        ctx.add("loss_wiring", PASS, f"logits {tuple(out.shape)}, values in "
                                     f"[{float(out.min()):.3g}, {float(out.max()):.3g}]")


def _seams_check(ctx: _Context) -> None:
    """The user's optimizer, schedule, loss, step and metrics run as training runs them: one
    optimizer step on the first batch must change the weights. A row only with user code."""
    s, run = ctx.settings, ctx.run
    users = [f"{seam} {getattr(s, seam)}" for seam in ("optimizer", "schedule", "loss", "step")
             if seams.is_user_code(seam, getattr(s, seam))]
    if not users and not s.metrics:
        return
    (x, y), params = ctx.batch, [p for p in run.module.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    run.model.train()
    run.optimizer.zero_grad(set_to_none=True)
    loss, logits = ctx.guarded("seams", lambda: forward_loss(run, prepare_inputs(s, x), y))
    ctx.guarded("seams", loss.backward)
    lr = run.optimizer.param_groups[0]["lr"]
    ctx.guarded("seams", run.optimizer.step)
    ctx.guarded("seams", run.scheduler.step)
    changed = sum(not torch.equal(a, p.detach()) for a, p in zip(before, params))
    evidence = (f"{'; '.join(users) or 'built-in seams'}: one step (lr {lr:.3g}, loss "
                f"{float(loss.detach()):.3g}) changed {changed} of {len(params)} parameter tensors")
    if changed == 0:
        blame = " or ".join(u.split()[0] for u in users if u.split()[0] in ("optimizer",
                                                                            "step")) or "loss"
        ctx.add("seams", FAIL, evidence, f"the user's {blame} leaves the weights as they were: "
                                         f"the sweep would train nothing",
                "update every parameter of the groups the optimizer is given (in step()), and "
                "return a loss computed from the model's output")
        raise _Stop
    if s.metrics:
        run.model.eval()
        with torch.no_grad():
            out = run.model(prepare_inputs(s, x)).float()
        values = ctx.guarded("seams", lambda: user_metrics(run.metric_fns, out, y,
                                                           {"val_loss", "val_acc"}))
        evidence += "; metrics on the batch: " + ", ".join(f"{k} {v:.3g}"
                                                           for k, v in values.items())
        ctx.report.metrics = [*EPOCH_METRICS, *(CUDA_METRICS if ctx.device.type == "cuda" else ()),
                              *values]
    ctx.add("seams", PASS, evidence)


def _last_batch_check(ctx: _Context) -> None:
    """Where an epoch leaves a forward pass of one item, that item trains: BatchNorm over one
    value per channel raises mid-epoch. A row only when some forward pass sees one item."""
    s, n = ctx.settings, len(ctx.data.train)
    order = ctx.run.train_batches.order
    if min(len(m) for micro, _, _ in order.steps() for m in micro) > 1:
        return
    model, (x, y) = ctx.run.model, ctx.batch
    model.train()
    k = s.grad_accum_steps
    evidence = (f"an epoch of {n} items in batches of {s.batch_size}"
                f"{f' (each in {k} forward passes)' if k > 1 else ''} leaves a forward pass of "
                f"one item")
    try:
        F.cross_entropy(model(x[:1]).float(), y[:1]).backward()
    except Exception as e:  # noqa: BLE001 - the model's own verdict on a batch of one
        # the next batch_size grad_accum_steps divides that leaves no forward pass of one item
        better = next(b for b in itertools.count(s.batch_size + k, k)
                      if not _leaves_one_item(n, b, k))
        ctx.add("last_batch", FAIL, f"{evidence}; the model raises on it: "
                                    f"{type(e).__name__}: {_first_line(e)}",
                "the model cannot train on a single item (BatchNorm needs two values per "
                "channel)", f"choose a batch_size that leaves no single item (e.g. {better}), "
                            f"or a dataset size that does")
    else:
        ctx.add("last_batch", PASS, f"{evidence}; the model trains on it")
    finally:
        model.zero_grad(set_to_none=True)


def _leaves_one_item(n: int, batch_size: int, grad_accum_steps: int) -> bool:
    """Whether an epoch of ``n`` items in batches of ``batch_size``, each cut into
    ``grad_accum_steps`` forward passes the way :class:`trainers.batches.EpochOrder` cuts them
    (``tensor_split``), has a forward pass of one item (in a full batch or the last one)."""
    last = n % batch_size
    return any(len(part) == 1 for size in {batch_size, last} - {0}
               for part in torch.arange(size).tensor_split(grad_accum_steps))


# ------------------------------------------------------------------------- overfit one batch

def _overfit_checks(ctx: _Context) -> None:
    """Adam on one fixed batch, re-read from the dataset at every step (so labels that change
    between reads show up as a batch that cannot be learnt)."""
    s, data, device = ctx.settings, ctx.data, ctx.device
    seed_everything(s.seed)
    model = ctx.guarded("overfit", lambda: build_run(s, device, data).model)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=OVERFIT_LR)
    n = min(OVERFIT_BATCH, len(data.train))
    indices = list(range(n))
    losses, norms = [], []
    for _ in range(ctx.overfit_steps):
        x, y = _read(data.train, indices)
        x, y = x.to(device, torch.float32), torch.as_tensor(y).long().to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)))
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]) or losses[-1] < OVERFIT_TARGET / 2:
            break
        optimizer.step()
    _judge_overfit(ctx, losses, n)
    _gradient_health(ctx, norms)


def _judge_overfit(ctx: _Context, losses: list[float], n: int) -> None:
    first, last, best = losses[0], losses[-1], min(losses)
    evidence = (f"loss {first:.3f} -> {last:.3f} (lowest {best:.3f}) in {len(losses)} Adam "
                f"steps (lr {OVERFIT_LR:g}) on one batch of {n}")
    if not math.isfinite(last):
        ctx.add("overfit", FAIL, evidence, "the loss became NaN/inf on a single batch",
                "look for log(0), division by zero or unnormalised inputs")
    elif best <= OVERFIT_TARGET:
        ctx.add("overfit", PASS, evidence)
    elif ctx.labels_change:
        ctx.add("overfit", FAIL, evidence, f"no batch can be memorised: {ctx.labels_change}",
                "make __getitem__ return the item's stored label")
    elif best <= 0.5 * first:
        ctx.add("overfit", WARN, evidence, "the loss falls but slowly for a single batch",
                "check the loss wiring and the model's capacity before tuning the lr")
    else:
        ctx.add("overfit", FAIL, evidence, "the model cannot memorise one small batch: the "
                                           "model or the loss is broken, not the hyperparameters",
                "check the checks above (softmax, detach, registration) and the model's forward")


def _gradient_health(ctx: _Context, norms: list[float]) -> None:
    finite = [g for g in norms if math.isfinite(g)]
    if len(finite) < len(norms):
        bad = next(i for i, g in enumerate(norms) if not math.isfinite(g))
        ctx.add("gradient_health", FAIL, f"gradient norm {norms[bad]} at step {bad + 1}",
                "non-finite gradients", "find the op producing inf/NaN (log of 0, division), "
                                        "or lower the lr")
        return
    ordered = sorted(finite)
    median = ordered[len(ordered) // 2]
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    top = ordered[-1]
    evidence = f"global gradient norm median {median:.3g}, max {top:.3g} over {len(norms)} steps"
    clip = ctx.settings.clip_grad_norm
    if top > 1e3 or (median > 0 and top > 50 * median):
        bounded = f" (clip_grad_norm {clip:g} bounds them)" if clip else ""
        ctx.add("gradient_health", WARN, evidence + bounded, "gradient norms spike",
                f"clip_grad_norm: {p90:.3g} (the 90th percentile) would bound the spikes"
                if not clip else "keep the clipping; check the lr warmup")
    else:
        ctx.add("gradient_health", PASS, evidence)


# -------------------------------------------------------------------------- lr range test

def _lr_range_check(ctx: _Context, lr_search: tuple[float, float] | None,
                    lo: float = 1e-6, hi: float = 1.0, steps: int = 100) -> None:
    """An exponential lr sweep with the run's optimizer; stops once the loss explodes."""
    s, device = ctx.settings, ctx.device
    seed_everything(s.seed)
    run = ctx.guarded("lr_range", lambda: build_run(replace(s, lr_scaling="none", min_lr=0.0,
                                                         lr=lo), device, ctx.data))
    model, optimizer = run.model, run.optimizer  # the lr is set by hand below, no scheduler
    model.train()
    lrs, losses, smooth, best = [], [], None, math.inf
    batches = _cycle(run)
    for i in range(steps):
        lr = lo * (hi / lo) ** (i / (steps - 1))
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        smooth = value if smooth is None else 0.8 * smooth + 0.2 * value
        lrs.append(lr)
        losses.append(smooth)
        best = min(best, smooth)
        if not math.isfinite(value) or smooth > 4 * best:
            break
    low, high = _suggest(lrs, losses)
    ctx.report.suggested_lr = (low, high)
    if ctx.out is not None:
        ctx.report.files["lr_range"] = str(_plot_lr_range(lrs, losses, (low, high),
                                                          ctx.out / "lr_range.png"))
    evidence = (f"{s.optimizer}: loss falls fastest near lr {math.sqrt(low * high):.2g}; "
                f"suggested lr range [{low:.2g}, {high:.2g}]")
    if lr_search and (lr_search[1] < low or lr_search[0] > high):
        ctx.add("lr_range", WARN, f"{evidence}; the sweep searches [{lr_search[0]:.2g}, "
                                  f"{lr_search[1]:.2g}]",
                "the lr search range misses the range where this model learns",
                f"search lr in [{low:.2g}, {high:.2g}]")
    else:
        ctx.add("lr_range", PASS, evidence)


def _cycle(run):
    for epoch in itertools.count(1):
        for step in run.train_batches.epoch(epoch):
            yield step.micro_batches[0]


def _suggest(lrs: list[float], losses: list[float]) -> tuple[float, float]:
    """A range around the steepest descent of the smoothed loss, capped below the lr of the
    lowest loss (past it the loss climbs)."""
    if len(lrs) < 5:
        return lrs[0], lrs[-1]
    logs = [math.log10(v) for v in lrs]
    slopes = [(losses[i + 1] - losses[i]) / (logs[i + 1] - logs[i]) for i in range(len(lrs) - 1)]
    stop = losses.index(min(losses))
    steepest = min(range(max(1, stop)), key=lambda i: slopes[i])
    center = lrs[steepest]
    return center / 3, min(center * 3, lrs[stop])


def _plot_lr_range(lrs, losses, suggested, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(lrs, losses)
    ax.axvspan(*suggested, alpha=0.2, label="suggested lr range")
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss (smoothed)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
