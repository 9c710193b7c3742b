"""The command blocks of the docs pages run as written, and the figures the pages quote are the
code's, so that docs and code cannot drift.

Every fenced command block (```bash, ```console, ```sh, ```shell) of a page of docs/ carries, on
the line above it, one of:

- ``<!-- docs-example -->``: a page's example, run by the site's build (``docs/build.py``), which
  writes its real output into the ``<!-- docs-output -->`` block under it;
- ``<!-- docs-test: run -->``: run as written (``bash -e``) by tests/test_docs.py, in the folder
  the build prepared for the examples: a copy of ``sweeps/``, ``.venv`` (a link to this
  checkout's), a small quickstart sweep and a home folder of its own; the word ``RUN_ID`` stands
  for a trial run of that sweep;
- ``<!-- docs-test: as readme-test NAME -->``: the same commands as README's block marked NAME,
  which tests/test_readme.py runs;
- ``<!-- readme-test: NAME -->``: run by tests/test_readme.py;
- ``<!-- docs-test: skip (WHY) -->``: why it cannot run here (a cluster, the network, a server
  that runs until stopped).
"""
import importlib.util
import re
import sys
from dataclasses import dataclass

import pytest

from tests.conftest import ROOT
from tests.test_readme import marked_blocks

DOCS = ROOT / "docs"
COMMAND_LANGUAGES = ("bash", "console", "sh", "shell")
MARKER = re.compile(r"^\s*<!-- (?:docs-test: (run|skip \((?P<why>.*\S.*)\)|as readme-test "
                    r"(?P<same>\w+))|readme-test: (?P<readme>\w+)|(?P<example>docs-example))"
                    r" -->\s*$")
PLACEHOLDERS = ("RUN_ID",)


