"""Every contract point (C-number) cited in code and docs is defined in docs/kueue-contract.md.

Code and docs cite the Kueue contract as ``C28``, ``C21–C33``, ``C1-C3``, ``(C8, C10)`` or
``C42/C45``; each number must have its own ``### C<n>. <title>`` heading in
``docs/kueue-contract.md``, so that a link to its anchor (``#c28-admission-detection``) reaches it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from dispatcher_sandbox.harness.markdown import NumberedPoints, github_anchor, heading_anchors

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "docs" / "kueue-contract.md"
PYTHON_DIRS = ("dispatcher", "sandbox", "tests", "benchmarks", "scripts")
MAX_TITLE_LENGTH = 40

# ``C`` and one to three digits (what else counts: NumberedPoints).
POINTS_OF_DOC = NumberedPoints("C", digits=3)
_BOLD_DEFINITION = re.compile(r"^\*\*C[0-9]+\.")
_CONTRACT_LINK = re.compile(r"kueue-contract\.md#(?P<anchor>[A-Za-z0-9_-]+)")
_MARKDOWN_LINK = re.compile(r"\]\((?P<target>[^)\s]*)\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


parse_references = POINTS_OF_DOC.parse
referenced_numbers = POINTS_OF_DOC.numbers
defined_points = POINTS_OF_DOC.defined


def undefined_references(
    files: Iterable[tuple[str, str]], defined: set[int]
) -> list[tuple[str, int, str]]:
    """``(file, line, reference)`` for each citation of a number that ``defined`` lacks."""
    missing = []
    for name, text in files:
        try:
            refs = parse_references(text)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        for ref in refs:
            if any(n not in defined for n in ref.numbers()):
                missing.append((name, ref.line, ref.text))
    return missing


def scanned_files() -> Iterator[Path]:
    """The files whose contract references must resolve."""
    for directory in PYTHON_DIRS:
        yield from sorted((ROOT / directory).rglob("*.py"))
    yield from sorted((ROOT / "docs").rglob("*.md"))
    yield ROOT / "README.md"


PARSER_CASES = {
    "single point": ("see C28.", [28]),
    "en-dash range": ("(contract C21–C33)", list(range(21, 34))),
    "hyphen range": ("contract C1-C3).", [1, 2, 3]),
    "em-dash range": ("C56—C57", [56, 57]),
    "range without second C": ("C10–11", [10, 11]),
    "spaced en-dash range": ("C21 – C23", [21, 22, 23]),
    "list in parentheses": ("(C8, C10)", [8, 10]),
    "slash pair": ("(C42/C45)", [42, 45]),
    "step suffix": ("C28 step 2, C33", [28, 33]),
    "bold definition": ("**C17. CEL rules**", [17]),
    "hyphen then a word": ("a C28-like write", [28]),
    "spaced hyphen is no range": ("C5 - 7 items", [5]),
    "inside a longer word": ("NC110 and XC12", []),
    "identifier named after a point": ("C54_CASES", []),
    "hex number": ("0xC28 and #C28A3F and C0FFEE", []),
    "letters after the digits": ("C3PO", []),
    "lower case": ("c28 and #c28-admission-detection", []),
    "four digits": ("C1234", []),
    "other numbered schemes": ("F39, S12, notes 1.2", []),
}


@pytest.mark.parametrize(("text", "expected"), list(PARSER_CASES.values()), ids=list(PARSER_CASES))
def test_reference_parser(text: str, expected: list[int]) -> None:
    assert referenced_numbers(text) == expected


def test_reference_parser_refuses_a_backward_range() -> None:
    # Built from parts, so that the scan of this very file does not meet a backward range.
    backward = "C33" + "–" + "C21"
    with pytest.raises(ValueError, match="line 2: range"):
        parse_references("text\n" + backward)


def test_reference_parser_reports_lines() -> None:
    refs = parse_references("C1\n\nsee C2 and C4-C5\n")
    assert [(r.text, r.line) for r in refs] == [("C1", 1), ("C2", 3), ("C4-C5", 3)]


UNDEFINED_CASES = {
    "all defined": ([("a.py", "C1 and C2–C3")], []),
    "single undefined": ([("a.py", "C1\nC9")], [("a.py", 2, "C9")]),
    "range reaching past the end": ([("b.md", "C2–C4")], [("b.md", 1, "C2–C4")]),
    "several files": (
        [("a.py", "C4"), ("b.md", "ok C3")],
        [("a.py", 1, "C4")],
    ),
}


@pytest.mark.parametrize(
    ("files", "expected"), list(UNDEFINED_CASES.values()), ids=list(UNDEFINED_CASES)
)
def test_undefined_references_are_found(
    files: list[tuple[str, str]], expected: list[tuple[str, int, str]]
) -> None:
    assert undefined_references(files, defined={1, 2, 3}) == expected


ANCHOR_CASES = {
    "point heading": ("C28. Admission detection", "c28-admission-detection"),
    "colon and digits": (
        "C44. Remedy 1: write as kueue-admission",
        "c44-remedy-1-write-as-kueue-admission",
    ),
    "apostrophe": ("3. The manager's controller", "3-the-managers-controller"),
    "dots in a version": ("What changes in v0.20", "what-changes-in-v020"),
    "code span": ("The `kueue-admission` manager", "the-kueue-admission-manager"),
}


@pytest.mark.parametrize(("heading", "anchor"), list(ANCHOR_CASES.values()), ids=list(ANCHOR_CASES))
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_every_point_in_the_contract_has_an_anchor_heading() -> None:
    text = CONTRACT.read_text()
    points = defined_points(text)
    assert points, f"{CONTRACT} defines no point"
    assert sorted(points) == list(range(1, max(points) + 1)), "gaps in the C-numbering"
    bold = [line for line in text.splitlines() if _BOLD_DEFINITION.match(line)]
    assert bold == [], "points defined without a heading"
    long = {n: t for n, t in points.items() if len(t) > MAX_TITLE_LENGTH}
    assert long == {}, f"headings longer than {MAX_TITLE_LENGTH} characters"
    anchors = heading_anchors(text)
    for number, title in points.items():
        anchor = github_anchor(f"C{number}. {title}")
        assert anchor.startswith(f"c{number}-"), anchor
        assert anchor in anchors


def test_every_contract_reference_in_code_and_docs_is_defined() -> None:
    defined = set(defined_points(CONTRACT.read_text()))
    files = [(str(p.relative_to(ROOT)), p.read_text()) for p in scanned_files()]
    cited = [ref for _, text in files for ref in parse_references(text)]
    assert cited, "no contract reference found: the scan looked in the wrong places"
    missing = undefined_references(files, defined)
    assert missing == [], "cited but not defined in docs/kueue-contract.md:\n" + "\n".join(
        f"  {name}:{line}: {ref}" for name, line, ref in missing
    )


def test_links_to_contract_anchors_resolve() -> None:
    anchors = heading_anchors(CONTRACT.read_text())
    broken = []
    for path in [*scanned_files(), CONTRACT]:
        for match in _CONTRACT_LINK.finditer(path.read_text()):
            if match["anchor"] not in anchors:
                broken.append(f"{path.relative_to(ROOT)}: #{match['anchor']}")
    assert broken == []


def test_links_inside_the_contract_resolve() -> None:
    text = _CODE_SPAN.sub("", CONTRACT.read_text())
    broken = []
    for match in _MARKDOWN_LINK.finditer(text):
        target = match["target"]
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = CONTRACT if not file_part else (CONTRACT.parent / file_part)
        if not linked.is_file() or (anchor and anchor not in heading_anchors(linked.read_text())):
            broken.append(target)
    assert broken == []
