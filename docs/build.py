"""Build the documentation site: ``.venv/bin/python docs/build.py`` writes it into ``site/``.

Zensical builds the site, but it runs no code of ours. So this script does what the build must
not skip, in order, and exits 1 naming the page, line and marker of the first step that fails:

1. Copy ``docs/`` and ``zensical.toml`` into a staging folder (the sources are never changed).
2. Check every generated marker of the pages before any slow step: each figure names a figure
   of ``docs/figures.py``, each ``<!-- docs-example -->`` block has its empty
   ``<!-- docs-output -->`` block, the map page has its marker.
3. Fill the staged pages: the map page from the code (:func:`map_markdown`), the figures from
   ``docs/figures.py``, and each example's real output. The examples run in a prepared folder
   (:func:`prepare`): a copy of ``sweeps/``, a link to ``.venv``, a home of its own and a
   small quickstart sweep. A failing example, or one that prints nothing, fails the build.
4. Run ``zensical build --strict`` on the staged copy (a broken link or anchor fails it).
5. Check the built site: every internal link lands on a built file and, with a ``#anchor``,
   on an id there; every page of ``docs/`` is in ``nav`` once.

``--serve`` then serves the built site on http://127.0.0.1:8000 until Ctrl-C. The tests build
the site with ``--workdir`` (the prepared folder, kept for their own runs of the pages' command
blocks) and ``--staging`` (the filled pages, kept to break a copy of them).
"""
from __future__ import annotations

import argparse
import functools
import html.parser
import importlib.util
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "zensical.toml"

MAP_PAGE = "map.md"
MAP_MARKER = "<!-- map: generated at build time by docs/build.py -->"
EXAMPLE = "<!-- docs-example -->"
OUTPUT = "<!-- docs-output -->"
EXAMPLE_LANGUAGES = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
FIGURE_START = re.compile(r"<!-- figure:")
GENERATED_COMMENT = re.compile(r"<!-- (map|figure|docs-example|docs-output)\b[^>]*-->")

# the prepared folder the examples run in (as tests/test_docs_blocks.py's runnable blocks)
QUICKSTART = "sweep run sweeps/quickstart.yaml --set train.epochs=1 --trials 2"
PREPARED_STAMP = ".docs-prepared"
PLACEHOLDER = "RUN_ID"
EXAMPLE_TIMEOUT_S = 300
# what an example's output shows instead of the folder it ran in and of its home
PROJECT_STAND_IN = "~/project"
HOME_STAND_IN = "~"
COLUMNS = "100"  # rich and argparse wrap at this width, wherever the build runs

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)[^`]*$")


class BuildError(Exception):
    """The build is refused: one line per problem, each naming page, line and marker."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------------------- the pages

@dataclass(frozen=True)
class Fenced:
    """A fenced block of a page."""

    page: str  # its path under docs/
    start: int  # the index of its opening fence line (from 0)
    end: int  # the index of its closing fence line
    indent: int
    fence: str
    lang: str
    marker: str  # the line above the opening fence, stripped
    body: str  # its lines, its fence's indentation removed

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.start + 1}"


def fenced_blocks(page: str, text: str) -> list[Fenced]:
    """Every fenced block of a page's Markdown, in order (indented ones included)."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = len(m.group("indent")), m.group("fence")
        closing = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = "".join(line[indent:] + "\n" for line in lines[i + 1:j])
        out.append(Fenced(page, i, j, indent, fence, m.group("lang").lower(),
                          lines[i - 1].strip() if i else "", body))
        i = j + 1
    return out


def examples(page: str, text: str) -> tuple[list[tuple[Fenced, Fenced]], list[str]]:
    """The page's example blocks, each with the output block it fills, and one line per
    misplaced marker."""
    blocks = fenced_blocks(page, text)
    pairs, problems = [], []
    for i, block in enumerate(blocks):
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        if block.marker == EXAMPLE:
            if block.lang not in EXAMPLE_LANGUAGES:
                problems.append(f"{block.where}: {EXAMPLE} marks a ```{block.lang} block: an "
                                f"example is ```bash or ```python")
            elif after is None or after.marker != OUTPUT:
                problems.append(f"{block.where}: {EXAMPLE} has no {OUTPUT} block after it: add "
                                f"an empty ```text block marked {OUTPUT} under the example")
            else:
                pairs.append((block, after))
        elif block.marker == OUTPUT:
            before = blocks[i - 1] if i else None
            if before is None or before.marker != EXAMPLE:
                problems.append(f"{block.where}: {OUTPUT} follows no {EXAMPLE} block")
            elif block.body.strip():
                problems.append(f"{block.where}: {OUTPUT} is written by the build: leave the "
                                f"block empty in the source")
    fence_lines = {b.start - 1 for b in blocks}
    for n, line in enumerate(outside_code(page, text)):
        if line.strip() in (EXAMPLE, OUTPUT) and n not in fence_lines:
            problems.append(f"docs/{page}:{n + 1}: {line.strip()} is not on the line above a "
                            f"fenced block")
    return pairs, problems


