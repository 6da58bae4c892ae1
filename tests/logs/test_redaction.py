"""Credentials never reach the logs: bearer tokens, kubeconfig credential fields, service-account
JWTs, PEM blocks and base64 kubeconfig blobs are removed from messages, exceptions and fields."""

from __future__ import annotations

import base64
import io
import json
import logging
import random
import string
from collections.abc import Iterator

import pytest

from dispatcher.logs import REDACTED, RedactionFilter, configure_logging, redact, redact_value

RNG = random.Random(20261130)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def pem(kind: str, size: int) -> str:
    body = b64(RNG.randbytes(size))
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----", ""])


CA_PEM = pem("CERTIFICATE", 780)
KEY_PEM = pem("RSA PRIVATE KEY", 1190)
CA_DATA = b64(CA_PEM.encode())  # what kubeconfigs carry: LS0tLS1CRUdJTi...
KEY_DATA = b64(KEY_PEM.encode())
CERT_DATA = b64(pem("CERTIFICATE", 700).encode())
JWT = ".".join(
    [
        b64url(b'{"alg":"RS256","kid":"kJ3vQ0w2x9"}'),
        b64url(
            b'{"aud":["https://kubernetes.default.svc"],"exp":1796000000,'
            b'"iss":"https://kubernetes.default.svc","sub":'
            b'"system:serviceaccount:kueue-system:multikueue-sa"}'
        ),
        b64url(RNG.randbytes(256)),
    ]
)
OPAQUE_TOKEN = "".join(RNG.choice(string.ascii_lowercase + string.digits) for _ in range(6))
OPAQUE_TOKEN += "." + "".join(RNG.choice(string.ascii_lowercase + string.digits) for _ in range(16))
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: worker-h100
  cluster:
    server: https://10.0.0.12:6443
    certificate-authority-data: {CA_DATA}
users:
- name: multikueue-sa
  user:
    token: {JWT}
    client-certificate-data: {CERT_DATA}
    client-key-data: {KEY_DATA}
contexts:
- name: worker-h100
  context: {{cluster: worker-h100, user: multikueue-sa}}
current-context: worker-h100
"""
KUBECONFIG_B64 = b64(KUBECONFIG.encode())
SECRET_OBJECT = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "worker-h100-kubeconfig", "namespace": "kueue-system"},
    "data": {"kubeconfig": KUBECONFIG_B64},
}

# Pieces that must not survive anywhere in a log line.
SECRET_PIECES = [
    JWT.split(".")[1],
    JWT.split(".")[2][:40],
    CA_DATA[40:100],
    KEY_DATA[40:100],
    CERT_DATA[40:100],
    KUBECONFIG_B64[40:100],
    KEY_PEM.splitlines()[3],
    CA_PEM.splitlines()[3],
    OPAQUE_TOKEN,
]


def assert_clean(text: str) -> None:
    leaked = [piece for piece in SECRET_PIECES if piece in text]
    assert not leaked, f"secret pieces leaked: {leaked}"


@pytest.mark.parametrize(
    "text",
    [
        f"GET /apis returned 401 with Authorization: Bearer {JWT}",
        f"headers={{'Authorization': 'Bearer {OPAQUE_TOKEN}'}}",
        f"loading kubeconfig:\n{KUBECONFIG}",
        json.dumps({"users": [{"user": {"token": OPAQUE_TOKEN, "client-key-data": KEY_DATA}}]}),
        f"token={OPAQUE_TOKEN}&watch=true",
        f"secret {SECRET_OBJECT!r}",
        json.dumps(SECRET_OBJECT),
        f"bare jwt {JWT} in text",
        f"pem in text {KEY_PEM} end",
        f"client_key_data: {KEY_DATA}",
        f"truncated kubeconfig {KUBECONFIG_B64[:300]}",
    ],
    ids=[
        "bearer-jwt",
        "bearer-opaque",
        "kubeconfig-yaml",
        "kubeconfig-json",
        "query-token",
        "secret-repr",
        "secret-json",
        "jwt",
        "pem",
        "snake-key",
        "base64-blob",
    ],
)
def test_redact_removes_secrets(text: str) -> None:
    result = redact(text)
    assert_clean(result)
    assert REDACTED in result


@pytest.mark.parametrize(
    "text",
    [
        "nominated team-a/job-1 to worker-h100 (resourceVersion 91283)",
        "workload uid 7c9e6679-7425-40de-944b-e07fc1f90ae7 admitted",
        "image sha256:" + "ab12" * 16,
        "token expired, refreshing the client",
        "short base64 dGVzdA== stays",
        "server https://10.0.0.12:6443 refused the connection",
    ],
)
def test_redact_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_keeps_the_shape_of_a_kubeconfig() -> None:
    result = redact(KUBECONFIG)
    assert "server: https://10.0.0.12:6443" in result
    assert f"certificate-authority-data: {REDACTED}" in result
    assert f"client-key-data: {REDACTED}" in result
    assert f"token: {REDACTED}" in result
    assert "current-context: worker-h100" in result


def test_redact_value_walks_structures() -> None:
    value = {
        "token": "anything",
        "Client_Key_Data": "anything",
        "headers": {"Authorization": f"Bearer {JWT}"},
        "secret": SECRET_OBJECT,
        "items": [f"Bearer {OPAQUE_TOKEN}", 3, None, True],
        "raw": KUBECONFIG.encode(),
    }
    result = redact_value(value)
    assert result["token"] == REDACTED
    assert result["Client_Key_Data"] == REDACTED
    assert result["headers"]["Authorization"] == REDACTED
    assert result["secret"]["metadata"]["name"] == "worker-h100-kubeconfig"
    assert result["items"][1:] == [3, None, True]
    assert result["raw"] == f"<{len(KUBECONFIG.encode())} bytes>"
    assert_clean(json.dumps(result))


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("json", "debug", stream=stream)
    yield stream
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


def test_configured_logging_redacts_messages_args_fields_and_exceptions(
    json_log: io.StringIO,
) -> None:
    log = logging.getLogger("dispatcher.clusters")
    log.info("connecting with %s", KUBECONFIG, extra={"cluster": "worker-h100"})
    log.warning(
        "secret read",
        extra={"secret": SECRET_OBJECT, "token": OPAQUE_TOKEN, "kubeconfig": KUBECONFIG_B64},
    )
    try:
        raise PermissionError(f"401 Unauthorized for Bearer {JWT}")
    except PermissionError:
        log.exception("request failed", extra={"cluster": "worker-h100"})
    log.error("stack", stack_info=True, extra={"authorization": f"Bearer {JWT}"})

    output = json_log.getvalue()
    assert_clean(output)
    entries = [json.loads(line) for line in output.splitlines()]
    assert [e["message"].split()[0] for e in entries] == [
        "connecting",
        "secret",
        "request",
        "stack",
    ]
    assert entries[0]["cluster"] == "worker-h100"
    assert entries[1]["token"] == REDACTED
    assert entries[1]["secret"]["data"]["kubeconfig"] == REDACTED
    assert "PermissionError: 401 Unauthorized for Bearer [REDACTED]" in entries[2]["exception"]
    assert entries[3]["authorization"] == REDACTED


def test_filter_survives_a_broken_format_string() -> None:
    record = logging.LogRecord("n", logging.INFO, __file__, 1, "%d %d", (f"Bearer {JWT}",), None)
    assert RedactionFilter().filter(record)
    assert_clean(record.getMessage())
