"""The docs' figures come from the registry (docs/figures/*.toml, scripts/figures.py).

The repository's own documents must be rendered from the registry, every run must name its
command and a commit that is an ancestor of HEAD, every version claim must equal its pin, and
no measured number may stand outside a figure marker. The script's parts are also tested on
small registries and documents of their own, so that each check is seen to fail.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("figures", ROOT / "scripts" / "figures.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["figures"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


figures = _load_script()
NOT_A_CHECKOUT = "not a git checkout: the runs' commits cannot be checked"


# --- the repository's documents -----------------------------------------------------------


def test_the_documents_are_what_the_registry_renders() -> None:
    assert figures.stale_files() == [], "run python scripts/figures.py"


def test_every_run_names_its_command_and_commit() -> None:
    registry = figures.load_registry()
    runs = {f.run.id: f.run.spec for f in registry.values()}
    assert runs
    for run_id, run in runs.items():
        assert run.command.strip(), run_id
        assert figures.COMMIT.match(run.commit), run_id
        assert run.stale or run.command != figures.NOT_RECORDED, run_id


def test_every_commit_is_an_ancestor_of_head() -> None:
    if not figures.is_git_checkout(ROOT):
        pytest.skip(NOT_A_CHECKOUT)
    assert figures.commit_problems(figures.load_registry(), ROOT) == []


def test_every_version_claim_equals_its_pin() -> None:
    registry = figures.load_registry()
    assert any(f.spec.kind == "version" for f in registry.values())
    assert figures.pin_problems(registry) == []


def test_no_measured_number_stands_outside_a_marker() -> None:
    findings, unused = figures.unmarked_figures()
    assert [str(f) for f in findings] == []
    assert unused == [], "allowed.toml entries that match nothing"


def test_every_measured_figure_has_its_commit_in_its_section() -> None:
    assert figures.unnamed_commits() == []


def test_the_check_command_passes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "figures.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


# --- a small registry of its own ----------------------------------------------------------

RUN = """
[runs.r1]
command = "python bench.py"
commit = "{commit}"
date = 2026-11-30
machine = "2 CPUs"
source = "a note"
values = {{ seconds = 1.5 }}
units = {{ seconds = "s" }}
{extra}
"""
FIGURE = """
[figures.f1]
run = "r1"
claim = "how long it took"
text = "took {seconds} s at {commit}"
"""


def _world(
    tmp_path: Path,
    readme: str = "It <!-- figure:f1 --><!-- /figure -->.\n",
    run: str = RUN,
    figure: str = FIGURE,
    commit: str = "abc1234",
    extra: str = "",
) -> Path:
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "README.md").write_text(readme)
    registry = run.format(commit=commit, extra=extra) + figure
    (tmp_path / "docs" / "figures" / "area.toml").write_text(registry)
    return tmp_path


def test_a_figure_is_rendered_between_its_markers(tmp_path: Path) -> None:
    root = _world(tmp_path)
    out = figures.rendered(root)
    assert (
        out[root / "README.md"] == "It <!-- figure:f1 -->took 1.5 s at abc1234<!-- /figure -->.\n"
    )
    table = out[root / "docs" / "figures.md"]
    assert "| `f1` | how long it took | README.md | took 1.5 s at abc1234 |" in table
    assert figures.stale_files(root) == ["README.md", "docs/figures.md"]


BARE = '\n[figures.f2]\nrun = "r1"\nclaim = "no commit in its text"\ntext = "{seconds} s"\n'


@pytest.mark.parametrize(
    ("readme", "problems"),
    [
        pytest.param("It <!-- figure:f1 --><!-- /figure -->.\n", [], id="in-its-text"),
        pytest.param(
            "# A\n\nAt abc1234: <!-- figure:f2 --><!-- /figure -->.\n", [], id="in-its-section"
        ),
        pytest.param(
            "# A\n\nAt abc1234.\n\n## B\n\nIt <!-- figure:f2 --><!-- /figure -->.\n",
            [
                "README.md § B: figure f2: its section does not name commit abc1234"
                " (put {commit} in its text)"
            ],
            id="in-another-section",
        ),
    ],
)
def test_a_figure_names_its_commit_in_its_section(
    tmp_path: Path, readme: str, problems: list[str]
) -> None:
    root = _world(tmp_path, readme=readme, figure=FIGURE + BARE)
    registry = figures.load_registry(root / "docs" / "figures")
    (root / "README.md").write_text(figures.render_document("README.md", readme, registry))
    assert figures.unnamed_commits(root, registry) == problems


def test_a_stale_run_says_so_in_the_text(tmp_path: Path) -> None:
    root = _world(tmp_path, extra='stale = true\nstale_reason = "before the rate limiter"')
    readme = figures.rendered(root)[root / "README.md"]
    assert "took 1.5 s at abc1234 (not re-measured since abc1234)<!-- /figure -->" in readme


def test_a_table_figure_is_rendered_as_a_block(tmp_path: Path) -> None:
    table = """
