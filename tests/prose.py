"""How readable a docs page's prose is: its mean sentence length and its longest paragraph, in
words.

Prose is what is left of the Markdown source once code blocks, tables, headings, HTML comments,
images and admonition titles are left out; each list item counts as a paragraph of its own.
Inline code counts as one word and a link as its text. A sentence ends at ``.``, ``?`` or ``!``
followed by a space or the end of its paragraph (so ``0.05`` or ``e.g.`` inside a word
does not end one).

``python -m tests.prose docs/*.md`` prints each page's figures, worst first.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

# the bounds every page keeps (tests/test_docs.py): readable docs of the field average 12 to 15
# words a sentence with no paragraph over about 60 words
MAX_MEAN_SENTENCE = 20.0
MAX_PARAGRAPH = 100

FENCE = re.compile(r"^\s*(```|~~~)")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
SKIPPED_LINE = re.compile(r"^\s*(?:#|\||<!--.*-->\s*$|!\[|:::|!!!|\?\?\?|<\w|</\w|---\s*$)")
INLINE_CODE = re.compile(r"`[^`]+`")
LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|\[([^\]]*)\]\[[^\]]*\]")
COMMENT = re.compile(r"<!--.*?-->", re.S)
SENTENCE_END = re.compile(r"[.?!](?=\s|$)")
WORD = re.compile(r"[\w][\w'’.,/%+-]*")


@dataclass(frozen=True)
class Prose:
    page: str
    sentences: int
    words: int
    longest_paragraph: int
    longest_paragraph_start: str  # its first words, to find it

    @property
    def mean_sentence(self) -> float:
        return self.words / self.sentences if self.sentences else 0.0

    def problems(self) -> list[str]:
        out = []
        if self.mean_sentence > MAX_MEAN_SENTENCE:
            out.append(f"{self.page}: {self.mean_sentence:.1f} words a sentence on average "
                       f"(at most {MAX_MEAN_SENTENCE:g}): split the long sentences")
        if self.longest_paragraph > MAX_PARAGRAPH:
            out.append(f"{self.page}: a paragraph of {self.longest_paragraph} words (at most "
                       f"{MAX_PARAGRAPH}), starting {self.longest_paragraph_start!r}: split it, "
                       f"or move its detail to a table or a list")
        return out


def paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of a Markdown page, each as one line of plain text."""
    text = COMMENT.sub("", markdown)
    out: list[str] = []
    current: list[str] = []
    in_fence = False

    def close():
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        if FENCE.match(line):
            close()
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if not line.strip() or SKIPPED_LINE.match(line):
            close()
            continue
        item = LIST_ITEM.match(line)
        if item:
            close()
            line = line[item.end():]
        current.append(line.strip())
    close()
    return [p for p in (_plain(p) for p in out) if p]


def _plain(paragraph: str) -> str:
    paragraph = INLINE_CODE.sub("CODE", paragraph)
    paragraph = LINK.sub(lambda m: m.group(1) or m.group(2) or "", paragraph)
    paragraph = re.sub(r"[*_]{1,3}(?=\w)|(?<=\w)[*_]{1,3}", "", paragraph)
    return " ".join(paragraph.split())


def words(text: str) -> int:
    return len(WORD.findall(text))


def sentences(paragraph: str) -> list[str]:
    parts = [s for s in SENTENCE_END.split(paragraph) if words(s)]
    return parts or [paragraph]


def measure(path: Path) -> Prose:
    found = paragraphs(path.read_text())
    counts = [words(p) for p in found]
    n = sum(len(sentences(p)) for p in found)
    longest = max(range(len(found)), key=counts.__getitem__) if found else None
    return Prose(path.name, n, sum(counts), counts[longest] if found else 0,
                 " ".join(found[longest].split()[:8]) if found else "")


def main(argv: list[str]) -> int:
    pages = [measure(Path(p)) for p in argv]
    bad = 0
    for p in sorted(pages, key=lambda p: -p.mean_sentence):
        flag = " <-" if p.problems() else ""
        bad += bool(flag)
        print(f"{p.page:18} {p.mean_sentence:5.1f} words/sentence  longest paragraph "
              f"{p.longest_paragraph:4}  ({p.sentences} sentences){flag}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
