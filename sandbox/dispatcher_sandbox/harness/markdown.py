"""Markdown as the documentation checks read it: headings and the anchors GitHub gives them."""

from __future__ import annotations

import re

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
