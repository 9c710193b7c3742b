"""Exported models that behave like the trained one: torch.export, ONNX, TorchScript, int8.

Every format wraps the trained network in :class:`Classifier`: raw pixels in (uint8
``N x C x H x W`` as the dataset stores them: 0..255 for images, 0..16 for digits), logits and class
index out, with the training normalisation inside, so serving cannot drift from training. Each
file carries its metadata (class names, input spec, normalisation) and is checked after export:
reloaded from the file alone and compared with the eager wrapper on the validation images at
batch sizes 1, 4 and a full batch (a trace that took one batch-size branch fails here), with
latency per image for each runtime.

``torch_export`` is the recommended format; ``torchscript`` still works but ``torch.jit`` is
deprecated in recent torch. ``int8`` is ONNX Runtime's post-training quantization of the ONNX file
(static QDQ with a calibration set from the training images, dynamic where static fails):
``torch.ao.quantization`` is deprecated in torch 2.14 in favour of the separate ``torchao``
package, while ONNX Runtime's quantizer is maintained with the runtime that serves the file.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from .datasets import Data, Normalization, load_data, validation_split
from .errors import TrainerWarning
from .loop import load_trained_model
from .settings import DEFAULT_EXPORT_FORMATS, EXPORT_FORMATS, TrainSettings

FORMATS = EXPORT_FORMATS
DEFAULT_FORMATS = DEFAULT_EXPORT_FORMATS
FILES = {"torch_export": "model.pt2", "onnx": "model.onnx", "torchscript": "model.ts",
         "int8": "model.int8.onnx"}
VALIDATION_FILE = "validation.json"  # the validation split's items (trainers.validation_split)
ONNX_OPSET = 18  # supported by every ONNX Runtime since 1.14 and by torch's dynamo exporter
PARITY_BATCHES = (1, 4)  # plus the full batch
SMALL_BATCH_IMAGES = 512  # images checked one by one and four at a time (all of them at full)
FULL_BATCH = 512  # the "full batch": the validation set in chunks of this many
LATENCY_BATCH = 32
LATENCY_RUNS = 20
MAX_ABS_DIFF = 1e-3  # float formats: logits within this (relative to the largest logit, min 1)
MIN_AGREEMENT = 0.999  # float formats: share of equal top-1 classes
MAX_INT8_ACC_DROP = 0.02  # int8: accuracy may drop this much on the validation set


class Classifier(nn.Module):
    """Raw pixels -> (logits, class index), the training normalisation inside."""

    def __init__(self, model: nn.Module, mean: torch.Tensor, std: torch.Tensor, scale: float):
        super().__init__()
        self.model = model
        self.register_buffer("mean", mean.view(1, -1, 1, 1).clone())
        self.register_buffer("std", std.view(1, -1, 1, 1).clone())
        self.scale = scale

    def forward(self, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = (pixels.to(torch.float32) / self.scale - self.mean) / self.std
        logits = self.model(x)
        return logits, logits.argmax(dim=1)


def wrap(model: nn.Module, data: Data) -> Classifier:
    """``model`` in eval mode inside a :class:`Classifier` for ``data``'s normalisation (identity
    for a user dataset, whose own code normalises)."""
    norm = data.normalization or Normalization(1.0, (0.0,) * data.in_channels,
                                               (1.0,) * data.in_channels)
    return Classifier(model.eval(), torch.tensor(norm.mean), torch.tensor(norm.std),
                      norm.scale).eval()


def raw_pixels(data: Data, split: str = "val") -> tuple[torch.Tensor, torch.Tensor]:
    """A split as the pixels serving receives: the normalisation undone, uint8 where the dataset
    has one (rounding recovers the stored integers), float32 for user datasets."""
    dataset = getattr(data, split)
    if hasattr(dataset, "tensors"):
        x, y = dataset.tensors
    else:
        items = [dataset[i] for i in range(len(dataset))]
        x = torch.stack([img for img, _ in items])
        y = torch.tensor([int(label) for _, label in items])
    norm = data.normalization
    if norm is None:
        return x.to(torch.float32), y.long()
    mean = torch.tensor(norm.mean).view(1, -1, 1, 1)
    std = torch.tensor(norm.std).view(1, -1, 1, 1)
    raw = ((x * std + mean) * norm.scale).round().clamp(0, norm.scale)
    return raw.to(torch.uint8), y.long()


def metadata(data: Data, settings: TrainSettings, pixels: torch.Tensor) -> dict[str, Any]:
    norm = data.normalization
    return {"classes": list(data.classes), "num_classes": data.num_classes,
            "input": {"name": "pixels", "dtype": str(pixels.dtype).replace("torch.", ""),
                      "shape": ["batch", data.in_channels, *data.image_size],
                      "range": [0, norm.scale] if norm else None},
            "outputs": ["logits", "class_index"],
            "normalization": ({"scale": norm.scale, "mean": list(norm.mean),
                               "std": list(norm.std)} if norm else None),
            "model": settings.model, "dataset": settings.dataset,
            "torch_version": str(torch.__version__)}  # a TorchVersion unpickles torch


# ------------------------------------------------------------------------------ exporters

def _batch_dim():
    return {"pixels": {0: torch.export.Dim("batch", min=1, max=65536)}}


def export_torch_export(wrapper: Classifier, example: torch.Tensor, path: Path,
                        meta: dict) -> dict:
    program = torch.export.export(wrapper, (example,), dynamic_shapes=_batch_dim())
    torch.export.save(program, str(path), extra_files={"sweep.json": json.dumps(meta)})
    return {}


def load_torch_export(path: Path) -> Callable:
    module = torch.export.load(str(path)).module()
    return lambda pixels: module(torch.as_tensor(pixels))[0].detach().numpy()


def export_torchscript(wrapper: Classifier, example: torch.Tensor, path: Path, meta: dict,
                       method: str = "auto") -> dict:
    """``torch.jit.script`` of the wrapper; with ``auto``, trace only where script fails (the
    parity check then catches batch-size-dependent branches the trace froze)."""
    warnings.warn("torch.jit is deprecated in recent torch; torch_export is the recommended "
                  "format", TrainerWarning, stacklevel=2)
    used = method
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated")
        if method in ("auto", "script"):
            try:
                module = torch.jit.script(wrapper)
                used = "script"
            except Exception:
                if method == "script":
                    raise
                used = "trace"
        if used == "trace":
            module = torch.jit.trace(wrapper, (example,), check_trace=False)
        torch.jit.save(module, str(path), _extra_files={"sweep.json": json.dumps(meta)})
    return {"method": used}


def load_torchscript(path: Path) -> Callable:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated")
        module = torch.jit.load(str(path), map_location="cpu")
    return lambda pixels: module(torch.as_tensor(pixels))[0].detach().numpy()


def export_onnx(wrapper: Classifier, example: torch.Tensor, path: Path, meta: dict) -> dict:
    import onnx

    torch.onnx.export(wrapper, (example,), str(path), dynamo=True, opset_version=ONNX_OPSET,
                      input_names=["pixels"], output_names=["logits", "class_index"],
                      dynamic_shapes=_batch_dim(), external_data=False, verbose=False)
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, {"sweep": json.dumps(meta)})
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return {"opset": ONNX_OPSET}


def load_onnx(path: Path) -> Callable:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda pixels: session.run(["logits"], {"pixels": np.asarray(pixels)})[0]


def export_int8(onnx_path: Path, path: Path, calibration: torch.Tensor) -> dict:
    """Static QDQ int8 of the ONNX file with ``calibration`` images; dynamic where static fails."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantType,
        quant_pre_process,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"pixels": calibration[i:i + 16].numpy()}
                                 for i in range(0, len(calibration), 16)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(onnx_path), str(prepared), skip_symbolic_shape=True)
        try:
            quantize_static(str(prepared), str(path), Reader(), per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
            method = "static"
        except Exception as e:  # operators the static quantizer cannot handle
            quantize_dynamic(str(prepared), str(path), weight_type=QuantType.QInt8)
            method = f"dynamic (static failed: {type(e).__name__})"
    return {"method": method, "size_bytes_float": onnx_path.stat().st_size,
            "size_bytes_int8": path.stat().st_size}


LOADERS: dict[str, Callable[[Path], Callable]] = {
    "torch_export": load_torch_export, "onnx": load_onnx, "torchscript": load_torchscript,
    "int8": load_onnx}


# ---------------------------------------------------------------------------------- checks

def _logits(run: Callable, pixels: torch.Tensor, batch: int) -> np.ndarray:
    cache = getattr(run, "cache", None)  # the eager model's logits, shared by every format
    if cache is not None and (batch, len(pixels)) in cache:
        return cache[(batch, len(pixels))]
    out = np.concatenate([np.asarray(run(pixels[i:i + batch].numpy()
                                         if isinstance(pixels, torch.Tensor)
                                         else pixels[i:i + batch]))
                          for i in range(0, len(pixels), batch)])
    if cache is not None:
        cache[(batch, len(pixels))] = out
    return out


def parity(run: Callable, eager: Callable, pixels: torch.Tensor, labels: torch.Tensor,
           int8: bool = False) -> dict[str, Any]:
    """Compare ``run`` with ``eager`` at batch sizes 1, 4 and full; ``passed`` per the
    thresholds of float formats (logits and top-1) or of int8 (accuracy kept)."""
    y = labels.numpy()
    out: dict[str, Any] = {"batches": {}}
    passed = True
    for batch in (*PARITY_BATCHES, FULL_BATCH):
        subset = pixels if batch == FULL_BATCH else pixels[:SMALL_BATCH_IMAGES]
        ours, ref = _logits(run, subset, batch), _logits(eager, subset, batch)
        n = len(subset)
        acc, ref_acc = float((ours.argmax(1) == y[:n]).mean()), float((ref.argmax(1) == y[:n])
                                                                       .mean())
        diff = float(np.abs(ours - ref).max())
        agreement = float((ours.argmax(1) == ref.argmax(1)).mean())
        scale = max(1.0, float(np.abs(ref).max()))
        ok = (acc - ref_acc >= -MAX_INT8_ACC_DROP if int8 else
              diff <= MAX_ABS_DIFF * scale and agreement >= MIN_AGREEMENT)
        passed = passed and ok
        name = "full" if batch == FULL_BATCH else str(batch)
        out["batches"][name] = {"batch_size": min(batch, n), "images": n,
                                "max_abs_diff": diff, "top1_agreement": agreement,
                                "accuracy": acc, "eager_accuracy": ref_acc,
                                "accuracy_delta": acc - ref_acc, "passed": ok}
    full = out["batches"]["full"]
    out.update(passed=passed, max_abs_diff=max(b["max_abs_diff"] for b in out["batches"].values()),
               top1_agreement=min(b["top1_agreement"] for b in out["batches"].values()),
               accuracy=full["accuracy"], accuracy_delta=full["accuracy_delta"])
    return out


def latency(run: Callable, pixels: torch.Tensor) -> dict[str, float]:
    """Milliseconds per image at batch 1 and at :data:`LATENCY_BATCH` (median of runs)."""
    out = {}
    for batch in (1, LATENCY_BATCH):
        x = pixels[:batch].numpy()
        if len(x) < batch:
            continue
        run(x)  # warm-up
        times = []
        for _ in range(LATENCY_RUNS):
            t0 = time.perf_counter()
            run(x)
            times.append(time.perf_counter() - t0)
        out[f"ms_per_image_b{batch}"] = 1000 * statistics.median(times) / batch
    return out


def prepare(formats: tuple[str, ...]) -> None:
    """Export a tiny model in ``formats`` into a temporary folder and drop it: the first export
    of a process pays seconds for importing and setting up the exporters (torch.export's
    tracer, the ONNX exporter's op registry, onnxruntime), which a process with nothing else
    to do can pay ahead of a real export. Best effort: whatever fails here, the real export
    reports."""

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, pixels):
            return self.linear(pixels.flatten(1))

    model, example = Tiny().eval(), torch.zeros(2, 1, 2, 2)
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for fmt in dict.fromkeys("onnx" if f == "int8" else f for f in formats):
            try:
                if fmt == "torch_export":
                    torch.export.export(model, (example,), dynamic_shapes=_batch_dim())
                elif fmt == "onnx":
                    import onnxruntime  # noqa: F401  (the parity check's)

                    torch.onnx.export(model, (example,), os.path.join(folder, "m.onnx"),
                                      dynamo=True, opset_version=ONNX_OPSET,
                                      input_names=["pixels"], dynamic_shapes=_batch_dim(),
                                      external_data=False, verbose=False)
                elif fmt == "torchscript":
                    torch.jit.trace(model, (example,))
            except Exception:  # noqa: S112 - a head start only
                continue


