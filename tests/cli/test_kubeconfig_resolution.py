"""The manager connection of ``run``, ``check-config`` and ``explain`` is found as kubectl and
client-go find theirs (dispatcher/k8s/loading.py): ``--kubeconfig``, then ``$KUBECONFIG`` (a
merged list), then in-cluster, then ``~/.kube/config``; ``--context`` picks a context.

No real cluster: files in ``tmp_path``, the environment passed in, an in-cluster service
account faked with a token and CA file; the end-to-end cases talk to a fake API server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from dispatcher.cli import main
from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ManagerConfigError
from dispatcher.k8s.loading import (
    IN_CLUSTER,
    ManagerConnection,
    manager_client,
    resolve_manager_connection,
)
from dispatcher_sandbox.fake_apiserver import FakeCluster
from dispatcher_sandbox.kueue_crds import KUEUE_SHORT_FORMS

# --- builders --------------------------------------------------------------------------------


def kubeconfig(
    *,
    clusters: Mapping[str, str] = {},
    users: Mapping[str, str] = {},
    contexts: Mapping[str, tuple[str, str]] = {},
    current: str | None = None,
) -> dict[str, Any]:
    """A kubeconfig: clusters name → server, users name → token, contexts name → (cluster,
    user)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in clusters.items()],
        "users": [{"name": n, "user": {"token": t}} for n, t in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": c, "user": u}} for n, (c, u) in contexts.items()
        ],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def one_context(server: str, name: str = "only") -> dict[str, Any]:
    return kubeconfig(
        clusters={name: server}, users={name: "t"}, contexts={name: (name, name)}, current=name
    )


def write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