def outside_code(page: str, text: str) -> list[str]:
    """The page's lines with the fenced blocks' content and the inline code blanked: a marker
    shown there is an example of one, not a marker."""
    lines = text.splitlines()
    for block in fenced_blocks(page, text):
        lines[block.start + 1:block.end] = [""] * (block.end - block.start - 1)
    return [INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line) for line in lines]


@functools.lru_cache(maxsize=1)
def _figures():
    """``docs/figures.py``, loaded from its file (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("sweep_doc_figures",
                                                  Path(__file__).with_name("figures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def marker_problems(docs: Path) -> list[str]:
    """One line per generated marker of ``docs`` that the build could not fill: found before
    any slow step runs."""
    figures = _figures()
    problems = []
    for path in sorted(docs.rglob("*.md")):
        page, text = path.relative_to(docs).as_posix(), path.read_text()
        problems += examples(page, text)[1]
        for n, line in enumerate(outside_code(page, text), 1):
            well_formed = {m.start() for m in figures.MARKED.finditer(line)}
            for m in FIGURE_START.finditer(line):
                name = figures.MARKED.match(line, m.start())
                if m.start() not in well_formed:
                    problems.append(f"docs/{page}:{n}: a figure marker that is not "
                                    f"<!-- figure: NAME -->VALUE<!-- /figure --> on one line")
                elif name.group(1) not in figures.FIGURES:
                    problems.append(f"docs/{page}:{n}: <!-- figure: {name.group(1)} --> names no "
                                    f"figure of docs/figures.py (known: "
                                    f"{', '.join(figures.FIGURES)})")
            for m in GENERATED_COMMENT.finditer(line):
                if m.group(1) == "map" and m.group(0) != MAP_MARKER:
                    problems.append(f"docs/{page}:{n}: {m.group(0)} is no marker the build "
                                    f"knows: the map page's is {MAP_MARKER}")
        if page == MAP_PAGE and MAP_MARKER not in text:
            problems.append(f"docs/{page}: {MAP_MARKER} is missing: the page would show no map")
    return problems


# ------------------------------------------------------------------------------ the map page

def _layout():
    """``tests/layout.py``, loaded from its file: the modules, imports and layers of the code."""
    spec = importlib.util.spec_from_file_location("sweep_layout", ROOT / "tests" / "layout.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and annotations look it up by name
    spec.loader.exec_module(module)
    return module


def _order(packages: dict[str, tuple[str, ...]]) -> list[str]:
    """Lowest layer first: a package after every package it may import."""
    done: list[str] = []
    while len(done) < len(packages):
        done += sorted(p for p, may in packages.items()
                       if p not in done and set(may) <= set(done))
    return done


def _first_line(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n")[0].split()) if doc else ""


def _module_table(layout, prefix: str) -> list[str]:
    out = ["| module | lines | what it owns |", "| --- | --- | --- |"]
    for name, path in sorted(layout.MODULES.items()):
        if name.startswith(prefix) and path.name != "__init__.py":
            lines = len(path.read_text().splitlines())
            out.append(f"| `{name}` | {lines} | {_first_line(layout.docstring(path))} |")
    return out


def map_markdown() -> str:
    """The map: one section per layer package of ``orchestrator`` (lowest first) with what it
    may import, what it does import and its modules, then ``trainers``."""
    layout = _layout()
    packages = layout.layer_packages()
    used = layout.package_imports()
    out = []
    for p in _order(packages):
        init = layout.ROOT / "orchestrator" / p / "__init__.py"
        may = ", ".join(f"`{q}`" for q in packages[p]) or "nothing else"
        imports = ", ".join(f"`{q}`" for q in sorted(used[p])) or "nothing else"
        out += [f"## `orchestrator.{p}`", "", _first_line(layout.docstring(init)), "",
                f"- may import: {may}", f"- imports: {imports}", "",
                *_module_table(layout, f"orchestrator.{p}."), ""]
    out += ["## `trainers`", "",
            _first_line(layout.docstring(layout.ROOT / "trainers" / "__init__.py")), "",
            "- imports: nothing of `orchestrator` (checked by `tests/test_architecture.py`)", "",
            *_module_table(layout, "trainers.")]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------- examples

def example_env(folder: Path) -> dict[str, str]:
    """The environment an example or a runnable block runs in: the folder's home and venv,
    no tracking URI of the caller's."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(HOME=str(folder / "home"), PATH=f"{folder / '.venv' / 'bin'}:{env['PATH']}",
               COLUMNS=COLUMNS, PYTHONUNBUFFERED="1")  # stdout and stderr in the order written
    env.pop("LINES", None)
    return env


