"""The container image, checked statically (no docker daemon here): the Dockerfile's shape and
what it copies. That the product wheel it installs holds no test world and runs alone is
tests/packaging/test_wheel.py."""

from __future__ import annotations

import json
import re
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


def test_installs_the_product_alone() -> None:
    installs = [r for r in _all("RUN") if "pip install" in r]
    assert any(re.search(r"pip install \.(\s|$)", r) for r in installs), installs
    assert not any("sandbox" in r or "[" in r for r in installs), installs
    copied = [c.split()[0] for c in _all("COPY") if not c.startswith("--from")]
    assert "sandbox" not in " ".join(_all("COPY")), copied


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
