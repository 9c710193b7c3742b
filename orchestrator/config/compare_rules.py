"""The rules of a ``compare:`` block (run by :func:`orchestrator.config.rules.check_rules`):
its factors against the space, its seeds and looks, what it tunes, and the trials it counts; and
the levels it compares (:func:`compare_levels`), read by :mod:`orchestrator.answer.compare`.
Each problem is one line; a doubt is a warning.
"""
from __future__ import annotations

import itertools
from typing import Any

from . import space as sp

# compare: the most looks (max_seeds - seeds + 1) and first-look seeds the statistics take (the
# boundary's simulation grows with both; orchestrator.answer.stats.compare_paired refuses more)
MAX_LOOKS, MAX_COMPARE_SEEDS = 100, 1000
TUNING_SEEDS = 10_000  # replicate k of a comparison tunes on seed + TUNING_SEEDS + k


def compare_levels(space: sp.Space, factors: tuple[str, ...]) -> list[dict[str, Any]]:
    """The levels a comparison of ``factors`` compares, in YAML order: the product of each
    factor's options or choices, as the Optuna parameters that fix a level (``{optimizer:
    sgd}``). Every factor must be a list or an option mapping at the top of ``space``."""
    nodes = {n.setting: n for n in space}
    per_factor = [[{nodes[f].name: v} for v in _levels_of(nodes[f])] for f in factors]
    return [dict(kv for part in combo for kv in part.items())
            for combo in itertools.product(*per_factor)]


def _levels_of(node: sp.Node) -> tuple:
    return node.choices if isinstance(node, sp.Choice) else tuple(o for o, _ in node.options)


def check_compare(top, space: sp.Space, problems: list[str]) -> int | None:
    """The rules of ``compare:``; the most trials the comparison can run."""
    c, before = top.compare, len(problems)
    problems.extend(_factor_problems(c, space))
    if c.goal == "effects" and len(c.factors) < 2:
        problems.append(f"compare.goal: effects needs two or more settings in compare.factor "
                        f"(main effects and their interaction), got factor: {c.factor}; use "
                        f"goal: best or goal: pairs, or list several factors")
    if c.max_seeds is not None and c.max_seeds < c.seeds:
        problems.append(f"compare.max_seeds must be >= compare.seeds ({c.seeds}), got "
                        f"{c.max_seeds}; raise it or drop it")
    elif c.seeds > MAX_COMPARE_SEEDS or c.most_seeds - c.seeds + 1 > MAX_LOOKS:
        problems.append(f"compare: seeds {c.seeds} to max_seeds {c.most_seeds} is "
                        f"{c.most_seeds - c.seeds + 1} looks; the statistics take at most "
                        f"{MAX_LOOKS} looks and seeds <= {MAX_COMPARE_SEEDS}; lower max_seeds")
    problems.extend(_untuned(c, space))
    if top.repeats > 1:
        problems.append(f"repeats: {top.repeats}: repeats does not apply to a comparison: use "
                        f"compare.seeds (each level's best is trained on that many fresh "
                        f"paired seeds); remove repeats")
    if top.sampler.name == "grid":
        problems.append("sampler.name: grid cannot tune inside a comparison's levels (each "
                        "level gets tune_trials sampled trials); use tpe or random")
    if top.pruner.name == "hyperband":
        problems.append("pruner.name: hyperband runs its brackets over the whole study, not "
                        "within each level; with compare use median or successive_halving")
    if len(problems) > before:
        return None
    levels = len(compare_levels(space, c.factors))
    if c.tuning == "each_seed":
        least, most = (levels * c.seeds * (c.tune_trials + 1),
                       levels * c.most_seeds * (c.tune_trials + 1))
        count = "levels x seeds x (tune_trials + 1)"
    else:
        least, most = levels * (c.tune_trials + c.seeds), levels * (c.tune_trials + c.most_seeds)
        count = "levels x tune_trials + levels x seeds"
    if top.trials is not None:
        problems.append(f"trials: a comparison counts its own trials ({count}, up to max_seeds: "
                        f"here {least} to {most}), got trials: {top.trials}; remove trials (or "
                        f"--trials)")
    return most


def _factor_problems(c, space: sp.Space) -> list[str]:
    """What is wrong with ``compare.factor``: a setting named twice, one the top of the space
    does not search, a range, a setting of one level."""
    problems = []
    nodes = {n.setting: n for n in space}
    searched = [n.setting for n in space if not isinstance(n, sp.Fixed)]
    twice = [f for i, f in enumerate(c.factors) if f in c.factors[:i]]
    if twice:
        problems.append(f"compare.factor names {twice[0]} twice, got {c.factor}; name it once")
    for f in dict.fromkeys(c.factors):
        node = nodes.get(f)
        if node is None or isinstance(node, sp.Fixed):
            problems.append(f"compare.factor: {f!r} is not a searched setting at the top of "
                            f"space (it searches {', '.join(searched) or 'nothing'}); list its "
                            f"levels under space, e.g. space.{f}: [a, b]")
        elif isinstance(node, sp.Range):
            problems.append(f"compare.factor: space.{f} is a range; a comparison needs its "
                            f"levels as a list (e.g. [32, 128]) or an option mapping")
        elif len(_levels_of(node)) < 2:
            problems.append(f"compare.factor: space.{f} has one level, "
                            f"{list(_levels_of(node))}; list at least two to compare")
    return problems


def _untuned(c, space: sp.Space) -> list[str]:
    """``compare.tune_trials: 0`` confirms each level as it is: what else ``space`` searches
    would be drawn at random for every confirmation trial (one line, or none)."""
    left = sp.searched(space, c.factors) if c.tune_trials == 0 else []
    one = len(left) == 1
    return [f"compare.tune_trials: 0 tunes nothing, but {', '.join(left)} "
            f"{'is' if one else 'are'} still searched; give {'it' if one else 'each'} one value "
            f"(a scalar, not a list or a range), or set compare.tune_trials to 1 or more to "
            f"tune {'it' if one else 'them'}"] if left else []


def tuning_nothing(c, space: sp.Space) -> list[str]:
    """A warning when ``compare.tune_trials`` is 1 or more while ``space`` searches nothing
    besides the compared factors: every tuning trial of a level trains the same settings, so
    ``tune_trials: 0`` confirms the same levels without them."""
    if c.tune_trials == 0 or sp.searched(space, c.factors):
        return []
    return [f"compare.tune_trials: {c.tune_trials} tunes nothing: space searches only "
            f"{', '.join(c.factors)} (the compared factor{'s' if len(c.factors) > 1 else ''}), "
            f"so every tuning trial of a level trains the same settings; set "
            f"compare.tune_trials: 0 to confirm each level's settings directly"]
