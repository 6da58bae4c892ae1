"""Lease helpers: optimistic concurrency and MicroTime (docs/fake-apiserver.md F61)."""

from __future__ import annotations

import datetime

import pytest

from dispatcher.k8s.client import KubeApi
from dispatcher.k8s.leases import (
    LeaseConflict,
    LeaseRecord,
    create_lease,
    format_micro_time,
    get_lease,
    parse_micro_time,
    replace_lease,
)

NS = "default"
T0 = datetime.datetime(2026, 11, 30, 10, 23, 3, 123456, tzinfo=datetime.UTC)


def test_micro_time() -> None:
    assert format_micro_time(T0) == "2026-11-30T10:23:03.123456Z"
    assert parse_micro_time("2026-11-30T10:23:03.123456Z") == T0
    assert parse_micro_time("2026-11-30T10:23:03Z") == T0.replace(microsecond=0)
    assert parse_micro_time("") is None
    assert parse_micro_time("yesterday") is None
    other_zone = T0.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert format_micro_time(other_zone) == "2026-11-30T10:23:03.123456Z"


async def test_create_get_replace_with_conflicts(api: KubeApi) -> None:
    assert await get_lease(api, NS, "lock") is None
    record = LeaseRecord("a", 15, T0, T0, 0)
    lease = await create_lease(api, NS, "lock", record)
    assert lease.record == record
    with pytest.raises(LeaseConflict):
        await create_lease(api, NS, "lock", record)
    renewed = await replace_lease(
        api, lease, LeaseRecord("a", 15, T0, T0 + datetime.timedelta(seconds=2), 0)
    )
    assert renewed.resource_version != lease.resource_version
    with pytest.raises(LeaseConflict):  # stale resourceVersion: someone wrote since
        await replace_lease(api, lease, LeaseRecord("b", 15, T0, T0, 1))
    current = await get_lease(api, NS, "lock")
    assert current is not None
    assert current.record.holder_identity == "a"
    assert current.record.renew_time == T0 + datetime.timedelta(seconds=2)
