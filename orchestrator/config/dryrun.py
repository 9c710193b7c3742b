"""Optuna's own verdict on a sweep's sampler and pruner options, at validation rather than
mid-sweep: each option checked against the constructor's keywords and their types, the object
built as ``sweep run`` builds it, and a small in-memory study run past its startup trials.
"""
from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import did_you_mean

# what each annotation of an Optuna constructor's keyword accepts from a YAML
YAML_TYPES = {"int": (int,), "float": (float, int), "bool": (bool,), "str": (str,),
              "None": (type(None),), "dict[str, Any]": (dict,)}


def check_options(label, key, cls, options: dict, problems, reserved=()) -> bool:
    """Each option a keyword of ``cls`` whose value a YAML can give with the annotated type;
    False if any is not."""
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p in params if p not in ("self", "seed", *reserved)]
    before = len(problems)
    for opt, value in options.items():
        if opt in reserved:
            problems.append(f"{key}.{opt} is set by sweep from min_epochs/epochs; remove it")
        elif opt not in allowed:
            problems.append(f"{key}.{opt} is not an option of the {label}"
                            f"{did_you_mean(opt, allowed)}; it takes {', '.join(allowed)}")
        else:
            annotation = params[opt].annotation
            text = annotation if isinstance(annotation, str) else \
                getattr(annotation, "__name__", str(annotation))
            types = tuple(t for part in text.split("|") for t in YAML_TYPES.get(part.strip(), ()))
            if not types:
                problems.append(f"{key}.{opt} takes a Python object ({text}), which a YAML "
                                f"cannot give; remove it")
            elif not _is_a(value, types):
                problems.append(f"{key}.{opt} must be {text.replace(' | ', ' or ')}, "
                                f"got {value!r}")
    return len(problems) == before


def _is_a(value, types: tuple) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, types)


def construct(key: str, build: Callable[[dict[str, Any]], Any], given: Iterable[str],
              options: dict, problems: list[str]):
    """Build the Optuna object as ``sweep run`` will (``build`` called with options; ``given``
    names the keywords it sets itself), turning its refusal into a line naming the option (each
    option alone first, to find the one refused); None if refused."""
    built = []

    def refusal(opts: dict) -> str | None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built.append(build(opts))
        except Exception as e:  # noqa: BLE001 - any refusal of Optuna's becomes the line
            return str(e).splitlines()[0] if str(e) else type(e).__name__
        return None

    why = refusal({})
    if why:
        problems.append(f"{key}: Optuna refuses it as sweep builds it ({', '.join(given)} from "
                        f"min_epochs and epochs): {why}")
        return
    for opt, value in options.items():
        why = refusal({opt: value})
        if why:
            problems.append(f"{key}.{opt}: Optuna refuses {value!r}: {why}")
            return
    why = refusal(options)
    if why:
        problems.append(f"{key}: Optuna refuses the options {', '.join(options) or '(none)'} "
                        f"together: {why}")
        return None
    return built[-1]


def dry_run(key: str, options: dict, problems: list[str], sampler=None, pruner=None,
            trials: int = 10, epochs: int = 5) -> None:
    """Some option values pass the constructor and fail at the first sample or prune (a
    negative candidate count, a reduction factor of 1): run a small in-memory study with the
    object, past its startup trials, so that they fail here and not in trial 11."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(sampler=sampler, pruner=pruner)
            for _ in range(min(trials, 30)):
                trial = study.ask()
                x = trial.suggest_float("x", 0.0, 1.0)
                trial.suggest_categorical("c", ["a", "b"])
                pruned = False
                for step in range(1, min(epochs, 10) + 1):
                    trial.report(x * step, step)
                    pruned = trial.should_prune()
                    if pruned:
                        break
                study.tell(trial, None if pruned else x,
                           state=optuna.trial.TrialState.PRUNED if pruned else None)
    except Exception as e:  # noqa: BLE001 - any failure of Optuna's becomes the line
        problems.append(f"{key} ({', '.join(f'{k}={v!r}' for k, v in options.items())}): "
                        f"Optuna fails with these options at the first trials: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
