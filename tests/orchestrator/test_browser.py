"""The MLflow UI of a finished sweep in a real browser (Debian's chromium, driven by Playwright):
the URL `sweep ui` prints, opened in a fresh profile, shows the sweep's runs by their
configurations' names, best objective first with it and the searched settings as columns, the
parent run's description with the report's headline, curves, exported files, comparison, and
one line per configuration once grouped by `sweep.config`. Screenshots of every step go to
test-output/browser/ and tmp_path."""
import json
import os
import re
import shutil

import pytest
from playwright.sync_api import expect, sync_playwright

from orchestrator.core import keys
from tests.conftest import ROOT, serve
from tests.helpers import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow  # end to end: a real browser on a real sweep

SHOTS = ROOT / "test-output" / "browser"
WAIT_MS = 60_000  # a React app: every check waits for the rendered element, up to this
# a plotly chart's traces: how it draws (mode, fill) and how many points
TRACES = "el => el.data.map(t => ({mode: t.mode || null, fill: t.fill || null, " \
         "n: (t.x || []).length}))"
# the runs table's cells by row and column id (ag-grid splits a row into its pinned and
# scrolled parts: both carry the row's index)
CELLS = """() => { const rows = {};
  for (const cell of document.querySelectorAll('.ag-row .ag-cell[col-id]')) {
    const i = cell.closest('.ag-row').getAttribute('row-index');
    (rows[i] = rows[i] || {row: i})[cell.getAttribute('col-id')] = cell.innerText.trim(); }
  return rows; }"""
RUN_NAME, OBJECTIVE = "attributes.`Run Name`", "metrics.`val_acc`"
SEARCHED = ("params.`optimizer`", "params.`lr`", "params.`batch_size`")  # quickstart's space
LINES_DRAWN = "([el, n]) => (el.data || []).filter(t => t.mode === 'lines+markers').length >= n"


