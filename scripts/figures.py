"""The docs' measured figures and version claims, from one registry.

Every figure the README and ``docs/*.md`` state (a time, a rate, a count from a run, a version
the project claims to serve) lives in ``docs/figures/*.toml`` with the run it came from: the
exact command, the commit measured at, the date and the machine. This script

- renders each figure into the documents between its markers, ``<!-- figure:ID -->`` and
  ``<!-- /figure -->`` (a figure whose run is ``stale`` gets a visible "(not re-measured since
  COMMIT)");
- writes ``docs/figures.md``, the table of every claim: where it appears, the figure, the command
  and the commit;
- checks the registry (every run names a command and a commit that is an ancestor of HEAD; every
  version claim equals its pin) and that no measured number stands outside a marker (the rule
  is in :func:`unmarked_figures`, the exceptions in ``docs/figures/allowed.toml``).

Usage: ``python scripts/figures.py`` rewrites the documents and ``docs/figures.md``;
``--check`` changes nothing and exits 1 when a document is stale or a check fails
(``tests/test_figures.py`` runs the same checks); ``--stub ID`` prints a registry entry for a new
run, with the commit and date of HEAD filled in.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "docs" / "figures"
ALLOWED = REGISTRY / "allowed.toml"
TABLE = ROOT / "docs" / "figures.md"
# Written whole by their own generators (scripts/gen_config_docs.py, scripts/gen_metrics_docs.py,
# tests/badinput/test_bad_input_catalogue.py): no marker can live there, and they state code,
# not measurements.
GENERATED = ("docs/configuration.md", "docs/metrics.md", "docs/bad-inputs.md", "docs/figures.md")
NOT_RECORDED = "not recorded"

MARKER = re.compile(r"<!-- figure:(?P<id>[^ ]*) -->(?P<body>.*?)<!-- /figure -->", re.DOTALL)
OPENING = re.compile(r"<!-- figure:")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
FIGURE_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


class RegistryError(Exception):
    """A registry file, a marker or a document that cannot be rendered; the message names the
    file and the field."""


# --- the registry ------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_units(units: Mapping[str, str], values: Mapping[str, object]) -> None:
    unknown = set(units) - set(values)
    if unknown:
        raise ValueError(f"units: no value named {', '.join(sorted(unknown))}")


class RunModel(_Model):
    """One measurement: a command run once, at one commit, on one machine."""

    command: str = Field(min_length=1)
    commit: str
    date: datetime.date
    machine: str = Field(min_length=1)
    source: str = Field(min_length=1)
    stale: bool = False
    stale_reason: str = ""
    values: dict[str, str | int | float] = Field(default_factory=dict)
    units: dict[str, str] = Field(default_factory=dict)

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not COMMIT.match(value):
            raise ValueError(f"not an abbreviated commit id (7 to 40 hex digits): {value!r}")
        return value

    @model_validator(mode="after")
    def _stale_has_a_reason(self) -> RunModel:
        if self.stale and not self.stale_reason.strip():
            raise ValueError("stale_reason: a stale run must say why")
        if self.stale_reason and not self.stale:
            raise ValueError("stale_reason: given for a run that is not stale")
        if self.command == NOT_RECORDED and not self.stale:
            raise ValueError(f"command: {NOT_RECORDED!r} is only allowed for a stale run")
        _check_units(self.units, self.values)
        return self


class TableModel(_Model):
    """A Markdown table of measured cells; ``align`` has one letter per column: ``-`` (none),
    ``l``, ``r`` or ``c``."""

    header: list[str] = Field(min_length=1)
    align: str
    rows: list[list[str | int | float]] = Field(min_length=1)

    @model_validator(mode="after")
    def _shape(self) -> TableModel:
        width = len(self.header)
        if len(self.align) != width or set(self.align) - set("-lrc"):
            raise ValueError(f"align: {width} letters of '-', 'l', 'r', 'c' expected")
        for number, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"rows[{number}]: {len(row)} cells, the header has {width}")
        return self


class PinModel(_Model):
    """Where the version a claim states is pinned: a TOML key (dotted) or a regular expression
    whose group ``value`` captures it, in one file of the repository."""

    file: str
    toml: str = ""
    regex: str = ""

    @model_validator(mode="after")
    def _one_of(self) -> PinModel:
        if bool(self.toml) == bool(self.regex):
            raise ValueError("give exactly one of toml and regex")
        return self


class FigureModel(_Model):
    """One claim, rendered by ``text`` (a Python format string over the run's values, the
    figure's own, ``commit``, ``command`` and ``date``) or as ``table``. A version claim has a
    pin for each of its values: the test compares them with the code."""

    run: str
    claim: str = Field(min_length=1)
    kind: Literal["measured", "version"] = "measured"
    command: str = ""
    values: dict[str, str | int | float] = Field(default_factory=dict)
    units: dict[str, str] = Field(default_factory=dict)
    text: str = ""
    table: TableModel | None = None
    pins: dict[str, PinModel] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> FigureModel:
        if bool(self.text) == (self.table is not None):
            raise ValueError("give exactly one of text and table")
        if self.kind == "version":
            if not self.pins:
                raise ValueError("pins: a version claim needs one for each version it states")
            unpinned = set(self.values) - set(self.pins)
            missing = set(self.pins) - set(self.values)
            if unpinned or missing:
                raise ValueError(
                    f"pins: one per value; unpinned {sorted(unpinned)}, no value {sorted(missing)}"
                )
        elif self.pins:
            raise ValueError("pins: only a version claim has them")
        _check_units(self.units, self.values)
        if self.text.endswith("\n") or self.text.startswith("\n"):
            raise ValueError("text: an inline figure may not start or end with a line break")
        return self


class FileModel(_Model):
    runs: dict[str, RunModel] = Field(default_factory=dict)
    figures: dict[str, FigureModel] = Field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    id: str
    file: str
    spec: RunModel


@dataclass(frozen=True)
class Figure:
    id: str
    file: str
    spec: FigureModel
    run: Run

    @property
    def command(self) -> str:
        return self.spec.command or self.run.spec.command

    @property
    def block(self) -> bool:
        return self.spec.table is not None


def _location(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def load_registry(directory: Path = REGISTRY) -> dict[str, Figure]:
    """Every figure of ``directory/*.toml`` (the allow-list aside), by id."""
    runs: dict[str, Run] = {}
    specs: list[tuple[str, str, FigureModel]] = []
    files = sorted(p for p in directory.glob("*.toml") if p != directory / ALLOWED.name)
    if not files:
        raise RegistryError(f"{_rel(directory)}: no registry files (*.toml)")
    for path in files:
        name = _rel(path)
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise RegistryError(f"{name}: not valid TOML: {error}") from error
        try:
            model = FileModel.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            raise RegistryError(f"{name}: {_location(first['loc'])}: {first['msg']}") from error
        for run_id, run_model in model.runs.items():
            if not FIGURE_ID.match(run_id):
                raise RegistryError(f"{name}: runs.{run_id}: ids are [a-z0-9.-], lower case")
            if run_id in runs:
                raise RegistryError(f"{name}: runs.{run_id}: also defined in {runs[run_id].file}")
            runs[run_id] = Run(run_id, name, run_model)
        specs.extend((name, figure_id, spec) for figure_id, spec in model.figures.items())
    figures: dict[str, Figure] = {}
    for name, figure_id, spec in specs:
        if not FIGURE_ID.match(figure_id):
            raise RegistryError(f"{name}: figures.{figure_id}: ids are [a-z0-9.-], lower case")
        if figure_id in figures:
            raise RegistryError(
                f"{name}: figures.{figure_id}: also defined in {figures[figure_id].file}"
            )
        if spec.run not in runs:
            raise RegistryError(f"{name}: figures.{figure_id}.run: no run {spec.run!r}")
        shared = set(spec.values) & set(runs[spec.run].spec.values)
        if shared:
            raise RegistryError(
                f"{name}: figures.{figure_id}.values: {', '.join(sorted(shared))} "
                f"also a value of run {spec.run}"
            )
        figures[figure_id] = Figure(figure_id, name, spec, runs[spec.run])
    for run in runs.values():
        if not any(f.run is run for f in figures.values()):
            raise RegistryError(f"{run.file}: runs.{run.id}: no figure comes from this run")
    return figures


# --- rendering ---------------------------------------------------------------------------


def _row(cells: Iterable[str | int | float]) -> str:
    return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"


def _table(table: TableModel) -> str:
    separators = {"-": "---", "l": ":---", "r": "---:", "c": ":---:"}
    lines = [_row(table.header), "|" + "|".join(separators[a] for a in table.align) + "|"]
    lines.extend(_row(row) for row in table.rows)
    return "\n".join(lines)


def stale_note(figure: Figure) -> str:
    return f"(not re-measured since {figure.run.spec.commit})"


def body(figure: Figure) -> str:
    """What stands between the figure's markers."""
    spec = figure.spec
    if spec.table is not None:
        text = _table(spec.table)
        if figure.run.spec.stale:
            text += "\n\n" + stale_note(figure)
        return f"\n\n{text}\n\n"
    fields: dict[str, Any] = {**figure.run.spec.values, **spec.values}
    fields.update(commit=figure.run.spec.commit, command=figure.command, date=figure.run.spec.date)
    try:
        text = spec.text.format_map(fields)
    except (KeyError, IndexError, ValueError) as error:
        raise RegistryError(f"{figure.file}: figures.{figure.id}.text: {error!r}") from error
    if figure.run.spec.stale:
        text += " " + stale_note(figure)
    return text


def documents(root: Path = ROOT) -> list[Path]:
    """The documents that may hold figures: the README and ``docs/*.md`` but the generated."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in paths if _rel(p, root) not in GENERATED]


def _rel(path: Path, root: Path = ROOT) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _check_inline_position(name: str, text: str, match: re.Match[str]) -> None:
    """An inline marker at the start of a line would open an HTML block, and Markdown would
    show the figure's text raw: it must follow text on its line (a block figure, a table, has
    its markers on lines of their own)."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    before = text[line_start : match.start()].strip()
    line = text.count("\n", 0, match.start()) + 1
    if not before or before in {"-", "*", "+", ">"} or re.fullmatch(r"\d+\.", before):
        raise RegistryError(
            f"{name}:{line}: figure {match['id']}: an inline marker may not open a line"
        )


def _check_block_position(name: str, text: str, match: re.Match[str]) -> None:
    """A block figure (a table) has its markers on lines of their own."""
    line = text.count("\n", 0, match.start()) + 1
    opens_line = match.start() == 0 or text[match.start() - 1] == "\n"
    closes_line = match.end() == len(text) or text[match.end()] == "\n"
    if not (opens_line and closes_line):
        raise RegistryError(
            f"{name}:{line}: figure {match['id']}: a table's markers stand on lines of their own"
        )


FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*(?:\n[^`\n]+)?`")


def _without_code(text: str) -> str:
    """``text`` with fenced code and code spans blanked (same length): a marker written as an
    example in code is no marker."""
    return CODE_SPAN.sub(_blank, FENCE.sub(_blank, text))


def markers(text: str) -> list[re.Match[str]]:
    """The figure markers of ``text`` outside code, in order."""
    return list(MARKER.finditer(_without_code(text)))


def render_document(name: str, text: str, figures: Mapping[str, Figure]) -> str:
    """``text`` with every marked figure rendered from the registry."""
    plain = _without_code(text)
    for opening in OPENING.finditer(plain):
        if not MARKER.match(plain, opening.start()):
            line = text.count("\n", 0, opening.start()) + 1
            raise RegistryError(f"{name}:{line}: a figure marker without its <!-- /figure -->")
    out = []
    position = 0
    for match in MARKER.finditer(plain):
        figure_id = match["id"]
        line = text.count("\n", 0, match.start()) + 1
        if OPENING.search(match["body"]):
            raise RegistryError(f"{name}:{line}: figure {figure_id}: markers do not nest")
        figure = figures.get(figure_id)
        if figure is None:
            raise RegistryError(f"{name}:{line}: figure {figure_id!r} is not in docs/figures/")
        if figure.block:
            _check_block_position(name, text, match)
        else:
            _check_inline_position(name, text, match)
        out.append(text[position : match.start()])
        out.append(f"<!-- figure:{figure_id} -->{body(figure)}<!-- /figure -->")
        position = match.end()
    out.append(text[position:])
    return "".join(out)


@dataclass(frozen=True)
class Place:
    """Where a figure appears: the document and the heading above its marker."""

    document: str
    heading: str

    def __str__(self) -> str:
        return f"{self.document} § {self.heading}" if self.heading else self.document


HEADING = re.compile(r"^(#{1,6}) (?P<text>.+?)\s*$")


def _plain(markdown: str) -> str:
    text = re.sub(r"<!--.*?-->", "", markdown, flags=re.DOTALL)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("**", "").replace("`", "")
    return " ".join(text.split())


def places(name: str, text: str) -> Iterator[tuple[str, Place]]:
    """(figure id, place) for every marker of a document, in order."""
    heading = ""
    in_code = False
    position = 0
    found = markers(text)
    index = 0
    for line in text.splitlines(keepends=True):
        end = position + len(line)
        while index < len(found) and found[index].start() < end:
            yield found[index]["id"], Place(name, heading)
            index += 1
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := HEADING.match(line)):
            heading = _plain(match["text"])
        position = end


# --- the table of claims -------------------------------------------------------------------

TABLE_HEADER = """\
# Measured figures and version claims

<!-- Generated by scripts/figures.py from docs/figures/*.toml; do not edit. -->

Every figure the README and `docs/` state comes from a run recorded in `docs/figures/*.toml`:
the exact command, the commit it was measured at, the date and the machine. The documents hold
each figure between `<!-- figure:ID -->` and `<!-- /figure -->`, and `python scripts/figures.py`
writes it there from the registry, so a figure is changed by recording a new run, not by editing
the text. A figure from a stale run is shown with "(not re-measured since COMMIT)"; the reason
is in the runs table below. `tests/test_figures.py` fails when a document differs from what the
script writes, when a run lacks its command or commit, when a commit is not an ancestor of HEAD,
when a measured figure's section (the text between two headings) does not name its commit, when
a version claim differs from the version the code pins, and when a measured number stands
outside a marker.

**The rule for a measured number.** In the README and `docs/*.md` (the generated tables, code
blocks, code spans, headings and markers aside), a number with a unit of time, rate, size or
ratio (`s`, `ms`, `min`, `h`, `%`, `MB`, `GiB`, `MiB/h`, `×`, `/s`, `Jobs/s`, …) is a measured
figure when its sentence, or for a table row the row, its header or the heading above the
table, says it was measured: *measured*, *took*, *benchmark*, *CI run*, *in CI*, *N passed*,
*p50*/*p95*/*p99*, *wall*, *slope*, or names a commit. Such a number must be inside a figure
marker. Numbers that are not measurements (a default, a threshold, a timeout of Kueue's) but
stand in such a sentence are listed, each with its reason, in `docs/figures/allowed.toml`; an
entry that no longer matches anything fails the test too.

**Recording a figure.** Run the command on a clean checkout, then
`python scripts/figures.py --stub RUN-ID --command "THE COMMAND"` prints a run entry with the
commit and date of HEAD; add it and the figure (`values`, `text`) to `docs/figures/*.toml`, put
`<!-- figure:ID --><!-- /figure -->` where the figure belongs and run `python scripts/figures.py`.
"""


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(figure: Figure) -> str:
    """The figure as one cell of the table of claims."""
    spec = figure.spec
    if spec.table is not None:
        return f"table of {len(spec.table.rows)} rows: {', '.join(spec.table.header)}"
    rendered = body(figure)
    if figure.run.spec.stale:
        rendered = rendered[: -len(stale_note(figure)) - 1]
    return _escape(_plain(rendered))


def claims_table(figures: Mapping[str, Figure], where: Mapping[str, list[Place]]) -> str:
    """The whole of ``docs/figures.md``."""
    lines = [TABLE_HEADER, "## Claims", ""]
    lines.append("| figure | claim | where | as the docs state it | command | commit | run |")
    lines.append("|---|---|---|---|---|---|---|")
    for figure in sorted(figures.values(), key=lambda f: (f.file, f.id)):
        spec = figure.spec
        status = "**stale**" if figure.run.spec.stale else spec.kind
        lines.append(
            f"| `{figure.id}` | {_escape(spec.claim)} | "
            f"{'; '.join(sorted({str(p) for p in where.get(figure.id, [])}))} | "
            f"{summary(figure)} | `{_escape(figure.command)}` | {figure.run.spec.commit} | "
            f"`{figure.run.id}` ({status}) |"
        )
    lines += ["", "## Runs", ""]
    lines.append("| run | command | commit | date | machine | source | stale because |")
    lines.append("|---|---|---|---|---|---|---|")
    runs = {f.run.id: f.run for f in figures.values()}
    for run in sorted(runs.values(), key=lambda r: (r.spec.date, r.id)):
        done = run.spec
        lines.append(
            f"| `{run.id}` | `{_escape(done.command)}` | {done.commit} | {done.date} | "
            f"{_escape(done.machine)} | {_escape(done.source)} | {_escape(done.stale_reason)} |"
        )
    return "\n".join(lines) + "\n"


def rendered(root: Path = ROOT, figures: Mapping[str, Figure] | None = None) -> dict[Path, str]:
    """Every file the script writes, with the text it writes; raises when a figure is unused."""
    figures = load_registry(root / "docs" / "figures") if figures is None else figures
    out: dict[Path, str] = {}
    where: dict[str, list[Place]] = {}
    for path in documents(root):
        name = _rel(path, root)
        text = render_document(name, path.read_text(), figures)
        out[path] = text
        for figure_id, place in places(name, text):
            where.setdefault(figure_id, []).append(place)
    unused = sorted(set(figures) - set(where))
    if unused:
        figure = figures[unused[0]]
        raise RegistryError(
            f"{figure.file}: figures.{figure.id}: no document has its marker "
            f"(<!-- figure:{figure.id} --><!-- /figure -->)"
        )
    out[root / "docs" / "figures.md"] = claims_table(figures, where)
    return out


def stale_files(root: Path = ROOT) -> list[str]:
    """The files whose text differs from what the script would write."""
    return [
        _rel(path, root)
        for path, text in rendered(root).items()
        if not path.exists() or path.read_text() != text
    ]


def unnamed_commits(root: Path = ROOT, figures: Mapping[str, Figure] | None = None) -> list[str]:
    """Each measured figure whose section (the text between two headings) does not name the
    commit it was measured at: a reader of the docs must see it beside the figure, not only in
    ``docs/figures.md``. Version claims are backed by their pins instead."""
    figures = load_registry(root / "docs" / "figures") if figures is None else figures
    problems = []
    for path in documents(root):
        name = _rel(path, root)
        text = path.read_text()
        for section in re.split(r"(?m)^#{1,6} .*$", text):
            for match in markers(section):
                figure = figures.get(match["id"])
                if figure is None or figure.spec.kind == "version":
                    continue
                if figure.run.spec.commit not in section:
                    heading = next((p.heading for i, p in places(name, text) if i == figure.id), "")
                    problems.append(
                        f"{Place(name, heading)}: figure {figure.id}: its section does not name "
                        f"commit {figure.run.spec.commit} (put {{commit}} in its text)"
                    )
    return problems


# --- commits and pins ------------------------------------------------------------------------


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False, timeout=30
    )


def is_git_checkout(root: Path = ROOT) -> bool:
    try:
        return _git(root, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
    except (OSError, subprocess.SubprocessError):
        return False


def commit_problems(figures: Mapping[str, Figure], root: Path = ROOT) -> list[str]:
    """Each run whose commit does not resolve, is not an ancestor of HEAD, or is dated after
    the run's date."""
    problems = []
    runs = {f.run.id: f.run for f in figures.values()}
    for run in sorted(runs.values(), key=lambda r: r.id):
        where = f"{run.file}: runs.{run.id}.commit {run.spec.commit}"
        full = _git(root, "rev-parse", "--verify", "--quiet", f"{run.spec.commit}^{{commit}}")
        if full.returncode != 0:
            problems.append(f"{where}: no such commit (ambiguous, or a shallow clone)")
            continue
        if _git(root, "merge-base", "--is-ancestor", full.stdout.strip(), "HEAD").returncode:
            problems.append(f"{where}: not an ancestor of HEAD")
            continue
        committed = _git(root, "show", "-s", "--format=%cs", full.stdout.strip()).stdout.strip()
        if committed and datetime.date.fromisoformat(committed) > run.spec.date:
            problems.append(f"{where}: committed {committed}, after the run's date {run.spec.date}")
    return problems


def pinned(pin: PinModel, root: Path = ROOT) -> str:
    """The version ``pin`` points at."""
    path = root / pin.file
    try:
        text = path.read_text()
    except OSError as error:
        raise RegistryError(f"{pin.file}: {error.strerror}") from error
    if pin.toml:
        value: Any = tomllib.loads(text)
        for key in pin.toml.split("."):
            if not isinstance(value, dict) or key not in value:
                raise RegistryError(f"{pin.file}: no key {pin.toml}")
            value = value[key]
        return str(value)
    match = re.search(pin.regex, text, re.MULTILINE)
    if match is None or "value" not in match.groupdict():
        raise RegistryError(f"{pin.file}: {pin.regex!r} does not match")
    return match["value"]


def pin_problems(figures: Mapping[str, Figure], root: Path = ROOT) -> list[str]:
    """Each version claim whose version differs from its pin."""
    problems = []
    for figure in sorted(figures.values(), key=lambda f: f.id):
        for name, pin in sorted(figure.spec.pins.items()):
            claimed = str(figure.spec.values[name])
            where = f"{figure.file}: figures.{figure.id}.pins.{name}"
            try:
                actual = pinned(pin, root)
            except RegistryError as error:
                problems.append(f"{where}: {error}")
                continue
            if actual != claimed:
                problems.append(f"{where}: the docs say {claimed}, {pin.file} pins {actual}")
    return problems


# --- the detector ----------------------------------------------------------------------------

# A number (thousands separators, decimals, ranges' last number) and a unit of time, rate, size
# or ratio; or a ratio written "× 72.5".
_NUMBER = r"(?<![\w.,/])[~≈]?\d[\d,]*(?:\.\d+)?"
_UNIT = (
    r"(?:ms|s|min|minutes?|seconds?|h|hours?|%|[KMGT]i?B(?:/h)?|ms/h|×|/s|/h"
    r"|[A-Za-z]+/[sh])"
)
NUMBER_WITH_UNIT = re.compile(rf"{_NUMBER}\s?{_UNIT}(?![\w/])|×\s?\d[\d,]*(?:\.\d+)?")
CUE = re.compile(
    r"\bmeasur\w*|\btook\b|\bbenchmark\w*|\bCI run\b|\bin CI\b|\b\d[\d,]* passed\b"
    r"|\bp(?:50|95|99)\b|\bwall\b|\bslopes?\b",
    re.IGNORECASE,
)
COMMIT_MENTION = re.compile(
    r"(?<![\w/.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}(?![\w/-])"
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(`\[])")
GENERATED_BLOCK = re.compile(r"<!-- BEGIN [^\n]*?-->.*?<!-- END [^\n]*?-->", re.DOTALL)
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")


@dataclass(frozen=True)
class Finding:
    """A measured number outside a figure marker."""

    document: str
    line: int
    number: str
    sentence: str

    def __str__(self) -> str:
        return f"{self.document}:{self.line}: {self.number!r} in {self.sentence!r}"


def _blank(match: re.Match[str]) -> str:
    """The same text with every character but line breaks replaced by a space, so positions and
    line numbers survive masking."""
    return re.sub(r"[^\n]", " ", match.group(0))


def masked(text: str) -> str:
    """``text`` with what the detector does not read blanked out: figure markers and their
    content, generated blocks, other HTML comments, fenced code, code spans, link targets."""
    text = MARKER.sub(_blank, _without_code(text))
    text = GENERATED_BLOCK.sub(_blank, text)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.DOTALL)
    return re.sub(r"\]\([^)\s]*\)", _blank, text)


def _is_measured(text: str) -> bool:
    return bool(CUE.search(text) or COMMIT_MENTION.search(text))


@dataclass(frozen=True)
class _Unit:
    """A sentence or a table row, with where it starts and what else counts as its context."""

    start: int
    text: str
    context: str


def _units(text: str) -> Iterator[_Unit]:
    """Paragraph sentences, list items' sentences and table rows of masked ``text``."""
    lines = text.splitlines(keepends=True)
    offsets = []
    position = 0
    for line in lines:
        offsets.append(position)
        position += len(line)
    heading = ""
    block: list[int] = []

    def flush() -> Iterator[_Unit]:
        if not block:
            return
        start = offsets[block[0]]
        joined = "".join(lines[i] for i in block)
        cursor = 0
        for piece in SENTENCE_END.split(joined):
            found = joined.index(piece, cursor)
            cursor = found + len(piece)
            yield _Unit(start + found, piece, "")
        block.clear()

    table_header = ""
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            yield from flush()
            table_header = ""
            continue
        if match := HEADING.match(line):
            yield from flush()
            heading = match["text"]
            continue
        if stripped.startswith("|"):
            yield from flush()
            if not table_header:
                table_header = stripped
                continue
            if re.fullmatch(r"\|[\s:|-]+\|", stripped):
                continue
            yield _Unit(offsets[number], line, table_header + " " + heading)
            continue
        if LIST_ITEM.match(line):
            yield from flush()
        block.append(number)
    yield from flush()


@dataclass(frozen=True)
class Allowed:
    """An allowed number: in ``file``, a sentence containing ``context``; ``number`` (the
    number and unit as found) or, when empty, every number of that sentence."""

    file: str
    context: str
    number: str
    reason: str


class _AllowedModel(_Model):
    file: str
    context: str = Field(min_length=1)
    number: str = ""
    reason: str = Field(min_length=1)


class _AllowedFile(_Model):
    allow: list[_AllowedModel] = Field(default_factory=list)


def load_allowed(path: Path = ALLOWED) -> list[Allowed]:
    try:
        data = tomllib.loads(path.read_text()) if path.exists() else {}
        model = _AllowedFile.model_validate(data)
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(f"{_rel(path)}: not valid TOML: {error}") from error
    except ValidationError as error:
        first = error.errors()[0]
        raise RegistryError(f"{_rel(path)}: {_location(first['loc'])}: {first['msg']}") from error
    return [Allowed(a.file, a.context, a.number, a.reason) for a in model.allow]


def _flat(text: str) -> str:
    return " ".join(text.split())


def scan(name: str, text: str) -> Iterator[Finding]:
    """Every measured number outside a marker in one document: a number with a unit in a
    sentence (or table row, with its header and heading) that says it was measured."""
    text = masked(text)
    for unit in _units(text):
        if not _is_measured(unit.text) and not _is_measured(unit.context):
            continue
        for match in NUMBER_WITH_UNIT.finditer(unit.text):
            line = text.count("\n", 0, unit.start + match.start()) + 1
            yield Finding(name, line, match.group(0).strip(), _flat(unit.text))


def unmarked_figures(
    root: Path = ROOT, allowed: Iterable[Allowed] | None = None
) -> tuple[list[Finding], list[Allowed]]:
    """The measured numbers outside markers that no allow-list entry covers, and the entries
    that covered nothing."""
    entries = list(
        load_allowed(root / "docs" / "figures" / ALLOWED.name) if allowed is None else allowed
    )
    used: set[int] = set()
    findings = []
    for path in documents(root):
        name = _rel(path, root)
        for finding in scan(name, path.read_text()):
            covering = [
                i
                for i, entry in enumerate(entries)
                if entry.file == name
                and entry.context in finding.sentence
                and entry.number in ("", finding.number)
            ]
            used.update(covering)
            if not covering:
                findings.append(finding)
    unused = [entry for i, entry in enumerate(entries) if i not in used]
    return findings, unused


# --- the command -----------------------------------------------------------------------------


def stub(run_id: str, command: str, root: Path = ROOT) -> str:
    """A registry entry for a run of ``command`` at HEAD, to fill in."""
    commit = _git(root, "rev-parse", "--short", "HEAD").stdout.strip() or "COMMIT"
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    warning = (
        "# warning: the checkout has uncommitted changes; a figure measured on it has no commit\n"
        if dirty
        else ""
    )
    return (
        f"{warning}[runs.{run_id}]\n"
        f"command = {_toml_string(command)}\n"
        f'commit = "{commit}"\n'
        f"date = {datetime.date.today().isoformat()}\n"
        'machine = "2-CPU x86_64 VM, shared with other jobs"\n'
        'source = "WHERE THE OUTPUT IS KEPT (a CI log, an issue note)"\n\n'
        f"[figures.{run_id}-FIGURE]\n"
        f'run = "{run_id}"\n'
        'claim = "WHAT IT SHOWS"\n'
        "values = { seconds = 0.0 }\n"
        'units = { seconds = "s" }\n'
        'text = "{seconds} s"\n'
    )


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check(root: Path = ROOT) -> list[str]:
    """Every problem ``--check`` reports, as lines."""
    figures = load_registry(root / "docs" / "figures")
    problems = [f"{name} is stale: run python scripts/figures.py" for name in stale_files(root)]
    if is_git_checkout(root):
        problems += commit_problems(figures, root)
    else:
        problems.append("not a git checkout: the runs' commits cannot be checked")
    problems += pin_problems(figures, root)
    problems += unnamed_commits(root, figures)
    findings, unused = unmarked_figures(root)
    problems += [f"{f}: a measured number outside a figure marker" for f in findings]
    problems += [
        f"docs/figures/allowed.toml: the entry for {u.file} {u.context!r} matches nothing"
        for u in unused
    ]
    return problems


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a problem")
    parser.add_argument("--stub", metavar="RUN-ID", help="print a registry entry for a new run")
    parser.add_argument("--command", default="COMMAND", help="with --stub: the command run")
    args = parser.parse_args(argv)
    try:
        if args.stub:
            print(stub(args.stub, args.command), end="")
            return 0
        if args.check:
            problems = check()
            for problem in problems:
                print(problem, file=sys.stderr)
            return 1 if problems else 0
        for path, text in rendered().items():
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {_rel(path)}")
    except RegistryError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
