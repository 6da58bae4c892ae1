"""Build the real control plane's binaries with the ``go`` command, once per pinned version.

Three binaries, each cached as ``<cache>/<component>-<version>`` outside the checkout
(``$MKD_REAL_CACHE``, default ``~/.cache/multikueue-dispatcher/bin``):

- ``etcd`` from ``go.etcd.io/etcd/server/v3`` (its ``etcdmain`` package, behind a two-line
  ``main`` in a generated module);
- ``kube-apiserver`` from ``k8s.io/kubernetes``: that module's ``go.mod`` points its staging
  modules (``k8s.io/api``, ``k8s.io/client-go``, ...) at ``./staging`` directories, which
  ``go install module@version`` refuses. A generated module requires ``k8s.io/kubernetes`` and
  replaces every staging module by its published ``v0.<minor>.<patch>`` release (the
  ``sample-*`` examples are not imported and not all of them are published, so they are left
  out). The version ldflags are set as the Kubernetes release build sets them: without them
  ``/version`` answers ``v0.0.0-master``, which Kueue cannot parse;
- ``kube-controller-manager`` from the same module (the tests run only its garbage collector,
  so that a deleted Job takes its Workload with it as on a real cluster);
- ``kueue`` from ``sigs.k8s.io/kueue/cmd/kueue`` (``go install`` works as it is).

Nothing built lands in the checkout. A binary that exists is not rebuilt; ``--force`` rebuilds.
Used by ``.ci/run`` and by the ``real`` backend (:mod:`dispatcher_sandbox.real_kueue.plane`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.toml")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kueue")


class BuildError(RuntimeError):
    """A binary could not be built (the message names the component and the go command)."""


@dataclass(frozen=True)
class Versions:
    """The pinned versions (``versions.toml``)."""

    kubernetes: str
    staging: str
    etcd: str
    kueue: str
    kubernetes_module: str
    apiserver_package: str
    controller_manager_package: str
    etcd_module: str
    kueue_module: str
    kueue_package: str

    def of(self, component: str) -> str:
        """The version of one component."""
        if component in ("kube-apiserver", "kube-controller-manager"):
            return self.kubernetes
        return {"etcd": self.etcd, "kueue": self.kueue}[component]


def load_versions(path: Path = VERSIONS_FILE) -> Versions:
    """Read the pinned versions."""
    data = tomllib.loads(path.read_text())
    return Versions(
        kubernetes=data["kubernetes"]["version"],
        staging=data["kubernetes"]["staging_version"],
        etcd=data["etcd"]["version"],
        kueue=data["kueue"]["version"],
        kubernetes_module=data["kubernetes"]["module"],
        apiserver_package=data["kubernetes"]["apiserver_package"],
        controller_manager_package=data["kubernetes"]["controller_manager_package"],
        etcd_module=data["etcd"]["module"],
        kueue_module=data["kueue"]["module"],
        kueue_package=data["kueue"]["package"],
    )


def cache_dir() -> Path:
    """Where the binaries live (``$MKD_REAL_CACHE`` or ``~/.cache/multikueue-dispatcher/bin``)."""
    configured = os.environ.get("MKD_REAL_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "multikueue-dispatcher" / "bin"


def binary_path(component: str, versions: Versions | None = None) -> Path:
    """The cached binary of a component at its pinned version (it may not exist yet)."""
    chosen = versions or load_versions()
    return cache_dir() / f"{component}-{chosen.of(component)}"


def missing_binaries(versions: Versions | None = None) -> list[str]:
    """The components whose pinned binary is not built yet."""
    return [c for c in COMPONENTS if not binary_path(c, versions).is_file()]


def missing_reason(versions: Versions | None = None) -> str | None:
    """Why the real control plane cannot start (binaries not built), or None when it can."""
    missing = missing_binaries(versions)
    if not missing:
        return None
    return (
        f"real control plane binaries not built ({', '.join(missing)}): run "
        "`python -m dispatcher_sandbox.real_kueue.build` (needs Go; cached outside the checkout)"
    )


def go_command() -> str:
    """The ``go`` executable, or a :class:`BuildError` saying it is needed."""
    found = shutil.which("go")
    if found is None:
        raise BuildError("the real control plane is built with the go command: go is not on PATH")
    return found


def _run(argv: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, check=False, env=env, timeout=3600
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-25:])
        raise BuildError(f"{what}: `{' '.join(argv)}` exited {done.returncode}:\n{tail}")
    print(f"  {what}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return done.stdout


def module_dir(module: str, version: str) -> Path:
    """The module's source directory in the module cache (downloaded when missing)."""
    out = _run(
        [go_command(), "mod", "download", "-json", f"{module}@{version}"],
        Path.cwd(),
        f"download {module}@{version}",
    )
    info = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"download {module}@{version}: {info['Error']}")
    return Path(info["Dir"])


def staging_modules(kubernetes_dir: Path) -> list[str]:
    """The staging modules that ``k8s.io/kubernetes``'s go.mod replaces by ``./staging`` paths."""
    text = (kubernetes_dir / "go.mod").read_text()
    found = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", text, flags=re.MULTILINE)
    return sorted({m for m in found if not m.startswith("k8s.io/sample-")})


