"""Opening the study of a sweep: created by the first ``sweep run`` process, joined by the others
once checked to be the same sweep, each with its sampler and pruner; what the creator writes
first (who made it, the enqueued points, the trials ``warm_start`` copies, its identity) and the
grid's queue. :meth:`SweepStudy.open <orchestrator.stores.study.SweepStudy.open>` drives these.
"""
from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import optuna
from optuna.trial import TrialState

from ..answer import objectives
from ..config.samplers import build_pruner, build_sampler
from ..config.spec import SweepSpec
from ..core import compat, keys
from ..core.errors import SweepError
from . import levels
from .machines import Owner, sampler_offset, wait_for

REPLICATE_STRIDE = 2**25  # past any offset a process draws (sampler_offset: trials + < 2**24)


def make_sampler(spec: SweepSpec, seed_offset: int = 0):
    """The sampler of ``spec``, its seed offset by ``seed_offset`` (see :func:`create_or_join`);
    for a comparison, one such sampler per level (:class:`levels.LevelSampler`)."""
    if spec.compare is not None:
        return levels.LevelSampler(  # a replicate's levels seeded alike, replicates apart
            lambda replicate: _one_sampler(spec, seed_offset + REPLICATE_STRIDE * replicate))
    return _one_sampler(spec, seed_offset)


def _one_sampler(spec: SweepSpec, seed_offset: int):
    # numpy's seeds stop at 2**32 - 1, which a valid seed plus a joiner's offset can pass
    s, seed = spec.sampler, (spec.sampler_seed + seed_offset) % 2**32
    return build_sampler(s.name, seed, s.options)


def make_pruner(spec: SweepSpec):
    """The pruner of ``spec``; for a comparison, judging each level against itself."""
    p = spec.pruner
    pruner = build_pruner(p.name, p.min_epochs, spec.epochs, p.options)
    return levels.LevelPruner(pruner) if spec.compare is not None else pruner


def free_name(storage, name: str) -> str:
    """``NAME-2``, ``NAME-3``...: the first name of a study ``storage`` does not hold."""
    taken = set(optuna.get_all_study_names(storage))
    return next(f"{name}-{i}" for i in itertools.count(2) if f"{name}-{i}" not in taken)


def create_or_join(spec: SweepSpec, storage, name: str) -> tuple[optuna.Study, bool]:
    """Study ``name`` in ``storage``, and whether this process created it. One another process
    created first is loaded once its creator has written its identity, checked to be this
    sweep, and given a sampler seeded for this joiner (:func:`machines.sampler_offset`: a
    resumed or a second concurrent ``sweep run`` does not redraw the same start-up trials)."""
    try:
        return optuna.create_study(study_name=name, storage=storage,
                                   directions=spec.directions,
                                   sampler=make_sampler(spec), pruner=make_pruner(spec)), True
    except optuna.exceptions.DuplicatedStudyError:
        existing = optuna.load_study(study_name=name, storage=storage)
        # another machine may have created it a moment ago: its attributes come next
        wait_for(lambda: keys.FINGERPRINT in existing.user_attrs)
        check_same_sweep(spec, name, existing)
        return optuna.load_study(study_name=name, storage=storage,
                                 sampler=make_sampler(spec, sampler_offset(existing)),
                                 pruner=make_pruner(spec)), False


def initialise(spec: SweepSpec, study: optuna.Study, creator: Owner,
               copies: list[optuna.trial.FrozenTrial]) -> None:
    """What the process creating a study writes into it: who made it, the enqueued
    configurations, the trials copied by ``warm_start``, then its identity (joiners wait for
    the fingerprint, so it is written last)."""
    study.set_user_attr(keys.CREATOR, creator.as_dict())
    if spec.compare is not None:
        study.set_user_attr(keys.COMPARE, spec.compare.model_dump_json())
    for point in spec.enqueue:
        study.enqueue_trial(point, user_attrs={keys.ENQUEUED: True})
    if copies:
        study.add_trials(copies)
    study.set_user_attr(keys.STUDY_ID, uuid.uuid4().hex)
    study.set_user_attr(keys.IDENTITY, json.dumps(spec.identity(), sort_keys=True, default=str))
    study.set_user_attr(keys.FINGERPRINT, spec.fingerprint())


