"""The saved views of MLflow's runs table that `sweep ui` opens for a comparison: its confirmation
runs grouped by level with their mean, and its tuning runs a view away (test_browser.py opens
them in a real browser)."""
import json

import pytest

from orchestrator.answer.compare import CONFIRM, TUNE
from orchestrator.config.spec import validate
from orchestrator.core import keys
from orchestrator.running.server import phase_filter, runs_view, tuning_view
from tests.helpers import compare_spec

LEVELS = [32, 64, 128]
SPACE = {"batch_size": LEVELS, "lr": {"low": 1e-3, "high": 1e-2, "log": True}}
PHASE, LEVEL, SEED = (f"tags.`{k}`" for k in (keys.PHASE, keys.LEVEL, keys.SEED))


def _comparison(objective: dict):
    return validate(compare_spec(objective=objective, space=SPACE,
                                 compare={"factor": "batch_size", "tune_trials": 1, "seeds": 3}))


def _state(view: str) -> dict:
    return json.loads(json.loads(view)["state"])


@pytest.mark.parametrize("objective", [{"metric": "val_acc", "direction": "maximize"},
                                       {"metric": "val_loss", "direction": "minimize"}])
def test_a_comparison_opens_on_its_confirmation_runs_a_row_a_level_with_their_mean(objective):
    spec = _comparison(objective)
    metric, mean = f"metrics.`{objective['metric']}`", f"metrics.`{keys.LEVEL_MEAN}`"
    state = _state(runs_view(spec, "cmp"))
    assert state["searchFilter"] == f"tags.`{keys.PHASE}` = '{CONFIRM}' and " \
                                    f"tags.`{keys.STUDY}` = 'cmp'"
    # MLflow's Group by a tag with its aggregate, as its runs table writes it: the largest of
    # a level's runs' level_mean, all equal (MLflow's average of them prints 16 digits)
    assert state["groupBy"] == {"aggregateFunction": "max",
                                "groupByKeys": [{"mode": "tag", "groupByData": keys.LEVEL}]}
    # sorted by the level's mean, MLflow orders the groups by it, best first; sorted by start
    # time, it also lists the runs' parent, as a group "Additional runs"
    assert (state["orderByKey"], state["orderByAsc"]) == (
        mean, objective["direction"] == "minimize")
    # each level's group folded (MLflow's group id: mode.key.value): a row a level
    assert state["groupsExpanded"] == {f"tag.{keys.LEVEL}.{b}": False for b in LEVELS}
    # the level's mean, then phase, level and seed, then the searched settings, next to the
    # name; not the objective's own column, whose max over a level's runs is its best seed
    columns = [mean, PHASE, LEVEL, SEED, "params.`batch_size`", "params.`lr`"]
    assert state["selectedColumns"][:6] == columns
    assert state["columnOrder"][:7] == ["attributes.`Run Name`", *columns]
    assert metric not in state["selectedColumns"] + state["columnOrder"]
    assert json.loads(runs_view(spec))["name"] == \
        f"sweep: confirmation runs, mean {objective['metric']} by level"

    tuning = _state(tuning_view(spec, "cmp"))
    assert tuning["searchFilter"] == phase_filter(TUNE, "cmp") != state["searchFilter"]
    assert "groupBy" not in tuning  # a run a row, best first in the objective's direction
    assert (tuning["orderByKey"], tuning["orderByAsc"]) == (
        metric, objective["direction"] == "minimize")
    assert tuning["selectedColumns"][:4] == [metric, PHASE, LEVEL, SEED]


def test_the_name_column_fits_a_levels_name_in_its_group_row():
    """MLflow's own width (190 px) cuts a two-factor level ("optimizer=adam,clip_grad_norm=
    null") after "Group: optimize"."""
    short = _state(runs_view(_comparison({"metric": "val_acc", "direction": "maximize"})))
    two = validate(compare_spec(space={**SPACE, "clip_grad_norm": [None, 1.0]}, compare={
        "factor": ["batch_size", "clip_grad_norm"], "tune_trials": 1, "seeds": 3}))
    long = _state(runs_view(two))
    name = "attributes.`Run Name`"
    assert short["columnWidths"][name] == 190  # MLflow's default: "Group: 128" fits
    longest = len("Group: batch_size=128,clip_grad_norm=null")
    # its letters (6.5 px each in MLflow's font), the arrow and swatch before, the count after
    assert long["columnWidths"][name] >= 6.5 * longest + 60 > 190


def test_a_sweep_that_compares_nothing_keeps_its_view_of_every_run_best_first():
    spec = validate(compare_spec(compare=None, trials=2, space=SPACE))
    state = _state(runs_view(spec, "cmp"))
    assert not {"searchFilter", "groupBy", "groupsExpanded"} & state.keys()
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`val_acc`", False)
    assert PHASE not in state["selectedColumns"]


def test_the_phase_filters_select_one_phase_of_one_study_in_a_real_store(stores):
    """The views' filters, as MLflow's search reads them: `sweep run --new` puts a second
    study's runs in the same experiment."""
    client = stores.client()
    exp = client.create_experiment("cmp")
    made: dict[tuple[str, str], set[str]] = {}
    for study in ("cmp", "cmp-2"):
        parent = client.create_run(exp, tags={keys.ROLE: "parent", keys.STUDY: study})
        made[(study, "parent")] = {parent.info.run_id}
        for phase, seeds in ((TUNE, [0]), (CONFIRM, [1, 2])):
            for level in LEVELS:
                for seed in seeds:
                    run = client.create_run(exp, tags={
                        keys.ROLE: "trial", keys.STUDY: study, keys.PHASE: phase,
                        keys.LEVEL: str(level), keys.SEED: str(seed),
                        "mlflow.parentRunId": parent.info.run_id})
                    made.setdefault((study, phase), set()).add(run.info.run_id)

    def found(text: str) -> set[str]:
        return {r.info.run_id for r in client.search_runs([exp], filter_string=text)}

    spec = _comparison({"metric": "val_acc", "direction": "maximize"})
    assert found(_state(runs_view(spec, "cmp"))["searchFilter"]) == made[("cmp", CONFIRM)]
    assert found(_state(tuning_view(spec, "cmp-2"))["searchFilter"]) == made[("cmp-2", TUNE)]
    assert found(phase_filter(CONFIRM)) == made[("cmp", CONFIRM)] | made[("cmp-2", CONFIRM)]
    assert len(made[("cmp", CONFIRM)]) == 6 and len(made[("cmp", TUNE)]) == 3
