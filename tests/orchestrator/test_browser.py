"""The MLflow UI of a finished sweep in a real browser (Debian's chromium, driven by Playwright):
the URL `sweep ui` prints, opened in a fresh profile, shows the sweep's runs by their
configurations' names, best objective first with it and the searched settings as columns, the
parent run's description with the report's headline, curves, exported files, comparison, and
one line per configuration once grouped by `sweep.config`. Screenshots of every step go to
test-output/browser/ and tmp_path."""
import itertools
import json
import os
import re
import shutil
import threading
from decimal import Decimal

import numpy as np
import pytest
import yaml
from playwright.sync_api import expect, sync_playwright

from orchestrator.answer.compare import CONFIRM, TUNE
from orchestrator.core import keys
from tests.conftest import ROOT, Stores, run_cli, serve
from tests.helpers import CHROMIUM, CHROMIUM_ARGS, compare_spec

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
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.*"):  # this test's screenshots of an earlier run
        old.unlink()

    with serve("ui", "quickstart", cwd=stores.dir, prefix="MLflow UI:") as ui, \
            sync_playwright() as playwright:
        browser, page, shot = open_page(playwright, tmp_path, SHOTS)

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
            close_assistant(page)
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
            expect(page.locator(ASSISTANT_CLOSE)).to_have_count(0)  # closed once, for good

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


def open_page(playwright, tmp_path, shots, width: int = 1600, height: int = 1000):
    """A fresh headless chromium (a window ``width`` x ``height`` px), its page and
    ``shot(name)``, which saves a screenshot in ``tmp_path`` and ``shots``. The UI must work
    offline: anything but the server is refused (it asks for nothing else)."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=CHROMIUM_ARGS)
    context = browser.new_context(viewport={"width": width, "height": height})
    context.route(re.compile(r"^(?!http://127\.0\.0\.1:)"), lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    expect.set_options(timeout=WAIT_MS)

    def shot(name: str) -> None:
        page.screenshot(path=tmp_path / f"{name}.png")
        shutil.copy(tmp_path / f"{name}.png", shots / f"{name}.png")
    return browser, page, shot


ASSISTANT_CLOSE = '[data-component-id="mlflow.assistant.chat_panel.close"]'


def close_assistant(page) -> None:
    """MLflow 3.18 opens its Assistant panel (a quarter of the window, on the right) at a
    browser's first visit to a UI on this machine; docs/mlflow-ui.md says to close it once,
    with its X: MLflow remembers that in the browser's storage."""
    close = page.locator(ASSISTANT_CLOSE)
    expect(close).to_be_visible()
    close.click()
    expect(close).to_have_count(0)


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


# a comparison of 3 batch sizes, each tuned by 1 trial, then 3 paired confirmation seeds (the
# perceptron: what the UI shows is the same for any model)
LEVELS = ["32", "64", "128"]
COMPARISON = compare_spec(space={"batch_size": [int(b) for b in LEVELS],
                                 "lr": {"low": 1e-3, "high": 1e-2, "log": True}},
                          train={"dataset": "digits", "model": "mlp", "epochs": 1},
                          compare={"factor": "batch_size", "tune_trials": 1, "seeds": 3,
                                   "max_seeds": 3},
                          workers=1)  # what the UI shows does not depend on two trials at once
PHASE, LEVEL, SEED = (f"tags.`{k}`" for k in (keys.PHASE, keys.LEVEL, keys.SEED))
LEVEL_MEAN = f"metrics.`{keys.LEVEL_MEAN}`"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> Stores:
    """The comparison COMPARISON, run once (18 trials of 1 epoch)."""
    d = tmp_path_factory.mktemp("comparison")
    (d / "cmp.yaml").write_text(yaml.safe_dump(COMPARISON))
    out = run_cli("run", "cmp.yaml", cwd=d)
    assert out.returncode == 0, out.stdout + out.stderr
    return Stores(d)


