"""The probe and metrics HTTP server: ``/healthz``, ``/readyz`` and ``/metrics``.

Health probes and metrics listen on separate addresses by default (``health_address`` and
``metrics_address``, docs/configuration.md; Kueue: probes on ``:8081``, metrics on their own
port); when both addresses are equal one listener serves all three paths.
The server runs inside the anyio task tree: :func:`serve_http` reports the bound addresses through
``task_status.started()`` and, when cancelled, stops its listeners in a shielded scope bounded by
``shutdown_timeout`` (docs/fake-apiserver.md#9-client-facts).

Nothing secret is ever answered: a failing check shows only the detail text the application
chose, and a check that raises shows only the exception's type name.
"""

from __future__ import annotations

import inspect
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = [
    "BoundAddresses",
    "Check",
    "CheckResult",
    "format_address",
    "parse_address",
    "serve_http",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of a health or readiness check; ``detail`` is shown in the response body."""

    ok: bool
    detail: str = ""


Check = Callable[[], "CheckResult | bool | Awaitable[CheckResult | bool]"]
"""A check the application injects: sync or async, returning ``bool`` or :class:`CheckResult`."""


@dataclass(frozen=True)
class BoundAddresses:
    """Where the server listens once started (ports resolved when ``0`` was asked for)."""

    health: tuple[str, int]
    metrics: tuple[str, int]


def parse_address(text: str) -> tuple[str, int]:
    """Split ``host:port`` (``:8081`` for every interface, ``[::1]:8081`` for IPv6) into
    ``(host, port)``; ``host`` is ``""`` for every interface. Raises ``ValueError``."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(f"address {text!r} must be host:port or :port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"address {text!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError(f"address {text!r}: write IPv6 hosts in brackets, e.g. [::1]:8081")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"address {text!r}: port must be a number from 0 to 65535")
    if any(c.isspace() or c in "/?#@" for c in host):
        raise ValueError(f"address {text!r}: {host!r} is not a host name")
    return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """The inverse of :func:`parse_address`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _run_check(check: Check, limit: float) -> CheckResult:
    try:
        with anyio.fail_after(limit):
            outcome = check()
            if inspect.isawaitable(outcome):
                outcome = await outcome
    except TimeoutError:
        return CheckResult(False, f"check timed out after {limit:g}s")
    except Exception as error:
        log.warning("probe check failed", exc_info=True)
        return CheckResult(False, f"check raised {type(error).__name__}")
    if isinstance(outcome, CheckResult):
        return outcome
    return CheckResult(bool(outcome))


def _probe_handler(
    check: Check | None, timeout: float
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        result = CheckResult(True) if check is None else await _run_check(check, timeout)
        if result.ok:
            return web.Response(text=f"ok{': ' + result.detail if result.detail else ''}\n")
        detail = result.detail or "check failed"
        return web.Response(status=503, text=f"not ok: {detail}\n")

    return handle


def _metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    return handle


async def serve_http(
    *,
    health_address: str,
    metrics_address: str | None,
    readiness: Check,
    registry: CollectorRegistry,
    liveness: Check | None = None,
    check_timeout: float = 2.0,
    shutdown_timeout: float = 5.0,
    task_status: TaskStatus[BoundAddresses] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``/healthz`` and ``/readyz`` on ``health_address`` and ``/metrics`` (the
    Prometheus text of ``registry``) on ``metrics_address`` until cancelled.

    Use as ``bound = await tg.start(functools.partial(serve_http, ...))``. ``readiness`` decides
    ``/readyz`` (200 ``ok`` or 503 ``not ok: detail``); ``liveness`` decides ``/healthz``
    (always 200 when ``None``). Each check gets ``check_timeout`` seconds. Addresses are
    ``host:port`` as :func:`parse_address` reads them; port 0 picks a free port. One listener
    serves all three paths when ``metrics_address`` is ``None`` or equals ``health_address``
    with a fixed port (two port-0 addresses get a free port each).
    """
    health = parse_address(health_address)
    metrics = parse_address(metrics_address) if metrics_address is not None else health
    shared = metrics == health and (metrics_address is None or health[1] != 0)
    probes = [
        web.get("/healthz", _probe_handler(liveness, check_timeout)),
        web.get("/readyz", _probe_handler(readiness, check_timeout)),
    ]
    scrape = [web.get("/metrics", _metrics_handler(registry))]
    listeners = [(health, probes + scrape)] if shared else [(health, probes), (metrics, scrape)]
    runners: list[web.AppRunner] = []
    bound: list[tuple[str, int]] = []
    try:
        for address, defs in listeners:
            app = web.Application()
            app.add_routes(defs)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
            runners.append(runner)
            await runner.setup()
            site = web.TCPSite(runner, address[0] or None, address[1])
            await site.start()
            sockname = runner.addresses[0]
            bound.append((str(sockname[0]), int(sockname[1])))
            log.info(
                "serving %s on %s",
                " ".join(d.path for d in defs),
                format_address(*bound[-1]),
            )
        task_status.started(BoundAddresses(health=bound[0], metrics=bound[-1]))
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(shutdown_timeout):
            for runner in reversed(runners):
                await runner.cleanup()
