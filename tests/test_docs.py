"""The documentation site: ``docs/build.py`` builds it once per test run (the pages' generated
parts filled, their examples run, ``zensical build --strict``, every link, anchor and page
checked), and a copy of the pages broken once per rule fails the build. The runnable command
blocks of the pages run in the folder the build prepared for the examples (one quickstart sweep
for both). The built home and API pages are opened in Debian's chromium, their screenshots saved
in test-output/docs/. Every page's prose is measured (tests/prose.py) and kept readable."""
import html
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests import prose
from tests.conftest import ROOT
from tests.helpers import CHROMIUM, CHROMIUM_ARGS
from tests.test_docs_blocks import command_blocks, commands, docs_test_runs, load_build

DOCS = ROOT / "docs"
SHOTS = ROOT / "test-output" / "docs"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
README_LINK = re.compile(r"\]\((docs/[^)\s#]+)(?:#([^)\s]+))?\)")
build = load_build()
slow = pytest.mark.slow  # end to end: the site built with its examples, opened in a browser


@dataclass(frozen=True)
class Built:
    site: Path  # the built site
    staging: Path  # the build's filled copy of docs/ and zensical.toml
    workdir: Path  # where the examples ran: sweeps/, .venv, home/, the quickstart sweep
    log: str


def run_build(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python docs/build.py ARGS``, as a user runs it."""
    return subprocess.run([sys.executable, str(DOCS / "build.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    if find_spec("zensical") is None:
        pytest.fail("zensical is not installed: the docs tests need it (`.venv/bin/pip install "
                    "-e '.[test]'`, on Python 3.11 or later)", pytrace=False)
    folder = tmp_path_factory.mktemp("docs")
    paths = Built(folder / "site", folder / "staging", folder / "project", "")
    out = run_build("--site", str(paths.site), "--staging", str(paths.staging),
                    "--workdir", str(paths.workdir))
    assert out.returncode == 0, out.stdout + out.stderr
    return Built(paths.site, paths.staging, paths.workdir, out.stdout + out.stderr)


def built_page(site: Path, page: str) -> Path:
    """The HTML file ``page`` (a path under docs/) builds to (directory URLs)."""
    stem = page[:-len(".md")]
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


def text_of(html_text: str) -> str:
    """A built page's text: tags dropped, entities read, white space collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", html_text)).split())


def squeezed(html_text: str) -> str:
    """A built page's text without tags or white space: what it says, however it is marked up."""
    return re.sub(r"\s+", "", html.unescape(re.sub(r"<[^>]+>", "", html_text)))


def section(html_text: str, anchor: str) -> str:
    """The part of a built page from the heading with id ``anchor`` to the next heading of the
    same level or higher."""
    heading = re.search(rf'<h([1-6])\b[^>]*\bid="{re.escape(anchor)}"', html_text)
    assert heading, f"no heading with id {anchor}"
    level, rest = int(heading.group(1)), html_text[heading.end():]
    ends = [m.start() for m in re.finditer(r"<h([1-6])\b", rest) if int(m.group(1)) <= level]
    return rest[:ends[0]] if ends else rest


def staged_copy(built: Built, tmp_path: Path) -> Path:
    """A copy of the build's filled pages and config, to break; returns its config."""
    copy = tmp_path / "staging"
    shutil.copytree(built.staging, copy, ignore=shutil.ignore_patterns("site", ".cache"))
    return copy / build.CONFIG


# ------------------------------------------------------------------------------ the build

@slow
def test_the_site_builds_with_the_api_reference_read_from_the_docstrings(built):
    from orchestrator.answer.stats import compare_paired
    from orchestrator.commands.api import run, write_report
    from trainers.loop import train

    assert (built.site / "index.html").is_file()
    assert "No issues found" in built.log  # Zensical's strict build warned of nothing
    api = built_page(built.site, "api.md").read_text()
    for function, anchor in [(run, "orchestrator.commands.api.run"),
                             (write_report, "orchestrator.commands.api.write_report"),
                             (compare_paired, "orchestrator.answer.stats.compare_paired"),
                             (train, "trainers.loop.train")]:
        assert f'id="{anchor}"' in api, anchor
        shown = text_of(section(api, anchor))
        summary = inspect.getdoc(function).split("\n\n")[0].replace("`", "")
        assert squeezed(summary) in squeezed(section(api, anchor)), (anchor, summary)
        for name in inspect.signature(function).parameters:  # its signature, each parameter
            assert re.search(rf"\b{name}\b", shown), (anchor, name)


@slow
def test_the_map_page_has_a_section_per_layer_package_with_its_modules(built):
    layout = build._layout()
    page = built_page(built.site, "map.md").read_text()
    packages = [f"orchestrator.{p}" for p in layout.layer_packages()] + ["trainers"]
    assert len(packages) >= 7
    for package in packages:
        anchor = package.replace(".", "")
        assert f'<h2 id="{anchor}"' in page, package
        shown = section(page, anchor)
        modules = [m for m, path in layout.MODULES.items()
                   if m.startswith(package + ".") and path.name != "__init__.py"]
        assert modules, package
        for module in modules:  # its row: the name, its size, its docstring's first line
            lines = len(layout.MODULES[module].read_text().splitlines())
            assert re.search(rf"<code>{re.escape(module)}</code></td>\s*<td>{lines}</td>",
                             shown), module
        assert "may import" in shown or package == "trainers"


@slow
def test_the_built_pages_show_the_figures_the_code_gives(built):
    figures = build._figures()
    known = figures.values()
    shown = 0
    for page in sorted(DOCS.glob("*.md")):
        html_text = built_page(built.site, page.name).read_text()
        on_page = {}
        for m in re.finditer(r"<!-- figure: (\w+) -->(.*?)<!-- /figure -->", html_text):
            on_page.setdefault(m.group(1), set()).add(text_of(m.group(2)))
        for m in figures.MARKED.finditer(page.read_text()):
            name = m.group(1)
            # as the code gives it, Markdown's backticks rendered as code
            assert on_page.get(name) == {known[name].replace("`", "")}, (page.name, name)
            shown += 1
    assert shown >= len(known)


@slow
def test_every_example_has_its_real_output_on_the_built_page(built):
    found = 0
    for page in sorted(DOCS.glob("*.md")):
        pairs = build.examples(page.name, page.read_text())[0]
        staged = (built.staging / "docs" / page.name).read_text()
        outputs = [b for b in build.fenced_blocks(page.name, staged) if b.marker == build.OUTPUT]
        assert len(outputs) == len(pairs), page.name
        shown = squeezed(built_page(built.site, page.name).read_text())
        for block in outputs:
            assert block.body.strip(), f"{block.where}: an empty output"
            assert squeezed(html.escape(block.body)) in shown, (block.where, block.body[:200])
            found += 1
    assert found >= 2  # development.md's and map.md's, at least
    # the folder they ran in is shown by its stand-in
    everything = "".join(p.read_text() for p in built.site.rglob("*.html"))
    assert str(built.workdir) not in everything and str(built.workdir.resolve()) not in everything
    development = (built.staging / "docs" / "development.md").read_text()
    assert "sweeps in ~/project/optuna.journal" in development
    assert re.search(r"^quickstart +2 +2 ", development, re.M)
    assert "may import: ('core', 'config')" in (built.staging / "docs" / "map.md").read_text()


# a copy of the filled pages, broken once per rule the build keeps
BREAKS = {
    "a link to a missing page": ("yaml.md", "\nSee [nowhere](nopage.md).\n", "nopage.md"),
    "a link to a missing heading": ("yaml.md", "\nSee [nowhere](compare.md#no-such-heading).\n",
                                    "no-such-heading"),
    "an HTML link Zensical does not check": ("yaml.md", '\n<a href="../nowhere/">x</a>\n',
                                             "lands on no file"),
    "a page outside the nav": ("orphan.md", "# Orphan\n",
                               "docs/orphan.md: the page is in no nav entry of zensical.toml"),
    "a reference to no object of the code": ("api.md", "\n::: orchestrator.commands.api.nosuch\n",
                                             "orchestrator.commands.api.nosuch"),
}


@slow
@pytest.mark.parametrize("case", list(BREAKS))
def test_a_broken_copy_of_the_pages_fails_the_build(built, tmp_path, case):
    config = staged_copy(built, tmp_path)
    page, added, said = BREAKS[case]
    path = config.parent / "docs" / page
    path.write_text((path.read_text() if path.exists() else "") + added)
    logged = []
    with pytest.raises(build.BuildError) as failed:
        build.render(config, tmp_path / "site", log=logged.append)
    assert said in "\n".join(logged + failed.value.problems)
    assert not (tmp_path / "site").exists()


@slow
def test_the_unbroken_copy_builds(built, tmp_path):
    """The copy the cases above break builds as it is: each failure is its break's."""
    build.render(staged_copy(built, tmp_path), tmp_path / "site", log=lambda said: None)
    assert (tmp_path / "site" / "index.html").is_file()


@slow
@pytest.mark.parametrize("example, said", [
    ("```bash\n.venv/bin/sweep status nosuch-sweep\n```", "failed (exit 2)"),
    ("```python\nimport json\njson.loads('{')\n```", "JSONDecodeError"),
    ("```bash\ntrue\n```", "printed nothing"),
])
def test_a_failing_example_fails_the_build_naming_page_and_line(built, tmp_path, example, said):
    docs = tmp_path / "docs"
    docs.mkdir()
    text = (DOCS / "development.md").read_text()
    head, tail = text.split("\n## ", 1)
    (docs / "development.md").write_text(f"{head}\n<!-- docs-example -->\n{example}\n\n"
                                         f"<!-- docs-output -->\n```text\n```\n\n## {tail}")
    line = head.count("\n") + 3  # the example's opening fence
    with pytest.raises(build.BuildError) as failed:
        build.fill(docs, built.workdir, log=lambda said: None)
    (problem,) = failed.value.problems
    assert problem.startswith(f"docs/development.md:{line}: ") and said in problem, problem


@slow
def test_a_pages_examples_run_in_order_and_show_stdout_and_stderr_as_written(built, tmp_path):
    (tmp_path / "p.md").write_text(
        "# P\n\n<!-- docs-example -->\n```bash\necho one > note.txt\ncat note.txt\n```\n\n"
        "<!-- docs-output -->\n```text\n```\n\nThen:\n\n<!-- docs-example -->\n```python\n"
        "import sys\nprint(open('note.txt').read().strip(), 'again')\n"
        "print('to stderr', file=sys.stderr)\nprint('to stdout')\n```\n\n"
        "  <!-- docs-output -->\n  ```text\n  ```\n")
    build.fill(tmp_path, built.workdir, log=lambda said: None)
    outputs = [b.body for b in build.fenced_blocks("p.md", (tmp_path / "p.md").read_text())
               if b.marker == build.OUTPUT]
    assert outputs == ["one\n", "one again\nto stderr\nto stdout\n"]
    assert "  ```text\n  one again\n" in (tmp_path / "p.md").read_text()  # indented as its fence


# the build's checks of the pages' markers, made before anything slow runs (so fast): a change
# to development.md or map.md, and what the build says
EXAMPLE_BLOCK = "<!-- docs-example -->\n```bash\n.venv/bin/sweep status\n```\n"
OUTPUT_BLOCK = "<!-- docs-output -->\n```text\n```\n"
MARKER_BREAKS = {
    "a figure of no name": (
        "development.md", ("\n## ", "\nA <!-- figure: alpah -->0.05<!-- /figure --> alpha.\n\n## "),
        "<!-- figure: alpah --> names no figure of docs/figures.py"),
    "a figure left open": (
        "development.md", ("\n## ", "\nA <!-- figure: alpha -->0.05 alpha.\n\n## "),
        "a figure marker that is not <!-- figure: NAME -->VALUE<!-- /figure --> on one line"),
    "the map page's marker renamed": (
        "map.md", ("docs/build.py -->", "docs/hooks.py -->"),
        "<!-- map: generated at build time by docs/hooks.py --> is no marker the build knows"),
    "the map page's marker removed": (
        "map.md", ("<!-- map: generated at build time by docs/build.py -->", ""),
        "docs/map.md: <!-- map: generated at build time by docs/build.py --> is missing"),
    "an example without its output": (
        "development.md", (OUTPUT_BLOCK, ""),
        "<!-- docs-example --> has no <!-- docs-output --> block after it"),
    "an output typed by hand": (
        "development.md", (OUTPUT_BLOCK, OUTPUT_BLOCK.replace("```text\n", "```text\nsweeps in\n")),
        "<!-- docs-output --> is written by the build: leave the block empty in the source"),
    "an output after no example": (
        "development.md", ("<!-- docs-example -->\n", ""),
        "<!-- docs-output --> follows no <!-- docs-example --> block"),
    "an example of another language": (
        "development.md", (EXAMPLE_BLOCK, EXAMPLE_BLOCK.replace("```bash", "```console")),
        "<!-- docs-example --> marks a ```console block: an example is ```bash or ```python"),
}


@pytest.mark.parametrize("case", list(MARKER_BREAKS))
def test_a_generated_part_the_build_cannot_fill_fails_it_naming_page_and_marker(tmp_path, case):
    page, (before, after), said = MARKER_BREAKS[case]
    source = tmp_path / "source"
    shutil.copytree(DOCS, source / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / build.CONFIG, source / build.CONFIG)
    path = source / "docs" / page
    assert before in path.read_text(), (page, before)
    path.write_text(path.read_text().replace(before, after, 1))
    workdir = tmp_path / "project"
    out = run_build("--source", str(source), "--site", str(tmp_path / "site"), "--workdir",
                    str(workdir))
    assert out.returncode == 1, out.stdout + out.stderr
    problems = [line.strip() for line in out.stderr.splitlines()[1:]]
    assert problems and all(p.startswith(f"docs/{page}:") for p in problems), problems
    assert any(said in p for p in problems), problems
    assert not workdir.exists() and not (tmp_path / "site").exists()  # refused before running


def test_a_generated_part_left_empty_fails_the_build(tmp_path, monkeypatch):
    """What the code gives is checked too: a map or a figure that comes out empty."""
    (tmp_path / "map.md").write_text(f"# Map\n\n{build.MAP_MARKER}\n")
    (tmp_path / "yaml.md").write_text("At most <!-- figure: max_grid -->1<!-- /figure --> runs.\n")
    monkeypatch.setattr(build, "map_markdown", lambda: "")
    monkeypatch.setitem(build._figures().FIGURES, "max_grid", lambda: "")
    with pytest.raises(build.BuildError) as failed:
        build.fill(tmp_path, None)  # no example: nothing runs
    assert failed.value.problems == [
        f"docs/map.md: {build.MAP_MARKER} was not filled with the map",
        "docs/yaml.md: <!-- figure: max_grid --> is empty"]


def test_every_page_is_in_the_nav_once():
    assert build.nav_problems(ROOT / build.CONFIG, DOCS) == []
    listed = build.nav_pages(build._toml(ROOT / build.CONFIG)["project"]["nav"])
    assert len(listed) == len(list(DOCS.glob("*.md"))) >= 16


# a test the pages name as the evidence of what they say: `path/test_x.py::test_y`, and
# `::test_z` after it for another test of the same file
TEST_NAMED = re.compile(r"`(?:([\w/]*test_\w+\.py))?::(test_\w+)")


def test_every_test_a_page_names_exists():
    """A page that says "tested by" names a test of tests/: a renamed or removed test fails
    here, not on the reader who looks for it."""
    named, missing = 0, []
    for page in sorted(DOCS.glob("*.md")):
        for line in page.read_text().splitlines():
            file = None
            for match in TEST_NAMED.finditer(line):
                file = match[1] or file
                if file is None:
                    missing.append(f"{page.name}: ::{match[2]} follows no test file")
                    continue
                path = ROOT / "tests" / file
                named += 1
                if not path.is_file() or not re.search(rf"^def {match[2]}\(", path.read_text(),
                                                       re.M):
                    missing.append(f"{page.name}: {file}::{match[2]}")
    assert named >= 30 and missing == []  # (41 today: a pattern that finds none fails)


@slow
def test_every_image_in_docs_is_shown_by_a_page(built):
    shown = {(page.parent / path).resolve() for page in DOCS.rglob("*.md")
             for path in IMAGE.findall(page.read_text())}
    images = {p.resolve() for p in DOCS.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES}
    assert images, "docs/ holds no image"
    assert sorted(map(str, images - shown)) == [], "images no page shows"
    assert sorted(map(str, shown - images)) == [], "pages show images that do not exist"
    for image in images:  # and the site carries them
        assert (built.site / image.relative_to(DOCS.resolve())).is_file(), image


@slow
def test_the_readmes_links_into_the_docs_land_on_a_page_and_heading(built):
    links = README_LINK.findall((ROOT / "README.md").read_text())
    assert links, "README links to no page of the docs"
    for path, anchor in links:
        target = ROOT / path
        assert target.is_file(), f"README links to {path}, which does not exist"
        if target.suffix == ".md" and anchor:
            html_text = built_page(built.site, target.relative_to(DOCS).as_posix()).read_text()
            assert f'id="{anchor}"' in html_text, f"README links to {path}#{anchor}: no heading"


@slow
def test_the_built_home_and_api_pages_render_in_a_browser(built):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: the docs test needs Debian's chromium; install it as "
                    f"root with `apt-get update && apt-get install -y chromium` (the README's "
                    f"test command does)", pytrace=False)
    from playwright.sync_api import expect, sync_playwright

    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            # the built site reads offline: anything but its own files is refused
            context.route(re.compile(r"^(?!file://)"), lambda route: route.abort())
            page = context.new_page()
            page.goto(built_page(built.site, "index.md").as_uri())
            expect(page.locator("h1").first).to_have_text(re.compile("sweep"))
            expect(page.locator("img[src='live-view.png']")).to_be_visible()
            page.screenshot(path=SHOTS / "home.png", full_page=False)
            anchor = "#orchestrator.answer.stats.compare_paired"
            page.goto(built_page(built.site, "api.md").as_uri() + anchor)
            expect(page.locator("[id='orchestrator.answer.stats.compare_paired']")).to_be_visible()
            page.screenshot(path=SHOTS / "api.png", full_page=False)
        finally:
            browser.close()
    for name in ("home.png", "api.png"):
        assert (SHOTS / name).stat().st_size > 10_000, name


