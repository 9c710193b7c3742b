"""Run the shipped sweeps that answer the design card's four questions and copy their answers
into docs/compare.md: never typed by hand.

Each sweep runs from its YAML in a fresh folder of its own (the embedded default stores:
``optuna.journal`` and ``mlflow.db`` there), timed: its wall-clock seconds and the CPU seconds
of ``sweep run`` and its workers. Its answer is what the end of ``sweep run`` prints
(:func:`orchestrator.report.answer_lines`, read back from the stores), written with the time
and the machine's load between the markers ``<!-- shipped: NAME -->`` and
``<!-- /shipped: NAME -->`` of docs/compare.md.

Usage:
    python bench/shipped.py                      # run all four
    python bench/shipped.py --only clipping      # one of them
    python bench/shipped.py --reuse DIR          # DIR/NAME holds a finished run of each: read it
    python bench/shipped.py --replicate          # each at its seed and two other base seeds

``--replicate`` asks whether the answers replicate: each sweep runs at its shipped base seed and
at :data:`OTHER_SEEDS` added to it (chosen before any of these runs), and the table shows the
three answers side by side: every pair's verdict and interval (the scaling exponent's interval
for the grid), the wall time, and three checks: no two runs give opposite verdicts, the
intervals of the same quantity overlap, and each run finished within 10 minutes. The table is
written between ``<!-- shipped: replicate -->`` and ``<!-- /shipped: replicate -->``. Each
run's figures are kept in :data:`RECORD` (committed), so that ``--only NAME`` adds its rows to
the others' instead of dropping them; the shipped-seed run also writes that sweep's own block.

A reused run's time is read from ``timing.json`` (written here) or, for a run made with
``/usr/bin/time -v sweep run ... 2> time.log``, from ``time.log``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHIPPED = {  # marker name -> the YAML under sweeps/, in the order docs/compare.md shows them
    "adam_vs_sgd": "adam_vs_sgd.yaml",
    "schedules": "schedules.yaml",
    "clipping": "clipping.yaml",
    "batch_lr_scaling": "batch_lr_scaling.yaml",
}
PAGE = ROOT / "docs" / "compare.md"
OTHER_SEEDS = (1000, 2000)  # added to each sweep's shipped seed; fixed before any run
MINUTES = 10  # the longest a shipped sweep may take on 2 idle cores
SWEEP = Path(sys.executable).with_name("sweep")
RECORD = ROOT / "bench" / "shipped_replicate.json"  # name -> seed -> quantities and timing


def run(name: str, folder: Path, seed: int | None = None) -> dict:
    """Run sweep ``name`` in ``folder`` (made fresh), at base seed ``seed`` (None: as shipped),
    and return its timing."""
    folder.mkdir(parents=True, exist_ok=False)
    spec = folder / SHIPPED[name]
    spec.write_bytes((ROOT / "sweeps" / SHIPPED[name]).read_bytes())
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(folder / "run.log", "w") as log:
        subprocess.run([str(SWEEP), "run", spec.name,
                        *([] if seed is None else ["--set", f"seed={seed}"])], cwd=folder,
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    timing = {"wall_s": round(time.perf_counter() - t0, 1),
              "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime
                             - before.ru_stime, 1),
              "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1),
              "date": datetime.date.today().isoformat()}
    (folder / "timing.json").write_text(json.dumps(timing))
    return timing


def timing_of(folder: Path) -> dict:
    """A reused run's timing: timing.json, else GNU time's log (time.log)."""
    if (folder / "timing.json").exists():
        return json.loads((folder / "timing.json").read_text())
    text = (folder / "time.log").read_text()

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (.+)", text).group(1).strip()

    parts = [float(p) for p in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
    wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    date = datetime.date.fromtimestamp((folder / "time.log").stat().st_mtime).isoformat()
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "date": date}


def answer(name: str, folder: Path) -> list[str]:
    """The answer the end of ``sweep run`` prints, read back from the run's stores."""
    from orchestrator.report import answer_lines, load_sweep

    here = os.getcwd()
    os.chdir(folder)  # the embedded default stores are the folder's own
    try:
        return answer_lines(load_sweep(SHIPPED[name]))
    finally:
        os.chdir(here)


def quantities(name: str, folder: Path) -> dict[str, tuple[str, str, float, float]]:
    """What a run answers, quantity by quantity: for a comparison, each pair ``b - a`` ->
    (verdict, winner, interval low, high); for the scaling grid, each metric's exponent ->
    (the rules inside its interval, "", low, high)."""
    from orchestrator.report import load_sweep
    from orchestrator.report.comparison import compare
    from orchestrator.report.scaling import scaling

    here = os.getcwd()
    os.chdir(folder)
    try:
        data = load_sweep(SHIPPED[name], curves=True)
        found = compare(data)
        if found is not None:
            return {f"{r.b} - {r.a}": (r.verdict, r.winner or "", r.ci_low, r.ci_high)
                    for r in found.results}
        answer = scaling(data)
        return {f"exponent ({e.metric})": (e.rules(), "", e.ci_low, e.ci_high)
                for e in (answer.exponents if answer is not None else [])}
    finally:
        os.chdir(here)


