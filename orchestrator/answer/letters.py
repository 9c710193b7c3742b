"""The compact letter display of pairwise verdicts, as multiple-comparison reports print it:
levels that share a letter are not separated by their pair's test, levels of a separated pair
share none. It stays one short column however many levels there are.

The letters come from the insert-absorb algorithm (Piepho 2004, "An algorithm for a
letter-based representation of all-pairwise comparisons", J. Comput. Graph. Stat. 13):
start with one group holding every level; for each separated pair, split every group that
holds both into the group without one and the group without the other; drop any group
inside another. Every pair that is not separated keeps a group in common (a split keeps it
whole in one of the two halves, and a dropped group lies inside a kept one).
"""
from __future__ import annotations

import string
from collections.abc import Iterable, Sequence

NAMES = string.ascii_lowercase + string.ascii_uppercase


def letters(levels: Sequence[str], separated: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each level's letters (``"a"``, ``"ab"``...), given the pairs a test separated.

    Args:
        levels: the levels, best first: the group of the first level is ``a``, and groups are
            lettered in the order of their best level (then their next best...).
        separated: the pairs of levels (either order) whose verdict is not "no difference
            shown" (``better``).

    Returns:
        level -> its letters, in ``levels`` order.
    """
    rank = {level: i for i, level in enumerate(levels)}
    groups = [frozenset(levels)]
    for a, b in separated:
        if a not in rank or b not in rank:
            raise ValueError(f"separated pair ({a}, {b}) names a level not in {list(levels)}")
        split = []
        for g in groups:
            split += [g - {a}, g - {b}] if a in g and b in g else [g]
        groups = [g for i, g in enumerate(split)
                  if not any(g < h or (g == h and j < i) for j, h in enumerate(split))]
    groups.sort(key=lambda g: sorted(rank[level] for level in g))
    names = [NAMES[i] if i < len(NAMES) else f"[{i + 1}]" for i in range(len(groups))]
    return {level: "".join(n for n, g in zip(names, groups) if level in g) for level in levels}