# ------------------------------------------------------------------------------ entry point

@dataclass
class ExportReport:
    """What :func:`export` produced: the files by format, and per format its parity, latency
    and details (``error`` when the export itself failed)."""

    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)
    formats: dict[str, dict[str, Any]] = field(default_factory=dict)
    eager_latency: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as ``export.json`` holds it: every file named relative to the export's
        folder (it moves: a temporary folder, the run's artifacts, ``sweep export --out``)."""
        return {"files": {k: v.name for k, v in self.files.items()}, "formats": self.formats,
                "eager_latency": self.eager_latency, "meta": self.meta}


def export(settings: TrainSettings, weights: str | os.PathLike | nn.Module,
           out_dir: str | os.PathLike, formats: tuple[str, ...] = DEFAULT_FORMATS,
           torchscript_method: str = "auto") -> ExportReport:
    """Export the model trained with ``settings`` (its saved state dict, or the module) in
    ``formats`` into ``out_dir``, each checked for parity; ``out_dir/export.json`` holds the
    report, ``out_dir/validation.json`` the items of the validation split the checks used
    (:func:`trainers.validation_split`; none for a dataset whose split is its own). A format
    that fails to export or to match is reported, not raised.

    Raises:
        ValueError: an unknown format.
        CheckpointError: the weights cannot be read or do not fit the model.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown export format(s) {unknown}; known: {', '.join(FORMATS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load_data(settings)
    model = (weights if isinstance(weights, nn.Module)
             else load_trained_model(settings, data, weights))
    wrapper = wrap(model.cpu(), data)
    pixels, labels = raw_pixels(data)
    meta = metadata(data, settings, pixels)
    report = ExportReport(out_dir, meta=meta)

    def eager(x):
        with torch.no_grad():
            return wrapper(torch.as_tensor(x))[0].numpy()

    eager.cache = {}  # parity compares every format with the same eager logits: compute once

    report.eager_latency = latency(eager, pixels)
    example = pixels[:4] if len(pixels) >= 4 else pixels.repeat(4, 1, 1, 1)[:4]
    calibration = raw_pixels(data, "train")[0][:256]
    onnx_file = out_dir / FILES["onnx"]
    for fmt in formats:
        report.formats[fmt] = _one_format(fmt, wrapper, example, out_dir, meta, eager, pixels,
                                          labels, calibration, onnx_file, formats,
                                          torchscript_method)
        if report.formats[fmt].get("file"):
            report.files[fmt] = out_dir / report.formats[fmt]["file"]
    # what MLflow's model signature and a serving client need to see: two images, raw
    np.save(out_dir / "input_example.npy", pixels[:2].numpy())
    split = validation_split(settings)
    if split is not None:  # which items the parity checks (and the run's val_acc) used
        (out_dir / VALIDATION_FILE).write_text(json.dumps(split.to_dict()) + "\n")
    for fmt, result in report.formats.items():  # a small parity file per format
        (out_dir / f"parity_{fmt}.json").write_text(json.dumps(result, indent=2, default=str))
    (out_dir / "export.json").write_text(json.dumps(report.to_dict(), indent=2, default=str))
    return report


def _one_format(fmt, wrapper, example, out_dir, meta, eager, pixels, labels, calibration,
                onnx_file, formats, torchscript_method) -> dict[str, Any]:
    path = out_dir / FILES[fmt]
    try:
        with torch.no_grad():
            if fmt == "torch_export":
                details = export_torch_export(wrapper, example, path, meta)
            elif fmt == "onnx":
                details = export_onnx(wrapper, example, path, meta)
            elif fmt == "torchscript":
                details = export_torchscript(wrapper, example, path, meta, torchscript_method)
            else:
                source = onnx_file
                if "onnx" not in formats or not onnx_file.exists():
                    source = out_dir / ".float.onnx"
                    export_onnx(wrapper, example, source, meta)
                details = export_int8(source, path, calibration)
                if source != onnx_file:
                    source.unlink()
        run = LOADERS[fmt](path)
    except Exception as e:  # a model the exporter cannot handle: reported, the trial stands
        return {"file": None, "passed": False,
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:500]}"}
    check = parity(run, eager, pixels, labels, int8=fmt == "int8")
    return {"file": path.name, "size_bytes": path.stat().st_size, **details, **check,
            "latency": latency(run, pixels), "error": None}


def summary_metrics(report: dict[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics of an export report: ``export_<format>_<figure>``."""
    out = {}
    for name, value in report.get("eager_latency", {}).items():
        out[f"export_eager_{name}"] = value
    for fmt, r in report.get("formats", {}).items():
        out[f"export_{fmt}_passed"] = float(bool(r.get("passed")))
        for key in ("max_abs_diff", "top1_agreement", "accuracy", "accuracy_delta",
                    "size_bytes", "size_bytes_float", "size_bytes_int8", "opset"):
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key]):
                out[f"export_{fmt}_{key}"] = float(r[key])
        for name, value in r.get("latency", {}).items():
            out[f"export_{fmt}_{name}"] = value
    return out
