"""``coordination.k8s.io/v1`` Leases for leader election (README, *Operations*;
docs/fake-apiserver.md F61).

Get, create and replace with optimistic concurrency: :func:`replace_lease` sends the
resourceVersion it read, so a concurrent writer makes it fail with :class:`LeaseConflict`
(409). Times are microsecond RFC 3339 in UTC (``MicroTime``), as client-go writes them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.errors import ApiError
from dispatcher.k8s.resources import LEASES

Obj = dict[str, Any]


class LeaseConflict(Exception):
    """The Lease changed since it was read (409), or was created meanwhile."""


def format_micro_time(moment: datetime.datetime) -> str:
    """``2026-11-30T10:23:03.123456Z`` (``metav1.MicroTime``) for an aware or UTC-naive time."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str | None) -> datetime.datetime | None:
    """An aware UTC datetime from a MicroTime or Time string; None when absent or malformed."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


@dataclass(frozen=True)
class LeaseRecord:
    """The leader-election fields of a Lease's ``spec``."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: datetime.datetime | None = None
    renew_time: datetime.datetime | None = None
    lease_transitions: int = 0

    def to_spec(self) -> Obj:
        """The Lease ``spec``."""
        spec: Obj = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.lease_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        return spec

    @classmethod
    def from_spec(cls, spec: Obj | None) -> LeaseRecord:
        """The record of a Lease ``spec`` (missing fields: empty or zero)."""
        spec = spec or {}
        return cls(
            holder_identity=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            renew_time=parse_micro_time(spec.get("renewTime")),
            lease_transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclass(frozen=True)
class Lease:
    """A Lease as read: where it is, its resourceVersion and its record."""

    namespace: str
    name: str
    resource_version: str
    record: LeaseRecord

    @classmethod
    def from_object(cls, obj: Obj) -> Lease:
        """From the API's JSON."""
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            record=LeaseRecord.from_spec(obj.get("spec")),
        )


def _body(namespace: str, name: str, record: LeaseRecord, resource_version: str = "") -> Obj:
    metadata: Obj = {"name": name, "namespace": namespace}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": LEASES.api_version,
        "kind": "Lease",
        "metadata": metadata,
        "spec": record.to_spec(),
    }


async def get_lease(api: KubeApi, namespace: str, name: str) -> Lease | None:
    """The Lease, or None when it does not exist."""
    try:
        return Lease.from_object(await api.get(LEASES, name, namespace))
    except ApiError as error:
        if error.not_found:
            return None
        raise


async def create_lease(api: KubeApi, namespace: str, name: str, record: LeaseRecord) -> Lease:
    """Create the Lease; :class:`LeaseConflict` when it exists already."""
    try:
        obj = await api.create(LEASES, _body(namespace, name, record), namespace)
    except ApiError as error:
        if error.conflict:
            raise LeaseConflict(error.message) from error
        raise
    return Lease.from_object(obj)


async def replace_lease(api: KubeApi, lease: Lease, record: LeaseRecord) -> Lease:
    """Replace the Lease read as ``lease`` (its resourceVersion is the precondition);
    :class:`LeaseConflict` when someone wrote it since."""
    body = _body(lease.namespace, lease.name, record, lease.resource_version)
    try:
        obj = await api.replace(LEASES, lease.name, body, lease.namespace)
    except ApiError as error:
        if error.conflict:
            raise LeaseConflict(error.message) from error
        raise
    return Lease.from_object(obj)