[figures.f1]
run = "r1"
claim = "a table"
[figures.f1.table]
header = ["a", "b", ""]
align = "-r-"
rows = [["x", 1.5, ""]]
"""
    root = _world(tmp_path, readme="<!-- figure:f1 -->\n<!-- /figure -->\n", figure=table)
    assert figures.rendered(root)[root / "README.md"] == (
        "<!-- figure:f1 -->\n\n| a | b | |\n|---|---:|---|\n| x | 1.5 | |\n\n<!-- /figure -->\n"
    )


def test_a_marker_written_in_code_is_no_marker(tmp_path: Path) -> None:
    readme = "Use `<!-- figure:ID --><!-- /figure -->`; it <!-- figure:f1 --><!-- /figure -->.\n"
    root = _world(tmp_path, readme=readme)
    assert figures.rendered(root)[root / "README.md"].startswith(
        "Use `<!-- figure:ID --><!-- /figure -->`; it <!-- figure:f1 -->took"
    )


@pytest.mark.parametrize(
    ("readme", "message"),
    [
        pytest.param(
            "It <!-- figure:f2 --><!-- /figure -->.\n", "figure 'f2' is not in", id="unknown"
        ),
        pytest.param("It <!-- figure:f1 -->.\n", "without its <!-- /figure -->", id="unclosed"),
        pytest.param(
            "It\n<!-- figure:f1 --><!-- /figure -->.\n", "may not open a line", id="line-start"
        ),
        pytest.param(
            "- <!-- figure:f1 --><!-- /figure -->\n", "may not open a line", id="list-item"
        ),
        pytest.param("Nothing here.\n", "no document has its marker", id="unused"),
    ],
)
def test_a_bad_marker_is_named(tmp_path: Path, readme: str, message: str) -> None:
    root = _world(tmp_path, readme=readme)
    with pytest.raises(figures.RegistryError, match=message):
        figures.rendered(root)


@pytest.mark.parametrize(
    ("run", "figure", "message"),
    [
        pytest.param(
            RUN.replace('command = "python bench.py"\n', ""),
            FIGURE,
            r"area.toml: runs.r1.command: Field required",
            id="no-command",
        ),
        pytest.param(
            RUN.replace('commit = "{commit}"\n', ""),
            FIGURE,
            r"area.toml: runs.r1.commit: Field required",
            id="no-commit",
        ),
        pytest.param(
            RUN.replace('"{commit}"', '"HEAD"'),
            FIGURE,
            r"runs.r1.commit: .*not an abbreviated commit id",
            id="not-a-commit",
        ),
        pytest.param(
            RUN.replace("{extra}", "stale = true"),
            FIGURE,
            r"runs.r1: .*a stale run must say why",
            id="stale-without-reason",
        ),
        pytest.param(
            RUN.replace('"python bench.py"', '"not recorded"'),
            FIGURE,
            r"runs.r1: .*only allowed for a stale run",
            id="unrecorded-command-of-a-fresh-run",
        ),
        pytest.param(
            RUN,
            FIGURE.replace('run = "r1"', 'run = "r2"'),
            r"figures.f1.run: no run 'r2'",
            id="unknown-run",
        ),
        pytest.param(
            RUN, FIGURE.replace("{seconds}", "{minutes}"), r"figures.f1.text", id="unknown-value"
        ),
        pytest.param(
            RUN,
            FIGURE + 'kind = "version"\n',
            r"figures.f1: .*a version claim needs one",
            id="version-without-pin",
        ),
    ],
)
def test_a_bad_registry_entry_names_its_file_and_field(
    tmp_path: Path, run: str, figure: str, message: str
) -> None:
    root = _world(tmp_path, run=run, figure=figure)
    with pytest.raises(figures.RegistryError, match=message):
        figures.rendered(root)


# --- commits and pins ----------------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_AUTHOR_DATE": "2026-11-30T12:00:00Z",
        "GIT_COMMITTER_DATE": "2026-11-30T12:00:00Z",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(root),
    }
    result = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env
    )
    return result.stdout.strip()


def test_a_commit_off_the_history_of_head_is_reported(tmp_path: Path) -> None:
    root = _world(tmp_path)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "commit", "-q", "--allow-empty", "-m", "measured here")
    on_main = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "-b", "side")
    _git(root, "commit", "-q", "--allow-empty", "-m", "elsewhere")
    elsewhere = _git(root, "rev-parse", "HEAD")
    _git(root, "checkout", "-q", "main")
    cases = {
        on_main: [],
        elsewhere: [f"area.toml: runs.r1.commit {elsewhere}: not an ancestor of HEAD"],
        "0123456789abcdef0123456789abcdef01234567": [
            "area.toml: runs.r1.commit 0123456789abcdef0123456789abcdef01234567: no such commit"
            " (ambiguous, or a shallow clone)"
        ],
    }
    for commit, expected in cases.items():
        (root / "docs" / "figures" / "area.toml").write_text(
            RUN.format(commit=commit, extra="") + FIGURE
        )
        problems = figures.commit_problems(figures.load_registry(root / "docs" / "figures"), root)
        assert [p.replace("docs/figures/", "").split("/")[-1] for p in problems] == expected


def test_a_version_claim_that_differs_from_its_pin_is_reported(tmp_path: Path) -> None:
    claim = """