def run_block(text: str, lang: str, folder: Path,
              timeout: float = EXAMPLE_TIMEOUT_S) -> subprocess.CompletedProcess:
    """A block run as written in ``folder``: bash with ``-e``, Python with the folder's
    ``.venv/bin/python``; stdout and stderr together, as a terminal shows them."""
    argv = (["bash", "-e", "-c", text] if EXAMPLE_LANGUAGES.get(lang, lang) == "bash" else
            [str(folder / ".venv" / "bin" / "python"), "-c", text])
    return subprocess.run(argv, cwd=folder, env=example_env(folder), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def prepare(folder: Path) -> Path:
    """``folder`` (empty or new) holding a copy of ``sweeps/``, ``.venv`` (a link to this
    checkout's), a home of its own and a quickstart sweep of 2 trials of 1 epoch; a folder
    prepared before is returned as it is.

    Raises:
        BuildError: the folder holds something else, or the quickstart failed.
    """
    if (folder / PREPARED_STAMP).is_file():
        return folder
    if folder.exists() and any(folder.iterdir()):
        raise BuildError([f"--workdir {folder}: neither empty nor prepared by docs/build.py"])
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "sweeps", folder / "sweeps")
    venv = ROOT / ".venv" if (ROOT / ".venv").is_dir() else Path(sys.prefix)
    (folder / ".venv").symlink_to(venv)
    (folder / "home").mkdir()
    out = run_block(QUICKSTART, "bash", folder, timeout=600)
    if out.returncode != 0:
        raise BuildError([f"the examples' quickstart sweep ({QUICKSTART}) exited "
                          f"{out.returncode}:\n{out.stdout[-3000:]}"])
    (folder / PREPARED_STAMP).write_text(QUICKSTART + "\n")
    return folder


@functools.lru_cache(maxsize=None)
def run_id(folder: Path) -> str:
    """A trial run of the prepared folder's quickstart sweep: what ``RUN_ID`` stands for."""
    from mlflow.tracking import MlflowClient

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from orchestrator.core.paths import sqlite_uri

    client = MlflowClient(tracking_uri=sqlite_uri(folder / "mlflow.db"))
    exp = client.get_experiment_by_name("quickstart")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`sweep.role` = 'trial'",
                              order_by=["attributes.start_time ASC"], max_results=1)
    return runs[0].info.run_id