def test_a_comparison_opens_on_the_mean_of_its_confirmation_runs_a_row_a_level(comparison,
                                                                                 tmp_path):
    stores = comparison
    exp_id = stores.client().get_experiment_by_name("cmp").experiment_id
    runs = stores.runs("cmp", "trial")
    phase = {r.info.run_name: r.data.tags[keys.PHASE] for r in runs}
    confirm = [r for r in runs if phase[r.info.run_name] == CONFIRM]
    tune = [r for r in runs if phase[r.info.run_name] == TUNE]
    # each paired seed tunes each level anew (compare's tuning: each_seed, the default)
    assert len(confirm) == 9 and len(tune) == 9, phase
    # the mean of each level's confirmation runs, from MLflow's client and numpy
    values: dict[str, list[float]] = {}
    for r in confirm:
        values.setdefault(r.data.tags[keys.LEVEL], []).append(r.data.metrics["val_acc"])
    assert sorted(values, key=int) == LEVELS and all(len(v) == 3 for v in values.values())
    means = {level: float(np.mean(v)) for level, v in values.items()}
    answer = stores.study("cmp").user_attrs[keys.ANSWER]
    assert answer["mean"] == pytest.approx(means[answer["level"]], abs=1e-12)
    shots = SHOTS / "comparison"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)

    with serve("ui", "cmp", cwd=stores.dir, prefix="MLflow UI:") as ui, \
            sync_playwright() as playwright:
        # the line under the link: the tuning runs' view
        tuning = next_line(ui.proc, timeout=30).split()
        assert tuning[:2] == ["tuning", "runs:"], tuning
        assert tuning[2] == ui.url.replace("viewStateShareKey=sweep",
                                           f"viewStateShareKey={keys.TUNING_VIEW_ID}")
        # a laptop's window: the mean's column on screen once the Assistant panel is closed
        browser, page, shot = open_page(playwright, tmp_path, shots, width=1280, height=800)

        try:
            # 1. the printed link: a row a level, the mean of its confirmation seeds, the best
            # mean first; no other row (the parent run, in a group "Additional runs" when
            # MLflow fetches it: sorted by start time, it does)
            page.goto(ui.url)
            groups = page.locator(".ag-row").filter(has_text="Group: ")
            expect(groups).to_have_count(len(LEVELS))
            close_assistant(page)
            expect(page.get_by_text(f"{len(confirm)} matching runs")).to_be_visible()
            expect(page.get_by_text("Additional runs")).to_have_count(0)
            expect(page.locator(f'.ag-header-cell[col-id="{LEVEL_MEAN}"]')).to_be_in_viewport(
                ratio=1)
            # not val_acc's own column: its group row would show the best seed's, "(max)"
            expect(page.locator(f'.ag-header-cell[col-id="{OBJECTIVE}"]')).to_have_count(0)
            for column in (PHASE, LEVEL, SEED):
                expect(page.locator(f'.ag-header-cell[col-id="{column}"]')).to_be_in_viewport()
            expect(page.get_by_role("button", name=f"Group by: {keys.LEVEL}")).to_be_visible()
            rows = sorted(page.evaluate(CELLS).values(), key=lambda row: int(row["row"]))
            shown = {}
            for row in rows:  # the levels' rows, folded: no run row among them
                level, count = re.fullmatch(r"#\w+\nGroup: (\S+)\n(\d+)",
                                            row[RUN_NAME]).groups()
                # the largest of the level's runs' level_mean, all the same
                mean = re.fullmatch(r"(\S+) \(max\)", row[LEVEL_MEAN]).group(1)
                shown[level] = (int(count), mean)
            assert shown.keys() == means.keys(), rows
            # each level's mean with the digits of the report's table of levels (its parent
            # run's description: val_acc in %), the point moved; within half its last digit
            # of the mean from MLflow's client and numpy
            table = report_table(stores.runs("cmp", "parent")[0].data.tags[keys.PARENT_NOTE])
            assert table.keys() == means.keys(), table
            for level, (count, mean) in shown.items():
                assert count == 3 and Decimal(mean).scaleb(2) == Decimal(table[level]), \
                    (shown, table)
                unit = Decimal(1).scaleb(Decimal(mean).as_tuple().exponent)
                assert abs(Decimal(mean) - Decimal(means[level])) <= unit / 2, (shown, means)
            # best first (val_acc: the higher); levels of equal rounded means in either order
            assert [Decimal(mean) for _, mean in shown.values()] == sorted(
                (Decimal(mean) for _, mean in shown.values()), reverse=True), shown
            shot("1-levels")

            # 2. each level unfolded: its confirmation runs, their phase, level and seed; no
            # tuning run
            for level in LEVELS:
                group = page.locator(".ag-row").filter(has_text=f"Group: {level}")
                group.locator(f'[col-id="{RUN_NAME}"] span[role="button"]').first.click()
            expect(page.locator(".ag-row").filter(
                has=page.locator(f'[col-id="{PHASE}"]', has_text=CONFIRM))
            ).to_have_count(len(confirm))
            listed = {row[RUN_NAME]: (row[PHASE], row[LEVEL], row[SEED])
                      for row in page.evaluate(CELLS).values() if row.get(PHASE)}
            assert listed == {r.info.run_name: (CONFIRM, r.data.tags[keys.LEVEL],
                                                r.data.tags[keys.SEED]) for r in confirm}
            shot("2-seeds")

            # 3. the tuning runs, a click away: the saved views' menu, or the printed link
            page.get_by_role("button", name=re.compile(r"^sweep: confirmation runs")).click()
            page.get_by_text(re.compile(r"^sweep: tuning runs, best val_acc first$")).click()
            expect(page).to_have_url(re.compile(rf"viewStateShareKey={keys.TUNING_VIEW_ID}"))
            page.goto(tuning[2])
            expect(page.get_by_text(f"{len(tune)} matching runs")).to_be_visible()
            expect(page.locator(".ag-row").filter(
                has=page.locator(f'[col-id="{PHASE}"]', has_text=TUNE))).to_have_count(len(tune))
            rows = sorted(page.evaluate(CELLS).values(), key=lambda row: int(row["row"]))
            best_first = sorted(tune, key=lambda r: r.data.metrics["val_acc"], reverse=True)
            assert [(row[RUN_NAME].split("\n")[-1], row[PHASE]) for row in rows] == [
                (r.info.run_name, TUNE) for r in best_first], rows
            shot("3-tuning-runs")

            # 4. the parent run's page, from a confirmation run's "Parent run": the answer in
            # its description
            page.goto(f"{ui.url.split('/#/')[0]}/#/experiments/{exp_id}/runs/"
                      f"{confirm[0].info.run_id}")
            parent_id = stores.runs("cmp", "parent")[0].info.run_id
            link = page.locator(f'a[href="#/experiments/{exp_id}/runs/{parent_id}"]')
            expect(link).to_have_text("cmp")  # its run name: the sweep's
            link.click()
            expect(page).to_have_url(re.compile(rf"/runs/{parent_id}"))
            note = page.locator(".note-editor-preview-content")
            table = note.locator("table")
            expect(table).to_be_attached()
            more = page.get_by_text("Show more", exact=True)
            try:  # MLflow folds a long description (measured once it rendered)
                expect(more).to_be_visible(timeout=5_000)
                more.click()
            except AssertionError:
                pass  # a short one: shown whole
            table.scroll_into_view_if_needed()
            expect(table).to_be_visible()
            for level in LEVELS:  # the Markdown table, rendered, names every level
                expect(table.get_by_text(level, exact=True).first).to_be_visible()
            page.get_by_text("Description", exact=True).evaluate(
                "e => e.scrollIntoView({block: 'start'})")  # for the screenshot
            # a sentence or a row names the answer's level with its confirmed mean
            parts = note.locator("p, li, tr, strong, h1, h2, h3, h4").all_inner_texts()
            assert any(says(part, answer["level"], answer["mean"]) for part in parts), parts
            shot("4-parent-description")
        except Exception:
            shot("failed")
            (shots / "failed.html").write_text(page.content())
            raise
        finally:
            browser.close()
        ui.stop()


