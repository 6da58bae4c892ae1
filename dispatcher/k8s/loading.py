"""The dispatcher's own connection to the manager cluster, found the way kubectl, client-go and
controller-runtime find theirs.

Order (:func:`resolve_manager_connection`):

1. ``--kubeconfig FILE``: that file alone; it must exist.
2. ``$KUBECONFIG`` (when set and not empty): a colon-separated list of files merged with
   client-go's rules: files that do not exist are skipped, the first file to set
   ``current-context`` wins, and clusters, users and contexts are merged by name, the first file
   to define a name winning (an entry is never merged field by field); a relative file path in
   an entry is relative to the file that defines it. When it is set, nothing else is tried.
3. In-cluster: the pod's service account (``KUBERNETES_SERVICE_HOST``,
   ``KUBERNETES_SERVICE_PORT``, ``token`` and ``ca.crt`` in
   ``/var/run/secrets/kubernetes.io/serviceaccount``). A service account has no contexts, so
   with ``--context`` this step is skipped.
4. ``~/.kube/config`` (``$HOME``).

``--context NAME`` picks a context of the kubeconfig found instead of its ``current-context``.
Merging and loading are kubernetes_asyncio's own (``KubeConfigMerger``, ``KubeConfigLoader``,
``InClusterConfigLoader``); this module reads the files first so that every problem is one line
naming the flag, variable, file or context, and takes the first ``current-context`` (the merger
keeps the last). When nothing is found, the message lists what was tried.

Unlike the worker kubeconfigs from Secrets (:mod:`dispatcher.k8s.kubeconfig`, validated as Kueue
does), the operator's own kubeconfig is trusted as kubectl trusts it: exec plugins, auth
providers and files are allowed. Messages name files, contexts, clusters and keys, never values.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from kubernetes_asyncio.config.kube_config import KubeConfigLoader, KubeConfigMerger

from dispatcher.k8s.errors import ManagerConfigError
from dispatcher.k8s.transport import settle_transport

__all__ = [
    "KUBECONFIG_ENV",
    "SERVICE_ACCOUNT_DIR",
    "ManagerConnection",
    "manager_client",
    "resolve_manager_connection",
]

KUBECONFIG_ENV = "KUBECONFIG"
SERVICE_HOST_ENV = "KUBERNETES_SERVICE_HOST"
SERVICE_PORT_ENV = "KUBERNETES_SERVICE_PORT"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod's service account token and CA are mounted (``token``, ``ca.crt``)."""

IN_CLUSTER = "in-cluster service account"
_SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


@dataclass(frozen=True)
class ManagerConnection:
    """Where the manager connection comes from.

    ``source`` is how it was found (``--kubeconfig FILE``, ``KUBECONFIG=a:b``, the
    in-cluster service account, ``~/.kube/config``'s path); ``files`` the kubeconfig files
    merged, in order; ``context`` the context used (``None`` in-cluster); ``server`` its URL.
    """

    source: str
    server: str
    context: str | None = None
    files: tuple[str, ...] = ()
    in_cluster: Any = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """``SERVER (SOURCE, context NAME)`` for messages."""
        where = self.source if self.context is None else f"{self.source}, context {self.context}"
        return f"{self.server} ({where})"


def resolve_manager_connection(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account_dir: Path | None = None,
) -> ManagerConnection:
    """Find the manager connection in the order of the module docstring.

    ``environ`` (default ``os.environ``) supplies ``KUBECONFIG``, ``HOME`` and the service
    host and port; ``service_account_dir`` (default :data:`SERVICE_ACCOUNT_DIR`) the token and
    CA. Reads files only, never the network. Raises :class:`ManagerConfigError`.
    """
    env = os.environ if environ is None else environ
    if kubeconfig is not None and str(kubeconfig):
        path = str(kubeconfig)
        return _from_files(f"--kubeconfig {path}", [path], context, skip_missing=False)
    listed = env.get(KUBECONFIG_ENV, "")
    if listed:
        paths = list(dict.fromkeys(p for p in listed.split(os.pathsep) if p))
        return _from_files(f"{KUBECONFIG_ENV}={listed}", paths, context, skip_missing=True)
    tried = ["--kubeconfig: not given", f"${KUBECONFIG_ENV}: not set"]
    if context is None:
        account = SERVICE_ACCOUNT_DIR if service_account_dir is None else service_account_dir
        found = _in_cluster(env, account)
        if isinstance(found, ManagerConnection):
            return found
        tried.append(f"in-cluster: {found}")
    else:
        tried.append(f"in-cluster: skipped (--context {context} names a kubeconfig context)")
    home = _home(env) / ".kube" / "config"
    if home.exists():
        return _from_files(str(home), [str(home)], context, skip_missing=False)
    tried.append(f"{home}: no such file")
    raise ManagerConfigError("no kubeconfig for the manager cluster (" + "; ".join(tried) + ")")


async def manager_client(connection: ManagerConnection, *, user_agent: str) -> ApiClient:
    """A new ``ApiClient`` for ``connection`` (the caller closes it).

    kubeconfig files are merged and loaded by kubernetes_asyncio (which runs exec plugins);
    a failure raises :class:`ManagerConfigError` naming the source and context.
    """
    if connection.in_cluster is not None:
        configuration = connection.in_cluster
    else:
        configuration = type.__call__(Configuration)
        merger = KubeConfigMerger(os.pathsep.join(connection.files))
        loader = KubeConfigLoader(
            config_dict=merger.config,
            active_context=connection.context,
            config_base_path=None,
            config_persister=merger.save_changes,
        )
        try:
            await loader.load_and_set(configuration)
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as error:
            raise ManagerConfigError(
                f"{connection.source}: context {connection.context}: cannot be loaded: "
                f"{_scrub(error)}"
            ) from None
    try:
        api = ApiClient(configuration=configuration)
    except (ssl.SSLError, OSError, ValueError) as error:
        where = connection.source
        if connection.context is not None:
            where += f": context {connection.context}"
        raise ManagerConfigError(
            f"{where}: TLS settings cannot be loaded: {_scrub(error)}"
        ) from None
    settle_transport(api)
    api.user_agent = user_agent
    return api


