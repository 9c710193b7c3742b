"""A comparison's finding in words: its one sentence (the headline, at most
:data:`HEADLINE_LIMIT` characters) and, for a product of factors, a line per effect.

The sentence says what is decided first, then what stays open, then the level and method of
its intervals. For one factor: a level better than every other with its lead over the closest;
each winner's losers; the levels equivalent two by two as groups; the undecided pairs. For two
or more factors: each main effect and interaction (:mod:`orchestrator.answer.effects`): a level
better than another by its contrast, or no effect (no interaction) beyond what its interval
rules out, then the effects left undecided. Each amount comes with its own interval, or is the
largest its interval allows: never two figures a reader must reconcile. "Undecided" is no
evidence either way, never "no difference". Shorter wordings are tried in turn until the
sentence fits.

The lines under the answer's table are written here too (:func:`pair_notes`, :func:`open_note`,
:func:`goal_note`, :func:`value_notes`, :func:`weights_note`, :func:`edge_note`,
:func:`estimand`, :func:`caption`): with :mod:`orchestrator.answer.words`, this module is the
one voice of an answer; :mod:`orchestrator.answer.summary` passes them its figures.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

from ..core.numbers import value_text
from . import stats
from .effects import INTERACTION, MAIN, SHOWN, Effect
from .edges import EDGE
from .words import (
    Words,
    half_width,
    interval_text,
    joined,
    level_percent,
    no_interval,
    p_text,
    plain,
    rules_out,
)

HEADLINE_LIMIT = 300  # the most characters of a headline


def sentence(words: Words, results: Sequence[stats.PairResult], found: Sequence[Effect],
              leader: str | None, mean: float, half: float, direction: str,
              ranking: Sequence[str], finished: bool) -> str:
    """The finding in one sentence of at most :data:`HEADLINE_LIMIT` characters: what is
    decided first (which levels are better than which and which are equivalent; or each
    effect's verdict), then what stays open, then the intervals' level. Each amount comes
    with its own interval or is what an interval rules out: never two figures to reconcile.
    Shorter wordings are tried in turn until it fits."""
    factor = words.header if len(words.factors) == 1 else f"({words.header})"
    interim = "" if finished else " (an interim look: not finished; `sweep run` again " \
        "resumes it)"
    if leader is None:
        return f"{factor}: no level has a finite {words.metric} on its confirmation " \
            f"seeds{interim}."
    if not results:
        return f"{factor}: fewer than two levels have confirmation values to compare{interim}."
    n = max(r.pairs for r in results)
    if found:
        level = f"{_intervals(found, len(found) > 1)}; Holm over {found[0].family} effects"
    else:
        level = _intervals(results, len(results) > 1)
    head, tail = f"{factor} after {n} seeds: ", f" ({level}){interim}."
    for detail in (2, 1, 0):
        clauses = _effect_clauses(words, found, direction, detail) if found else \
            _pair_clauses(words, results, leader, mean, half, direction, ranking, detail)
        text = head + "; ".join(clauses) + tail
        if len(text) <= HEADLINE_LIMIT:
            return text
    text = _fit(head, clauses, tail)
    return text if len(text) <= HEADLINE_LIMIT else text[:HEADLINE_LIMIT - 1] + "…"


def _intervals(items: Sequence, several: bool) -> str:
    """``98.6% t intervals, look 3 of 6``: the level, method and look the items share."""
    first = items[0]
    where = f", look {first.look} of {first.looks}" if first.looks > 1 else ""
    return f"{level_percent(first.ci_level)} t interval{'s' if several else ''}{where}"


def _fit(head: str, clauses: Sequence[str], tail: str) -> str:
    """``head`` + the clauses joined by ``; `` + ``tail``; clauses from the last on are left
    to the notes ("N more below") while it is longer than :data:`HEADLINE_LIMIT`."""
    kept = list(clauses)
    text = head + "; ".join(kept) + tail
    while len(text) > HEADLINE_LIMIT and len(kept) > 1:
        kept.pop()
        text = head + "; ".join(kept) + f"; {len(clauses) - len(kept)} more below" + tail
    return text


def _by(words: Words, lead: tuple[float, float, float], half: float, detail: int) -> str:
    """A lead with its interval (``0.42 points [0.01, 0.82]``), or its lower end alone."""
    amount, low, high = lead
    if detail >= 2:
        return f"{words.amount(amount, half)} {words.unit} {words.span(low, high, half)}"
    return f"at least {words.amount(low, half)} {words.unit}"


def _pair_clauses(words: Words, results: Sequence[stats.PairResult], leader: str, mean: float,
                  half: float, direction: str, ranking: Sequence[str], detail: int) -> list[str]:
    """The decided pairs in words (a level better than every other first, then each winner's
    losers, then the equivalent groups), then the undecided pairs, then the named level."""
    wins: dict[str, list[stats.PairResult]] = {}
    for r in results:
        if r.verdict == stats.BETTER:
            wins.setdefault(r.winner, []).append(r)
    others = {x for r in results for x in (r.a, r.b)} - {leader}
    best = bool(others) and {r.loser for r in wins.get(leader, [])} >= others
    out = []
    if best:
        out.append(_best_clause(words, sorted(wins.pop(leader), key=lambda r: r.lead(direction)[0]),
                                mean, half, direction, detail))
    out += _better_clauses(words, wins, direction, ranking, detail)
    out += _equivalent_clauses(words, results, ranking, detail)
    out += _undecided_clauses(words, results, detail)
    if not best:
        top = bool(ranking) and leader == ranking[0]
        out.append(f"{'best mean' if top else 'named'} {words.name(leader)}, "
                   f"{words.mean(mean, half)}")
    return out


def _better_clauses(words: Words, wins: dict[str, list[stats.PairResult]], direction: str,
                    ranking: Sequence[str], detail: int) -> list[str]:
    """Each winner's losers: every pair with its lead and interval; shorter, only the pairs no
    chain of two others implies (a > b and b > c say a > c), with the least lead's lower end,
    then without figures."""
    if detail < 2:
        said = {(w, r.loser) for w, rs in wins.items() for r in rs}
        middle = {x for pair in said for x in pair}
        wins = {w: [r for r in rs if not any((w, m) in said and (m, r.loser) in said
                                             for m in middle)] for w, rs in wins.items()}
    rank = {lv: i for i, lv in enumerate(ranking)}
    out = []
    for winner in sorted(wins, key=lambda lv: (rank.get(lv, len(rank)), lv)):
        rs = sorted(wins[winner], key=lambda r: r.lead(direction)[0])
        if detail == 0:
            out.append(f"{words.name(winner)} better than " + (
                f"{len(rs)} levels" if len(rs) > 2 else words.names([r.loser for r in rs])))
        elif len(rs) == 1 or detail == 1:
            least = min(rs, key=lambda r: r.lead(direction)[1])
            out.append(f"{words.name(winner)} better than "
                       f"{words.names([r.loser for r in rs])} by "
                       f"{_by(words, least.lead(direction), half_width(least), detail)}")
        else:
            out.append(f"{words.name(winner)} better than " + ", than ".join(
                f"{words.name(r.loser)} by {_by(words, r.lead(direction), half_width(r), detail)}"
                for r in rs))
    return out


def _best_clause(words: Words, rs: Sequence[stats.PairResult], mean: float, half: float,
                 direction: str, detail: int) -> str:
    """A level better than every other: its mean, and its lead over the closest level."""
    closest = rs[0]
    head = f"{words.name(closest.winner)} best, {words.mean(mean, half)}"
    lead = _by(words, closest.lead(direction), half_width(closest), detail)
    if len(rs) == 1:
        return f"{head}, better than {words.name(closest.loser)} by {lead}"
    return f"{head}, better than every other level, than the closest " \
        f"({words.name(closest.loser)}) by {lead}"


def _equivalent_clauses(words: Words, results: Sequence[stats.PairResult],
                        ranking: Sequence[str], detail: int) -> list[str]:
    """The equivalent pairs as groups: the largest sets of levels equivalent two by two
    (three or more), then each level with its remaining equivalent partners; each with the
    largest difference its intervals still allow."""
    pairs = {frozenset((r.a, r.b)): r for r in results if r.verdict == stats.EQUIVALENT}
    if not pairs:
        return []
    if detail == 0:
        return [f"{len(pairs)} pair{'s' if len(pairs) > 1 else ''} equivalent"]
    rank = {lv: i for i, lv in enumerate(ranking)}

    def order(levels) -> list[str]:
        return sorted(levels, key=lambda lv: (rank.get(lv, len(rank)), lv))

    def beyond(group_pairs) -> str:
        widest = max(group_pairs, key=rules_out)
        return words.allowed(rules_out(widest), half_width(widest))
    out, left = [], dict(pairs)
    for group in _cliques(set(pairs)):
        if len(group) >= 3:
            inside = [pairs[frozenset(p)] for p in itertools.combinations(group, 2)]
            out.append(f"{words.names(order(group))} equivalent, no difference "
                       f"{beyond(inside)}")
            for p in itertools.combinations(group, 2):
                left.pop(frozenset(p), None)
    while left:
        counts = {lv: sum(lv in p for p in left) for p in left for lv in p}
        hub = min(counts, key=lambda lv: (-counts[lv], rank.get(lv, len(rank)), lv))
        mine = [p for p in left if hub in p]
        partners = order([lv for p in mine for lv in p if lv != hub])
        out.append(f"{words.name(hub)} equivalent to {words.names(partners)}, no difference "
                   f"{beyond([left.pop(p) for p in mine])}")
    return out


def _cliques(edges: set[frozenset]) -> list[frozenset]:
    """The maximal sets of levels linked two by two (Bron-Kerbosch), largest first."""
    links: dict[str, set[str]] = {}
    for e in edges:
        a, b = tuple(e)
        links.setdefault(a, set()).add(b)
        links.setdefault(b, set()).add(a)
    found: list[frozenset] = []

    def grow(r: set, p: set, x: set) -> None:
        if not p and not x:
            found.append(frozenset(r))
        for v in sorted(p):
            grow(r | {v}, p & links[v], x & links[v])
            p, x = p - {v}, x | {v}
    grow(set(), set(links), set())
    return sorted(found, key=lambda g: (-len(g), sorted(g)))


def _undecided_clauses(words: Words, results: Sequence[stats.PairResult],
                       detail: int) -> list[str]:
    """What stays open: one undecided pair with its difference and interval; several by
    name; many by their count."""
    open_ = [r for r in results if r.verdict == stats.UNDECIDED]
    if not open_:
        return []
    if len(open_) == 1 and detail >= 1:
        r = open_[0]
        what = f"{words.name(r.a)} vs {words.name(r.b)} undecided"
        if math.isnan(r.ci_low):
            return [f"{what} (no interval: {no_interval(r)})"]
        h = half_width(r)
        return [f"{what}: {words.name(r.b)} minus {words.name(r.a)} = "
                f"{words.amount(r.diff, h)} {words.unit} {words.span(r.ci_low, r.ci_high, h)}"]
    if len(open_) <= (3 if detail >= 1 else 2):
        return ["undecided: " + ", ".join(f"{words.name(r.a)} vs {words.name(r.b)}"
                                          for r in open_)]
    return [f"{len(open_)} pair{'s' if len(open_) > 1 else ''} undecided"]


def _effect_name(e: Effect, found: Sequence[Effect]) -> str:
    """How a contrast is named: ``warmup_epochs`` (a factor of two levels), ``warmup_epochs
    2 vs 0`` (of more), ``the interaction`` (two factors of two levels each) or
    ``warmup_epochs × clip_grad_norm`` (with its levels where a factor has more than two)."""
    mains = Counter(x.factors[0] for x in found if x.kind == MAIN)
    if e.kind == MAIN:
        many = mains[e.factors[0]] > 1
        return f"{e.factors[0]} {value_text(e.levels[0])} vs {value_text(e.bases[0])}" if many \
            else e.factors[0]
    if len(mains) == 2 and set(mains.values()) == {1}:
        return "the interaction"
    at = f" ({value_text(e.levels[0])}, {value_text(e.levels[1])})" \
        if mains[e.factors[0]] > 1 or mains[e.factors[1]] > 1 else ""
    return f"{e.factors[0]} × {e.factors[1]}{at}"


def _effect_clause(words: Words, e: Effect, found: Sequence[Effect], direction: str,
                   detail: int) -> str:
    """A decided effect in words: a level better than another, an interaction shown, or what
    an equivalent effect's interval rules out."""
    h, name = half_width(e), _effect_name(e, found)
    if e.verdict == stats.BETTER:
        ahead = e.winner[0]
        behind = e.bases[0] if ahead == e.levels[0] else e.levels[0]
        what = f"{e.factors[0]} {value_text(ahead)} better than {value_text(behind)}"
        return what if detail == 0 else f"{what} by {_by(words, e.lead(direction), h, detail)}"
    if e.verdict == SHOWN:
        if detail == 0:
            return f"{e.factors[0]} and {e.factors[1]} interact"
        up = e.estimate > 0
        low, high = (e.ci_low, e.ci_high) if up else (-e.ci_high, -e.ci_low)
        span = f" {words.span(low, high, h)}" if detail >= 2 else ""
        return (f"{e.factors[0]} and {e.factors[1]} interact: {e.factors[0]} "
                f"{value_text(e.levels[0])} minus {value_text(e.bases[0])} is "
                f"{words.amount(abs(e.estimate), h)} {words.unit}{span} "
                f"{'higher' if up else 'lower'} with {e.factors[1]} {value_text(e.levels[1])} than "
                f"with {value_text(e.bases[1])}")
    beyond = words.allowed(max(abs(e.ci_low), abs(e.ci_high)), h)
    if e.kind == INTERACTION:
        return f"no interaction {beyond}" if name == "the interaction" else \
            f"no {name} interaction {beyond}"
    return f"{name}: no effect {beyond}"


def _effect_clauses(words: Words, found: Sequence[Effect], direction: str,
                    detail: int) -> list[str]:
    """The effects' verdicts in words: the levels better and the interactions shown, then the
    effects ruled out beyond an amount (shortest: one clause for the main effects and one for
    the interactions, each with the largest amount), then what stays open."""
    shown = [e for e in found if e.verdict in (stats.BETTER, SHOWN)]
    out = [_effect_clause(words, e, found, direction, detail) for e in shown]
    flat = [e for e in found if e.verdict == stats.EQUIVALENT]
    if detail > 0:
        out += [_effect_clause(words, e, found, direction, detail) for e in flat]
    for kind in (MAIN, INTERACTION):
        mine = [e for e in flat if e.kind == kind and detail == 0]
        if mine:
            widest = max(mine, key=lambda e: max(abs(e.ci_low), abs(e.ci_high)))
            beyond = words.allowed(max(abs(widest.ci_low), abs(widest.ci_high)),
                                   half_width(widest))
            names = joined(list(dict.fromkeys(e.factors[0] for e in mine)))
            out.append(f"{names}: no effect {beyond}" if kind == MAIN else
                       f"no interaction {beyond}")
    open_ = [e for e in found if not e.decided]
    if not open_:
        return out
    if detail == 0:
        return out + [f"{len(open_)} effect{'s' if len(open_) > 1 else ''} undecided"]
    if detail == 1 or len(open_) > 3:
        return out + ["undecided: " + ", ".join(_effect_name(e, found) for e in open_)]
    said = []
    for e in open_:
        h = half_width(e)
        size = f"no interval: {e.ci_method.split(': ', 1)[-1]}" if math.isnan(e.ci_low) else \
            f"{words.amount(e.estimate, h)} {words.unit} {words.span(e.ci_low, e.ci_high, h)}"
        what = f"{value_text(e.levels[0])} minus {value_text(e.bases[0])}: " \
            if e.kind == MAIN and not math.isnan(e.ci_low) else ""
        said.append(f"{_effect_name(e, found)} ({what}{size})")
    return out + ["undecided: " + ", ".join(said)]


def effect_notes(words: Words, found: Sequence[Effect]) -> list[str]:
    """What the effects are, then a sentence per effect with its contrast, interval, Holm p,
    seeds and the seeds that gave no contrast."""
    if not found:
        return []
    many = any(Counter(x.factors[0] for x in found if x.kind == MAIN)[f] > 1
               for f in {e.factors[0] for e in found})
    out = [f"Effects: a factor's main effect is, at each paired seed, a level minus the "
           f"factor's first level, averaged over the other factors' levels"
           f"{' (a factor of more than two levels: each level against its first)' if many else ''}"
           f"; an interaction is how much one factor's effect changes from the other's first "
           f"level to another (a difference of differences). Each interval is Student's t over "
           f"the seeds' contrasts, with Holm's correction over the {found[0].family} effects."]
    verdicts = {stats.BETTER: "better", SHOWN: "an interaction shown",
                stats.UNDECIDED: "undecided"}
    for e in found:
        h = half_width(e)
        others = [f for f in dict.fromkeys(f for x in found for f in x.factors)
                  if f not in e.factors]
        if e.kind == MAIN:
            what = (f"Main effect of {e.factors[0]} ({value_text(e.levels[0])} minus "
                    f"{value_text(e.bases[0])}, averaged over {', '.join(others)})")
        else:
            what = (f"Interaction of {e.factors[0]} and {e.factors[1]} ({e.factors[0]} "
                    f"{value_text(e.levels[0])} minus {value_text(e.bases[0])} with "
                    f"{e.factors[1]} {value_text(e.levels[1])}, minus the same with "
                    f"{value_text(e.bases[1])}" +
                    (f", averaged over {', '.join(others)})" if others else ")"))
        size = f"no interval ({e.ci_method.split(': ', 1)[-1]})" if math.isnan(e.ci_low) else \
            f"{words.amount(e.estimate, h)} {words.unit} {words.span(e.ci_low, e.ci_high, h)}" \
            f" ({interval_text(e)}; Holm {p_text(e.p_holm)})"
        verdict = verdicts.get(e.verdict) or f"equivalent within {words.precision(e.precision)}"
        gone = f"; {e.dropped} seed{'s' if e.dropped > 1 else ''} with a non-finite value at a " \
            f"level it needs gave no contrast" if e.dropped else ""
        out.append(f"{what}: {size} over {e.seeds - e.dropped} "
                   f"seed{'s' if e.seeds - e.dropped != 1 else ''}: {verdict}{gone}.")
    return out


def look_line(words: Words, look) -> str:
    """The line ``sweep run`` says at a look after which seeding goes on
    (:class:`orchestrator.answer.compare.Look`): what of the question is still undecided,
    e.g. ``(warmup_epochs, clip_grad_norm), look 1 of 4 at 3 paired seeds: warmup_epochs and
    the interaction undecided; one more paired seed (at most 6).``"""
    factor = words.header if len(words.factors) == 1 else f"({words.header})"
    names = [_effect_name(x, look.effects) if isinstance(x, Effect)
             else f"{words.name(x.a)} vs {words.name(x.b)}" for x in look.open]
    shown = names if len(names) <= 4 else [*names[:3], f"{len(names) - 3} more"]
    return (f"{factor}, look {look.look} of {look.looks} at {look.rounds} paired seeds: "
            f"{joined(shown)} undecided; one more paired seed (at most "
            f"{look.rounds - look.look + look.looks}).")


# ------------------------------------------------------------ the lines under the table


def caption(words: Words, results: Sequence[stats.PairResult]) -> str:
    """What the table of levels shows, and what its letters mean."""
    level = interval_text(results[0]).replace(", clipped to the metric's range", "") \
        if results else "no pair"
    return (f"Levels ranked by their mean {words.metric} over their confirmation seeds"
            f"{' (in %)' if words.percent else ''}, with its 95% t interval (clipped to the "
            f"metric's range). Levels that share a letter are not separated by their pair's "
            f"test ({level}, Holm's correction over {len(results)} "
            f"pair{'s' if len(results) != 1 else ''}); levels with no letter in common are.")


def pair_notes(words: Words, results: Sequence[stats.PairResult], direction: str) -> list[str]:
    """A sentence per decided pair (better or equivalent), with its interval."""
    out = []
    for r in results:
        h = half_width(r)
        if r.verdict == stats.BETTER:
            ahead, low, high = r.lead(direction)
            out.append(f"{words.name(r.winner)} better than {words.name(r.loser)} by "
                       f"{words.with_unit(ahead, h)} {words.span(low, high, h)} "
                       f"({interval_text(r)}; Holm {p_text(r.p_holm)}).")
        elif r.verdict == stats.EQUIVALENT:
            out.append(f"{words.name(r.a)} and {words.name(r.b)} equivalent within "
                       f"{words.precision(r.precision)}: {words.name(r.b)} minus "
                       f"{words.name(r.a)} = {words.amount(r.diff, h)} "
                       f"{words.span(r.ci_low, r.ci_high, h)} ({interval_text(r)}).")
    return out


def open_note(words: Words, pairs: Sequence, limit: int) -> list[str]:
    """One line for every pair not called better (:class:`orchestrator.answer.summary.
    OpenPair`): what it rules out, and the seeds that would decide it (more than ``limit``:
    said so)."""
    if not pairs:
        return []
    said = []
    for p in pairs:
        what = f"{words.name(p.a)} vs {words.name(p.b)}"
        if math.isnan(p.rules_out):
            said.append(f"{what} no interval")
            continue
        seeds = "" if p.verdict != stats.UNDECIDED else ", no estimate" if p.seeds is None \
            else f", more than {limit} seeds" if p.seeds > limit else \
            f", about {p.seeds} seeds"
        said.append(f"{what} {words.allowed(p.rules_out, p.half)}"
                    f"{' (equivalent)' if p.verdict == stats.EQUIVALENT else seeds}")
    return ["Not called better, what each pair's interval rules out (differences beyond the "
            "largest it allows) and about how many paired seeds would decide an undecided pair "
            "(if its mean difference and spread held): " + "; ".join(said) + "."]


def goal_note(goal: str, effects: bool, undecided: int) -> str:
    """Seeding stopped once the narrower question ``goal`` was decided (every effect when
    ``effects``, else the best level), leaving ``undecided`` pairs of levels open."""
    question = "every effect" if effects else "the best level"
    return (f"Seeding stops once {question} is decided (compare.goal: {goal}); the "
            f"{undecided} undecided pair{'s' if undecided > 1 else ''} of levels did not hold "
            f"it open.")


def value_notes(words: Words, levels: Sequence[str], values) -> list[str]:
    """The levels with seeds without a value, or no confirmation value at all."""
    out = []
    for level in levels:
        seeds = [v for v in (values.get(level) or {}).values() if v is not None]
        missing = sum(not math.isfinite(v) for v in seeds)
        if not seeds:
            out.append(f"{words.name(level)} has no confirmation value.")
        elif missing:
            out.append(f"{words.name(level)} gave no finite {words.metric} on {missing} of "
                       f"{len(seeds)} seeds (its worst outcome: left out of its mean and of "
                       f"the differences; it cannot be named better).")
    return out


def weights_note(words: Words, leader: str, run: tuple[int, int], peers: Sequence[str],
                 equivalent: bool, best: bool) -> str:
    """Whose weights stand for the answer (``run``: seed and trial of ``leader``'s
    confirmation run closest to its mean), and, with ``peers`` (levels no other beats that are
    not separated from ``leader``; all ``equivalent`` to it or not), that these weights are
    one of theirs and why ``leader``'s (the ``best`` mean among them, or fewer seeds without a
    value)."""
    name = words.name(leader)
    text = (f"The weights of {name}: the run of seed {run[0]} (trial {run[1]}), the "
            f"confirmation run closest to its mean.")
    if not peers:
        return text
    return text + (
        f" {name} is {'equivalent to' if equivalent else 'not separated from'} "
        f"{words.names(peers)}, so these weights are those of one of {len(peers) + 1} levels: "
        f"{name}'s, "
        f"{'the best mean among them' if best else 'the one with fewer seeds without a value'}"
        f"{'' if equivalent else ' (another may yet prove better)'}.")


def edge_note(words: Words, edges: Sequence) -> str | None:
    """The tuned optima on an edge of their searched range
    (:class:`orchestrator.answer.edges.Edge`), in one line: each level's parameter, its tuned
    values there (one value once, however many tunings found it), which end of which range,
    in how many of the level's tunings; None when there is none."""
    if not edges:
        return None
    said = []
    for e in edges:
        lo, hi = plain(min(e.values)), plain(max(e.values))
        value = lo if lo == hi else f"{lo} to {hi}"
        said.append(f"{words.name(e.level)} {e.param.rpartition('.')[2]} {value} at the "
                    f"{e.side} end of [{plain(e.low)}, {plain(e.high)}]"
                    f"{' (log scale)' if e.log else ''}, in {len(e.values)} of {e.tunings} "
                    f"tuning{'s' if e.tunings != 1 else ''}")
    return (f"Tuned within {EDGE:.0%} of an end of the searched range (on its log scale "
            f"for a log range), so the optimum may lie beyond it; widen the range and run "
            f"again: " + "; ".join(said) + ".")


def estimand(c) -> str:
    """What a comparison's intervals are about, and what they hold, by its ``tuning`` (and
    with ``tune_trials: 0``, nothing tuned)."""
    trials = f"{c.tune_trials} tuning trial{'s' if c.tune_trials != 1 else ''}"
    if c.tune_trials == 0:
        return (f"What it estimates: the {c.metric} of the fixed configuration of each level, "
                f"over fresh paired seeds (compare.tune_trials: 0, nothing tuned). Each interval "
                f"holds the seed alone: other settings may order the levels otherwise.")
    if c.replicated:
        return (f"What it estimates: each level's expected {c.metric} after tuning with "
                f"{trials}. Every seed tuned each level anew and trained its best once, so each "
                f"interval holds the tuning draw as well as the seed: a re-run with another "
                f"base seed lands inside it at the stated rate.")
    return (f"What it estimates: the {c.metric} of the configuration one tuning of "
            f"{trials} found for each level, over fresh seeds. The intervals hold the seeds, "
            f"not the tuning draw: a re-run with another base seed may tune a level elsewhere "
            f"and land outside them (compare.tuning: each_seed holds both).")
