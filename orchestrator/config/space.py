"""The searched part of a sweep: the nodes of ``space:``, sampling them with an Optuna trial (or
replaying a trial's parameters), and grids; :mod:`orchestrator.config.space_reading` reads a sweep
file's ``space:`` into these nodes.

Rules: a scalar is fixed; a list is a categorical choice; ``{low, high, log?, step?, type?}`` is a
range; any other mapping is a set of named options, each bringing its own sub-space that is sampled
only when that option is chosen. A trial decides each setting in one place only. Inside Optuna a
parameter is named by the option it belongs to (``sgd.lr``), because one name cannot carry two
distributions; an option inside an option names its outer options too (``sgd.constant.lr`` and
``adam.constant.lr``) wherever the short name would stand for two nodes. Settings keep their
trainer names.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator, Union

RANGE_KEYS = ("low", "high", "log", "step", "type")
# settings whose user code (torch:NAME, module:function) takes keywords of its own, searched
# under its option and given to the trainer in <setting>_args
SEAMS = ("model", "optimizer", "schedule", "loss", "step")
SET_BY_TRAINER = {"optimizer": ("lr", "weight_decay")}  # in every parameter group
MAX_RANGE_STEPS = 10**9  # a float step finer than this many steps over its range is a typo
SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Fixed:
    setting: str
    value: Any


@dataclass(frozen=True)
class Choice:
    setting: str
    name: str
    choices: tuple


@dataclass(frozen=True)
class Range:
    setting: str
    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None
    kind: str = "float"


@dataclass(frozen=True)
class Options:
    setting: str
    name: str
    options: tuple[tuple[str, tuple["Node", ...]], ...]


Node = Union[Fixed, Choice, Range, Options]
Space = tuple  # tuple[Node, ...]


def yaml_key(setting: str) -> str:
    """A node's key in the YAML: its setting, or for a user's keyword (``optimizer_args.betas``)
    the keyword."""
    return setting.rpartition(".")[2]


def put(out: dict[str, Any], setting: str, value: Any) -> None:
    """Set ``setting`` in a settings mapping; a user's keyword (``optimizer_args.betas``) goes
    into its ``*_args`` mapping, copied, not shared."""
    group, dot, key = setting.partition(".")
    if dot:
        out[group] = {**out.get(group, {}), key: value}
    else:
        out[setting] = value


def overlay(base: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``base`` overlaid with ``settings``; ``*_args`` mappings are merged key by key."""
    out = dict(base)
    for setting, value in settings.items():
        if setting.endswith("_args") and isinstance(value, dict):
            out[setting] = {**out.get(setting, {}), **value}
        else:
            out[setting] = value
    return out


# ---------------------------------------------------------------------------------------- sample

def sample(trial, space: Space) -> dict[str, Any]:
    """The settings one trial uses, drawn through ``trial.suggest_*`` (Optuna's trial API).

    Enqueued trials return their fixed parameters through the same calls.
    """
    out: dict[str, Any] = {}
    for node in space:
        if isinstance(node, Fixed):
            put(out, node.setting, node.value)
        elif isinstance(node, Choice):
            put(out, node.setting, trial.suggest_categorical(node.name, list(node.choices)))
        elif isinstance(node, Range):
            if node.kind == "int":
                put(out, node.setting, trial.suggest_int(node.name, node.low, node.high,
                                                         step=node.step or 1, log=node.log))
            else:
                put(out, node.setting, trial.suggest_float(node.name, node.low, node.high,
                                                           step=node.step, log=node.log))
        else:
            option = trial.suggest_categorical(node.name, [o for o, _ in node.options])
            out[node.setting] = option
            out = overlay(out, sample(trial, dict(node.options)[option]))
    return out


class _FromParams:
    """A stand-in trial that answers ``suggest_*`` from a parameter dict (grids, validation)."""

    def __init__(self, params: dict[str, Any]):
        self.params = params

    def _value(self, name):
        return self.params[name]

    def suggest_categorical(self, name, choices):
        return self._value(name)

    def suggest_int(self, name, low, high, step=1, log=False):
        return self._value(name)

    def suggest_float(self, name, low, high, step=None, log=False):
        return self._value(name)


def settings_for(space: Space, params: dict[str, Any]) -> dict[str, Any]:
    """The trainer settings that an Optuna parameter dict (e.g. a grid point) stands for."""
    return sample(_FromParams(params), space)


def grid(space: Space) -> list[dict[str, Any]]:
    """Every combination of choices and options, as Optuna parameter dicts, in YAML order."""
    per_node = []
    for node in space:
        if isinstance(node, Fixed):
            continue
        if isinstance(node, Choice):
            per_node.append([{node.name: c} for c in node.choices])
        elif isinstance(node, Options):
            per_node.append([{node.name: option, **sub}
                             for option, subspace in node.options for sub in grid(subspace)])
        else:
            raise ValueError(f"range {node.name} in a grid")
    return [dict(kv for part in combo for kv in part.items())
            for combo in itertools.product(*per_node)]


def grid_size(space: Space) -> int:
    """How many configurations :func:`grid` would list, counted without listing them."""
    size = 1
    for node in space:
        if isinstance(node, Choice):
            size *= len(node.choices)
        elif isinstance(node, Options):
            size *= sum(grid_size(sub) for _, sub in node.options)
    return size


def walk(space: Space, where: str = "space") -> Iterator[tuple[str, Node]]:
    """Every node with its YAML path, depth first (options' sub-spaces included)."""
    for node in space:
        path = f"{where}.{yaml_key(node.setting)}"
        yield path, node
        if isinstance(node, Options):
            for option, sub in node.options:
                yield from walk(sub, f"{path}.{option}")


def searched(space: Space, besides: tuple[str, ...] = ()) -> list[str]:
    """The YAML paths of what ``space`` searches (a list, a range, an option mapping: the
    outermost only), leaving out the top-level settings ``besides`` but not their options'
    sub-spaces: ``["space.optimizer.adam.lr"]`` for an optimizer compared at a searched lr."""
    out: list[str] = []
    for path, node in walk(space):
        top = path.count(".") == 1 and node.setting in besides
        if not isinstance(node, Fixed) and not top and \
                not any(path.startswith(f"{p}.") for p in out):
            out.append(path)
    return out


def first_values(space: Space) -> dict[str, Any]:
    """A representative configuration: the first choice, option and low end of every node."""
    out: dict[str, Any] = {}
    for node in space:
        if isinstance(node, Fixed):
            put(out, node.setting, node.value)
        elif isinstance(node, Choice):
            put(out, node.setting, node.choices[0])
        elif isinstance(node, Range):
            put(out, node.setting, node.low)
        else:
            option, sub = node.options[0]
            out[node.setting] = option
            out = overlay(out, first_values(sub))
    return out