# --- kubeconfig files ------------------------------------------------------------------------


def _from_files(
    source: str, paths: Sequence[str], context: str | None, *, skip_missing: bool
) -> ManagerConnection:
    documents: list[tuple[str, dict[str, Any]]] = []
    for raw in paths:
        path = Path(raw).expanduser()
        where = source if not skip_missing else f"{path} (in ${KUBECONFIG_ENV})"
        if skip_missing and not path.exists():
            continue
        document = _read(path, where)
        if document:
            documents.append((str(path), document))
    if not documents:
        if not skip_missing:
            problem = "the file is empty"
        elif any(Path(p).expanduser().exists() for p in paths):
            problem = "its files are empty"
        else:
            problem = "none of its files exists"
        raise ManagerConfigError(f"{source}: {problem}")
    merged = _merge(documents)
    contexts: dict[str, Mapping[str, Any]] = merged["contexts"]
    known = ", ".join(sorted(contexts)) or "none"
    if context is not None:
        if context not in contexts:
            raise ManagerConfigError(
                f"--context {context}: no such context in {source} (contexts: {known})"
            )
        name = context
    else:
        name = merged["current-context"]
        if not name:
            raise ManagerConfigError(
                f"{source}: no current-context and no --context given (contexts: {known})"
            )
        if name not in contexts:
            raise ManagerConfigError(
                f"{source}: current-context {name} is not one of the contexts ({known})"
            )
    cluster_name = contexts[name].get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise ManagerConfigError(f"{source}: context {name}: no cluster")
    cluster = merged["clusters"].get(cluster_name)
    if cluster is None:
        raise ManagerConfigError(
            f"{source}: context {name}: cluster {cluster_name} is not defined "
            f"(clusters: {', '.join(sorted(merged['clusters'])) or 'none'})"
        )
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ManagerConfigError(f"{source}: cluster {cluster_name}: no server")
    return ManagerConnection(source, server.rstrip("/"), name, tuple(p for p, _ in documents))


def _read(path: Path, where: str) -> dict[str, Any]:
    """One kubeconfig file, its structure checked as far as resolution needs it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManagerConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ManagerConfigError(f"{where}: is a directory, not a file") from None
    except PermissionError:
        raise ManagerConfigError(f"{where}: permission denied") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ManagerConfigError(f"{where}: cannot be read ({reason})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ManagerConfigError(f"{where}: not valid YAML{at}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ManagerConfigError(
            f"{where}: not a kubeconfig (the top level is a {type(data).__name__}, not a mapping)"
        )
    for section, singular in _SECTIONS:
        items = data.get(section)
        if items is None:
            continue
        if not isinstance(items, list):
            raise ManagerConfigError(f"{where}: {section}: must be a list")
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ManagerConfigError(f"{where}: {section}[{index}]: must have a name")
            if not isinstance(item.get(singular) or {}, dict):
                raise ManagerConfigError(
                    f"{where}: {section}[{index}] ({item['name']}): {singular} must be a mapping"
                )
    current = data.get("current-context")
    if current is not None and not isinstance(current, str):
        raise ManagerConfigError(f"{where}: current-context: must be a string")
    return data


def _merge(documents: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """client-go's merge: the first file to set current-context or to define a name wins."""
    merged: dict[str, Any] = {section: {} for section, _ in _SECTIONS}
    merged["current-context"] = ""
    for _, document in documents:
        if not merged["current-context"] and document.get("current-context"):
            merged["current-context"] = document["current-context"]
        for section, singular in _SECTIONS:
            for item in document.get(section) or []:
                merged[section].setdefault(item["name"], item.get(singular) or {})
    return merged


# --- in-cluster ------------------------------------------------------------------------------


def _in_cluster(env: Mapping[str, str], account: Path) -> ManagerConnection | str:
    """The in-cluster connection, or why there is none (client-go's ``Possible()`` first)."""
    if not env.get(SERVICE_HOST_ENV) or not env.get(SERVICE_PORT_ENV):
        return f"{SERVICE_HOST_ENV} and {SERVICE_PORT_ENV} not set (not in a pod)"
    token = account / "token"
    if not token.is_file():
        return f"{token}: no such file"
    configuration = type.__call__(Configuration)
    loader = InClusterConfigLoader(
        token_filename=str(token),
        cert_filename=str(account / "ca.crt"),
        environ=dict(env),
    )
    try:
        loader.load_and_set(configuration)
    except (ConfigException, OSError) as error:
        return f"{account}: {_scrub(error)}"
    server = str(configuration.host)
    return ManagerConnection(IN_CLUSTER, server, None, (), in_cluster=configuration)


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    return Path(home) if home else Path.home()


def _scrub(error: BaseException) -> str:
    """An error of the loader in one line without values: kubernetes_asyncio names merged
    entries by their whole content (``path/{'name': ..., 'user': {'token': ...}}``)."""
    text = re.sub(r"\{.*\}", "{…}", str(error), flags=re.DOTALL)
    text = " ".join(text.split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
