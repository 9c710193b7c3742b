"""The searched part of a sweep: parsing ``space:``, sampling it with an Optuna trial, and grids.

Rules: a scalar is fixed; a list is a categorical choice; ``{low, high, log?, step?, type?}`` is a
range; any other mapping is a set of named options, each bringing its own sub-space that is sampled
only when that option is chosen. A trial decides each setting in one place only. Inside Optuna a
parameter is named by the option it belongs to (``sgd.lr``), because one name cannot carry two
distributions; an option inside an option names its outer options too (``sgd.constant.lr`` and
``adam.constant.lr``) wherever the short name would stand for two nodes. Settings keep their
trainer names.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator, Union

from trainers import (
    READ_BY,
    SettingsError,
    TrainSettings,
    check_seams,
    is_user_code,
    keyword_default,
    reads,
    seam_keywords,
    setting_fields,
    setting_kind,
    takes_args,
    unused_fix,
)

from .errors import SweepError, did_you_mean, key_text

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


# ---------------------------------------------------------------------------------------- parse

def parse_space(mapping: Any, where: str, problems: list[str]) -> Space:
    """Parse a ``space:`` mapping into nodes; append one line per problem.

    Besides each value's form, checks that no trial can have a setting decided in two places (an
    option that sets its parent setting again, or a setting both inside an option and beside
    it), and names each node's Optuna parameter (see the module docstring).

    Args:
        mapping: the YAML value.
        where: the dotted path for messages, e.g. ``space``.
        problems: collects one line per problem.
    """
    before = len(problems)
    space = _parse_mapping(mapping, where, problems, prefix="")
    if len(problems) == before:
        _decided_by(space, where, problems)
    return _named(space)


def _parse_mapping(mapping: Any, where: str, problems: list[str], prefix: str,
                   owner: tuple[str, str] | None = None) -> Space:
    """``prefix`` is the full option path of a sub-space (``sgd.`` or ``sgd.constant.``);
    ``owner`` the (setting, user code) whose option this sub-space is, whose own keywords it
    may search besides trainer settings."""
    if mapping is None:
        return ()
    if not isinstance(mapping, dict):
        problems.append(f"{where} must be a mapping of setting: values, got {mapping!r}")
        return ()
    fields = setting_fields()
    nodes = []
    allowed = _keywords_of(owner, where, problems)
    if allowed is False:
        return ()
    for setting, value in mapping.items():
        path = f"{where}.{key_text(setting)}"
        if owner is not None and _is_keyword(owner, setting, allowed, fields):
            node = _parse_keyword(owner, setting, value, path, prefix + setting, problems)
            if node is not None:
                nodes.append(node)
            continue
        if owner is not None and setting not in fields:
            problems.append(f"{path} is neither a keyword of {owner[0]} {owner[1]} (it takes "
                            f"{', '.join(allowed) or 'none'}) nor a trainer setting"
                            f"{did_you_mean(setting, [*allowed, *fields])}; remove it")
            continue
        if setting not in fields:
            problems.append(f"{path} is not a trainer setting{did_you_mean(setting, fields)}")
            continue
        if setting == "seed":
            problems.append(f"{path}: trial seeds come from the top-level `seed` and `repeats`; "
                            "remove it from space")
            continue
        if setting_kind(setting) == "dict":
            seam = setting[:-len("_args")]
            problems.append(f"{path}: give the keywords of a user {seam} under its option "
                            f"(space.{seam}: {{\"torch:NAME\" or module:function: {{keyword: "
                            f"values}}}}), or fixed in train.{setting}")
            continue
        if fields[setting].metadata["fixed_only"]:
            problems.append(f"{path}: {setting} is fixed for the whole sweep (it says where "
                            f"data lives, what is written or how many slots a trial takes), "
                            f"so it cannot be searched; move it under train")
            continue
        node = _parse_node(setting, value, path, prefix + setting, problems)
        if node is not None:
            nodes.append(node)
    return tuple(nodes)


def _keywords_of(owner, where: str, problems: list[str]):
    """The keywords ``owner``'s user code takes (None: any; False: it cannot be looked up,
    the line said why; () without an owner)."""
    if owner is None:
        return ()
    try:
        found = seam_keywords(*owner)
    except SettingsError as e:
        problems.append(f"{where}: {e}")
        return False
    return found


def _is_keyword(owner, key: str, allowed, fields) -> bool:
    """Whether ``key`` under ``owner``'s option is one of its own keywords (rather than a
    trainer setting): one it takes, or any name but a setting's where it takes ``**kwargs``;
    lr and weight_decay stay settings (the trainer puts them in every parameter group)."""
    if key in SET_BY_TRAINER.get(owner[0], ()):
        return False
    return key not in fields if allowed is None else key in allowed


def _parse_keyword(owner, key: str, value: Any, path: str, name: str, problems: list[str]):
    """A keyword of a user's seam: fixed, a choice or a range, like a setting; a keyword whose
    default is a tuple or list takes one fixed list (Optuna's choices are plain values)."""
    default = keyword_default(*owner, key)
    setting = f"{owner[0]}_args.{key}"
    if isinstance(default, (tuple, list)) and isinstance(value, list):
        if not all(isinstance(v, SCALARS) for v in value):
            problems.append(f"{path}: a fixed list of plain values, got {value!r}")
            return None
        return Fixed(setting, value)
    kinds = {bool: "bool", int: "int", float: "float", str: "str"}
    return _parse_node(setting, value, path, name, problems,
                       base=kinds.get(type(default), "float"))


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


def _decided_by(space: Space, where: str, problems: list[str]) -> dict[str, str]:
    """Setting -> the first YAML path that decides it, over every setting ``space`` can decide;
    one line for each setting that two nodes decide in one trial (the YAML order would pick the
    value it trains, while the study records the other)."""
    out: dict[str, str] = {}
    for node in space:
        path = f"{where}.{yaml_key(node.setting)}"
        mine = {node.setting: path}
        if isinstance(node, Options):
            for option, sub in node.options:
                inner = _decided_by(sub, f"{path}.{option}", problems)
                if node.setting in inner:
                    problems.append(f"{inner[node.setting]}: an option of {path} cannot set "
                                    f"{node.setting} again (the study records {option}, the trial "
                                    f"could train another); remove it")
                for setting, inner_path in inner.items():
                    mine.setdefault(setting, inner_path)
        for setting, mine_path in mine.items():
            if setting in out:
                problems.append(f"{mine_path}: {setting} is decided twice, here and at "
                                f"{out[setting]}, and one trial can take both; keep it in one "
                                f"place")
            else:
                out[setting] = mine_path
    return out


def _named(space: Space) -> Space:
    """Each searched node's Optuna name: the short form (inner option and setting) where no
    other node has it, the full option path where one does."""
    def short(name: str) -> str:
        return ".".join(name.split(".")[-2:])

    counts = Counter(short(n.name) for _, n in walk(space) if not isinstance(n, Fixed))

    def rename(nodes: Space) -> Space:
        out = []
        for node in nodes:
            if isinstance(node, Fixed):
                out.append(node)
                continue
            name = short(node.name) if counts[short(node.name)] == 1 else node.name
            if isinstance(node, Options):
                node = dataclasses.replace(node, options=tuple(
                    (option, rename(sub)) for option, sub in node.options))
            out.append(dataclasses.replace(node, name=name))
        return tuple(out)

    return rename(space)


def _parse_node(setting: str, value: Any, path: str, name: str, problems: list[str],
                base: str | None = None):
    """``base``: the value's type where ``setting`` is a user's keyword (not a setting)."""
    if isinstance(value, list):
        if not value:
            problems.append(f"{path} is an empty list: give at least one choice")
            return None
        bad = [v for v in value if not isinstance(v, SCALARS)]
        if bad:
            problems.append(f"{path}: choices must be plain values, got {bad[0]!r}")
            return None
        return Choice(setting, name, tuple(value))
    if isinstance(value, dict):
        if any(k in value for k in ("low", "high")):
            return _parse_range(setting, value, path, name, problems, base)
        if base is not None:
            problems.append(f"{path}: a keyword takes a value, a list of choices or a range "
                            f"{{low, high}}, got {value!r}")
            return None
        return _parse_options(setting, value, path, name, problems)
    return Fixed(setting, value)


def _parse_range(setting, value, path, name, problems, base=None):
    for key in value:
        if key not in RANGE_KEYS:
            problems.append(f"{path}.{key_text(key)} is not a range key"
                            f"{did_you_mean(key, RANGE_KEYS)}; a range takes "
                            f"{', '.join(RANGE_KEYS)}")
            return None
    for key in ("low", "high"):
        if key not in value:
            problems.append(f"{path}: a range needs both low and high; {key} is missing")
            return None
        if not _is_number(value[key]):
            problems.append(f"{path}.{key} must be a number, got {value[key]!r}")
            return None
    base = base or setting_kind(setting)
    if base not in ("int", "float"):
        problems.append(f"{path}: {yaml_key(setting)} is {base}, not numeric: give a list of "
                        f"choices instead of a range")
        return None
    kind = value.get("type", "int" if base == "int" else "float")
    if kind not in ("int", "float"):
        problems.append(f"{path}.type must be int or float, got {kind!r}")
        return None
    if kind == "float" and base == "int":
        problems.append(f"{path}.type: {setting} takes whole numbers, so the range must be "
                        f"type: int, got {kind!r}")
        return None
    low, high, log, step = value["low"], value["high"], value.get("log", False), value.get("step")
    if not isinstance(log, bool):
        problems.append(f"{path}.log must be true or false, got {log!r}")
    elif not low < high:
        problems.append(f"{path}.low must be < high, got low={low!r}, high={high!r}")
    elif log and low <= 0:
        problems.append(f"{path}.low must be > 0 for a log range, got {low!r}")
    elif step is not None and (not _is_number(step) or step <= 0):
        problems.append(f"{path}.step must be a number > 0, got {step!r}")
    elif log and step is not None:
        problems.append(f"{path}: a range cannot have both log: true and a step; drop one")
    elif kind == "int" and not all(isinstance(v, int) for v in (low, high, step or 1)):
        problems.append(f"{path}: an int range needs whole-number low, high and step, "
                        f"got low={low!r}, high={high!r}")
    elif _distribution_problem(path, low, high, log, step, kind, problems) is None:
        return Range(setting, name, low, high, log, step, kind)
    return None


def _distribution_problem(path, low, high, log, step, kind, problems) -> str | None:
    """The line Optuna's own distribution (built here, as the sampler will) gives a range."""
    import decimal

    from optuna.distributions import FloatDistribution, IntDistribution

    line = None
    if step is not None and step > high - low:
        line = (f"{path}.step ({step!r}) is wider than the range {low!r}..{high!r}, which then "
                f"holds one value; lower the step, or fix the setting")
    elif step is not None and (high - low) / step > MAX_RANGE_STEPS:
        line = (f"{path}.step ({step!r}) splits {low!r}..{high!r} into "
                f"{(high - low) / step:.3g} steps (at most {MAX_RANGE_STEPS:.0e}): use a larger "
                f"step, or drop it for a continuous range")
    else:
        try:
            if kind == "int":
                IntDistribution(low, high, log=log, step=step or 1)
            else:
                FloatDistribution(low, high, log=log, step=step)
        except (ValueError, ArithmeticError, decimal.InvalidOperation) as e:
            line = f"{path}: Optuna cannot sample this range: {e}"
    if line:
        problems.append(line)
    return line


def _parse_options(setting, value, path, name, problems):
    meta = setting_fields()[setting].metadata
    choices = meta["choices"] or ()
    if not choices and not meta["user_code"]:
        problems.append(f"{path}: a mapping of options needs a setting with named values "
                        f"(optimizer, schedule...); for a range write {{low: .., high: ..}}")
        return None
    if not value:
        problems.append(f"{path} is an empty mapping: name at least one option")
        return None
    options, labels = [], {}
    user_code = meta["user_code"]
    for option, sub in value.items():
        user = user_code and is_user_code(setting, option)
        if option not in choices and not user:
            known = [*choices, "module:function"] if user_code else choices
            problems.append(f"{path}.{key_text(option)} is not a {setting}"
                            f"{did_you_mean(option, choices)}; known: {', '.join(known)}")
            continue
        label = option.rpartition(":")[2]  # torch:RAdam -> RAdam.lr, pkg.opt:lion -> lion.lr
        if label in labels:
            problems.append(f"{path}: options {labels[label]} and {option} would both name "
                            f"their parameters {label}.*; rename one function")
            continue
        labels[label] = option
        outer = name[:len(name) - len(setting)]  # the options this one is inside, as "sgd."
        owner = (setting, option) if setting in SEAMS and takes_args(setting, option) else None
        options.append((option, _parse_mapping(sub or {}, f"{path}.{option}", problems,
                                               prefix=f"{outer}{label}.", owner=owner)))
    return Options(setting, name, tuple(options)) if options else None


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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
        if name not in self.params:  # e.g. a study started before nested names were qualified
            raise SweepError(f"a trial's parameters {sorted(self.params)} lack {name!r}, which "
                             f"this sweep's space names: the study was made with other "
                             f"parameter names; rerun with --new to start a fresh study")
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


def check_values(space: Space, fixed: dict[str, Any], problems: list[str],
                 where: str = "space", context: dict[str, Any] | None = None,
                 top: Space | None = None) -> None:
    """Check every value the space can produce against the trainer's own validation, and that
    no trial is given a setting it does not read (:func:`unused_problem`).

    Each candidate is checked in a representative configuration (the fixed settings plus the first
    value of every other node), so that one bad choice gives one line naming its path.
    """
    top = space if top is None else top
    base = overlay(overlay(fixed, first_values(space)), context or {})
    for node in space:
        path = f"{where}.{yaml_key(node.setting)}"
        unused = unused_problem(path, node.setting, top, fixed, context or {})
        if unused and unused not in problems:
            problems.append(unused)
        if isinstance(node, Fixed):
            candidates = [node.value]
        elif isinstance(node, Choice):
            candidates = list(node.choices)
        elif isinstance(node, Range):
            candidates = [node.low, node.high]
        else:
            for option, sub in node.options:
                own = {node.setting: option}  # another option's keywords are not this one's
                if node.setting in SEAMS:
                    own[f"{node.setting}_args"] = fixed.get(f"{node.setting}_args", {})
                _check_one(path, overlay({**base, **own}, first_values(sub)), node.setting,
                           option, problems)
                check_values(sub, fixed, problems, f"{path}.{option}",
                             {**(context or {}), node.setting: option}, top)
            continue
        for value in candidates:
            values = dict(base)
            put(values, node.setting, value)
            _check_one(path, values, node.setting, value, problems)


def unused_problem(where: str, setting: str, space: Space, fixed: dict[str, Any],
                   context: dict[str, Any]) -> str | None:
    """A setting given at ``where`` that no trial reads: the seam deciding it (``READ_BY``) is
    chosen by an enclosing option (``context``), else takes its values in ``space``, in train
    (``fixed``) or by default, and none of them reads it (None: some trial reads it)."""
    if setting not in READ_BY:
        return None
    seam = READ_BY[setting][0]
    if seam in context:
        values = [context[seam]]
    else:
        values = [*seam_values(space, seam),
                  fixed.get(seam, setting_fields()[seam].default)]
    values = list(dict.fromkeys(values))
    if any(reads(setting, v) for v in values):
        return None
    if len(values) == 1:
        return f"{where}: {unused_fix(setting, values[0])}"
    return (f"{where}: no {seam} this sweep tries ({', '.join(map(str, values))}) uses "
            f"{setting}: remove it")


def seam_values(space: Space, setting: str) -> list[Any]:
    """Every value ``space`` gives ``setting``, in any option."""
    out: list[Any] = []
    for _, node in walk(space):
        if node.setting == setting:
            out += ([node.value] if isinstance(node, Fixed) else list(node.choices)
                    if isinstance(node, Choice) else [o for o, _ in node.options]
                    if isinstance(node, Options) else [])
    return out


def _check_one(path, values, setting, value, problems):
    """One configuration as the trainer checks it, user code at its seams included."""
    try:
        check_seams(TrainSettings.from_dict(values))
    except SettingsError as e:
        where = path if e.field == setting else f"{path}={value!r}"
        line = f"{where}: {e}"
        if line not in problems:
            problems.append(line)