def test_a_fresh_browser_browses_the_sweep_from_the_url_sweep_ui_prints(quickstart, tmp_path):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: the browser test needs Debian's chromium; install "
                    f"it as root with `apt-get update && apt-get install -y chromium` (the "
                    f"README's test command does)", pytrace=False)
    stores, _ = quickstart
    client = stores.client()
    exp_id = client.get_experiment_by_name("quickstart").experiment_id
    trial_runs = stores.runs("quickstart", "trial")
    trials = {r.info.run_name: r.info.run_id for r in trial_runs}
    # a run says its configuration and seed, and its tag sweep.config the configuration alone
    configs: dict[str, list[str]] = {}
    epochs: dict[str, set[int]] = {}  # the epochs a configuration's runs logged val_acc at
    for r in trial_runs:
        tags = r.data.tags
        assert r.info.run_name == f"{tags[keys.CONFIG]} s{tags[keys.SEED]}", r.info.run_name
        configs.setdefault(tags[keys.CONFIG], []).append(r.info.run_name)
        epochs.setdefault(tags[keys.CONFIG], set()).update(
            m.step for m in client.get_metric_history(r.info.run_id, "val_acc"))
    # the best trial when the sweep ended, the one exported: another test may resume the sweep
    # with a fifth trial (export off) that becomes the parent's sweep.best_run_id
    exported = [r for r in stores.runs("quickstart", "trial")
                if r.data.tags.get("sweep.exported") == "true"]
    assert len(exported) == 1, [r.info.run_name for r in exported]
    best_name, best_id = exported[0].info.run_name, exported[0].info.run_id
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)

    with serve("ui", "quickstart", cwd=stores.dir, prefix="MLflow UI:") as ui, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1600, "height": 1000})
        # the UI must work offline: anything but the server is refused (it asks for nothing else)
        context.route(re.compile(r"^(?!http://127\.0\.0\.1:)"), lambda route: route.abort())
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)

        def shot(name: str) -> None:
            page.screenshot(path=tmp_path / f"{name}.png")
            shutil.copy(tmp_path / f"{name}.png", SHOTS / f"{name}.png")

        def artifact(name: str):
            """A file or folder of the run page's artifact tree, by its name."""
            return page.get_by_test_id("artifact-tree-node").filter(
                has_text=re.compile(rf"^{re.escape(name)}$"))

        try:
            # 1. the printed URL, in an empty profile: the runs table, not the GenAI overview
            page.goto(ui.url)
            parent = page.get_by_role("link", name="quickstart", exact=True)
            parent_row = page.locator(".ag-row").filter(has=parent)
            expect(parent_row).to_be_visible()
            expect(page).to_have_url(re.compile(rf"#/experiments/{exp_id}/runs(\?|$)"))
            # the printed URL switches the sidebar to "Model training", whose table is "Runs"
            # (the default GenAI toggle would title it "Training runs")
            expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
            expect(page.get_by_text(f"{len(trials) + 1} matching runs")).to_be_visible()
            # the sweep's own view: the objective and the searched settings are columns, on
            # screen next to the run's name; the trials come best first, the parent (no
            # val_acc) last
            for column in (OBJECTIVE, *SEARCHED):
                header = page.locator(f'.ag-header-cell[col-id="{column}"]')
                expect(header).to_be_in_viewport()
                expect(header).to_have_text(column.split("`")[1])
            shot("1-runs-table")
            cells = page.evaluate(CELLS)
            by_row = sorted(cells.values(), key=lambda row: int(row["row"]))
            names = [row.get(RUN_NAME, "").split("\n")[-1] for row in by_row]
            last = {r.info.run_name: r.data.metrics["val_acc"] for r in trial_runs}
            assert names == sorted(last, key=last.get, reverse=True) + ["quickstart"], names
            values = [float(row[OBJECTIVE]) for row in by_row[:-1]]
            assert values == sorted(last.values(), reverse=True), values

            # the parent run's page says who won: its description, the report's headline
            parent_id = stores.runs("quickstart", "parent")[0].info.run_id
            note = stores.runs("quickstart", "parent")[0].data.tags[keys.PARENT_NOTE]
            page.goto(f"{ui.url.split('/#/')[0]}/#/experiments/{exp_id}/runs/{parent_id}")
            expect(page.locator("strong").filter(
                has_text=note.split("\n\n")[0].strip("*"))).to_be_visible()
            shot("1-parent-description")
            page.goto(ui.url)
            expect(parent_row).to_be_visible()

            # 2. the parent run holds the trial runs (MLflow shows them collapsed)
            if not page.get_by_role("link", name=best_name, exact=True).is_visible():
                parent_row.locator('button[data-component-id*="runnamecellrenderer"]').click()
            for name, run_id in trials.items():
                expect(page.get_by_role("link", name=name, exact=True)).to_have_attribute(
                    "href", f"#/experiments/{exp_id}/runs/{run_id}")
            shot("2-trial-runs")

            # 3. the best trial's page charts its val_acc curve
            page.get_by_role("link", name=best_name, exact=True).click()
            expect(page).to_have_url(re.compile(rf"/runs/{best_id}"))
            page.get_by_role("tab", name="Model metrics").click()
            page.get_by_placeholder("Search metric charts").fill("val_acc")
            chart = page.get_by_test_id("experiment-view-compare-runs-card").filter(
                has_text=f"{best_name} (val_acc)")
            curve = chart.locator(".js-plotly-plot .scatterlayer path.js-line")
            expect(curve.first).to_be_visible()
            shot("3-val-acc-chart")

            # 4. its artifacts hold the exported model files
            page.get_by_role("tab", name="Artifacts").click()
            artifact("export").click()
            for name in ("model.pt2", "model.onnx", "export.json"):
                expect(artifact(name)).to_be_visible()
            artifact("export.json").click()  # waits for the folder to finish unfolding
            expect(page.get_by_text('"top1_agreement"').first).to_be_visible()  # its preview
            shot("4-exported-files")

            # 5. the compare view of the trial runs (the URL the runs table's Compare opens)
            ids = json.dumps(sorted(trials.values()), separators=(",", ":"))
            base = ui.url.split("/#/")[0]
            page.goto(f"{base}/#/compare-runs?runs={ids}&experiments={json.dumps([exp_id])}")
            expect(page.get_by_role(
                "heading", name=f"Comparing {len(trials)} Runs from 1 Experiment")).to_be_visible()
            for run_id in trials.values():
                expect(page.locator(f'a[href$="/runs/{run_id}"]')).to_be_visible()
            shot("5-compare-runs")

            # 6. the experiments list names the sweep
            page.goto(f"{base}/#/experiments")
            listed = page.get_by_test_id("experiment-list-item-link").filter(
                has_text=re.compile(r"^quickstart$"))
            expect(listed).to_have_attribute("href", f"#/experiments/{exp_id}")
            shot("6-experiments-list")

            # 7. "Group by" the tag sweep.config: a row per configuration over its runs, and
            # the chart view draws one line per configuration (with its band over seeds)
            page.goto(ui.url)
            group_by_config(page)
            groups = page.locator(".ag-row").filter(has_text="Group: ")
            expect(groups).to_have_count(len(configs))
            shown = {}
            for text in groups.all_inner_texts():
                name, count = re.search(r"Group: (.+)\n(\d+)\n", text).groups()
                shown[name] = int(count)
            assert shown == {c: len(names) for c, names in configs.items()}
            shot("7-grouped-runs")
            card = val_acc_chart(page)
            legend = card.get_by_text(re.compile(r" \(val_acc\)$"))
            expect(legend).to_have_count(len(configs) + 1)  # and the parent: "Unassigned"
            assert set(legend.all_inner_texts()) == {f"{c} (val_acc)" for c in configs} | {
                "Unassigned (val_acc)"}
            # the plot's traces (plotly's data): per configuration a line through its mean and
            # a band, filled, from its lowest to its highest run at each epoch
            plot = card.locator(".js-plotly-plot")
            page.wait_for_function(LINES_DRAWN, arg=[plot.element_handle(), len(configs)])
            traces = plot.evaluate(TRACES)
            means = [t for t in traces if t["mode"] == "lines+markers"]
            assert len(means) == len(configs), traces
            # a point per epoch any of its runs reached (a pruned run stops early)
            assert sorted(t["n"] for t in means) == sorted(map(len, epochs.values())), traces
            assert sum(t["fill"] is not None and t["n"] > 1 for t in traces) == len(configs)
            shot("8-grouped-chart")
        except Exception:
            shot("failed")  # where it stopped, and what the page held
            (tmp_path / "failed.html").write_text(page.content())
            shutil.copy(tmp_path / "failed.html", SHOTS / "failed.html")
            raise
        finally:
            browser.close()
        ui.stop()


def group_by_config(page) -> None:
    """The runs table's "Group by" control, set to the tag sweep.config."""
    page.get_by_role("button", name=re.compile(r"^Group by")).click()
    page.get_by_role("menuitemcheckbox", name=keys.CONFIG, exact=True).click()
    page.keyboard.press("Escape")
    expect(page.get_by_role("button", name=re.compile(rf"^Group by: {re.escape(keys.CONFIG)}"))
           ).to_be_visible()


def val_acc_chart(page):
    """The runs table's chart view, filtered to its val_acc chart card."""
    # the radio's own icon covers the input: the click goes to its label
    page.locator("label").filter(has=page.locator('input[value="CHART"]')).click(force=True)
    expect(page).to_have_url(re.compile(r"compareRunsMode=CHART"))
    page.get_by_placeholder("Search metric charts").fill("val_acc")
    card = page.get_by_test_id("experiment-view-compare-runs-card").filter(
        has_text=re.compile(r"^val_acc"))
    expect(card).to_have_count(1)
    return card
