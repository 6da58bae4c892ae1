"""``simulate`` runs with the product and its ``sim`` extra alone: a subprocess in which neither
the test world (``dispatcher_sandbox``) nor the libraries only it brings can be imported still
simulates, plots and writes its JSON (README, *The simulator*; docs/simulator.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dispatcher_sandbox.harness.blocking import (
    blocker_source,
    world_distributions,
    world_modules,
)

ROOT = Path(__file__).resolve().parents[2]


def run_blocked(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(blocker_source())
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


def test_the_test_world_adds_libraries_the_blocker_refuses(tmp_path: Path) -> None:
    """The premise: the test world has distinct libraries, they are installed here, and the
    blocker makes the test world unimportable."""
    assert {"jsonpatch", "cel-python", "cryptography", "rich"} <= world_distributions()
    assert {
        "jsonpatch",
        "celpy",
        "cryptography",
        "rich",
        "dispatcher_sandbox",
    } <= world_modules()
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
