"""The documentation site builds without a warning, reaches every page and image, and README's
links into it land: ``mkdocs build --strict`` (MkDocs, the Material theme, the API reference read
from the docstrings by mkdocstrings), then the built home and API pages opened in Debian's
chromium, their screenshots saved in test-output/docs/."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.helpers import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow  # end to end: the site built, opened in a browser

DOCS = ROOT / "docs"
SHOTS = ROOT / "test-output" / "docs"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
README_LINK = re.compile(r"\]\((docs/[^)\s#]+)(?:#([^)\s]+))?\)")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``site``, as a user runs it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(config), "--site-dir", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    out = build(ROOT / "mkdocs.yml", folder)
    assert out.returncode == 0, out.stdout + out.stderr
    warnings = [line for line in (out.stdout + out.stderr).splitlines()
                if re.match(r"(WARNING|ERROR)\b", line)]
    assert warnings == [], "\n".join(warnings)
    return folder


def nav_pages(nav) -> list[str]:
    """Every page file ``nav`` names, at any depth."""
    if isinstance(nav, str):
        return [] if "://" in nav else [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


def built_page(site: Path, page: str) -> Path:
    """The HTML file ``page`` (a path under docs/) builds to (directory URLs)."""
    stem = page[:-len(".md")]
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


def test_the_site_builds_strict_without_a_warning(site):
    assert (site / "index.html").is_file()
    api = built_page(site, "api.md").read_text()
    # the reference is generated from the docstrings, not written by hand
    assert 'id="orchestrator.answer.stats.compare_paired"' in api
    assert "Every pair of levels compared over their paired seeds" in api


def test_the_built_pages_show_the_figures_the_code_gives(site):
    """docs/figures.py's figures, as the built compare page shows them (the hook writes them)."""
    from orchestrator.answer.stats import boundary_alpha, level_percent

    html = built_page(site, "compare.md").read_text()
    level = boundary_alpha(0.05, 6, 3)  # seeds 3 to 8: 6 looks
    assert f"alpha' = <!-- figure: boundary_seeds_3_to_8 -->{level:.3g}<!-- /figure -->" in html
    assert f"{level_percent(1 - level)}<!-- /figure --> t interval" in html
    report = built_page(site, "report.md").read_text()
    assert f"{boundary_alpha(0.05, 4, 3):.3g}<!-- /figure -->" in report  # seeds 3 to 6
    assert "0.05/4" not in report


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The build above would pass a broken anchor unless the config asks MkDocs to check them."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "yaml.md"
    page.write_text(page.read_text() + "\nSee [nowhere](compare.md#no-such-heading).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(config.read_text().replace("paths: [.]", f"paths: [{ROOT}]"))
    out = build(config, tmp_path / "site")
    assert out.returncode != 0
    assert "no-such-heading" in out.stdout + out.stderr


def test_every_page_is_in_the_nav_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages, "pages outside mkdocs.yml's nav, or nav entries without a page"
    assert len(listed) == len(set(listed)), "a page is in the nav twice"


def test_every_image_in_docs_is_shown_by_a_page(site):
    shown = {(page.parent / path).resolve() for page in DOCS.rglob("*.md")
             for path in IMAGE.findall(page.read_text())}
    images = {p.resolve() for p in DOCS.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES}
    assert images, "docs/ holds no image"
    assert sorted(map(str, images - shown)) == [], "images no page shows"
    assert sorted(map(str, shown - images)) == [], "pages show images that do not exist"
    for image in images:  # and the site carries them
        assert (site / image.relative_to(DOCS.resolve())).is_file(), image


def test_the_readmes_links_into_the_docs_land_on_a_page_and_heading(site):
    links = README_LINK.findall((ROOT / "README.md").read_text())
    assert links, "README links to no page of the docs"
    for path, anchor in links:
        target = ROOT / path
        assert target.is_file(), f"README links to {path}, which does not exist"
        if target.suffix == ".md" and anchor:
            html = built_page(site, target.relative_to(DOCS).as_posix()).read_text()
            assert f'id="{anchor}"' in html, f"README links to {path}#{anchor}: no such heading"


def test_the_built_home_and_api_pages_render_in_a_browser(site):
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
            page.goto(built_page(site, "index.md").as_uri())
            expect(page.locator("h1").first).to_have_text(re.compile("sweep"))
            expect(page.locator("img[src='live-view.png']")).to_be_visible()
            page.screenshot(path=SHOTS / "home.png", full_page=False)
            anchor = "#orchestrator.answer.stats.compare_paired"
            page.goto(built_page(site, "api.md").as_uri() + anchor)
            expect(page.locator("[id='orchestrator.answer.stats.compare_paired']")).to_be_visible()
            page.screenshot(path=SHOTS / "api.png", full_page=False)
        finally:
            browser.close()
    for name in ("home.png", "api.png"):
        assert (SHOTS / name).stat().st_size > 10_000, name
