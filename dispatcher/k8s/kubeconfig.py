"""Worker kubeconfigs, validated exactly as Kueue validates them (contract C62).

kubernetes_asyncio's loader *runs* ``exec`` plugins and reads files named in a kubeconfig, and a
kubeconfig Secret is plain data that whoever can write the Secret controls. So every kubeconfig
from a Secret goes through :func:`validate_kubeconfig` before a client is built from it:

- each cluster: ``server`` present, ``https``, host an IP address or a DNS-1123 name; inline
  ``certificate-authority-data`` (no ``certificate-authority`` file); no
  ``insecure-skip-tls-verify``;
- each user: no ``tokenFile``, no ``username``/``password``, no ``exec``, no ``auth-provider``, no
  client certificate or key files;
- a current context (or the only context) naming an existing cluster and user.

Failures raise :class:`KubeconfigError` with a Kueue condition reason (``BadKubeConfig`` for
structure, ``InsecureKubeConfig`` for the security rules) and a message that names the field,
for example ``users[0].user.exec: exec plugins are not allowed``. Messages never contain secret
values (tokens, keys, the document text).
"""

from __future__ import annotations

import base64
import binascii
import copy
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

BAD = "BadKubeConfig"
INSECURE = "InsecureKubeConfig"
SECRET_KEY = "kubeconfig"  # Kueue's MultiKueueConfigSecretKey (C10)

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

# (field, message) of the user fields Kueue refuses; the order is the order of the checks.
_USER_RULES = (
    ("tokenFile", "token files are not allowed"),
    ("username", "basic auth is not allowed"),
    ("password", "basic auth is not allowed"),
    ("exec", "exec plugins are not allowed"),
    ("auth-provider", "auth providers are not allowed"),
    ("client-certificate", "client certificate files are not allowed, use client-certificate-data"),
    ("client-key", "client key files are not allowed, use client-key-data"),
)


class KubeconfigError(Exception):
    """A kubeconfig that must not be used.

    ``reason`` is the MultiKueueCluster ``Active=False`` condition reason Kueue would report
    (``BadKubeConfig`` or ``InsecureKubeConfig``); ``message`` names the offending field.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


@dataclass(frozen=True)
class ValidKubeconfig:
    """A kubeconfig that passed :func:`validate_kubeconfig`.

    ``config`` is a deep copy with ``current-context`` set to ``context``; ``server`` is the
    current context's server URL.
    """

    config: dict[str, Any]
    context: str
    server: str


def valid_host(host: str) -> bool:
    """Kueue's ``isValidHostname``: an IP address or a DNS-1123 subdomain."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return 0 < len(host) <= 253 and bool(_DNS1123_SUBDOMAIN.match(host.lower()))


def _entries(config: Mapping[str, Any], section: str, body_key: str) -> list[tuple[str, Any]]:
    """``(name, body)`` of a named list section, checking its shape."""
    raw = config.get(section)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise KubeconfigError(BAD, f"{section}: must be a list")
    found: list[tuple[str, Any]] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise KubeconfigError(BAD, f"{section}[{index}]: must be a mapping")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise KubeconfigError(BAD, f"{section}[{index}].name: required")
        body = entry.get(body_key)
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise KubeconfigError(BAD, f"{section}[{index}].{body_key}: must be a mapping")
        found.append((name, body))
    return found


def _check_cluster(index: int, cluster: Mapping[str, Any]) -> None:
    where = f"clusters[{index}].cluster"
    if cluster.get("insecure-skip-tls-verify"):
        raise KubeconfigError(
            INSECURE, f"{where}.insecure-skip-tls-verify: insecure TLS verification is not allowed"
        )
    if cluster.get("certificate-authority"):
        raise KubeconfigError(
            INSECURE,
            f"{where}.certificate-authority: certificate authority files are not allowed, "
            "use certificate-authority-data",
        )
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigError(BAD, f"{where}.server: server URL is required")
    try:
        url = urlsplit(server)
        host = url.hostname or ""
    except ValueError:
        raise KubeconfigError(BAD, f"{where}.server: not a valid URL") from None
    if url.scheme != "https":
        raise KubeconfigError(INSECURE, f"{where}.server: the server must use https")
    if not valid_host(host):
        raise KubeconfigError(
            INSECURE,
            f"{where}.server: untrusted server endpoint "
            "(the host must be an IP address or a DNS-1123 name)",
        )
    if not cluster.get("certificate-authority-data"):
        raise KubeconfigError(
            INSECURE, f"{where}.certificate-authority-data: inline CA data is required"
        )


