"""User code at the trainer's seams, found by name and checked against its signature.

``optimizer: torch:NAME`` is a ``torch.optim`` class; ``optimizer``, ``schedule``, ``loss``,
``step`` and ``metrics`` take ``module:function`` (importable from the working folder or
PYTHONPATH). The trainer passes each seam its own arguments first (:data:`PASSED`); the rest of
the function's keywords are the user's, given in ``<seam>_args``. Imports no torch unless a
``torch:NAME`` is looked up, so that a sweep is validated without it.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any, Callable

from .errors import SettingsError
from .settings import (
    GIVEN_THE_SETTINGS,
    READ_BY,
    TORCH_OPTIM,
    TORCHVISION,
    USER_CODE,
    setting_fields,
)

# what the trainer passes to each seam, in this order (positionally); the rest are keywords
PASSED = {"model": ("num_classes", "in_channels"),
          "optimizer": ("params", "settings"),
          "schedule": ("step", "total_steps", "warmup_steps"),
          "loss": ("settings",),
          "step": ("model", "inputs", "targets", "loss_fn", "settings"),
          "metrics": ("logits", "targets")}
# keywords the trainer sets itself (in each parameter group), never given in optimizer_args
SET_BY_TRAINER = {"optimizer": {"lr": "lr (and lr_scaling)", "weight_decay": "weight_decay"}}
NEEDS_CLOSURE = ("LBFGS",)  # their step() re-evaluates the loss: not a step the trainer takes


def is_user_code(seam: str, value: Any) -> bool:
    """Whether ``value`` of setting ``seam`` names user code (not one of its built-in names)."""
    choices = setting_fields()[seam].metadata["choices"] or ()
    return isinstance(value, str) and value not in choices and bool(USER_CODE.match(value))


def takes_args(seam: str, value: Any) -> bool:
    """Whether ``value`` of setting ``seam`` is user code taking keywords in ``<seam>_args``
    (a torchvision:NAME model is not: it is built by name)."""
    return is_user_code(seam, value) and not (seam == "model" and value.startswith(TORCHVISION))


def resolve(seam: str, name: str, error: type[SettingsError] = SettingsError) -> Callable:
    """The callable ``name`` stands for: a ``torch.optim`` class for ``torch:NAME``, else the
    function ``module:function`` (of any seam: the model and the dataset too).

    Raises:
        SettingsError: (or ``error``) it cannot be imported, its module raised while imported,
            it is not callable, or it is no torch optimizer.
    """
    if seam == "optimizer" and name.startswith(TORCH_OPTIM):
        return _torch_optimizer(name)
    module, _, function = name.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as for a worker (python -m)
        sys.path.append(os.getcwd())
    try:
        found = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as e:
        raise error(seam, name, f"cannot be imported ({e}); the module must be "
                                        f"importable from the working folder or "
                                        f"PYTHONPATH") from None
    except Exception as e:  # user code: a syntax error, or raising while it is imported
        raise error(seam, name, f"cannot be imported: its module raised "
                                        f"{type(e).__name__}: {e}") from None
    if not callable(found):
        raise error(seam, name, f"is a {type(found).__name__}, not a function")
    return found


def _torch_optimizer(name: str) -> Callable:
    import torch.optim

    attr = name[len(TORCH_OPTIM):]
    cls = getattr(torch.optim, attr, None)
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)) \
            or cls is torch.optim.Optimizer or inspect.isabstract(cls):  # the base class
        known = sorted(n for n, c in vars(torch.optim).items()
                       if inspect.isclass(c) and issubclass(c, torch.optim.Optimizer)
                       and c is not torch.optim.Optimizer and n not in NEEDS_CLOSURE)
        raise SettingsError("optimizer", name, f"is not a torch.optim optimizer; torch: takes "
                                               f"{', '.join(known)}")
    if attr in NEEDS_CLOSURE:
        raise SettingsError("optimizer", name, "needs a closure that re-evaluates the loss at "
                                               "each step, which the trainer's loop does not "
                                               "take; choose another optimizer")
    return cls


def keywords(seam: str, name: str) -> tuple[str, ...] | None:
    """The keywords a user's ``name`` at ``seam`` takes in ``<seam>_args`` (None: any, for a
    function with ``**kwargs``): its parameters after those the trainer passes, less those the
    trainer sets itself.

    Raises:
        SettingsError: as :func:`resolve`, or the function cannot take what the trainer passes.
    """
    target = resolve(seam, name)
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return None
    passed = _passed(seam, name)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < len(passed) and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise SettingsError(seam, name, f"must take the trainer's arguments "
                                        f"({', '.join(passed)}) first, then keywords; it takes "
                                        f"({', '.join(p.name for p in params)})")
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in _own(params, passed)
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                 and p.name not in SET_BY_TRAINER.get(seam, {}))


def _own(params: list[inspect.Parameter], passed: tuple[str, ...]) -> list[inspect.Parameter]:
    """The parameters after those the trainer passes; where a ``*args`` takes some of the
    trainer's arguments, the keyword-only ones after it."""
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= len(passed):
        return params[len(passed):]
    return [p for p in params if p.kind == p.KEYWORD_ONLY]


def keyword_default(seam: str, name: str, key: str) -> Any:
    """The default of keyword ``key`` of ``name`` (None where it has none)."""
    try:
        param = inspect.signature(resolve(seam, name)).parameters.get(key)
    except (TypeError, ValueError):
        return None
    return None if param is None or param.default is param.empty else param.default