# ------------------------------------------------------------- the runnable command blocks

@slow  # runs the docs' commands: sweeps, a preflight, reports
def test_the_runnable_command_blocks_of_the_docs_run_as_written(built):
    """The ``docs-test: run`` blocks, in the folder the build prepared for the examples (its
    quickstart sweep made once for both); the examples themselves ran in the build."""
    folder = built.workdir
    run_id = build.run_id(folder)
    blocks = [b for b in command_blocks() if docs_test_runs(b)]
    assert blocks and not any("docs-example" in b.marker for b in blocks)
    failed = []
    for block in blocks:
        text = re.sub(r"\bRUN_ID\b", run_id, block.text)
        out = build.run_block(text, "bash", folder, timeout=600)
        if out.returncode != 0 or "Traceback" in out.stdout:
            failed.append(f"{block.where} exited {out.returncode}: {out.stdout[-2000:]}")
            continue
        for command in commands(text):  # what it says it writes is there
            words = shlex.split(command)
            for flag in ("--out", ">"):
                if flag in words:
                    target = Path(os.path.expanduser(words[words.index(flag) + 1]).replace(
                        str(Path.home()), str(folder / "home")))
                    if not (folder / target).exists():
                        failed.append(f"{block.where}: {target} was not written")
    assert failed == []
    assert any("reproduce RUN_ID" in b.text for b in command_blocks() if docs_test_runs(b)
               or "docs-example" in b.marker)


