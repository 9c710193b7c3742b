"""The preflight's data checks: the data loads, a sample of inputs is normalised floats, the
labels are fixed integer class indices in range, the classes are balanced; and the grid of sample
images with their class names, for a human to spot swapped labels."""
from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from .checks import Context, Stop, read_items
from .datasets import Data, load_data
from .verdicts import FAIL, PASS, WARN

SAMPLE = 64          # items read for the data checks
BALANCE_ITEMS = 5000  # at most this many labels counted per split for the class balance
GRID = 16            # images in the sample grid
GRID_COLUMNS, GRID_TILE = 8, 64  # the sample grid: tiles per row, pixels per tile side


def data_checks(ctx: Context) -> None:
    s = ctx.settings
    data = ctx.data = ctx.guarded("data", lambda: load_data(s))
    n_train, n_val = len(data.train), len(data.val)
    order = torch.randperm(n_train, generator=torch.Generator().manual_seed(0)).tolist()
    sample = order[:SAMPLE]
    x, y = ctx.guarded("data", lambda: read_items(data.train, sample))
    ctx.add("data", PASS, f"{n_train} training and {n_val} validation items, "
                          f"{data.num_classes} classes, images {data.in_channels}x"
                          f"{data.image_size[0]}x{data.image_size[1]}")
    # each check on its own: one that raises is an ERROR row and the others still run
    inputs_ok = ctx.isolated("inputs", _inputs_check, ctx, x, data) is not False
    labels_ok = ctx.isolated("labels", _labels_check, ctx, y, data, sample) is not False
    if labels_ok:  # counting classes needs one integer label per item
        ctx.isolated("class_balance", _class_balance_check, ctx, data)
    if ctx.out is not None and inputs_ok:
        path = ctx.isolated("samples", sample_grid, x[:GRID], y[:GRID] if labels_ok else None,
                            data, ctx.out / "samples.png")
        if path is not None:
            ctx.report.files["samples"] = str(path)
    if not (inputs_ok and labels_ok):
        raise Stop


def _inputs_check(ctx: Context, x: torch.Tensor, data: Data) -> bool:
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


def _labels_check(ctx: Context, y: torch.Tensor, data: Data, sample: list[int]) -> bool:
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
    _, again = read_items(data.train, sample)
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


def _class_balance_check(ctx: Context, data: Data) -> None:
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


def sample_grid(x: torch.Tensor, y: torch.Tensor | None, data: Data, path: Path) -> Path:
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