def enqueue_grid(spec: SweepSpec, study: optuna.Study) -> None:
    """Queue each configuration of the grid ``repeats`` times, but those the study holds
    already, then mark the grid done."""
    present = {(objectives.config_key(t.params or compat.fixed_params(t)),
                t.user_attrs.get(keys.REPEAT, 0)) for t in study.get_trials(deepcopy=False)}
    configs = spec.grid()
    for repeat in range(spec.repeats):  # seed-major: one full comparison per seed first
        for params in configs:
            if (objectives.config_key(params), repeat) not in present:
                study.enqueue_trial(params, user_attrs={keys.REPEAT: repeat})
    study.set_user_attr(keys.GRID_DONE, len(configs) * spec.repeats)


def warm_start_copies(spec: SweepSpec, storage) -> list[optuna.trial.FrozenTrial]:
    """``warm_start``: copies of the finished (complete and pruned) trials of sweep
    ``spec.warm_start`` in ``storage``, each marked with where it came from, for the new
    study's history.

    Raises:
        SweepError: no such sweep, or one of another space, objectives or constraints.
    """
    name, where = spec.warm_start, f"{spec.source}: warm_start: {spec.warm_start}"
    names = optuna.get_all_study_names(storage)
    if name not in names:
        from ..core.errors import did_you_mean
        raise SweepError(f"{where}: no sweep of that name in this study storage"
                         f"{did_you_mean(name, names)}; name a sweep `sweep status` lists")
    source = optuna.load_study(study_name=name, storage=storage)
    theirs = json.loads(source.user_attrs.get(keys.IDENTITY) or "{}")
    mine = json.loads(json.dumps(spec.identity(), sort_keys=True, default=str))
    for key, what in (("space", "space"), ("objective", "objectives"),
                      ("constraints", "constraints")):
        if theirs.get(key) != mine.get(key):
            raise SweepError(f"{where}: that sweep has another {what} ({key}: "
                             f"{json.dumps(theirs.get(key))}, here {json.dumps(mine.get(key))}); "
                             f"warm start only from a sweep with the same {what}")
    copies = [optuna.trial.create_trial(
        state=t.state, params=t.params, distributions=t.distributions,
        values=t.values if t.state == TrialState.COMPLETE else None,
        intermediate_values=t.intermediate_values, constraints=t.constraints,
        user_attrs={**{k: v for k, v in t.user_attrs.items()
                       if k in (keys.SEED, keys.REPEAT, keys.CONSTRAINTS)},
                    keys.COPIED_FROM: f"{name}#{t.number}"})
        for t in source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                           TrialState.PRUNED))]
    return copies


def check_same_sweep(spec: SweepSpec, name: str, study: optuna.Study) -> None:
    """Refuse to join study ``name`` when it was started to other directions or from a
    different sweep (its identity, with up to four of the changes named)."""
    directions = [d.name.lower() for d in study.directions]
    if directions != spec.directions:
        raise SweepError(f"{spec.source}: study {name!r} was started to "
                         f"{', '.join(directions)}, not {', '.join(spec.directions)}; "
                         f"rerun with --new to start a fresh study")
    stored = study.user_attrs.get(keys.IDENTITY)
    if stored is not None and study.user_attrs.get(keys.FINGERPRINT) != spec.fingerprint():
        before = json.loads(stored)
        now = json.loads(json.dumps(spec.identity(), sort_keys=True, default=str))
        changes = _diff(before, now)
        raise SweepError(f"{spec.source}: study {name!r} was started from a different sweep "
                         f"({'; '.join(changes[:4])}); restore the file, or rerun with --new to "
                         f"start a fresh study")


def _diff(before: Any, now: Any, path: str = "") -> list[str]:
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for key in list(before) + [k for k in now if k not in before]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in now:
                out.append(f"{sub} was {before[key]!r}, now unset")
            elif key not in before:
                out.append(f"{sub} was unset, now {now[key]!r}")
            else:
                out += _diff(before[key], now[key], sub)
        return out
    return [] if before == now else [f"{path} was {before!r}, now {now!r}"]
