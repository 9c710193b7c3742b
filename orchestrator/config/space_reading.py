"""Reading a sweep's ``space:`` into the nodes of :mod:`orchestrator.config.space`: each value's
form (a scalar fixed, a list a choice, ``{low, high, ...}`` a range, a mapping of options), that no
trial decides a setting in two places, each node's Optuna name, and the values checked against
what the trainer accepts (its settings, the keywords of user code, settings no trial reads)."""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any

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

from ..core.errors import did_you_mean, key_text
from .space import (
    MAX_RANGE_STEPS,
    RANGE_KEYS,
    SCALARS,
    SEAMS,
    SET_BY_TRAINER,
    Choice,
    Fixed,
    Options,
    Range,
    Space,
    first_values,
    overlay,
    put,
    walk,
    yaml_key,
)


def parse_space(mapping: Any, where: str, problems: list[str],
                spellings: dict[tuple[str, ...], tuple[str, ...]] | None = None) -> Space:
    """Parse a ``space:`` mapping into nodes; append one line per problem.

    Besides each value's form, checks that no trial can have a setting decided in two places (an
    option that sets its parent setting again, or a setting both inside an option and beside
    it), that no list of choices holds one value twice (:func:`equal_choices`), and names each
    node's Optuna parameter (see the module docstring).

    Args:
        mapping: the YAML value.
        where: the dotted path for messages, e.g. ``space``.
        problems: collects one line per problem.
        spellings: each list's items as the file wrote them, by key path from the file's top
            (:func:`orchestrator.config.reading.list_spellings`); None: the values' own text.
    """
    before = len(problems)
    space = _parse_mapping(mapping, where, problems, prefix="")
    if len(problems) == before:
        _decided_by(space, where, problems)
    equal_choices(space, tuple(where.split(".")), problems, spellings or {})
    return _named(space)


def equal_choices(space: Space, where: tuple[str, ...], problems: list[str],
                  spellings: dict[tuple[str, ...], tuple[str, ...]]) -> None:
    """One line for each list of choices, at any depth of ``space``, that holds two values the
    trainer reads as one (``1e-3`` and ``0.001``, ``0`` and ``0.0`` for a float setting, ``64``
    twice): Optuna tells choices apart by ``==``, so the study would record one for a trial of
    the other, a comparison would tune and confirm one level twice, and a grid train one
    configuration twice. The line quotes both as ``spellings`` has them (``where`` is the
    space's key path in it), else as their values read."""
    for node in space:
        at = (*where, yaml_key(node.setting))
        if isinstance(node, Options):
            for option, sub in node.options:
                equal_choices(sub, (*at, option), problems, spellings)
        if not isinstance(node, Choice):
            continue
        seen: dict[Any, int] = {}
        for i, value in enumerate(node.choices):
            read = _as_read(node.setting, value)
            if read is None:  # a type the trainer refuses: check_values says so
                continue
            if read[0] in seen:
                written = spellings.get(at)
                if written is None or len(written) != len(node.choices):
                    written = tuple(_text(v) for v in node.choices)
                first, second = written[seen[read[0]]], written[i]
                problems.append(
                    f"{'.'.join(at)} lists {first} twice; keep one" if first == second else
                    f"{'.'.join(at)} lists {first} and {second}, which the trainer reads as "
                    f"the same value {_text(read[0])}; keep one")
                break
            seen[read[0]] = i


def _as_read(setting: str, value: Any) -> tuple[Any] | None:
    """``(value,)`` as the trainer reads ``setting``: a float setting reads ``0`` as ``0.0``;
    a user's keyword (``model_args.width``) is given to user code as it is; None where the
    trainer refuses the value's type (``64.0`` for an int, ``1`` for a bool, null where the
    setting takes none)."""
    if "." in setting:
        return (value,)
    kind = setting_kind(setting)
    if value is None:
        return (None,) if "None" in str(setting_fields()[setting].type) else None
    if isinstance(value, bool):
        return (value,) if kind == "bool" else None
    if isinstance(value, (int, float)):
        if kind == "float":
            return (float(value),) if abs(value) < 1e300 else (value,)  # 10**400: refused
        return (value,) if kind == "int" and isinstance(value, int) else None
    return (value,) if kind == "str" else None


def _text(value: Any) -> str:
    """A plain value as YAML writes it: ``null``, ``true``, ``0.001``, ``sgd``."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


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
        if not is_number(value[key]):
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
    elif step is not None and (not is_number(step) or step <= 0):
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


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_values(space: Space, fixed: dict[str, Any], problems: list[str]) -> None:
    """Check every value the space can produce against the trainer's own validation, and that
    no trial is given a setting it does not read (:func:`unused_problem`).

    Each candidate is checked in a representative configuration (the fixed settings plus the
    first value of every other node), so that one bad choice gives one line naming its path.
    An option's sub-space is checked within its enclosing configuration (the option chosen,
    the other nodes at their first values): a user model an outer option picks keeps its
    ``model_args`` there. A problem found at its own path is not said again where another
    candidate's check met it.
    """
    said: list[tuple[str, bool, str]] = []  # each line, whether at its own path, its message
    _check_space(space, fixed, problems, said, "space", {}, space, fixed)
    elsewhere = [line for line, own, message in said
                 if not own and any(o and m == message for _, o, m in said)]
    for line in elsewhere:
        if line in problems:
            problems.remove(line)


def _check_space(space: Space, fixed: dict[str, Any], problems: list[str],
                 said: list[tuple[str, bool, str]], where: str, context: dict[str, Any],
                 top: Space, around: dict[str, Any]) -> None:
    """:func:`check_values` of ``space`` at ``where``, inside the options ``context`` chose,
    the rest of the configuration as in ``around``."""
    base = overlay(overlay(around, first_values(space)), context)
    for node in space:
        path = f"{where}.{yaml_key(node.setting)}"
        unused = unused_problem(path, node.setting, top, fixed, context)
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
                           option, problems, said)
                _check_space(sub, fixed, problems, said, f"{path}.{option}",
                             {**context, node.setting: option}, top, {**base, **own})
            continue
        for value in candidates:
            values = dict(base)
            put(values, node.setting, value)
            _check_one(path, values, node.setting, value, problems, said)


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


def _check_one(path, values, setting, value, problems, said):
    """One configuration as the trainer checks it, user code at its seams included; a problem
    of another setting than the candidate's names the candidate's value."""
    try:
        check_seams(TrainSettings.from_dict(values))
    except SettingsError as e:
        own = e.field == setting
        line = f"{path if own else f'{path}={value!r}'}: {e}"
        said.append((line, own, str(e)))
        if line not in problems:
            problems.append(line)
