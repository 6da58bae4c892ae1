"""The two distributions as built (issue 19): the product wheel the manager image installs holds
no test-world code and runs alone; the test world's wheel holds only the test world and adds
``sandbox`` to the product's command line; importing the error types loads nothing heavy.

The wheels are built from this checkout with the venv's own setuptools (no build isolation, no
network); the product wheel is unpacked into a folder of its own and run from there, with the
test world and its libraries made unimportable.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import dispatcher
from dispatcher_sandbox.harness.blocking import blocker_source

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WORLD = tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text())["project"]


def build_wheel(source: Path, into: Path) -> Path:
    """Build from a copy (setuptools writes build/ and *.egg-info beside the sources) of what the
    distribution is made of: for the product, what the Dockerfile copies."""
    copy = into / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    if source == ROOT:
        copy.mkdir()
        shutil.copytree(ROOT / "dispatcher", copy / "dispatcher", ignore=ignore)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, copy / name)
    else:
        shutil.copytree(source, copy, ignore=ignore)
    source = copy
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(into),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = into.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def product_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT, tmp_path_factory.mktemp("product"))


@pytest.fixture(scope="module")
def world_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(ROOT / "sandbox", tmp_path_factory.mktemp("world"))


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode())


def test_the_product_wheel_holds_the_product_only(product_wheel: Path) -> None:
    names = zipfile.ZipFile(product_wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"dispatcher"}
    for room in ("sandbox", "fake_apiserver", "fakeapi", "kueue_emulator", "harness", "testkit"):
        assert not [n for n in names if room in n.split("/")[1:-1] or f"/{room}." in n], room
    # The simulator's topology files come with the product (it reads them, so does the sandbox).
    assert "dispatcher/topology/topologies/default.yaml" in names
    assert "dispatcher/py.typed" in names


def test_the_product_requires_no_test_world_library(product_wheel: Path) -> None:
    meta = metadata(product_wheel)
    assert meta["Version"] == dispatcher.__version__ == WORLD["version"]
    unconditional = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    for library in ("jsonpatch", "cel-python", "cryptography", "rich", "pytest"):
        assert not [r for r in unconditional if r.lower().startswith(library)], library
    assert set(meta.get_all("Provides-Extra") or []) == {"sim", "otlp"}


def test_the_test_world_wheel_holds_the_test_world_and_adds_its_command(world_wheel: Path) -> None:
    archive = zipfile.ZipFile(world_wheel)
    names = archive.namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"dispatcher_sandbox"}
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "[multikueue_dispatcher.commands]" in text
    assert "sandbox = dispatcher_sandbox.cli:register" in text
    requires = metadata(world_wheel).get_all("Requires-Dist") or []
    assert f"multikueue-dispatcher[sim]=={dispatcher.__version__}" in requires


@pytest.fixture(scope="module")
def installed_product(product_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The product wheel unpacked alone (its dependencies come from this venv)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(product_wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def run_product(target: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = blocker_source() + (
        "import dispatcher\n"
        f"assert dispatcher.__file__.startswith({str(target)!r}), dispatcher.__file__\n"
        "from dispatcher.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCHER_")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout: only the unpacked wheel provides ``dispatcher``
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["plugins", "--json"], id="plugins"),
        pytest.param(["run", "--help"], id="run-help"),
        pytest.param(["check-config", "--offline"], id="check-config"),
        pytest.param(["simulate", "--generate", "20", "--seed", "3"], id="simulate"),
    ],
)
def test_the_product_runs_from_its_wheel_alone(
    installed_product: Path, tmp_path: Path, args: list[str]
) -> None:
    result = run_product(installed_product, tmp_path, *args)
    assert result.returncode == 0, (args, result.stderr[-2000:])
    if args[0] == "plugins":
        assert "capacity-first" in {a["algorithm"] for a in json.loads(result.stdout)["algorithms"]}


def test_a_test_world_that_cannot_load_leaves_the_product_working(
    installed_product: Path, tmp_path: Path
) -> None:
    """Its entry point is registered (this venv) but its package cannot be imported: the other
    commands ran above; ``sandbox`` says why it cannot run, in one line, exit 2."""
    result = run_product(installed_product, tmp_path, "sandbox", "serve", "--dir", "x")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "the sandbox command of dispatcher_sandbox.cli:register could not be loaded" in line
    assert "multikueue-dispatcher-sandbox" in line


def test_sandbox_without_the_test_world_says_where_it_comes_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.metadata

    from dispatcher.cli import COMMANDS_GROUP, main

    real = importlib.metadata.entry_points

    def without_the_test_world(**select: str) -> importlib.metadata.EntryPoints:
        found = real(**select)
        return importlib.metadata.EntryPoints(
            e for e in found if select.get("group") != COMMANDS_GROUP
        )

    monkeypatch.setattr(importlib.metadata, "entry_points", without_the_test_world)
    assert main(["sandbox", "serve", "--dir", "x"]) == 2
    err = capsys.readouterr().err
    assert "comes with the test world's distribution, multikueue-dispatcher-sandbox" in err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "sandbox" not in capsys.readouterr().out.split()


@pytest.mark.parametrize(
    ("module", "not_loaded"),
    [
        pytest.param(
            "dispatcher.k8s.errors", {"pluggy", "pydantic", "kubernetes_asyncio"}, id="errors"
        ),
        pytest.param("dispatcher", {"pluggy", "pydantic", "kubernetes_asyncio"}, id="root"),
        pytest.param("dispatcher.cli", {"pluggy", "pydantic", "kubernetes_asyncio"}, id="cli"),
    ],
)
def test_light_imports_load_nothing_heavy(module: str, not_loaded: set[str]) -> None:
    probe = f"import sys, {module}\nprint(sorted({{m.split('.')[0] for m in sys.modules}}))\n"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(result.stdout.replace("'", '"')))
    assert not (loaded & not_loaded), sorted(loaded & not_loaded)
    assert module.split(".")[0] in loaded  # the probe did import it


def test_hookimpl_is_still_reachable_from_the_root() -> None:
    from dispatcher import hookimpl
    from dispatcher.plugins.markers import hookimpl as marker

    assert hookimpl is marker