# ------------------------------------------------------------------------------- the prose

@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_the_prose_of_each_page_reads_at_a_glance(page):
    """At most MAX_MEAN_SENTENCE words a sentence on average and no prose paragraph over
    MAX_PARAGRAPH words (tests/prose.py says what counts as prose)."""
    measured = prose.measure(DOCS / page)
    assert measured.sentences > 0, f"{page}: no prose found"
    assert measured.problems() == []


HAND_MADE = """# A page

Two sentences here. The second has six words.

- A list item is its own paragraph.
- So is this one, which ends without a stop

```bash
sweep run with many words in a code block that must never count as prose at all
```

| a table | of words that are not prose either, however long |
| --- | --- |

## A heading of many words that is not prose

<!-- a comment of words, left out -->
Inline `code spans count as one` word, and [a link](x.md) as its text.
"""


def test_the_prose_measure_counts_sentences_and_paragraphs_as_the_check_says(tmp_path):
    page = tmp_path / "hand.md"
    page.write_text(HAND_MADE)
    assert prose.paragraphs(HAND_MADE) == [
        "Two sentences here. The second has six words.",
        "A list item is its own paragraph.",
        "So is this one, which ends without a stop",
        "Inline CODE word, and a link as its text.",
    ]
    measured = prose.measure(page)
    # 8, 7, 9 and 9 words; 2, 1, 1 and 1 sentences
    assert (measured.words, measured.sentences, measured.longest_paragraph) == (33, 5, 9)
    assert measured.mean_sentence == pytest.approx(6.6)
    assert measured.problems() == []
    long = tmp_path / "long.md"
    long.write_text(" ".join(["word"] * (prose.MAX_PARAGRAPH + 1)) + ".\n")
    assert [p.split(":")[1].split(" (")[0] for p in prose.measure(long).problems()] == [
        f" {prose.MAX_PARAGRAPH + 1}.0 words a sentence on average",
        f" a paragraph of {prose.MAX_PARAGRAPH + 1} words"]