@dataclass
class Place:
    """A home, a service account folder and the environment of one test."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def account(self) -> Path:
        return self.root / "serviceaccount"

    def environ(self, **extra: str) -> dict[str, str]:
        return {"HOME": str(self.home), **extra}

    def home_config(self, server: str = "https://home.example:6443") -> Path:
        return write(self.home / ".kube" / "config", one_context(server, "home"))

    def service_account(self, ca: bytes = b"not checked before connecting\n") -> None:
        self.account.mkdir(parents=True, exist_ok=True)
        (self.account / "token").write_text("service-account-token")
        (self.account / "ca.crt").write_bytes(ca)

    def resolve(
        self, kubeconfig: Path | None = None, context: str | None = None, /, **env: str
    ) -> ManagerConnection:
        return resolve_manager_connection(
            kubeconfig, context, environ=self.environ(**env), service_account_dir=self.account
        )


IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return Place(tmp_path)


# --- the order ---------------------------------------------------------------------------------

# Which sources exist, the --context given, and the source that must win.
ORDER_CASES = [
    pytest.param({"flag", "env", "pod", "home"}, None, "flag", id="--kubeconfig-beats-all"),
    pytest.param({"env", "pod", "home"}, None, "env", id="KUBECONFIG-beats-in-cluster-and-home"),
    pytest.param({"pod", "home"}, None, "pod", id="in-cluster-beats-home"),
    pytest.param({"home"}, None, "home", id="home-last"),
    pytest.param({"pod", "home"}, "home", "home", id="--context-skips-in-cluster"),
    pytest.param({"flag", "home"}, None, "flag", id="--kubeconfig-without-KUBECONFIG"),
]


@pytest.mark.parametrize(("present", "context", "winner"), ORDER_CASES)
def test_resolution_order(
    place: Place, present: set[str], context: str | None, winner: str
) -> None:
    servers = {
        "flag": "https://flag.example:6443",
        "env": "https://env.example:6443",
        "home": "https://home.example:6443",
    }
    flag = env = None
    extra: dict[str, str] = {}
    if "flag" in present:
        flag = write(place.root / "flag.yaml", one_context(servers["flag"], "home"))
    if "env" in present:
        env = write(place.root / "env.yaml", one_context(servers["env"], "home"))
        extra["KUBECONFIG"] = str(env)
    if "pod" in present:
        place.service_account()
        extra.update(IN_POD)
    if "home" in present:
        place.home_config(servers["home"])
    found = place.resolve(flag, context, **extra)
    expected_source = {
        "flag": f"--kubeconfig {flag}",
        "env": f"KUBECONFIG={env}",
        "pod": IN_CLUSTER,
        "home": str(place.home / ".kube" / "config"),
    }[winner]
    assert found.source == expected_source
    assert found.server == servers.get(winner, "https://10.96.0.1:443")


def test_KUBECONFIG_set_is_the_only_source(place: Place) -> None:
    """As client-go: with $KUBECONFIG set (to files that do not exist), neither in-cluster nor
    ~/.kube/config is tried."""
    place.service_account()
    place.home_config()
    with pytest.raises(ManagerConfigError) as raised:
        place.resolve(KUBECONFIG=f"{place.root}/a:{place.root}/b", **IN_POD)
    listed = f"{place.root}/a:{place.root}/b"
    assert str(raised.value) == f"KUBECONFIG={listed}: none of its files exists"


def test_nothing_found_says_what_was_tried(place: Place) -> None:
    with pytest.raises(ManagerConfigError) as raised:
        place.resolve()
    assert str(raised.value) == (
        "no kubeconfig for the manager cluster (--kubeconfig: not given; $KUBECONFIG: not set; "
        "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT not set (not in a "
        f"pod); {place.home}/.kube/config: no such file)"
    )


def test_in_cluster_without_a_token_falls_through_to_home(place: Place) -> None:
    place.home_config()
    assert place.resolve(**IN_POD).source == str(place.home / ".kube" / "config")
    (place.home / ".kube" / "config").unlink()
    with pytest.raises(ManagerConfigError, match=r"in-cluster: .*/serviceaccount/token: no such"):
        place.resolve(**IN_POD)


# --- $KUBECONFIG merging -----------------------------------------------------------------------


@pytest.fixture
def two_files(place: Place) -> tuple[Path, Path]:
    """a: the current context ctx-a, whose cluster and user are defined in b; both define the
    cluster `shared` and set a current-context."""
    first = write(
        place.root / "a.yaml",
        kubeconfig(
            clusters={"shared": "https://shared-from-a.example:6443"},
            contexts={"ctx-a": ("from-b", "user-b"), "ctx-shared": ("shared", "user-b")},
            current="ctx-a",
        ),
    )
    second = write(
        place.root / "b.yaml",
        kubeconfig(
            clusters={
                "from-b": "https://b.example:6443",
                "shared": "https://shared-from-b.example:6443",
            },
            users={"user-b": "token-b"},
            contexts={"ctx-b": ("from-b", "user-b")},
            current="ctx-b",
        ),
    )
    return first, second


MERGE_CASES = [
    pytest.param(None, "ctx-a", "https://b.example:6443", id="context-from-a-cluster-from-b"),
    pytest.param("ctx-shared", "ctx-shared", "https://shared-from-a.example:6443", id="first-wins"),
    pytest.param("ctx-b", "ctx-b", "https://b.example:6443", id="--context-from-the-second"),
]


@pytest.mark.parametrize(("context", "used", "server"), MERGE_CASES)
async def test_KUBECONFIG_files_are_merged_as_client_go_merges_them(
    place: Place, two_files: tuple[Path, Path], context: str | None, used: str, server: str
) -> None:
    first, second = two_files
    missing = place.root / "missing.yaml"  # skipped, as client-go skips it
    listed = f"{first}:{missing}:{second}"
    found = place.resolve(None, context, KUBECONFIG=listed)
    assert (found.context, found.server, found.files) == (used, server, (str(first), str(second)))
    # kubernetes_asyncio's own merger and loader build the client: the user comes from b.
    api = await manager_client(found, user_agent="test")
    try:
        assert api.configuration.host == server
        assert api.configuration.api_key == {"BearerToken": "Bearer token-b"}
    finally:
        await api.close()


def test_the_first_current_context_wins(place: Place, two_files: tuple[Path, Path]) -> None:
    first, second = two_files
    assert place.resolve(KUBECONFIG=f"{second}:{first}").context == "ctx-b"
    assert place.resolve(KUBECONFIG=f"{first}:{second}").context == "ctx-a"


# --- errors ------------------------------------------------------------------------------------

ERROR_CASES = [
    pytest.param(None, None, "--kubeconfig {p}: no such file", id="missing"),
    pytest.param("", None, "--kubeconfig {p}: the file is empty", id="empty"),
    pytest.param(
        "a: [\n",
        None,
        "--kubeconfig {p}: not valid YAML (line 2, column 1): expected the node content, but "
        "found '<stream end>'",
        id="not-yaml",
    ),
    pytest.param(
        "- 1\n",
        None,
        "--kubeconfig {p}: not a kubeconfig (the top level is a list, not a mapping)",
        id="top-level-list",
    ),
    pytest.param(
        "clusters: {a: b}\n", None, "--kubeconfig {p}: clusters: must be a list", id="bad-section"
    ),
    pytest.param(
        kubeconfig(clusters={"c": "https://c"}, contexts={"x": ("c", "u"), "y": ("c", "u")}),
        None,
        "--kubeconfig {p}: no current-context and no --context given (contexts: x, y)",
        id="no-current-context",
    ),
    pytest.param(
        one_context("https://c"),
        "nope",
        "--context nope: no such context in --kubeconfig {p} (contexts: only)",
        id="unknown-context",
    ),
    pytest.param(
        kubeconfig(contexts={"x": ("gone", "u")}, current="x"),
        None,
        "--kubeconfig {p}: context x: cluster gone is not defined (clusters: none)",
        id="context-without-its-cluster",
    ),
    pytest.param(
        kubeconfig(clusters={"c": ""}, contexts={"x": ("c", "u")}, current="x"),
        None,
        "--kubeconfig {p}: cluster c: no server",
        id="cluster-without-server",
    ),
]


@pytest.mark.parametrize(("content", "context", "message"), ERROR_CASES)
def test_errors_name_the_flag_the_file_and_the_context(
    place: Place, content: object, context: str | None, message: str
) -> None:
    path = place.root / "kubeconfig.yaml"
    if content is not None:
        write(path, content)
    with pytest.raises(ManagerConfigError) as raised:
        place.resolve(path, context)
    assert str(raised.value) == message.format(p=path)


def test_a_bad_file_in_KUBECONFIG_is_named(place: Place) -> None:
    good = write(place.root / "good.yaml", one_context("https://c"))
    bad = write(place.root / "bad.yaml", "- 1\n")
    with pytest.raises(ManagerConfigError) as raised:
        place.resolve(KUBECONFIG=f"{good}:{bad}")
    assert str(raised.value) == (
        f"{bad} (in $KUBECONFIG): not a kubeconfig (the top level is a list, not a mapping)"
    )


def test_loader_errors_do_not_quote_credentials(place: Place) -> None:
    """kubernetes_asyncio names merged entries by their content; the message must not carry the
    token."""
    doc = one_context("https://c.example:6443")
    doc["users"][0]["user"] = {"token": "secret-token-value", "client-certificate": "/no/such"}
    path = write(place.root / "kubeconfig.yaml", doc)

    async def build() -> None:
        await manager_client(place.resolve(path), user_agent="test")

    with pytest.raises(ManagerConfigError) as raised:
        anyio.run(build)
    assert str(raised.value).startswith(f"--kubeconfig {path}: context only: cannot be loaded: ")
    assert "secret-token-value" not in str(raised.value)


# --- end to end, against a fake API server -------------------------------------------------------


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster("cli-manager", resources=KUEUE_SHORT_FORMS) as fake:
        yield fake


async def test_in_cluster_service_account_connects(cluster: FakeCluster, place: Place) -> None:
    """The in-cluster loader reads the token and CA files the service account mounts."""
    assert cluster.ca_pem is not None
    place.service_account(ca=cluster.ca_pem)
    (place.account / "token").write_text(cluster.token)
    host, _, port = cluster.url.removeprefix("https://").rpartition(":")
    found = place.resolve(KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port)
    assert (found.source, found.server, found.context) == (IN_CLUSTER, cluster.url, None)
    async with KubeApi(await manager_client(found, user_agent="test")) as api:
        assert "gitVersion" in await api.request("GET", "/version")


async def test_check_config_through_a_merged_KUBECONFIG_and_context(
    cluster: FakeCluster,
    place: Place,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """check-config finds the fake manager through $KUBECONFIG (context in one file, cluster
    and user in the other) with --context, connects, and reports what it finds."""
    config = cluster.kubeconfig
    contexts = write(
        place.root / "contexts.yaml",
        {"contexts": [{"name": "fake", "context": {"cluster": "m", "user": "m"}}]},
    )
    rest = write(
        place.root / "rest.yaml",
        {
            "clusters": [{"name": "m", "cluster": config["clusters"][0]["cluster"]}],
            "users": [{"name": "m", "user": config["users"][0]["user"]}],
        },
    )
    for name in ("KUBERNETES_SERVICE_HOST", "DISPATCHER_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(place.home))
    monkeypatch.setenv("KUBECONFIG", f"{contexts}:{rest}")
    monkeypatch.setenv("DISPATCHER_DISABLE_PLUGIN_AUTOLOAD", "1")
    code = await anyio.to_thread.run_sync(main, ["check-config", "--context", "fake"])
    # Connected: the fake manager has no MultiKueue objects, which check-config reports (1).
    out, err = capsys.readouterr()
    assert (code, err) == (1, "")
    assert out.splitlines()[1:] == [
        "MultiKueue admission checks: (none)",
        "no MultiKueueCluster objects",
    ]
