"""The HTTP session under every ``ApiClient``: the environment read once, not per request.

kubernetes_asyncio builds its ``aiohttp.ClientSession`` with ``trust_env=True``. aiohttp then
looks up, on **every** request, the ``.netrc`` file (in the default thread pool) and the proxy
environment variables (in a second thread hop): two thread round trips per request, and a
controller sends thousands of requests (what that costs: ``benchmarks/client_overhead.py``,
docs/performance.md, *Changed for issue 15*).

:func:`settle_transport` replaces that session, keeping its connector (the TLS context and the
connection pool), by one with ``trust_env=False``, after resolving the proxy once the way
client-go's ``http.ProxyFromEnvironment`` does:

- a ``proxy-url`` in the kubeconfig wins (kubernetes_asyncio already put it in
  ``Configuration.proxy``);
- otherwise ``HTTPS_PROXY``/``HTTP_PROXY`` by the server's scheme, unless ``NO_PROXY`` names the
  host (aiohttp's reading of the variables, so the lowercase forms count too);
- ``localhost`` and loopback addresses are never proxied (as in Go's ``httpproxy``).

``.netrc`` is not read: client-go never reads it, and the API server's credentials come from the
kubeconfig alone. The environment is read when the client is built: a worker whose kubeconfig
Secret changes gets a new client, and with it the environment of that moment.
"""

from __future__ import annotations

import ipaddress

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import ApiClient
from yarl import URL

# kubernetes_asyncio's own value: watch events of large objects exceed aiohttp's default buffer.
READ_BUFSIZE = 2**21


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def environment_proxy(server: str) -> tuple[str, dict[str, str]] | None:
    """The proxy the environment names for ``server`` and its ``Proxy-Authorization`` header,
    or ``None`` (no proxy variable for the scheme, ``NO_PROXY`` names the host, or loopback)."""
    url = URL(server)
    if url.host is None or _loopback(url.host):
        return None
    try:
        proxy, auth = get_env_proxy_for_url(url)
    except LookupError:
        return None
    headers = {"Proxy-Authorization": auth.encode()} if auth is not None else {}
    return str(proxy), headers


def settle_transport(api: ApiClient) -> None:
    """Resolve ``api``'s proxy once and give it a session that reads no environment per request.

    Call it right after building the client, inside the event loop that will use it.
    """
    rest = api.rest_client
    if not rest.proxy:
        found = environment_proxy(str(api.configuration.host))
        if found is not None:
            rest.proxy, headers = found
            if headers:
                rest.proxy_headers = {**(rest.proxy_headers or {}), **headers}
    old: aiohttp.ClientSession = rest.pool_manager
    connector = old.connector
    old.detach()  # the connector stays open; the old session now reports itself closed
    rest.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE
    )
