"""``simulate`` runs with the base install and the ``sim`` extra alone: a subprocess in which
the libraries only the ``sandbox`` extra brings cannot be imported still simulates, plots and
writes its JSON (README, *The simulator*; docs/simulator.md)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = """\
import sys

BLOCKED = frozenset({modules!r})


class _Blocker:
    '''Refuses the top-level modules of the sandbox extra's own distributions.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
        return None


sys.meta_path.insert(0, _Blocker())
"""


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def sandbox_only_distributions() -> set[str]:
    """Distributions the ``sandbox`` extra adds that neither the base install nor ``sim`` has."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return _names(extras["sandbox"]) - _names(project["dependencies"]) - _names(extras["sim"])


def blocked_modules() -> set[str]:
    wanted = sandbox_only_distributions()
    return {
        module
        for module, distributions in importlib.metadata.packages_distributions().items()
        if {d.lower() for d in distributions} & wanted
    }


def run_blocked(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(modules=sorted(blocked_modules())))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_the_sandbox_extra_adds_libraries_the_blocker_refuses(tmp_path: Path) -> None:
    """The premise: the sandbox extra has distinct libraries, they are installed here, and the
    blocker makes the fake API server (which needs them) unimportable."""
    assert {"jsonpatch", "cel-python", "cryptography", "rich"} <= sandbox_only_distributions()
    assert {"jsonpatch", "celpy", "cryptography", "rich"} <= blocked_modules()
    refused = run_blocked(tmp_path, "-c", "import dispatcher_sandbox.fake_apiserver")
    assert refused.returncode == 1
    assert "blocked by the test" in refused.stderr


def test_simulate_generate_with_the_sim_extra_only(tmp_path: Path) -> None:
    done = run_blocked(
        tmp_path,
        *("-m", "dispatcher", "simulate", "--generate", "60", "--seed", "7"),
        *("--json", "out.json", "--plot", "out.png", "--deterministic"),
    )
    assert (done.returncode, done.stderr) == (0, "")
    header, *rows = done.stdout.splitlines()
    assert header.split()[:2] == ["ALGORITHM", "ADMITTED"]  # the plain table: rich is blocked
    assert [row.split()[0] for row in rows] == [
        "gpu-type-affinity+capacity-first",
        "all-at-once",
        "incremental",
    ]
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["algorithms"]["all-at-once"]["workloads"] == 60
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
