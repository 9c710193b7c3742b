"""Optuna's view of one level of a comparison: a study showing a level's sampler or pruner
only that level's tuning trials of one replicate (:class:`LevelView`), so that each tuning is
searched as if it were the only one (:class:`LevelSampler`, :class:`LevelPruner`), and a
confirmation trial is never pruned.
"""
from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial

from ..answer.compare import TUNE, replicate
from ..core import compat, keys


class LevelView:
    """A study as one level's sampler or pruner sees it: only the tuning trials of ``label``
    in tuning replicate ``replicate`` (every other attribute is the study's own)."""

    def __init__(self, study: optuna.Study, label: str | None, replicate: int = 0):
        self._study, self._label, self._replicate = study, label, replicate

    def __getattr__(self, name: str):
        return getattr(self._study, name)

    def _mine(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        return [t for t in trials if t.user_attrs.get(keys.LEVEL) == self._label
                and t.user_attrs.get(keys.PHASE) == TUNE and replicate(t) == self._replicate]

    def get_trials(self, deepcopy: bool = True, states=None) -> list[FrozenTrial]:
        return self._mine(self._study.get_trials(deepcopy=deepcopy, states=states))

    def trials_read(self, deepcopy: bool = True, states=None, use_cache: bool = False):
        """The study's own trials read (:data:`compat.STUDY_TRIALS`, which samplers call), of
        this level only."""
        return self._mine(compat.study_trials(self._study, deepcopy=deepcopy, states=states,
                                              use_cache=use_cache))

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


compat.implement(LevelView, compat.STUDY_TRIALS, LevelView.trials_read)


class LevelSampler(optuna.samplers.BaseSampler):
    """One sampler per level and tuning replicate, made by ``make(replicate)`` (so every level
    of a replicate is seeded alike) and shown only that level's tuning trials of that
    replicate: each tuning is searched as if it were the only one."""

    def __init__(self, make: Callable[[int], optuna.samplers.BaseSampler]):
        self._make = make
        self._samplers: dict[tuple[str | None, int], optuna.samplers.BaseSampler] = {}

    def _of(self, study, trial: FrozenTrial):
        key = (trial.user_attrs.get(keys.LEVEL), replicate(trial))
        if key not in self._samplers:
            self._samplers[key] = self._make(key[1])
        return self._samplers[key], LevelView(study, *key)

    def infer_relative_search_space(self, study, trial):
        sampler, view = self._of(study, trial)
        return sampler.infer_relative_search_space(view, trial)

    def sample_relative(self, study, trial, search_space):
        sampler, view = self._of(study, trial)
        return sampler.sample_relative(view, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        sampler, view = self._of(study, trial)
        return sampler.sample_independent(view, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        sampler, view = self._of(study, trial)
        sampler.before_trial(view, trial)

    def after_trial(self, study, trial, state, values) -> None:
        sampler, view = self._of(study, trial)
        sampler.after_trial(view, trial, state, values)

    def reseed_rng(self) -> None:
        for sampler in self._samplers.values():
            sampler.reseed_rng()


class LevelPruner(optuna.pruners.BasePruner):
    """``inner`` judging a tuning trial against its own level's tuning trials only; a
    confirmation trial is never pruned (its seed would go unpaired)."""

    def __init__(self, inner: optuna.pruners.BasePruner):
        self._inner = inner

    def prune(self, study, trial) -> bool:
        if trial.user_attrs.get(keys.PHASE) != TUNE:
            return False
        return self._inner.prune(LevelView(study, trial.user_attrs.get(keys.LEVEL),
                                           replicate(trial)), trial)