def replicate(names: list[str], base: Path, page: Path) -> str:
    """Run each of ``names`` at its seed and the :data:`OTHER_SEEDS` (a finished run in
    ``base`` is read, not run again), record them in :data:`RECORD`, write each shipped-seed
    run's block on ``page``, and return the side-by-side table of every recorded sweep (as
    Markdown) with its checks."""
    from orchestrator.config.spec import load_spec

    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    for name in names:
        shipped = load_spec(ROOT / "sweeps" / SHIPPED[name]).seed
        runs = {}
        for seed in (shipped, *(shipped + k for k in OTHER_SEEDS)):
            folder = base / f"{name}-{seed}"
            timing = timing_of(folder) if (folder / "timing.json").exists() else \
                run(name, folder, seed)
            runs[str(seed)] = {"quantities": quantities(name, folder), "timing": timing}
            if seed == shipped:
                write(page, name, block(name, answer(name, folder), timing))
        record[name] = runs
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
    return table(record)


def table(record: dict) -> str:
    """The side-by-side table of the recorded runs, in :data:`SHIPPED` order, and its checks."""
    lines = ["| sweep | base seed | quantity | verdict | interval | wall s | CPU s | load |",
             "|---|---|---|---|---|---|---|---|"]
    checks = []
    for name in [n for n in SHIPPED if n in record]:
        found = {}
        for seed, got in record[name].items():
            timing = got["timing"]
            found[seed] = ({q: tuple(v) for q, v in got["quantities"].items()}, timing)
            for q, (verdict, winner, low, high) in found[seed][0].items():
                said = f"{verdict} ({winner})" if winner else verdict
                load = f"{timing.get('load_before', '?')}-{timing.get('load_after', '?')}"
                lines.append(f"| {name} | {seed} | {q} | {said} | [{low:.4g}, {high:.4g}] "
                             f"| {timing['wall_s']:.0f} | {timing['cpu_s']:.0f} | {load} |")
        checks.append(_checks(name, found))
    return "\n".join(lines) + "\n\n" + "\n".join(checks) + "\n"


def _checks(name: str, found: dict) -> str:
    """The three checks of one sweep's three runs, in words."""
    runs = list(found.values())
    quantities_ = set().union(*(q for q, _ in runs))
    winners = {q: {r[0][q][1] for r in runs if q in r[0] and r[0][q][1]} for q in quantities_}
    opposite = [q for q, w in winners.items() if len(w) > 1]
    # intervals overlap pairwise when the highest low end lies below the lowest high end
    apart = [q for q in quantities_ if max(r[0][q][2] for r in runs if q in r[0]) >
             min(r[0][q][3] for r in runs if q in r[0])]
    slow = [t for _, t in runs if t["wall_s"] > 60 * MINUTES]
    # on 2 idle cores a run takes at least its CPU seconds / 2: over the budget even then?
    idle_slow = [t for _, t in runs if t["cpu_s"] / 2 > 60 * MINUTES]
    return (f"- {name}: opposite verdicts: {', '.join(opposite) or 'none'}; intervals that do "
            f"not all overlap: {', '.join(apart) or 'none'}; runs over {MINUTES} minutes of "
            f"wall clock: {len(slow)} of {len(runs)} (CPU seconds / 2 over it: "
            f"{len(idle_slow)} of {len(runs)}).")


def block(name: str, lines: list[str], timing: dict) -> str:
    """The text between the markers of ``name``."""
    load = (f", load average {timing['load_before']} before and {timing['load_after']} after"
            if "load_before" in timing else "")
    return (f"`sweeps/{SHIPPED[name]}`, run {timing['date']} from a fresh folder: "
            f"{timing['wall_s']:.0f} s wall clock on the shared 2-core machine{load}, "
            f"{timing['cpu_s']:.0f} CPU seconds (sweep run and its workers together):"
            f"\n\n```text\n" + "\n".join(lines) + "\n```\n")


def write(page: Path, name: str, text: str) -> None:
    """Replace what lies between the markers of ``name`` on ``page``."""
    start, end = f"<!-- shipped: {name} -->", f"<!-- /shipped: {name} -->"
    content = page.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{page}: no markers {start} ... {end}; add them where the answer goes")
    before, rest = content.split(start, 1)
    _, after = rest.split(end, 1)
    page.write_text(f"{before}{start}\n{text}{end}{after}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SHIPPED), action="append")
    parser.add_argument("--reuse", type=Path, help="a folder holding NAME/ for each finished run")
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--replicate", action="store_true",
                        help="each sweep at its seed and two other base seeds, side by side")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="shipped-")) if args.reuse is None else args.reuse
    if args.replicate:
        text = replicate(args.only or list(SHIPPED), base, args.page)
        write(args.page, "replicate", text)
        print(text)
        return
    for name in args.only or SHIPPED:
        folder = base / name
        timing = run(name, folder) if args.reuse is None else timing_of(folder)
        lines = answer(name, folder)
        write(args.page, name, block(name, lines, timing))
        print(f"{name}: {timing['wall_s']:.0f} s, {timing['cpu_s']:.0f} CPU s: {lines[0]}")


if __name__ == "__main__":
    main()
