"""Figures the pages of docs/ quote from the code (alphas, calibrated levels, counts, columns),
written from the code itself so that they cannot drift from it.

A page marks each such figure as ``<!-- figure: NAME -->VALUE<!-- /figure -->`` (NAME in lower
case: the upper-case one here is no marker; the comments are invisible on the site).
``python docs/figures.py`` rewrites every marked VALUE in docs/*.md from :data:`FIGURES`. The
site's build (docs/build.py) applies :func:`fill` to its copy of each page, so the site shows the
code's values even when a page was not rewritten, and refuses a marker that names no figure.
``python docs/figures.py --check`` rewrites nothing and exits 1 naming each stale or unknown
figure.
"""
from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKED = re.compile(r"<!-- figure: ([a-z0-9_]+) -->([^<\n]*)<!-- /figure -->")


def _code():
    """The modules the figures are read from (imported here: the build loads this file by path,
    maybe before the repository is on ``sys.path``)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from orchestrator.answer import stats, words
    from orchestrator.config import rules
    from orchestrator.report import plots
    from orchestrator.report import stats as report_stats

    return stats, rules, plots, report_stats, words


def _alpha() -> float:
    """``compare_paired``'s default ``alpha``: the chance of a false "better" over all looks."""
    stats = _code()[0]
    return inspect.signature(stats.compare_paired).parameters["alpha"].default


def _boundary(seeds: int, max_seeds: int) -> float:
    """The constant level every look of ``seeds`` to ``max_seeds`` paired seeds tests at."""
    stats = _code()[0]
    return stats.boundary_alpha(_alpha(), max_seeds - seeds + 1, seeds)


def _percent(level: float) -> str:
    """A level as the answer writes it (:func:`orchestrator.answer.words.level_percent`)."""
    return _code()[4].level_percent(level)


FIGURES: dict[str, Callable[[], str]] = {
    "alpha": lambda: f"{_alpha():g}",
    "alpha_percent": lambda: _percent(_alpha()),
    "confidence": lambda: _percent(1 - _alpha()),
    "boundary_draws": lambda: f"{_code()[0].BOUNDARY_DRAWS:,}",
    # the shipped comparisons: adam_vs_sgd (seeds 3 to 8), warmup_clipping (3 to 6)
    "boundary_seeds_3_to_8": lambda: f"{_boundary(3, 8):.3g}",
    "level_seeds_3_to_8": lambda: _percent(1 - _boundary(3, 8)),
    "boundary_seeds_3_to_6": lambda: f"{_boundary(3, 6):.3g}",
    "level_seeds_3_to_6": lambda: _percent(1 - _boundary(3, 6)),
    "level_seeds_3_to_4": lambda: _percent(1 - _boundary(3, 4)),
    "comparison_columns": lambda: f"`{', '.join(_code()[0].CSV_COLUMNS)}`",
    "max_grid": lambda: f"{_code()[1].MAX_GRID}",
    "min_pairs": lambda: f"{_code()[3].MIN_PAIRS}",
    "min_importance_trials": lambda: f"{_code()[2].MIN_IMPORTANCE_TRIALS}",
}


def values() -> dict[str, str]:
    """Every figure's text, as the code gives it now."""
    return {name: make() for name, make in FIGURES.items()}


def fill(markdown: str, known: dict[str, str] | None = None) -> str:
    """``markdown`` with each marked figure's value written from the code.

    Raises:
        KeyError: a marker names no figure of :data:`FIGURES`.
    """
    known = values() if known is None else known

    def one(m: re.Match) -> str:
        if m.group(1) not in known:
            raise KeyError(f"no figure named {m.group(1)!r} in docs/figures.py (known: "
                           f"{', '.join(known)})")
        return f"<!-- figure: {m.group(1)} -->{known[m.group(1)]}<!-- /figure -->"

    return MARKED.sub(one, markdown)


def stale(pages: list[Path]) -> list[str]:
    """One line per marked figure whose page shows another value than the code's, or that
    names no figure."""
    known, out = values(), []
    for page in pages:
        for m in MARKED.finditer(page.read_text()):
            name, shown = m.groups()
            if name not in known:
                out.append(f"{page.name}: no figure named {name!r} (known: {', '.join(known)})")
            elif shown != known[name]:
                out.append(f"{page.name}: figure {name} shows {shown!r}, the code gives "
                           f"{known[name]!r}")
    return out


def main(argv: list[str]) -> int:
    pages = sorted((ROOT / "docs").glob("*.md"))
    problems = stale(pages)
    if "--check" in argv or any("no figure named" in line for line in problems):
        print("\n".join(problems or ["every figure in docs/ is the code's"]))
        return 1 if problems else 0
    known = values()
    for page in pages:
        text = page.read_text()
        if fill(text, known) != text:
            page.write_text(fill(text, known))
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
