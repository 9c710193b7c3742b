"""Every trainer knob in one frozen dataclass: name, default, unit and allowed values.

The orchestrator reads the field metadata (``help``, ``choices``, ``fixed_only``) to validate sweep
YAML files; the trainer itself only needs the values.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import SettingsError

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "warmup_cosine", "warmup_linear", "step", "onecycle",
             "warmup_stable_decay")
LOSSES = ("cross_entropy",)
LR_SCALINGS = ("none", "linear", "sqrt")
DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100", "image_folder", "fake")
MODELS = ("small_cnn", "mlp", "resnet18")
AUGMENTS = ("none", "flip_crop")
AMPS = ("none", "bf16", "fp16")
LOADERS = ("auto", "tensors", "dataloader")
EXPORT_FORMATS = ("torch_export", "onnx", "torchscript", "int8")
DEFAULT_EXPORT_FORMATS = ("torch_export", "onnx")
# what train() reports after every epoch (the lr is reported per optimizer step instead)
EPOCH_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "grad_norm",
                 "clipped_fraction", "epoch_seconds", "samples_per_second")
CUDA_METRICS = ("peak_memory_mb",)  # reported after every epoch on CUDA devices only
# the names of a run's other metrics (logged by the trainer or the tool that runs it), which a
# user's metric function may not return: its value would be mixed into their curves
# reported after every epoch with noise_scale: true (trainers.noise)
NOISE_METRICS = ("noise_scale", "noise_trace", "noise_grad_sq")
TAKEN_METRICS = (*CUDA_METRICS, *NOISE_METRICS, "lr", "train_seconds", "export_seconds",
                 "val_items")
TAKEN_PREFIXES = ("test_", "export_", "system/")
# settings that only some values of a seam read: setting -> (the seam, the built-in values that
# read it). A user module:function optimizer or loss is given the settings whole and may read any;
# a torch:NAME optimizer takes its keywords from optimizer_args alone; a user schedule is given its
# step counts and schedule_args alone. A setting its trial does not read is no param of the trial.
READ_BY = {"momentum": ("optimizer", ("sgd",)), "nesterov": ("optimizer", ("sgd",)),
           "min_lr": ("schedule", ("warmup_cosine", "warmup_linear", "warmup_stable_decay")),
           "step_size_epochs": ("schedule", ("step",)), "gamma": ("schedule", ("step",)),
           "pct_start": ("schedule", ("onecycle",)), "div_factor": ("schedule", ("onecycle",)),
           "final_div_factor": ("schedule", ("onecycle",)),
           "decay_fraction": ("schedule", ("warmup_stable_decay",)),
           "reference_batch_size": ("lr_scaling", ("linear", "sqrt"))}
GIVEN_THE_SETTINGS = ("optimizer", "loss", "step")  # a user function here is passed them whole
DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
USER_CODE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module.path:function
TORCHVISION = "torchvision:"  # model: torchvision:NAME, any torchvision classification model
TORCH_OPTIM = "torch:"  # optimizer: torch:NAME, any torch.optim class
MAX_SEED = 2**32 - 1  # numpy's largest seed
MAX_INT = 2**63 - 1  # what torch and numpy hold in an int64


def _knob(default, help: str, *, choices=None, fixed_only: bool = False, unit: str = "",
          user_code: bool = False, factory=None):
    metadata = {"help": help, "choices": choices, "fixed_only": fixed_only, "unit": unit,
                "user_code": user_code}
    if factory is not None:  # a mutable default (a mapping or a list), fresh for every instance
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _args(seam: str):
    return _knob(None, f"keyword arguments of a user {seam} (torch:NAME or module:function), "
                       f"checked against its signature; searched under its option in space",
                 factory=dict)


@dataclass(frozen=True)
class TrainSettings:
    """All settings of one training run. Every field has a default; see ``help`` in its metadata."""

    dataset: str = _knob("digits", "dataset name, or module:function() -> (train_dataset, "
                         "val_dataset, num_classes)", choices=DATASETS, user_code=True)
    data_dir: str | None = _knob(None, "where datasets are read from (default "
                                       "~/.cache/sweep/data; image_folder: its root, with "
                                       "train/ and val/ class folders)", fixed_only=True)
    download: bool = _knob(False, "allow downloading a torchvision dataset into data_dir",
                           fixed_only=True)
    val_fraction: float = _knob(0.1, "share of the training split held out for validation where "
                                     "the dataset has a test split (seeded, the same for every "
                                     "trial)", fixed_only=True)
    image_size: int | None = _knob(None, "side of the square images the model sees; null = the "
                                         "dataset's own (image_folder needs it)", unit="pixels")
    augment: str = _knob("none", "training augmentation: flip_crop = random crop (padding "
                                 "size/8) + horizontal flip", choices=AUGMENTS)
    loader: str = _knob("auto", "tensors = whole dataset on the device, batches by indexing; "
                                "dataloader = a DataLoader; auto = tensors for in-memory "
                                "datasets", choices=LOADERS, fixed_only=True)
    num_workers: int | None = _knob(None, "DataLoader processes; null = min(4, torch threads)",
                                    fixed_only=True)
    model: str = _knob("small_cnn", "model name, torchvision:NAME, or "
                                    "module:function(num_classes, in_channels)",
                       choices=MODELS, user_code=True)
    model_args: dict[str, Any] = _knob(None, "keyword arguments of a user model "
                                             "(module:function: its width, dropout...), "
                                             "checked against its signature; searched under "
                                             "its option in space", factory=dict)
    weights: str | None = _knob(None, "pretrained weights of a torchvision:NAME model (DEFAULT or "
                                      "a weights name such as IMAGENET1K_V1); null = random init")
    channels_last: bool = _knob(False, "channels-last memory format for model and inputs")
    epochs: int = _knob(10, "passes over the training set", unit="epochs")
    batch_size: int = _knob(64, "samples per optimizer step", unit="samples")
    grad_accum_steps: int = _knob(1, "forward passes per optimizer step, each on "
                                     "batch_size / grad_accum_steps samples")
    optimizer: str = _knob("adam", "optimizer: sgd, adam, adamw, torch:NAME (a torch.optim "
                                   "class) or module:function(params, settings, **kwargs) -> "
                                   "torch.optim.Optimizer", choices=OPTIMIZERS, user_code=True)
    optimizer_args: dict[str, Any] = _args("optimizer")
    lr: float = _knob(1e-3, "base learning rate, before lr_scaling")
    momentum: float = _knob(0.9, "SGD momentum (sgd only)")
    nesterov: bool = _knob(False, "Nesterov momentum (sgd only)")
    weight_decay: float = _knob(0.0, "decoupled for adamw, L2 for sgd and adam; applied to "
                                     "weights, not to biases and norm parameters")
    decay_bias_and_norm: bool = _knob(False, "apply weight_decay to biases and normalization "
                                             "parameters too")
    schedule: str = _knob("warmup_cosine", "learning-rate schedule, stepped per optimizer step, "
                                           "or module:function(step, total_steps, warmup_steps, "
                                           "**kwargs) -> lr multiplier", choices=SCHEDULES,
                          user_code=True)
    schedule_args: dict[str, Any] = _args("schedule")
    warmup_epochs: float = _knob(0.0, "linear warmup length (capped at epochs); not with "
                                      "onecycle, which warms up over pct_start", unit="epochs")
    min_lr: float = _knob(0.0, "learning rate warmup_cosine, warmup_linear and "
                               "warmup_stable_decay decay to")
    step_size_epochs: float = _knob(10.0, "step: epochs between two drops of the lr",
                                    unit="epochs")
    gamma: float = _knob(0.1, "step: factor the lr is multiplied by at each drop, in (0, 1]")
    pct_start: float = _knob(0.3, "onecycle: share of the run spent raising the lr, in (0, 1)")
    div_factor: float = _knob(25.0, "onecycle: the lr starts at lr / div_factor (>= 1)")
    final_div_factor: float = _knob(1e4, "onecycle: the lr ends at lr / (div_factor x "
                                         "final_div_factor) (>= 1)")
    decay_fraction: float = _knob(0.2, "warmup_stable_decay: share of the run, at its end, over "
                                       "which the lr falls linearly to min_lr, in (0, 1]")
    clip_grad_norm: float | None = _knob(None, "max global gradient norm; null = no clipping")
    label_smoothing: float = _knob(0.0, "CrossEntropyLoss label smoothing, in [0, 1)")
    loss: str = _knob("cross_entropy", "training loss: cross_entropy (with label_smoothing), or "
                                       "module:function(settings, **kwargs) returning "
                                       "loss(logits, targets) -> scalar tensor",
                      choices=LOSSES, user_code=True)
    loss_args: dict[str, Any] = _args("loss")
    step: str | None = _knob(None, "module:function(model, inputs, targets, loss_fn, settings, "
                                   "**kwargs) -> (loss, logits or None) replacing the forward "
                                   "and loss of one micro-batch (mixup, distillation...); null "
                                   "= model then loss", user_code=True)
    step_args: dict[str, Any] = _args("step")
    metrics: list[str] = _knob(None, "module:function(logits, targets) -> {name: value} "
                                     "functions run on the validation set every epoch, logged "
                                     "like the built-in metrics", fixed_only=True, factory=list)
    lr_scaling: str = _knob("none", "lr used = lr * f(batch_size / reference_batch_size)",
                            choices=LR_SCALINGS)
    reference_batch_size: int | None = _knob(None, "batch size at which lr is used as given",
                                             unit="samples")
    equal_steps_batch_size: int | None = _knob(
        None, "null: an epoch is one pass over the training set; N: every epoch takes the "
        "optimizer steps an epoch at batch size N takes (ceil(train items / N)), each of "
        "batch_size samples, so batch sizes compare at equal steps, not equal epochs (a larger "
        "batch then sees more samples)", unit="samples")
    noise_scale: bool = _knob(False, "measure the gradient noise scale B_simple = "
                                     "tr(Sigma) / |G|^2 (McCandlish et al. 2018) of each "
                                     "epoch's final weights, by one more forward and backward "
                                     "pass over the training split, logged per epoch as "
                                     "noise_scale")
    amp: str = _knob("none", "automatic mixed precision: bf16, or fp16 with a gradient scaler",
                     choices=AMPS)
    seed: int = _knob(0, "seeds python, numpy, torch and the data shuffling")
    deterministic: bool = _knob(False, "deterministic algorithms (cuDNN deterministic, no "
                                       "benchmark); nondeterministic ops are reported")
    activation_stats: bool = _knob(False, "log per-epoch mean, std and dead-channel fraction of "
                                          "each main block's output (validation pass)")
    device: str = _knob("auto", "auto (the worker's GPU, else the CPU), cpu, cuda, cuda:N or mps",
                        fixed_only=True)
    devices_per_trial: int = _knob(1, "devices one trial trains on, one process each, with "
                                      "DistributedDataParallel (NCCL on GPUs, gloo on the "
                                      "CPU); batch_size is shared out among them",
                                   fixed_only=True, unit="devices")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_type(f, getattr(self, f.name))
            if isinstance(getattr(self, f.name), (dict, list, tuple)):  # a copy of the caller's
                object.__setattr__(self, f.name, _plain(getattr(self, f.name)))
        self._check_values()
        self._check_schedule_values()

    def _check_values(self):
        positive_ints = ("epochs", "batch_size", "grad_accum_steps", "devices_per_trial")
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise SettingsError(name, getattr(self, name), "must be >= 1")
        if not 0 <= self.seed <= MAX_SEED:
            raise SettingsError("seed", self.seed, f"must be in [0, {MAX_SEED}] (numpy's seeds)")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise SettingsError("lr", self.lr, "must be a finite number > 0")
        for name in ("weight_decay", "min_lr", "warmup_epochs"):
            if getattr(self, name) < 0:
                raise SettingsError(name, getattr(self, name), "must be >= 0")
        if not 0 <= self.momentum < 1:
            raise SettingsError("momentum", self.momentum, "must be in [0, 1)")
        if self.nesterov and self.optimizer == "sgd" and self.momentum == 0:
            raise SettingsError("nesterov", self.nesterov, "needs momentum > 0 (set momentum: 0.9)")
        if not 0 <= self.label_smoothing < 1:
            raise SettingsError("label_smoothing", self.label_smoothing, "must be in [0, 1)")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            raise SettingsError("clip_grad_norm", self.clip_grad_norm,
                                "must be > 0, or null for no clipping")
        if self.reference_batch_size is not None and self.reference_batch_size < 1:
            raise SettingsError("reference_batch_size", self.reference_batch_size, "must be >= 1")
        if self.lr_scaling != "none" and self.reference_batch_size is None:
            raise SettingsError("reference_batch_size", None,
                                f"is needed when lr_scaling is {self.lr_scaling} (e.g. 64)")
        if self.equal_steps_batch_size is not None and self.equal_steps_batch_size < 1:
            raise SettingsError("equal_steps_batch_size", self.equal_steps_batch_size,
                                "must be >= 1 (the batch size whose steps per epoch every "
                                "batch size takes), or null")
        self._check_data_values()
        if self.min_lr >= self.lr_effective:
            raise SettingsError("min_lr", self.min_lr,
                                f"must be < the lr used ({self.lr_effective:g})")

    def _check_schedule_values(self):
        for name in ("step_size_epochs",):
            if not getattr(self, name) > 0:
                raise SettingsError(name, getattr(self, name), "must be > 0")
        if not 0 < self.gamma <= 1:
            raise SettingsError("gamma", self.gamma, "must be in (0, 1]")
        if not 0 < self.pct_start < 1:
            raise SettingsError("pct_start", self.pct_start, "must be in (0, 1), e.g. 0.3")
        for name in ("div_factor", "final_div_factor"):
            if not getattr(self, name) >= 1:
                raise SettingsError(name, getattr(self, name), "must be >= 1")
        if not 0 < self.decay_fraction <= 1:
            raise SettingsError("decay_fraction", self.decay_fraction, "must be in (0, 1]")
        if self.schedule == "onecycle" and self.warmup_epochs > 0:
            raise SettingsError("warmup_epochs", self.warmup_epochs, "must be 0 with schedule "
                                "onecycle, which warms up over pct_start of the run")
        if (self.schedule == "warmup_stable_decay"
                and min(self.warmup_epochs, self.epochs) / self.epochs + self.decay_fraction > 1):
            raise SettingsError("decay_fraction", self.decay_fraction,
                                f"plus the warmup's share of the run "
                                f"({min(self.warmup_epochs, self.epochs) / self.epochs:g}) must "
                                f"be at most 1: lower one of them")
        for seam in ("model", "optimizer", "schedule", "loss", "step"):
            if getattr(self, f"{seam}_args") and (getattr(self, seam) in (
                    *(setting_fields()[seam].metadata["choices"] or ()), None)
                    or str(getattr(self, seam)).startswith(TORCHVISION)):
                raise SettingsError(f"{seam}_args", getattr(self, f"{seam}_args"),
                                    f"are for a user {seam} ("
                                    f"{'' if seam == 'model' else 'torch:NAME or '}"
                                    f"module:function); "
                                    f"{seam} {getattr(self, seam)} takes settings instead")

    def _check_data_values(self):
        if self.batch_size % self.grad_accum_steps:
            raise SettingsError("grad_accum_steps", self.grad_accum_steps,
                                f"must divide batch_size ({self.batch_size}): each forward pass "
                                f"sees batch_size / grad_accum_steps samples")
        if not 0 < self.val_fraction < 1:
            raise SettingsError("val_fraction", self.val_fraction, "must be in (0, 1), e.g. 0.1")
        if self.image_size is not None and self.image_size < 4:
            raise SettingsError("image_size", self.image_size, "must be >= 4 (pixels)")
        if self.dataset == "image_folder":
            if self.data_dir is None:
                raise SettingsError("data_dir", None, "is needed for dataset image_folder: the "
                                                      "folder holding train/ and val/")
        if self.num_workers is not None and self.num_workers < 0:
            raise SettingsError("num_workers", self.num_workers, "must be >= 0, or null")
        if not DEVICE.match(self.device):
            raise SettingsError("device", self.device, "must be auto, cpu, cuda, cuda:N or mps")
        if self.devices_per_trial > 1:
            if self.device not in ("auto", "cpu", "cuda"):
                raise SettingsError("device", self.device, f"names one device; with "
                                    f"devices_per_trial {self.devices_per_trial} use auto, cuda "
                                    f"or cpu (rank r trains on cuda:r)")
            if self.batch_size < self.devices_per_trial * self.grad_accum_steps:
                raise SettingsError("batch_size", self.batch_size,
                                    f"must be at least devices_per_trial x grad_accum_steps "
                                    f"({self.devices_per_trial * self.grad_accum_steps}): each "
                                    f"device sees a share of every step")
        if self.weights is not None and not self.model.startswith(TORCHVISION):
            raise SettingsError("weights", self.weights, f"needs a torchvision:NAME model, got "
                                                         f"model {self.model}")

    @property
    def lr_effective(self) -> float:
        """The learning rate after the batch-size scaling rule."""
        if self.lr_scaling == "none":
            return self.lr
        ratio = self.batch_size / self.reference_batch_size
        return self.lr * (ratio if self.lr_scaling == "linear" else math.sqrt(ratio))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TrainSettings":
        """Build settings from a mapping; unknown names raise :class:`SettingsError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        for name in values:
            if name not in known:
                raise SettingsError(name, values[name], "is not a trainer setting")
        return cls(**values)


def _check_type(f: dataclasses.Field, value: Any) -> None:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    optional = "None" in kind
    if value is None:
        if not optional:
            raise SettingsError(f.name, value, "must not be null")
        return
    base = kind.split("|")[0].strip()
    if base.startswith(("dict", "list")):
        _check_container(f, base[:4], value)
        return
    if base == "bool":
        ok = isinstance(value, bool)
    elif base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise SettingsError(f.name, value, f"must be {'null or ' if optional else ''}{base}")
    if base in ("int", "float") and isinstance(value, int) and abs(value) > MAX_INT:
        raise SettingsError(f.name, value, f"must be at most {MAX_INT} in size")
    if base == "float" and not math.isfinite(value):  # ints past a float's range were refused
        raise SettingsError(f.name, value, "must be a finite number")
    choices = f.metadata.get("choices")
    if choices is None and f.metadata.get("user_code") and not USER_CODE.match(value):
        raise SettingsError(f.name, value, "must be module:function (a function importable "
                                           "from the working folder or PYTHONPATH), or null")
    if choices is not None and value not in choices:
        if f.metadata.get("user_code") and USER_CODE.match(value):
            return
        also = " or module:function" if f.metadata.get("user_code") else ""
        if f.name == "optimizer":
            also = f", {TORCH_OPTIM}NAME (a torch.optim class){also}"
        raise SettingsError(f.name, value, f"must be one of {', '.join(choices)}{also}")


def _check_container(f: dataclasses.Field, kind: str, value: Any) -> None:
    """``*_args``: a mapping of keyword names; ``metrics``: a list of module:function names."""
    if kind == "dict":
        if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier()
                                                  for k in value):
            raise SettingsError(f.name, value, "must be a mapping of keyword names to values")
        return
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and USER_CODE.match(v)
                                                       for v in value):
        raise SettingsError(f.name, value, "must be a list of module:function names")
    if len(set(value)) < len(value):
        raise SettingsError(f.name, value, "names a function twice; list each once")


def _plain(value: Any) -> Any:
    """Tuples as lists, all the way down: settings are written as YAML and JSON."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def setting_fields() -> dict[str, dataclasses.Field]:
    """Name -> dataclass field of every trainer setting (for validators outside the trainer)."""
    return {f.name: f for f in dataclasses.fields(TrainSettings)}


def setting_kind(name: str) -> str:
    """'int', 'float', 'bool', 'str', 'dict' (``*_args``) or 'list' (``metrics``): the base
    type of setting ``name``."""
    kind = setting_fields()[name].type
    return kind.split("|")[0].strip().split("[")[0]