def load_build():
    """``docs/build.py``, the site's build, loaded from its file (docs/ is no package)."""
    if "sweep_docs_build" not in sys.modules:
        spec = importlib.util.spec_from_file_location("sweep_docs_build", DOCS / "build.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)
    return sys.modules["sweep_docs_build"]


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, from 1
    marker: str  # the line above the fence
    text: str  # the block's lines, its fence's indentation removed

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def command_blocks(pages=None) -> list[Block]:
    """Every fenced command block of ``pages`` (default: docs/*.md), in page order, found by the
    build's own parser (indented blocks too)."""
    out = []
    for path in pages or sorted(DOCS.glob("*.md")):
        for block in load_build().fenced_blocks(path.name, path.read_text()):
            if block.lang in COMMAND_LANGUAGES:
                out.append(Block(path.name, block.start + 1, block.marker, block.body))
    return out


def runnable(block: Block) -> bool:
    """Run as written: by tests/test_docs.py (``docs-test: run``) or by the site's build (an
    example)."""
    m = MARKER.match(block.marker)
    return m is not None and (m.group(1) == "run" or m.group("example") is not None)


def docs_test_runs(block: Block) -> bool:
    """Run by tests/test_docs.py: marked ``docs-test: run`` (an example is run by the build)."""
    m = MARKER.match(block.marker)
    return m is not None and m.group(1) == "run"


def commands(text: str) -> list[str]:
    """A block's commands, continued lines joined, comments left out."""
    joined = text.replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def marker_problem(block: Block, readme: dict[str, list[str]]) -> str | None:
    m = MARKER.match(block.marker)
    if m is None:
        return (f"{block.where}: a command block without a marker on the line above it: "
                f"<!-- docs-example -->, <!-- docs-test: run --> or <!-- docs-test: skip (why) -->")
    same = m.group("same") or m.group("readme")
    if same and same not in readme:
        return f"{block.where}: README has no block marked readme-test {same}"
    if m.group("same"):
        steps = [s.strip() for line in readme[same] for s in line.split("&&")]
        missing = [c for c in commands(block.text) if c not in steps]
        if missing:
            return f"{block.where}: {missing} are not commands of README's block {same}"
    return None


def test_every_command_block_of_the_docs_is_run_or_says_why_not():
    blocks = command_blocks()
    assert len(blocks) >= 20, [b.where for b in blocks]  # the parser finds them, indented too
    readme = marked_blocks()
    assert [p for b in blocks if (p := marker_problem(b, readme))] == []
    runs = [b for b in blocks if runnable(b)]  # by tests/test_docs.py or by the build
    assert len(runs) >= 8, [b.where for b in runs]
    assert any("docs-example" in b.marker for b in runs), "no page has a command example"


@pytest.mark.parametrize("marker, problem", [
    ("", "without a marker"),
    ("<!-- docs-test: skip -->", "without a marker"),  # a skip says why
    ("<!-- docs-test: skip ( ) -->", "without a marker"),
    ("<!-- docs-test: runs -->", "without a marker"),
    ("<!-- docs-test: as readme-test nosuch -->", "README has no block marked readme-test nosuch"),
    ("<!-- docs-test: as readme-test status -->", "are not commands of README's block status"),
    ("<!-- docs-examples -->", "without a marker"),
    ("<!-- docs-output -->", "without a marker"),  # an output is no command
    ("<!-- docs-example -->", None),  # run by the site's build
])
def test_a_block_without_a_runner_or_a_reason_is_named(tmp_path, marker, problem):
    page = tmp_path / "page.md"
    page.write_text(f"Text.\n\n{marker}\n```bash\n.venv/bin/sweep report quickstart\n```\n"
                    f"\n<!-- docs-test: run -->\n```console\n.venv/bin/sweep status\n```\n")
    first, second = command_blocks([page])
    assert (first.line, second.line) == (4, 9)
    if problem is None:
        assert marker_problem(first, marked_blocks()) is None
    else:
        assert problem in marker_problem(first, marked_blocks())
    assert marker_problem(second, marked_blocks()) is None
    # an example is run once, by the build: tests/test_docs.py runs the `docs-test: run` blocks
    assert runnable(second) and runnable(first) == (marker == "<!-- docs-example -->")
    assert [b.line for b in command_blocks([page]) if docs_test_runs(b)] == [9]


def test_the_compare_pages_python_block_runs_with_the_documented_import():
    """docs/compare.md's rerun of a row of comparison.csv, as written."""
    (block,) = re.findall(r"```python\n(.*?)```", (DOCS / "compare.md").read_text(), re.S)
    assert block.startswith("from orchestrator.stats import compare_paired\n")
    scope: dict = {}
    exec(compile(block, "docs/compare.md", "exec"), scope)  # noqa: S102 (the page's own code)
    r = scope["r"]
    assert (r.a, r.b, r.pairs, r.look, r.looks) == ("adam", "sgd", 3, 1, 6)
    assert r.diff == pytest.approx((0.93 + 0.931 + 0.94 - 0.912 - 0.905 - 0.915) / 3)


def test_compare_paired_is_named_by_one_import_path_in_the_readme_and_the_docs():
    """The public path, ``orchestrator.stats``; the API reference's own anchor aside."""
    paths = set()
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for line in page.read_text().splitlines():
            if line.startswith(":::"):
                continue  # mkdocstrings: where the reference is generated from
            line = re.sub(r"\(api\.md#[\w.]+\)", "", line)  # its anchor
            paths |= set(re.findall(r"from ([\w.]+) import compare_paired", line))
            paths |= set(re.findall(r"([\w.]+)\.compare_paired", line))
    assert paths == {"orchestrator.stats"}


# ------------------------------------------------------------------------------------ figures

def _figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("doc_figures", DOCS / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_figure_the_docs_quote_is_the_codes_and_each_is_quoted():
    from orchestrator.answer.stats import BOUNDARY_DRAWS, boundary_alpha
    from orchestrator.config.rules import MAX_GRID

    figures = _figures()
    pages = sorted(DOCS.glob("*.md"))
    assert figures.stale(pages) == [], "run: .venv/bin/python docs/figures.py"
    used = {m.group(1) for page in pages for m in figures.MARKED.finditer(page.read_text())}
    assert used == set(figures.FIGURES)
    known = figures.values()  # against the code, computed here
    assert known["boundary_seeds_3_to_8"] == f"{boundary_alpha(0.05, 6, 3):.3g}" == "0.0142"
    assert known["level_seeds_3_to_8"] == f"{100 * (1 - boundary_alpha(0.05, 6, 3)):.1f}%"
    assert known["boundary_seeds_3_to_6"] == f"{boundary_alpha(0.05, 4, 3):.3g}"
    assert (known["alpha"], known["confidence"]) == ("0.05", "95%")
    assert known["boundary_draws"] == f"{BOUNDARY_DRAWS:,}" and known["max_grid"] == str(MAX_GRID)


def test_a_stale_figure_is_named_and_rewritten_from_the_code(tmp_path):
    figures = _figures()
    page = tmp_path / "p.md"
    page.write_text("alpha' = <!-- figure: boundary_seeds_3_to_8 -->0.0125<!-- /figure -->, a "
                    "<!-- figure: confidence -->95%<!-- /figure --> interval\n")
    (line,) = figures.stale([page])
    assert line == "p.md: figure boundary_seeds_3_to_8 shows '0.0125', the code gives '0.0142'"
    assert figures.fill(page.read_text()) == (
        "alpha' = <!-- figure: boundary_seeds_3_to_8 -->0.0142<!-- /figure -->, a "
        "<!-- figure: confidence -->95%<!-- /figure --> interval\n")
    page.write_text("<!-- figure: nosuch -->1<!-- /figure -->")
    assert "no figure named 'nosuch'" in figures.stale([page])[0]


def test_the_build_writes_the_codes_figures_into_a_stale_page(tmp_path):
    """The build fills each figure of its copy of the pages from the code, whatever the page
    shows."""
    build = load_build()
    page = tmp_path / "compare.md"
    page.write_text("# Compare\n\nalpha' = <!-- figure: boundary_seeds_3_to_8 -->0.0083<!-- /figure"
                    " -->, a <!-- figure: confidence --><!-- /figure --> interval\n")
    build.fill(tmp_path, None)  # no example on the page: nothing runs
    assert page.read_text() == (
        "# Compare\n\nalpha' = <!-- figure: boundary_seeds_3_to_8 -->0.0142<!-- /figure -->, a "
        "<!-- figure: confidence -->95%<!-- /figure --> interval\n")
