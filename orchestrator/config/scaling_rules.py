"""The rules of ``scaling:`` (a batch-size x learning-rate grid read as lr-sensitivity curves,
see :mod:`orchestrator.report.scaling`), each problem one line naming the field, the value and
the fix. Called by :func:`orchestrator.config.rules.check_rules` once the space is parsed."""
from __future__ import annotations

from . import space as sp
from .metrics import metric_problem

MIN_LRS = 5  # learning rates per batch size: the best and two neighbours each side
MIN_REPEATS = 3  # seeds per cell: the exponent's interval resamples them


def scaling_metric(top) -> tuple[str, str]:
    """(metric, direction) the curves are read in: ``scaling.metric`` or the objective's; the
    direction given, else the objective's for its own metric, else minimize for a loss."""
    objective = top.objective[0] if isinstance(top.objective, list) else top.objective
    metric = top.scaling.metric or objective.metric
    if top.scaling.direction is not None:
        return metric, top.scaling.direction
    if metric == objective.metric:
        return metric, objective.direction
    return metric, "minimize" if metric.endswith("loss") else "maximize"


def check_scaling(top, space: sp.Space, problems: list[str], warnings: list[str]) -> None:
    """A grid over batch_size (2 or more sizes) and lr (MIN_LRS or more), nothing else
    searched, MIN_REPEATS or more repeats, no compare, and a metric the trainer logs
    (:func:`.metrics.metric_problem`, as an objective's: ``noise_scale`` with
    ``train.noise_scale: true``)."""
    nodes = {n.setting: n for n in space if not isinstance(n, sp.Fixed)}
    if top.compare is not None:
        problems.append("scaling: a scaling grid is no comparison of levels; remove compare "
                        "(or scaling, and compare the rules with compare.factor: lr_scaling)")
    if top.sampler.name != "grid":
        problems.append(f"scaling: needs sampler.name: grid (every batch size x lr x seed "
                        f"trained), got {top.sampler.name}; set sampler: {{name: grid}}")
    for name, least, example in (("batch_size", 2, "[32, 256]"),
                                 ("lr", MIN_LRS, "[0.0125, 0.0177, 0.025, 0.0354, 0.05]")):
        node = nodes.get(name)
        if not isinstance(node, sp.Choice):
            problems.append(f"scaling: space.{name} must be a list of values at the top of "
                            f"space, got {_shown(node)}; e.g. space.{name}: {example}")
        elif len(set(node.choices)) < least:
            problems.append(f"scaling: space.{name} lists {len(set(node.choices))} distinct "
                            f"values, {list(node.choices)}; list at least {least}"
                            + (" (the best lr and two neighbours on each side)"
                               if name == "lr" else ""))
    others = [s for s in nodes if s not in ("batch_size", "lr")]
    if others:
        problems.append(f"scaling: space searches {', '.join(others)} besides batch_size and "
                        f"lr; fix {'them' if len(others) > 1 else 'it'} under train (each "
                        f"curve must differ in lr alone)")
    if top.repeats < MIN_REPEATS:
        problems.append(f"scaling: repeats must be at least {MIN_REPEATS} (the seeds the "
                        f"exponent's bootstrap interval resamples), got {top.repeats}")
    if top.scaling.metric is not None and not top.scaling.metric.strip():
        problems.append(f"scaling.metric is empty, got {top.scaling.metric!r}; name an epoch "
                        f"metric (e.g. val_loss), or remove the key to read the curves in the "
                        f"objective's metric")
    elif top.scaling.metric is not None:  # the objective's own metric is checked as one
        metric_problem(top, "scaling.metric", top.scaling.metric, problems, warnings)


def _shown(node) -> str:
    if node is None:
        return "nothing"
    if isinstance(node, sp.Range):
        return f"a range [{node.low:g}, {node.high:g}]"
    return "an option mapping"