def normalise(output: str, folder: Path, run: str | None) -> str:
    """An example's output as the page shows it: no colours, the home as ``~``, the folder it
    ran in as ``~/project`` (and the venv it links to as ``~/project/.venv``), the run ``RUN_ID``
    stood for as ``RUN_ID``, no trailing blanks."""
    output = ANSI.sub("", output)
    venv = (folder / ".venv").resolve()  # this checkout's, linked there
    for path, stand_in in ((venv, f"{PROJECT_STAND_IN}/.venv"), (folder / "home", HOME_STAND_IN),
                           (folder, PROJECT_STAND_IN)):
        for form in sorted({str(path.resolve()), str(path)}, key=len, reverse=True):
            output = output.replace(form, stand_in)
    if run:
        output = output.replace(run, PLACEHOLDER)
    return "\n".join(line.rstrip() for line in output.splitlines()).strip("\n")


def run_example(block: Fenced, folder: Path) -> tuple[str | None, str]:
    """(the example's normalised output, '') or (None, why it failed)."""
    run = run_id(folder) if re.search(rf"\b{PLACEHOLDER}\b", block.body) else None
    text = re.sub(rf"\b{PLACEHOLDER}\b", run, block.body) if run else block.body
    try:
        out = run_block(text, block.lang, folder)
    except subprocess.TimeoutExpired:
        return None, f"{block.where}: the example ran past {EXAMPLE_TIMEOUT_S} s: keep it quick"
    shown = normalise(out.stdout, folder, run)
    if out.returncode != 0 or "Traceback (most recent call last)" in out.stdout:
        return None, (f"{block.where}: the example failed (exit {out.returncode}):\n"
                      + "\n".join("    " + line for line in shown.splitlines()[-40:]))
    if not shown:
        return None, f"{block.where}: the example printed nothing: its {OUTPUT} would be empty"
    return shown, ""


def write_output(lines: list[str], block: Fenced, output: str) -> None:
    """``output`` written between the fences of ``block`` (a fence longer than any run of
    backticks in it)."""
    pad = " " * block.indent
    longest = max((len(run) for run in re.findall(r"`+", output)), default=0)
    fence = "`" * max(3, longest + 1)
    lang = lines[block.start].strip().lstrip("`~") or "text"
    lines[block.start:block.end + 1] = [f"{pad}{fence}{lang}",
                                        *(pad + line if line else "" for line in
                                          output.splitlines()),
                                        f"{pad}{fence}"]


# ------------------------------------------------------------------------------------- fill

def fill(docs: Path, folder: Path | None, log=print) -> None:
    """Every generated part of the pages under ``docs`` written in place: the map, the
    figures, each example's output (run in ``folder``, prepared on first need; None: a
    temporary folder).

    Raises:
        BuildError: a marker the build cannot fill, a failing example, an empty output.
    """
    problems = marker_problems(docs)
    if problems:
        raise BuildError(problems)
    figures = _figures()
    known = figures.values()
    pages = {p: p.read_text() for p in sorted(docs.rglob("*.md"))}
    todo = {p: examples(p.relative_to(docs).as_posix(), text)[0] for p, text in pages.items()}
    with tempfile.TemporaryDirectory(prefix="sweep-docs-") as scratch:
        if any(todo.values()):
            folder = prepare(folder or Path(scratch) / "project")
        for path, text in pages.items():
            page = path.relative_to(docs).as_posix()
            lines = text.splitlines()
            shown = []
            for example, output in todo[path]:  # in order: one may use what another wrote
                log(f"example {example.where}")
                out, why = run_example(example, folder)
                if out is None:
                    problems.append(why)
                else:
                    shown.append((output, out))
            for output, out in reversed(shown):  # from the end: the line numbers above hold
                write_output(lines, output, out)
            text = "\n".join(lines) + "\n"
            if page == MAP_PAGE:
                text = text.replace(MAP_MARKER, MAP_MARKER + "\n\n" + map_markdown())
            path.write_text(figures.fill(text, known))
    if problems:  # a failed example's output is left empty: said once, by its example
        raise BuildError(problems)
    problems = unfilled(docs)
    if problems:
        raise BuildError(problems)


