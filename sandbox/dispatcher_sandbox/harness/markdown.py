"""Markdown as the documentation checks read it: headings and the anchors GitHub gives them."""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING = re.compile(r"^#{1,6} (?P<text>.+?)\s*$")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, dashes."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of all headings of a Markdown document (code blocks skipped)."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = HEADING.match(line)
        if match and not in_code:
            anchors.add(github_anchor(match["text"]))
    return anchors


@dataclass(frozen=True)
class Reference:
    """One citation of a numbered point: ``C28`` or the range ``C21–C33``, where it was found."""

    start: int
    end: int
    text: str
    line: int

    def numbers(self) -> range:
        return range(self.start, self.end + 1)


class NumberedPoints:
    """A document of numbered points (``### C<n>. <title>``) and the citations of its numbers.

    A citation is the letter and one to ``digits`` digits, not part of a longer word nor after a
    character of ``not_after`` (``NC110``, ``C54_CASES``, ``0xC28``, ``#C28A3F`` are not
    citations), optionally followed by the end of a range: a hyphen, en dash, em dash or ellipsis
    (an en or em dash may have a space on each side), then the end number with or without its
    letter.
    """

    def __init__(self, letter: str, *, digits: int, not_after: str = r"\w") -> None:
        self.letter = letter
        number = f"[0-9]{{1,{digits}}}"
        self._reference = re.compile(
            rf"(?<![{not_after}]){letter}(?P<start>{number})"
            rf"(?:(?:[-–—…]|\s[–—]\s){letter}?(?P<end>{number}))?"
            r"(?!\w)"
        )
        self.heading = re.compile(rf"^### {letter}(?P<number>[0-9]+)\. (?P<title>\S.*)$")

    def parse(self, text: str) -> list[Reference]:
        """The citations in ``text``, in order; a range must not run backwards."""
        found = []
        for match in self._reference.finditer(text):
            start = int(match["start"])
            end = int(match["end"]) if match["end"] is not None else start
            line = text.count("\n", 0, match.start()) + 1
            if end < start:
                raise ValueError(f"line {line}: range {match[0]!r} runs backwards")
            found.append(Reference(start, end, match[0], line))
        return found

    def numbers(self, text: str) -> list[int]:
        """Every point number ``text`` cites, ranges expanded, in order of appearance."""
        return [n for ref in self.parse(text) for n in ref.numbers()]

    def defined(self, markdown: str) -> dict[int, str]:
        """Point number → heading title, from the document's point headings."""
        points: dict[int, str] = {}
        for line in markdown.splitlines():
            match = self.heading.match(line)
            if match:
                number = int(match["number"])
                if number in points:
                    raise ValueError(f"{self.letter}{number} is defined twice")
                points[number] = match["title"]
        return points