def _passed(seam: str, name: str) -> tuple[str, ...]:
    """A torch.optim class takes the parameter groups alone (no settings)."""
    return ("params",) if seam == "optimizer" and name.startswith(TORCH_OPTIM) else PASSED[seam]


def _required(seam: str, name: str) -> list[str]:
    """The user's keywords without a default: ``<seam>_args`` must give them."""
    try:
        params = list(inspect.signature(resolve(seam, name)).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name for p in _own(params, _passed(seam, name))
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty
            and p.name not in SET_BY_TRAINER.get(seam, {})]


def check_args(seam: str, name: str, args: dict[str, Any]) -> None:
    """Refuse a keyword of ``args`` that the user's ``name`` at ``seam`` does not take.

    Raises:
        SettingsError: naming ``<seam>_args``, the keyword, and the keywords it takes.
    """
    allowed = keywords(seam, name)
    for key in args:
        if key in SET_BY_TRAINER.get(seam, {}):
            raise SettingsError(f"{seam}_args.{key}", args[key],
                                f"is set by the trainer from {SET_BY_TRAINER[seam][key]} in "
                                f"every parameter group: give that setting instead")
        if allowed is not None and key not in allowed:
            raise SettingsError(f"{seam}_args.{key}", args[key],
                                f"is not a keyword of {seam} {name} (it takes "
                                f"{', '.join(allowed) or 'none'}): remove it")
    missing = [k for k in _required(seam, name) if k not in args]
    if missing:
        raise SettingsError(f"{seam}_args", args, f"lack {', '.join(missing)}, which {seam} "
                                                  f"{name} needs (it has no default): give it "
                                                  f"under the option in space or in train")


def check_seams(settings) -> None:
    """Every user seam of ``settings`` importable, with the keywords it takes (metrics
    importable too).

    Raises:
        SettingsError: naming the seam (or its ``_args``), the value and the fix.
    """
    for seam in ("model", "optimizer", "schedule", "loss", "step"):
        name = getattr(settings, seam)
        if takes_args(seam, name):
            check_args(seam, name, getattr(settings, f"{seam}_args"))
    name = settings.optimizer
    if (settings.weight_decay > 0 and name.startswith(TORCH_OPTIM)
            and "weight_decay" not in inspect.signature(resolve("optimizer", name)).parameters):
        raise SettingsError("weight_decay", settings.weight_decay,
                            f"must be 0 with optimizer {name}, which has no weight decay")
    for name in settings.metrics:  # it must take (logits, targets)
        keywords("metrics", name)


def reads(setting: str, value: Any) -> bool:
    """Whether a trial reads ``setting`` when the seam that decides it (``READ_BY``) is
    ``value``: the built-in values named there, and a user function given the settings whole;
    not a ``torch:NAME`` optimizer (its keywords come from ``optimizer_args``) nor a user schedule.
    Settings outside ``READ_BY`` are read by every trial."""
    if setting not in READ_BY:
        return True
    seam, readers = READ_BY[setting]
    if value in readers:
        return True
    return (seam in GIVEN_THE_SETTINGS and isinstance(value, str)
            and not value.startswith(TORCH_OPTIM) and bool(USER_CODE.match(value)))


def unused_settings(settings) -> tuple[str, ...]:
    """The settings a trial under ``settings`` does not read (they are not logged as its
    params)."""
    return tuple(name for name, (seam, _) in READ_BY.items()
                 if not reads(name, getattr(settings, seam)))


def unused_fix(setting: str, value: str) -> str:
    """Why ``setting`` is not read when its seam is ``value``, and the fix, in one sentence."""
    seam, readers = READ_BY[setting]
    if seam == "optimizer" and value.startswith(TORCH_OPTIM):
        try:
            takes = setting in inspect.signature(resolve(seam, value)).parameters
        except (TypeError, ValueError, SettingsError):
            takes = False
        if takes:
            return (f"optimizer {value} takes its keywords from optimizer_args, not from "
                    f"{setting}: give optimizer_args: {{{setting}: ...}} instead")
        return f"optimizer {value} has no {setting}: remove it"
    if is_user_code(seam, value):
        return (f"{seam} {value} is given its step counts and {seam}_args only, not "
                f"{setting}: remove it, or give it as a keyword in {seam}_args")
    return (f"{seam} {value} does not use {setting} (only {', '.join(readers)} "
            f"{'does' if len(readers) == 1 else 'do'}): remove it, or choose {seam} "
            f"{readers[0]}")


def build(seam: str, name: str, args: dict[str, Any], *passed) -> Any:
    """``name``'s callable called with the trainer's ``passed`` arguments (the parameter
    groups alone for a torch.optim class) and the user's ``args`` by keyword."""
    target = resolve(seam, name)
    if seam == "optimizer" and name.startswith(TORCH_OPTIM):  # the groups' lr, also as the
        args = {"lr": passed[0][0]["lr"], **args}               # default some classes require
    return target(*passed[:len(_passed(seam, name))], **args)


def bind(seam: str, name: str, args: dict[str, Any]) -> Callable:
    """``name``'s callable with the user's ``args`` bound: called later with the trainer's own
    arguments (a schedule per step, a step per micro-batch)."""
    target = resolve(seam, name)
    return lambda *passed: target(*passed, **args)