def report_table(note: str) -> dict[str, str]:
    """Level -> its mean as the table of levels in a comparison's parent run description (the
    report's Markdown) writes it."""
    lines = note.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| rank | "))
    assert lines[head].split(" | ")[2].startswith("mean "), lines[head]
    rows = itertools.takewhile(lambda line: line.startswith("| "), lines[head + 2:])
    cells = [line.strip("| ").split(" | ") for line in rows]
    return {row[1]: row[2] for row in cells}


def next_line(proc, timeout: float) -> str:
    """The next line ``proc`` prints; "" when none comes within ``timeout`` seconds (a thread
    reads it: a pipe's read does not time out)."""
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return line[0] if line else ""


def says(text: str, level: str, mean: float) -> bool:
    """Whether ``text`` names ``level`` (a word of its own) and another number that is
    ``mean`` rounded as written (at least 2 digits after the point as a fraction, or in
    points, whole or not: the answer's figures have the digits its interval supports)."""
    if not re.search(rf"(?<![\w.]){re.escape(level)}(?![\w.])", text):
        return False
    for number, digits in re.findall(r"(?<![\w.])(\d+(?:\.(\d+))?)(?![\w.])", text):
        x, half = float(number), 0.5 * 10 ** -len(digits) + 1e-12
        if number != level and ((len(digits) >= 2 and abs(x - mean) <= half)
                                or abs(x - 100 * mean) <= half):
            return True
    return False