def unfilled(docs: Path) -> list[str]:
    """One line per generated part of the filled pages that is still empty."""
    figures, problems = _figures(), []
    for path in sorted(docs.rglob("*.md")):
        page, text = path.relative_to(docs).as_posix(), path.read_text()
        for m in figures.MARKED.finditer(text):
            if not m.group(2).strip():
                problems.append(f"docs/{page}: <!-- figure: {m.group(1)} --> is empty")
        blocks = fenced_blocks(page, text)
        for block in blocks:
            if block.marker == OUTPUT and not block.body.strip():
                problems.append(f"{block.where}: {OUTPUT} is empty after the build")
        if page == MAP_PAGE:
            after = text.split(MAP_MARKER, 1)[-1]
            if "## `orchestrator." not in after or "## `trainers`" not in after:
                problems.append(f"docs/{page}: {MAP_MARKER} was not filled with the map")
    return problems


# ----------------------------------------------------------------------------- the site check

class _Page(html.parser.HTMLParser):
    """The ids of a built page and the links and images it points to."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag in ("a", "link") and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag in ("img", "script") and attrs.get("src"):
            self.links.append(attrs["src"])


def link_problems(site: Path) -> list[str]:
    """One line per internal link or image of the built site that lands on no file, or on no
    id of its page."""
    pages: dict[str, _Page] = {}
    for path in sorted(site.rglob("*.html")):
        parsed = _Page()
        parsed.feed(path.read_text(errors="replace"))
        pages[path.relative_to(site).as_posix()] = parsed
    problems = []
    for name, parsed in pages.items():
        if name == "404.html":
            continue  # served at any depth: its links are relative to where it is shown
        for href in parsed.links:
            parts = urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue  # another site: not ours to check offline
            target = name
            if parts.path:
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(name),
                                                           unquote(parts.path)))
                target = joined + "/index.html" if (site / joined).is_dir() else joined
                if joined.startswith("..") or not (site / target).is_file():
                    problems.append(f"site/{name}: the link {href!r} lands on no file")
                    continue
            anchor = unquote(parts.fragment)
            if anchor and target.endswith(".html") and anchor not in pages[target].ids:
                problems.append(f"site/{name}: the link {href!r} lands on no id of {target}")
    return problems


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: Zensical installs tomli
        import tomli as tomllib
    return tomllib.loads(path.read_text())


def nav_pages(nav) -> list[str]:
    """Every page file ``nav`` names, at any depth."""
    if isinstance(nav, str):
        return [] if "://" in nav else [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


def nav_problems(config: Path, docs: Path) -> list[str]:
    """One line per page of ``docs`` outside ``nav``, nav entry without a page, or page in
    ``nav`` twice."""
    listed = nav_pages(_toml(config).get("project", {}).get("nav", []))
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    problems = [f"docs/{p}: the page is in no nav entry of {CONFIG}: add it to nav"
                for p in sorted(pages - set(listed))]
    problems += [f"{CONFIG}: nav names {p}, which is no page of docs/"
                 for p in sorted(set(listed) - pages)]
    problems += [f"{CONFIG}: nav names {p} {listed.count(p)} times"
                 for p in sorted(set(listed)) if listed.count(p) > 1]
    return problems


# ------------------------------------------------------------------------------------ build

def stage(source: Path, staging: Path) -> Path:
    """``source``'s docs/ and zensical.toml copied into ``staging``, the API reference read
    from this checkout's code; returns the staged config."""
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    shutil.copytree(source / "docs", staging / "docs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    text = (source / CONFIG).read_text()
    relative = 'paths = ["."]'
    if text.count(relative) != 1:
        raise BuildError([f"{CONFIG}: the mkdocstrings handler's `{relative}` (the code the "
                          f"API reference is read from) is not there once"])
    config = staging / CONFIG
    config.write_text(text.replace(relative, f"paths = [{str(ROOT)!r}]".replace("'", '"')))
    return config


def render(config: Path, site: Path, log=print) -> None:
    """``zensical build --strict`` of the filled pages beside ``config``, into ``site``, then
    the built site's links, anchors and nav checked.

    Raises:
        BuildError: Zensical refused the pages, or the check found a problem.
    """
    staging = config.parent
    built = staging / _toml(config)["project"].get("site_dir", "site")
    shutil.rmtree(built, ignore_errors=True)
    zensical = Path(sys.executable).with_name("zensical")
    argv = [str(zensical)] if zensical.exists() else [sys.executable, "-m", "zensical"]
    out = subprocess.run([*argv, "build", "--strict", "-f", str(config)],
                         cwd=staging, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = ANSI.sub("", out.stdout).rstrip().splitlines()
    if said and said[-1] == "RuntimeError: Aborted because --strict flag is set":
        said = said[:next(i for i, line in enumerate(said) if line.startswith("Traceback"))]
    log("\n".join(said))
    if out.returncode != 0:
        raise BuildError([f"zensical build --strict failed (exit {out.returncode}): its "
                          f"messages above say which page and line"])
    problems = link_problems(built) + nav_problems(config, staging / "docs")
    if problems:
        raise BuildError(problems)
    if site.resolve() != built.resolve():
        shutil.rmtree(site, ignore_errors=True)
        site.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(built), str(site))


def build(site: Path, *, source: Path = ROOT, workdir: Path | None = None,
          staging: Path | None = None, log=print) -> None:
    """The whole build (the module's docstring lists its steps).

    Raises:
        BuildError: the first step that failed, with its problems.
    """
    if importlib.util.find_spec("zensical") is None:
        raise BuildError(["zensical is not installed: .venv/bin/pip install -e '.[test]' "
                          "(Zensical needs Python 3.11 or later)"])
    with tempfile.TemporaryDirectory(prefix="sweep-docs-stage-") as scratch:
        config = stage(source, staging or Path(scratch))
        problems = marker_problems(config.parent / "docs") + nav_problems(
            config, config.parent / "docs")
        if problems:  # before the examples run: fails in a second
            raise BuildError(problems)
        fill(config.parent / "docs", workdir, log=log)
        render(config, site, log=log)


def serve(site: Path, port: int) -> None:
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    with ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {site} on http://127.0.0.1:{port}/ (Ctrl-C stops it; rebuild to see "
              f"edits)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docs/build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site",
                        help="where the site is written (default: site/)")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="a folder holding docs/ and zensical.toml (default: this checkout)")
    parser.add_argument("--workdir", type=Path,
                        help="the folder the examples run in: prepared there when empty, "
                             "reused when an earlier build prepared it (default: a temporary one)")
    parser.add_argument("--staging", type=Path,
                        help="keep the filled copy of the pages there (default: a temporary one)")
    parser.add_argument("--serve", type=int, nargs="?", const=8000, metavar="PORT",
                        help="then serve the site on 127.0.0.1:PORT (default 8000)")
    args = parser.parse_args(argv)
    try:
        build(args.site.resolve(), source=args.source.resolve(),
              workdir=args.workdir.resolve() if args.workdir else None,
              staging=args.staging.resolve() if args.staging else None)
    except BuildError as e:
        print("docs/build.py: the site was not built:", file=sys.stderr)
        print("\n".join(f"  {p}" for p in e.problems), file=sys.stderr)
        return 1
    shown = args.site.resolve()
    print(f"site: {shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown}")
    if args.serve is not None:
        serve(args.site, args.serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