def _generated_module(
    root: Path, name: str, main_go: str | None, requires: dict[str, str], replaces: dict[str, str]
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"module {name}", "", "go 1.26", ""]
    if requires:
        lines.append("require (")
        lines.extend(f"\t{m} {v}" for m, v in sorted(requires.items()))
        lines.extend([")", ""])
    if replaces:
        lines.append("replace (")
        lines.extend(f"\t{m} => {m} {v}" for m, v in sorted(replaces.items()))
        lines.extend([")", ""])
    (root / "go.mod").write_text("\n".join(lines))
    if main_go is not None:
        (root / "main.go").write_text(main_go)


def _version_ldflags(version: str) -> str:
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", version)
    if match is None:
        raise BuildError(f"kubernetes version {version!r} is not vMAJOR.MINOR.PATCH")
    major, minor = match.group(1), match.group(2)
    flags = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return "-s -w " + " ".join(flags)


def _install(out: Path, built: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    shutil.copy2(built, partial)
    partial.chmod(0o755)
    partial.replace(out)


def build_etcd(versions: Versions, work: Path) -> Path:
    """Build etcd from ``etcdmain`` behind a generated ``main``."""
    go = go_command()
    root = work / "etcd"
    main_go = (
        "package main\n\n"
        'import (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() { etcdmain.Main(os.Args) }\n"
    )
    _generated_module(root, "mkd.local/etcd", main_go, {versions.etcd_module: versions.etcd}, {})
    _run([go, "mod", "tidy"], root, "etcd: go mod tidy")
    _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", "etcd", "."], root, "etcd: go build")
    return root / "etcd"


def _build_kubernetes(versions: Versions, work: Path, binary: str, package: str) -> Path:
    """Build one command of ``k8s.io/kubernetes`` with its staging modules replaced.

    Both commands share one generated module (and so the go build cache)."""
    go = go_command()
    root = work / "kubernetes"
    if not (root / "go.mod").is_file():
        source = module_dir(versions.kubernetes_module, versions.kubernetes)
        staging = staging_modules(source)
        main_go = (
            "package main\n\n"
            "// Only for the package graph of go mod tidy: the binaries are built from the\n"
            "// real main packages of k8s.io/kubernetes.\n"
            "import (\n"
            f'\t_ "{versions.apiserver_package}/app"\n'
            f'\t_ "{versions.controller_manager_package}/app"\n'
            ")\n\n"
            "func main() {}\n"
        )
        _generated_module(
            root,
            "mkd.local/kubernetes",
            main_go,
            {versions.kubernetes_module: versions.kubernetes}
            | dict.fromkeys(staging, versions.staging),
            dict.fromkeys(staging, versions.staging),
        )
        _run([go, "mod", "tidy"], root, "kubernetes: go mod tidy")
    _run(
        [
            go,
            "build",
            "-trimpath",
            f"-ldflags={_version_ldflags(versions.kubernetes)}",
            "-o",
            binary,
            package,
        ],
        root,
        f"{binary}: go build",
    )
    return root / binary


def build_kube_apiserver(versions: Versions, work: Path) -> Path:
    """Build kube-apiserver."""
    return _build_kubernetes(versions, work, "kube-apiserver", versions.apiserver_package)


def build_kube_controller_manager(versions: Versions, work: Path) -> Path:
    """Build kube-controller-manager (the tests run only its garbage collector)."""
    return _build_kubernetes(
        versions, work, "kube-controller-manager", versions.controller_manager_package
    )


def build_kueue(versions: Versions, work: Path) -> Path:
    """Build Kueue's manager with ``go install`` into a private GOBIN."""
    go = go_command()
    gobin = work / "kueue-bin"
    gobin.mkdir(parents=True, exist_ok=True)
    env = os.environ | {"GOBIN": str(gobin)}
    _run(
        [
            go,
            "install",
            "-trimpath",
            "-ldflags=-s -w",
            f"{versions.kueue_package}@{versions.kueue}",
        ],
        work,
        "kueue: go install",
        env,
    )
    return gobin / "kueue"


BUILDERS = {
    "etcd": build_etcd,
    "kube-apiserver": build_kube_apiserver,
    "kube-controller-manager": build_kube_controller_manager,
    "kueue": build_kueue,
}


def build(components: list[str] | None = None, *, force: bool = False) -> dict[str, Path]:
    """Build what is missing (or everything with ``force``); returns the binaries by component."""
    versions = load_versions()
    chosen = components or list(COMPONENTS)
    result: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="mkd-real-build-") as scratch:
        for component in chosen:
            out = binary_path(component, versions)
            if out.is_file() and not force:
                print(f"{component} {versions.of(component)}: cached at {out}", file=sys.stderr)
                result[component] = out
                continue
            print(f"{component} {versions.of(component)}: building", file=sys.stderr)
            started = time.monotonic()
            built = BUILDERS[component](versions, Path(scratch))
            _install(out, built)
            print(
                f"{component} {versions.of(component)}: built in "
                f"{time.monotonic() - started:.0f} s -> {out}",
                file=sys.stderr,
            )
            result[component] = out
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m dispatcher_sandbox.real_kueue.build [--force] [component ...]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("components", nargs="*", help=f"any of {', '.join(COMPONENTS)}")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.components) - set(COMPONENTS))
    if unknown:
        parser.error(
            f"unknown component(s) {', '.join(unknown)}: choose from {', '.join(COMPONENTS)}"
        )
    try:
        built = build(list(args.components) or None, force=args.force)
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for component, path in built.items():
        print(f"{component}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
