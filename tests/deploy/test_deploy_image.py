"""The container image, checked statically (no docker daemon here): the Dockerfile's shape, and
that the package as the image installs it (without the ``sandbox`` extra) runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [
    line.strip()
    for line in re.sub(r"\\\n", " ", DOCKERFILE).splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


def _all(keyword: str) -> list[str]:
    return [i.split(None, 1)[1] for i in INSTRUCTIONS if i.split(None, 1)[0].upper() == keyword]


def test_multi_stage_on_a_slim_python_base() -> None:
    stages = _all("FROM")
    assert len(stages) >= 2
    assert any("AS build" in s for s in stages)
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.11-slim", DOCKERFILE)
    assert "COPY --from=build /opt/venv /opt/venv" in DOCKERFILE


def test_installs_the_package_without_the_sandbox_extra() -> None:
    installs = [r for r in _all("RUN") if "pip install" in r]
    assert any(re.search(r"pip install \.(\s|$)", r) for r in installs), installs
    assert not any("[sandbox" in r for r in installs)


def test_runs_as_non_root_with_an_exec_form_entrypoint() -> None:
    final = DOCKERFILE.rsplit("\nFROM ", 1)[1]
    users = [line.split()[1] for line in final.splitlines() if line.startswith("USER ")]
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    assert json.loads(_all("ENTRYPOINT")[-1]) == ["multikueue-dispatcher"]
    assert json.loads(_all("CMD")[-1]) == ["run"]


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert lines[next(i for i, x in enumerate(lines) if not x.startswith("#"))] == "*"
    for path in ("pyproject.toml", "README.md", "dispatcher/"):
        assert f"!{path}" in lines


BLOCK_SANDBOX_EXTRA = """
import importlib.abc, sys
BLOCKED = {"jsonpatch", "cryptography", "celpy", "rich"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} belongs to the sandbox extra")
        return None
sys.meta_path.insert(0, Block())
import dispatcher.app.manager, dispatcher.app.checks
from dispatcher.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_manager_runs_without_the_sandbox_extra() -> None:
    for args in (["plugins", "--json"], ["run", "--help"], ["check-config", "--offline"]):
        result = subprocess.run(
            [sys.executable, "-c", BLOCK_SANDBOX_EXTRA, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode == 0, (args, result.stderr[-2000:])