[figures.f2]
run = "r1"
kind = "version"
claim = "the Kueue version"
values = { version = "v0.19.2" }
pins = { version = { file = "versions.toml", toml = "kueue.version" } }
text = "{version}"
"""
    root = _world(tmp_path, figure=FIGURE + claim)
    registry = figures.load_registry(root / "docs" / "figures")
    (root / "versions.toml").write_text('[kueue]\nversion = "v0.19.2"\n')
    assert figures.pin_problems(registry, root) == []
    (root / "versions.toml").write_text('[kueue]\nversion = "v0.20.1"\n')
    [problem] = figures.pin_problems(registry, root)
    assert problem.endswith(
        "figures.f2.pins.version: the docs say v0.19.2, versions.toml pins v0.20.1"
    )


# --- the detector --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        pytest.param("A burst of 300 Jobs took 225 s to be admitted.\n", ["225 s"], id="took"),
        pytest.param(
            "In the CI run at 1beedbc, exit 0 in 20 min 17 s.\n", ["20 min", "17 s"], id="commit"
        ),
        pytest.param(
            "Measured: 72–108 nominations/s, 1,400–1,700× the PATCH.\n",
            ["108 nominations/s", "1,700×"],
            id="rates-ratios",
        ),
        pytest.param("Unit tests 68 passed in 529 s.\n", ["529 s"], id="passed"),
        pytest.param("The default timeout is 300 s.\n", [], id="no-cue"),
        pytest.param("It took a while. The timeout is 300 s.\n", [], id="cue-in-another-sentence"),
        pytest.param("Measured at `c87ceb3`: `sleep 5s`.\n", [], id="code-span"),
        pytest.param("It took <!-- figure:x -->5 s<!-- /figure -->.\n", [], id="inside-a-marker"),
        pytest.param("## Measured: 30 minutes, seed 1\n", [], id="heading"),
        pytest.param("```sh\nmake test   # took 20 min\n```\n", [], id="fenced-code"),
        pytest.param(
            "<!-- BEGIN table -->\nmeasured 5 s\n<!-- END table -->\n", [], id="generated"
        ),
        pytest.param(
            "| algorithm | wall s |\n|---|---|\n| ours | 10.8 s |\n",
            ["10.8 s"],
            id="table-header-cue",
        ),
        pytest.param(
            "## Measured\n\n| a | b |\n|---|---|\n| x | 4 MiB/h |\n",
            ["4 MiB/h"],
            id="table-under-a-measured-heading",
        ),
        pytest.param("| a | b |\n|---|---|\n| x | 4 MiB/h |\n", [], id="table-without-cue"),
        pytest.param("- the differential: measured 3 s;\n  and more\n", ["3 s"], id="list-item"),
    ],
)
def test_the_detector_finds_measured_numbers(text: str, numbers: list[str]) -> None:
    assert [f.number for f in figures.scan("doc.md", text)] == numbers


def test_an_allow_list_entry_covers_its_sentence_and_unused_ones_are_reported(
    tmp_path: Path,
) -> None:
    root = _world(
        tmp_path, readme="It <!-- figure:f1 --><!-- /figure -->. CI took 25 minutes at most.\n"
    )
    [finding], [] = figures.unmarked_figures(root, allowed=[])
    assert finding.number == "25 minutes"
    budget = figures.Allowed("README.md", "took 25 minutes at most", "", "CI's budget")
    stale = figures.Allowed("README.md", "no such sentence", "", "gone")
    assert figures.unmarked_figures(root, allowed=[budget, stale]) == ([], [stale])
