"""The fake API server's points (F-numbers) and the documents that code and docs cite.

Code, tests and docs cite the fake Kubernetes API server's points as ``F23``, ``F26–F28``,
``F1-F21``, ``(F47)`` or ``F53/F54``; each number must have its own ``### F<n>. <title>``
heading in ``docs/fake-apiserver.md``, so that a link to its anchor
(``fake-apiserver.md#f23-process-entry-point``) reaches it.

What counts as a reference: a capital ``F`` and one or two digits, not part of a longer word or
number and not after ``#``, optionally followed by the end of a range (as for contract points,
``tests/test_contract_docs.py``). So ruff codes (``F401``: three digits), identifiers
(``F42_CASES``, ``EF12``), hex colours (``#F12``, ``#F1F1F1``) and pytest names and anchors
(``test_f20_f23``, ``#f23-...``: lower case) are not references.

The citations must resolve inside the repository: no comment or document may cite a section of a
document that lives outside it (the design, the Python notes, the first fake API server
specification, the contract notes). Those facts are stated in ``docs/`` and the README now.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

# One definition of GitHub's heading anchors for both documents of numbered points.
from dispatcher_sandbox.harness.markdown import NumberedPoints, github_anchor, heading_anchors

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "fake-apiserver.md"
PACKAGE = ROOT / "sandbox" / "dispatcher_sandbox" / "fake_apiserver"
POINTS = range(1, 62)
MAX_TITLE_LENGTH = 40
SCANNED_DIRS = ("dispatcher", "sandbox", "tests", "benchmarks", "scripts", "docs")
SCANNED_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".txt"}
SKIPPED_PARTS = {"__pycache__", "build", "dist", "node_modules"}

POINTS_OF_DOC = NumberedPoints("F", digits=2, not_after=r"\w#")
_BOLD_DEFINITION = re.compile(r"^\*\*F[0-9]+\.")
_HEADING = re.compile(r"^#{1,6} (?P<text>.+?)\s*$")
_DOC_LINK = re.compile(r"fake-apiserver\.md#(?P<anchor>[A-Za-z0-9_-]+)")
_MARKDOWN_LINK = re.compile(r"\]\((?P<target>[^)\s]*)\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


parse_references = POINTS_OF_DOC.parse
referenced_numbers = POINTS_OF_DOC.numbers
defined_points = POINTS_OF_DOC.defined


def heading_texts(markdown: str) -> list[str]:
    """The text of every heading, in order (code blocks skipped)."""
    texts = []
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        match = _HEADING.match(line)
        if match and not in_code:
            texts.append(match["text"])
    return texts


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


def _skipped(path: Path) -> bool:
    parts = path.relative_to(ROOT).parts
    return any(
        part in SKIPPED_PARTS or part.startswith(".") or part.endswith(".egg-info")
        for part in parts
    )


def scanned_files() -> Iterator[Path]:
    """The files whose F-references must resolve."""
    for directory in SCANNED_DIRS:
        for path in sorted((ROOT / directory).rglob("*")):
            if path.suffix in SCANNED_SUFFIXES and path.is_file() and not _skipped(path):
                yield path
    yield ROOT / "README.md"


PARSER_CASES = {
    "single point": ("see F23.", [23]),
    "en-dash range": ("(F26–F28)", [26, 27, 28]),
    "hyphen range": ("F1-F21", list(range(1, 22))),
    "em-dash range": ("F55—F57", [55, 56, 57]),
    "ellipsis range": ("F1…F3", [1, 2, 3]),
    "range without second F": ("F26–28", [26, 27, 28]),
    "spaced en-dash range": ("F59 – F61", [59, 60, 61]),
    "in parentheses": ("(F47)", [47]),
    "list": ("(F55, F57, F15/F17)", [55, 57, 15, 17]),
    "slash pair": ("F53/F54 extension", [53, 54]),
    "step suffix": ("F39 (a)–(c)", [39]),
    "hyphen then a word": ("an F25-like limit", [25]),
    "spaced hyphen is no range": ("F5 - 7 items", [5]),
    "ruff codes have three digits": ("# noqa: F401, F841", []),
    "three digits": ("F123", []),
    "inside a longer word": ("EF12 and XF3", []),
    "identifier named after a point": ("F42_CASES", []),
    "hex colours and numbers": ("#F12, #F1F1F1 and 0xF1", []),
    "letters after the digits": ("F1A", []),
    "pytest ids are lower case": ("test_f20_f23_f28_two_processes", []),
    "anchors are lower case": ("fake-apiserver.md#f23-process-entry-point", []),
    "other numbered schemes": ("C28, S12, section 9", []),
}


@pytest.mark.parametrize(("text", "expected"), list(PARSER_CASES.values()), ids=list(PARSER_CASES))
def test_reference_parser(text: str, expected: list[int]) -> None:
    assert referenced_numbers(text) == expected


def test_reference_parser_refuses_a_backward_range() -> None:
    # Built from parts, so that the scan of this very file does not meet a backward range.
    backward = "F28" + "–" + "F26"
    with pytest.raises(ValueError, match="line 2: range"):
        parse_references("text\n" + backward)


def test_reference_parser_reports_lines() -> None:
    refs = parse_references("F1\n\nsee F2 and F4-F5\n")
    assert [(r.text, r.line) for r in refs] == [("F1", 1), ("F2", 3), ("F4-F5", 3)]


UNDEFINED_CASES = {
    "all defined": ([("a.py", "F1 and F2–F3")], []),
    "single undefined": ([("a.py", "F1\nF9")], [("a.py", 2, "F9")]),
    "range reaching past the end": ([("b.md", "F2–F4")], [("b.md", 1, "F2–F4")]),
    "several files": ([("a.py", "F4"), ("b.md", "ok F3")], [("a.py", 1, "F4")]),
}


@pytest.mark.parametrize(
    ("files", "expected"), list(UNDEFINED_CASES.values()), ids=list(UNDEFINED_CASES)
)
def test_undefined_references_are_found(
    files: list[tuple[str, str]], expected: list[tuple[str, int, str]]
) -> None:
    assert undefined_references(files, defined={1, 2, 3}) == expected


def test_a_point_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="F2 is defined twice"):
        defined_points("### F2. One\n\ntext\n\n### F2. Two\n")


def test_every_point_has_one_anchor_heading() -> None:
    text = DOC.read_text()
    points = defined_points(text)
    assert sorted(points) == list(POINTS), "F1–F61, each once, no gaps"
    bold = [line for line in text.splitlines() if _BOLD_DEFINITION.match(line)]
    assert bold == [], "points defined without a heading"
    long = {n: t for n, t in points.items() if len(t) > MAX_TITLE_LENGTH}
    assert long == {}, f"headings longer than {MAX_TITLE_LENGTH} characters"
    anchors = heading_anchors(text)
    for number, title in points.items():
        anchor = github_anchor(f"F{number}. {title}")
        assert anchor.startswith(f"f{number}-"), anchor
        assert anchor in anchors


def test_no_heading_is_duplicated() -> None:
    anchors = [github_anchor(text) for text in heading_texts(DOC.read_text())]
    duplicated = sorted({a for a in anchors if anchors.count(a) > 1})
    assert duplicated == [], "GitHub would number these anchors, and links would miss"


def test_every_fake_api_reference_in_code_and_docs_is_defined() -> None:
    defined = set(defined_points(DOC.read_text()))
    files = [(str(p.relative_to(ROOT)), p.read_text()) for p in scanned_files()]
    cited = [ref for _, text in files for ref in parse_references(text)]
    assert cited, "no F-reference found: the scan looked in the wrong places"
    missing = undefined_references(files, defined)
    assert missing == [], "cited but not defined in docs/fake-apiserver.md:\n" + "\n".join(
        f"  {name}:{line}: {ref}" for name, line, ref in missing
    )


def test_links_to_fake_api_anchors_resolve() -> None:
    anchors = heading_anchors(DOC.read_text())
    broken = []
    for path in [*scanned_files(), DOC]:
        for match in _DOC_LINK.finditer(path.read_text()):
            if match["anchor"] not in anchors:
                broken.append(f"{path.relative_to(ROOT)}: #{match['anchor']}")
    assert broken == []


def test_links_inside_the_document_resolve() -> None:
    text = _CODE_SPAN.sub("", DOC.read_text())
    broken = []
    for match in _MARKDOWN_LINK.finditer(text):
        target = match["target"]
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = DOC if not file_part else (DOC.parent / file_part)
        if not linked.is_file() or (anchor and anchor not in heading_anchors(linked.read_text())):
            broken.append(target)
    assert broken == []


# --- what the document points at in the code and the tests ---------------------------------------

# A "*Code:*" or "*Tests:*" part of a point (or of a bullet), up to the next part or paragraph.
_SEGMENT = re.compile(
    r"\*(?P<kind>Code|Tests):\*(?P<body>.*?)(?=\*Code:\*|\*Tests:\*|\n\n|\n- |\Z)", re.S
)
_MODULE = re.compile(r"`(?P<module>[\w/]+\.py)`(?:\s*\((?P<names>[^)]*)\))?")
_NAME = re.compile(r"`(?P<name>[A-Za-z_][\w.]*)`")
_TICKED = re.compile(r"`(?P<token>[^`]+)`")
_TEST_FILE = re.compile(r"^(?P<path>(?:tests/[\w/]*)?\w+\.py|tests/[\w/]+/)(?:::(?P<test>\w+))?$")
_TEST_NAME = re.compile(r"^(?P<name>test_\w+?)(?P<prefix>\.\.\.)?$")


def _defines(source: str, name: str) -> bool:
    """Whether ``source`` defines ``name`` (a function, class or module-level constant)."""
    word = re.escape(name)
    pattern = rf"^\s*(?:async\s+def|def|class)\s+{word}\b|^\s*{word}\s*[:=]"
    return re.search(pattern, source, re.M) is not None


def _defines_test(source: str, name: str, prefix: bool) -> bool:
    tail = r"\w*" if prefix else ""
    return re.search(rf"^(?:async\s+)?def {re.escape(name)}{tail}\(", source, re.M) is not None


def missing_pointers(markdown: str) -> list[str]:
    """Modules, functions, test files and test names the document names but the tree lacks."""
    missing = []
    for segment in _SEGMENT.finditer(markdown):
        body = segment["body"]
        if segment["kind"] == "Code":
            for match in _MODULE.finditer(body):
                module = match["module"]
                path = ROOT / module if "/" in module else PACKAGE / module
                if not path.is_file():
                    missing.append(module)
                    continue
                source = path.read_text()
                for name in _NAME.findall(match["names"] or ""):
                    if not all(_defines(source, part) for part in name.split(".")):
                        missing.append(f"{module}: {name}")
            continue
        current: Path | None = None
        for token in _TICKED.findall(body):
            if match := _TEST_FILE.match(token):
                path_text = match["path"]
                folder = ROOT if path_text.startswith("tests/") else ROOT / "tests" / "fakeapi"
                path = folder / path_text
                if not path.exists():
                    missing.append(path_text)
                    current = None
                    continue
                current = path if path.is_file() else None
                if match["test"] and not _defines_test(path.read_text(), match["test"], False):
                    missing.append(token)
            elif (
                (match := _TEST_NAME.match(token))
                and current is not None
                and not _defines_test(current.read_text(), match["name"], bool(match["prefix"]))
            ):
                missing.append(f"{current.relative_to(ROOT)}::{token}")
    return missing


def point_sections(markdown: str) -> dict[int, str]:
    """Point number → the text of its section (up to the next heading)."""
    sections: dict[int, str] = {}
    number: int | None = None
    for line in markdown.splitlines():
        if line.startswith("#"):
            match = POINTS_OF_DOC.heading.match(line)
            number = int(match["number"]) if match else None
            continue
        if number is not None:
            sections[number] = sections.get(number, "") + line + "\n"
    return sections


def test_every_point_says_where_its_code_and_tests_are() -> None:
    sections = point_sections(DOC.read_text())
    lacking = [
        f"F{number}: *{kind}:*"
        for number, text in sections.items()
        for kind in ("Code", "Tests")
        if f"*{kind}:*" not in text
    ]
    assert lacking == []


def test_the_document_names_code_and_tests_that_exist() -> None:
    assert missing_pointers(DOC.read_text()) == [], "docs/fake-apiserver.md names what is missing"


# --- no citation of a document outside the repository -------------------------------------------

# Sections of the design, of the Python notes, of the first fake API server specification and of
# the contract notes, and those documents by name. "Section 9" alone is not matched: it names a
# section of the document the sentence is about (docs/fake-apiserver.md in tests/fakeapi).
OUTSIDE_CITATION = re.compile(
    r"fake-apiserver-spec|python-k8s-notes|kueue-multikueue-contract|\bdesign\.md\b"
    r"|\bdesign(?:'s)?\s+(?:section|card)\b"
    r"|\b(?:notes|spec|contract)\s+section\b"
    r"|\bnotes\s+[0-9]"
    r"|\bspec\s+(?:F[0-9]|§)"
    r"|§\s*[0-9]",
    re.IGNORECASE,
)

CITATION_CASES = {
    "design section": ("The command line (design section 4).", True),
    "the design's section": ("the design's section 5 default topology", True),
    "design card": ("see design card 3", True),
    "notes and a number": ("Leases (notes 6.1)", True),
    "notes section": ("opentelemetry-sdk~=1.45.2 (notes section 0)", True),
    "contract section": ("S1-S16 (contract section 12.1)", True),
    "spec and a point": ("for the fake API server (spec F44, F45)", True),
    "spec section sign": ("Spec §8: the client's default", True),
    "the specification by name": ("(fake-apiserver-spec F52)", True),
    "the notes by name": ("python-k8s-notes.md", True),
    "the contract notes by name": ("``docs/kueue-multikueue-contract.md``", True),
    "the design by name": ("design.md", True),
    "this repository's document": ("(docs/fake-apiserver.md F52)", False),
    "this repository's contract": ("(docs/kueue-contract.md, section 12)", False),
    "a README section": ("(README, *Operations*)", False),
    "a section of the document at hand": ("F55 with section 9:", False),
    "a Kubernetes object's spec": ("copies the spec as it is", False),
    "a section sign before a title": ("docs/outage.md § Measured on real Kueue", False),
    "release notes": ("the v0.20.0 notes mention it", False),
    "by design": ("the difference is by design", False),
}


@pytest.mark.parametrize(("text", "cites"), list(CITATION_CASES.values()), ids=list(CITATION_CASES))
def test_outside_citation_pattern(text: str, cites: bool) -> None:
    assert (OUTSIDE_CITATION.search(text) is not None) == cites


# This file holds the patterns and their cases; the contract test's parser case "notes 1.2" is
# sample text, not a citation.
EXEMPT_FILES = {"tests/test_fake_api_docs.py"}
SAMPLE_TEXTS = {("tests/test_contract_docs.py", '"F39, S12, notes 1.2"')}


def tracked_files() -> list[str]:
    """The repository's files (``git ls-files``; outside a checkout, every file in the tree)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
        return sorted(name for name in listing.split("\0") if name)
    except (OSError, subprocess.CalledProcessError):
        return sorted(
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not _skipped(p) and "venv" not in p.relative_to(ROOT).parts
        )


def outside_citations(files: Iterable[str]) -> list[tuple[str, int, str]]:
    """``(file, line, text)`` of every citation of an outside document in ``files``."""
    found = []
    for name in files:
        if name.startswith("docs/figures/") or name in EXEMPT_FILES:
            continue
        raw = (ROOT / name).read_bytes() if (ROOT / name).is_file() else b""
        if b"\0" in raw:
            continue  # not text
        for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
            sample = any(name == path and text in line for path, text in SAMPLE_TEXTS)
            if not sample:
                found.extend((name, number, m[0]) for m in OUTSIDE_CITATION.finditer(line))
    return found


def test_no_citation_of_a_document_outside_the_repository() -> None:
    files = tracked_files()
    assert "README.md" in files, "the listing of the repository's files failed"
    found = outside_citations(files)
    assert found == [], "cite the document in this repository that states the fact:\n" + "\n".join(
        f"  {name}:{line}: {text}" for name, line, text in found
    )