# Plugin entries are refused when present at all, even empty: the loader acts on the key.
_PLUGINS = ("exec", "auth-provider")


def _check_user(index: int, user: Mapping[str, Any]) -> None:
    for field, message in _USER_RULES:
        value = user.get(field)
        if value or (field in _PLUGINS and value is not None):
            raise KubeconfigError(INSECURE, f"users[{index}].user.{field}: {message}")


def validate_kubeconfig(config: Any) -> ValidKubeconfig:
    """Validate a parsed kubeconfig as Kueue does (C62); raise :class:`KubeconfigError`."""
    if not isinstance(config, Mapping):
        raise KubeconfigError(BAD, "kubeconfig: must be a mapping")
    clusters = _entries(config, "clusters", "cluster")
    users = _entries(config, "users", "user")
    contexts = _entries(config, "contexts", "context")
    for index, (_, cluster) in enumerate(clusters):
        _check_cluster(index, cluster)
    for index, (_, user) in enumerate(users):
        _check_user(index, user)

    current = config.get("current-context") or ""
    if not isinstance(current, str):
        raise KubeconfigError(BAD, "current-context: must be a string")
    names = [name for name, _ in contexts]
    if not current:
        if not names:
            raise KubeconfigError(BAD, "contexts: no context is defined")
        if len(names) > 1:
            raise KubeconfigError(
                BAD, f"current-context: not set, and the kubeconfig has {len(names)} contexts"
            )
        current = names[0]
    if current not in names:
        raise KubeconfigError(BAD, f'current-context: context "{current}" not found')
    index = names.index(current)
    context = contexts[index][1]
    cluster_name = context.get("cluster") or ""
    cluster_names = [name for name, _ in clusters]
    if cluster_name not in cluster_names:
        raise KubeconfigError(
            BAD, f'contexts[{index}].context.cluster: cluster "{cluster_name}" not found'
        )
    user_name = context.get("user") or ""
    if user_name not in [name for name, _ in users]:
        raise KubeconfigError(BAD, f'contexts[{index}].context.user: user "{user_name}" not found')
    server = str(clusters[cluster_names.index(cluster_name)][1]["server"])
    valid = copy.deepcopy(dict(config))
    valid["current-context"] = current
    return ValidKubeconfig(config=valid, context=current, server=server)


def parse_kubeconfig_text(text: str | bytes, *, where: str = "kubeconfig") -> ValidKubeconfig:
    """Parse YAML kubeconfig text and validate it. ``where`` prefixes parse error messages."""
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        position = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        # The YAML error text quotes the document; it may hold a token, so it is not repeated.
        raise KubeconfigError(BAD, f"{where}: not valid YAML{position}") from None
    if not isinstance(parsed, Mapping):
        raise KubeconfigError(BAD, f"{where}: not a kubeconfig (expected a YAML mapping)")
    return validate_kubeconfig(parsed)


def kubeconfig_from_secret(secret: Mapping[str, Any], key: str = SECRET_KEY) -> ValidKubeconfig:
    """The validated kubeconfig stored in a Secret (as returned by the API: base64 ``data``).

    Errors (all :class:`KubeconfigError` with reason ``BadKubeConfig`` unless the kubeconfig
    itself breaks a security rule): missing key, not base64, not YAML, not a mapping, several
    contexts and none current.
    """
    meta = secret.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    data = secret.get("data") or {}
    raw = data.get(key) if isinstance(data, Mapping) else None
    if not raw:
        raise KubeconfigError(BAD, f'data.{key}: key "{key}" not found in secret "{ref}"')
    try:
        text = base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(BAD, f"data.{key}: not valid base64") from None
    return parse_kubeconfig_text(text, where=f"data.{key}")
