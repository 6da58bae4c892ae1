"""Issue 8, scope 1, fault-injection suite: manager API faults during a burst, and conflicts.

Both tests run the real dispatcher against the sandbox (fake API servers over HTTPS with the
real Kueue v0.19.2 CRDs, the emulated Kueue) and inject faults on the manager cluster only.

The faults match the request's verb, path and client: only requests whose User-Agent is the
dispatcher's (``dispatcher.k8s.client.USER_AGENT``) are faulted, so "10% of the dispatcher's
requests" is exact and the emulated Kueue, which uses the same verbs and paths (Workload status
writes, watches and lists of Kueue's kinds, Event creation), and the test's own submissions are
never faulted.

A plain latency fault holds a request before the server reads its body: a write whose client
gave up is never applied (the journal records it as 500, connection lost). "Applied on the
server but timed out on the client" (a lost answer) has its own test, with latency faults that
hold the answer after the write took effect (``hold=True``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.controller.nominator import Nominator
from dispatcher.k8s.client import USER_AGENT
from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import Environment, environment
from dispatcher_sandbox.fake_apiserver.faults import Fault, Faults, Journal, JournalEntry
from dispatcher_sandbox.harness.faults.api import (
    FirstAttemptConflicts,
    PlacementTracker,
    RetryLog,
    answers_by_client,
    contradicting,
    small_cpu_jobs,
    status_writes_by_workload,
    wait_drained,
    wait_leading,
    wait_until,
    workload_name_pattern,
    workload_names,
    write_counts,
)
from dispatcher_sandbox.harness.scenario import NominationRecorder, dispatcher_events, scrape

pytestmark = pytest.mark.faults

STUCK_SERIES = "multikueue_dispatcher_stuck_workloads_total"
NOMINATIONS_SERIES = "multikueue_dispatcher_nominations_total"

# Size of the burst: issue 8 asks for >= 500. Measured on the shared 2-CPU machine (whole test,
# 1-2 other processes running): 100 in 18 s, 250 in 41 s, 500 in 58-92 s, since the emulated
# Kueue reads its caches without copying them (Informer.values) and the faults spare it (user
# agent); before, 500 took 371 s. Those figures are for bare Workloads; since issue 14 the burst
# is Jobs (the emulated Job integration makes the Workloads, and MultiKueue creates a remote Job
# too): 500 dispatched in 96 s (one run, 4 other processes on the machine, the worker-client
# rate limit lifted). `FAULTS_API_BURST=<n>` overrides it (e.g. 100 for a quick run).
BURST = int(os.environ.get("FAULTS_API_BURST", "500"))
REQUEST_TIMEOUT = 2.0  # the dispatcher's manager request timeout in this test (seconds)
HANG = 5.0  # delay of the "time out" fault: longer than REQUEST_TIMEOUT
RETRY_AFTER = 1  # seconds, on the 429 answers
SEED = 8  # the manager's fault random source (probabilities)

# What the dispatcher sends to the manager: reads of Kueue's kinds and of its Secrets, status
# writes of Workloads; Events are faulted separately (their create is the only create it sends).
READS_AND_WRITES = (
    r"/(workloads|multikueueclusters|multikueueconfigs|admissionchecks|clusterqueues|secrets)"
    r"(/|$)"
)
READ_WRITE_VERBS = ("get", "list", "watch", "patch")
EVENTS = r"/events$"
DISPATCHER = f"^{re.escape(USER_AGENT)}$"  # the faults' client: the dispatcher only

# Lost answers: the write is stored, its answer held past the dispatcher's request timeout.
# The timeout covers every request of the dispatcher's manager client, its start-up probe
# (GET /version) included: at 1 s that probe timed out once in a fresh-clone CI (2f695a8),
# with three test processes sharing the two CPUs and this process starting its clusters. The
# hold stays well past the timeout, so that every held answer is lost.
LOST_ANSWER_TIMEOUT = 2.0
LOST_ANSWER_HOLD = 5.0

# Per-code probability of one request; together about 10% of the matching requests.
ERRORS = {500: 0.03, 503: 0.03, 429: 0.02}
TIMEOUTS = 0.02


@contextlib.asynccontextmanager
async def leading(
    tmp_path: Path,
    crds_dir: Path,
    settings: dict[str, Any],
    journal: int,
    kueue: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Environment, Nominator, RetryLog]]:
    """The sandbox with the dispatcher in-process under ``settings`` (and the emulated Kueue
    under ``kueue``), once it leads with every worker connected; the manager keeps a journal of
    ``journal`` requests; the nomination loop's failed reconciles are collected."""
    async with (
        RetryLog() as retries,
        environment(
            tmp_path, default_topology(), crds=crds_dir, settings=settings, kueue=kueue
        ) as env,
    ):
        assert env.dispatcher is not None
        nominator = await wait_leading(env.dispatcher)
        env.sandbox.manager.journal = Journal(journal)
        yield env, nominator, retries


def _faults(cluster: Any) -> dict[str, list[Fault]]:
    """Install the fault mix on ``cluster``; returns the faults by label."""
    installed: dict[str, list[Fault]] = {}
    for path, verbs in ((READS_AND_WRITES, READ_WRITE_VERBS), (EVENTS, ("create",))):
        for code, probability in ERRORS.items():
            installed.setdefault(str(code), []).append(
                cluster.faults.error(
                    code,
                    verbs=verbs,
                    path=path,
                    probability=probability,
                    retry_after=RETRY_AFTER if code == 429 else None,
                    message=f"injected {code}",
                    user_agent=DISPATCHER,
                )
            )
        installed.setdefault("timeout", []).append(
            cluster.faults.latency(
                HANG, verbs=verbs, path=path, probability=TIMEOUTS, user_agent=DISPATCHER
            )
        )
    return installed


def _faultable(entry: JournalEntry) -> bool:
    """Whether the fault mix matches a request by its verb and path (any client)."""
    if entry.verb in READ_WRITE_VERBS and re.search(READS_AND_WRITES, entry.path):
        return True
    return entry.verb == "create" and re.search(EVENTS, entry.path) is not None


async def test_manager_api_faults_during_a_burst(
    tmp_path: Path,
    crds_dir: Path,
    figures: Any,
) -> None:
    """Issue 8 scope 1, "manager API: 10% of requests fail with 500/503/429 (with Retry-After) or
    time out, for a burst of >= 500 workloads -> all dispatched, none twice, none stuck after
    faults stop".

    - all dispatched: every manager Workload gets ``status.clusterName`` (C16, C36);
    - none twice: exactly one remote copy per Workload across the workers (C33, C51's
      dispatched/admitted ratio), exactly one admitted nomination write per Workload (writes
      carry the resourceVersion their decision was based on, C48), and no write naming a
      cluster other than where it was admitted;
    - none stuck: the stuck counter (C43 detector) stays 0, no Workload without clusterName, the
      dispatcher's work queue drains;
    - 429: the dispatcher waits at least Retry-After before retrying.
    """
    lines = small_cpu_jobs("burst", BURST)
    recorder = NominationRecorder()
    tracker = PlacementTracker()
    settings = {
        "manager_client.request_timeout_seconds": REQUEST_TIMEOUT,
        # The C43 detector fires when a copy is Admitted on a worker and the manager lacks
        # clusterName for this long. The emulated Kueue copies admission back slowly when
        # saturated (measured up to 71 s with 500 workloads, and up to 161 s on a slower
        # machine, where the burst took 219 s): longer than the whole burst, so that only a
        # real pitfall (C43), not the emulator's speed, counts here.
        "stuck_after_seconds": 600.0,
    }
    # The burst measures the dispatcher under manager API faults. Kueue v0.19's clients to a
    # worker are rate-limited by client-go's defaults (5 QPS per kind, C10/C20, issue 14 item
    # 10): 500 Jobs to one worker would then wait minutes for their remote Workload and Job
    # creates, and the copy-back of clusterName (after the remote Job exists) would outlast the
    # C43 detector below. The emulation's knob lifts that limit here (KueueConfig
    # .worker_client_qps, an accepted difference of the emulation, docs/kueue-versions.md).
    kueue = {"worker_client_qps": math.inf}
    leader = leading(tmp_path, crds_dir, settings, journal=1_000_000, kueue=kueue)
    async with leader as (env, nominator, retries):
        assert env.dispatcher is not None
        manager = env.sandbox.manager
        manager.faults = Faults(SEED)  # seeded draws for the probabilities
        recorder.install(manager)
        tracker.install(env)

        faults = _faults(manager)
        started = time.monotonic()
        names = workload_names(await env.submit(lines))
        submitted = time.monotonic() - started
        try:
            await tracker.wait_for(names, within=60 + BURST * 1.0)
        except TimeoutError:
            missing = sorted(names - tracker.placed.keys())
            pytest.fail(f"{len(missing)} of {BURST} not dispatched, e.g. {missing[:5]}")
        dispatched_in = time.monotonic() - started
        fired = {label: sum(f.fired for f in group) for label, group in faults.items()}
        manager.faults.clear()
        # The dispatcher's requests while the faults were installed, and those they match.
        journal = manager.journal.entries()
        during = [e for e in journal if e.user_agent == USER_AGENT]
        matching = [e for e in during if _faultable(e)]
        # Other clients (the emulated Kueue, the test's submissions) are never faulted.
        spared = [e for e in journal if e.user_agent != USER_AGENT and e.status in ERRORS]

        # None stuck after the faults stop: the dispatcher's queue drains, every Workload
        # keeps its clusterName, and the C43 detector never fired.
        await wait_drained(nominator.queue, within=60)
        await wait_until(lambda: env.kueue.manager.admitted() >= BURST, within=60)
        final = {w["metadata"]["name"]: w for w in await env.workloads()}
        unplaced = sorted(n for n in names if not (final[n].get("status") or {}).get("clusterName"))
        samples = await scrape(env.dispatcher)
        stuck = sum(value for _, value in samples.get(STUCK_SERIES, []))

        # None twice: one copy per Workload across the workers; one admitted write each.
        copies = await env.copies_by_workload()
        twice = sorted(n for n, where in copies.items() if len(where) > 1)
        missing_copies = sorted(names - copies.keys())
        counts = write_counts(recorder.writes)
        duplicates = sorted(n for n, c in counts.items() if c > 1)
        wrong = contradicting(recorder.writes, tracker.placed)
        never_written = sorted(names - counts.keys())

        entries = manager.journal.entries()
        attempts = status_writes_by_workload(entries, "multikueue-dispatcher")
        by_client = answers_by_client(entries, tuple(ERRORS))
        failures = Counter(r.status for r in retries.retries)

        figures.record("workloads submitted", BURST)
        figures.record("workloads dispatched", len(tracker.placed.keys() & names))
        for label, count in fired.items():
            figures.record(f"injected faults fired: {label}", count)
        for label, count in sorted(by_client.items()):
            # 500 also counts writes abandoned by their client during an injected delay.
            figures.record(f"answered {label}", count)
        # The shares, over the dispatcher's requests while the faults were installed: injected
        # errors and delays counted where they fired (exact), and what the journal recorded as
        # answered 500/503/429 (also counting delayed writes their client abandoned, as 500).
        errors_fired = sum(fired[str(code)] for code in ERRORS)
        answered = sum(1 for e in matching if e.status in ERRORS)
        figures.record("dispatcher requests to the manager (faults on)", len(during))
        figures.record("of those, matching the faults (verb, path)", len(matching))
        figures.record(
            "matching requests failed 500/503/429", 100 * errors_fired / len(matching), "%"
        )
        figures.record(
            "matching requests delayed past the timeout",
            100 * fired["timeout"] / len(matching),
            "%",
        )
        figures.record(
            "matching requests answered 500/503/429", 100 * answered / len(matching), "%"
        )
        figures.record("other clients' requests answered 500/503/429", len(spared))
        for status, count in sorted(failures.items()):
            figures.record(f"dispatcher reconcile failures: {status or 'timeout'}", count)
        figures.record("duplicate nomination writes (workloads)", len(duplicates))
        figures.record("contradicting nomination writes", len(wrong))
        figures.record("workloads with copies on two workers", len(twice))
        figures.record("stuck (metric)", stuck)
        figures.record("left without clusterName", len(unplaced))
        figures.record("time to submit the burst", submitted, "s")
        figures.record("time to dispatch all", dispatched_in, "s")
        figures.record("admitted nomination writes per workload", len(recorder.writes) / BURST)
        figures.record("status write requests per workload", sum(attempts.values()) / BURST)
        figures.record("max status write requests for one workload", max(attempts.values()))
        dispatched = env.kueue.manager.dispatched()
        admitted = env.kueue.manager.admitted()
        figures.record("remote copies per admitted workload (C51)", dispatched / admitted)

        assert sum(fired.values()) > 0.05 * BURST, fired  # the faults really fired
        assert all(count > 0 for count in fired.values()), fired
        assert not spared, spared[:5]
        assert not unplaced, unplaced[:10]
        assert not missing_copies, missing_copies[:10]
        assert not twice, {n: copies[n] for n in twice[:10]}
        assert not never_written, never_written[:10]
        assert not duplicates, {n: recorder.of(n) for n in duplicates[:10]}
        assert not wrong, {n: (tracker.placed.get(n), recorder.of(n)) for n in wrong[:10]}
        assert stuck == 0
        assert admitted == BURST
        # 429: never retried before the server's Retry-After.
        answered_429 = [r for r in retries.retries if r.status == 429]
        assert all(r.retry_after == RETRY_AFTER for r in answered_429), answered_429[:5]
        too_early = [r for r in answered_429 if r.delay < RETRY_AFTER]
        assert not too_early, too_early[:10]


@pytest.mark.parametrize("write_mode", ["apply"])  # merge-patch was removed (README)
async def test_conflict_on_every_first_write_is_retried(
    tmp_path: Path, crds_dir: Path, figures: Any, write_mode: str
) -> None:
    """Issue 8 scope 1, "conflicts: 409 on every first write attempt -> retried correctly".

    The first nomination write of every Workload is answered 409 Conflict (the API server's
    stale-resourceVersion answer, C48: a harmless race, re-read and decide again); the second
    attempt is admitted. Every Workload ends nominated and admitted on a worker (C36), each has
    exactly two write attempts that reached admission (one refused, one written: none lost, none
    extra) and the written nomination is where it was admitted.
    """
    count = 60
    lines = small_cpu_jobs(f"conflict-{write_mode}", count)
    hook = FirstAttemptConflicts()
    tracker = PlacementTracker()
    settings = {"write_mode": write_mode}
    async with environment(tmp_path, default_topology(), crds=crds_dir, settings=settings) as env:
        assert env.dispatcher is not None
        nominator = await wait_leading(env.dispatcher)
        manager = env.sandbox.manager
        manager.journal = Journal(200_000)
        hook.install(manager)
        tracker.install(env)
        started = time.monotonic()
        names = workload_names(await env.submit(lines))
        await tracker.wait_for(names, within=120)
        dispatched_in = time.monotonic() - started
        await wait_until(lambda: env.kueue.manager.admitted() >= count, within=60)
        attempts = status_writes_by_workload(manager.journal.entries(), "multikueue-dispatcher")
        written = write_counts(hook.writes)
        wrong = contradicting(hook.writes, tracker.placed)

        figures.record(f"[{write_mode}] workloads dispatched", len(tracker.placed.keys() & names))
        figures.record(f"[{write_mode}] conflicts injected", hook.refused)
        figures.record(f"[{write_mode}] retries after a conflict (races)", nominator.races)
        figures.record(
            f"[{write_mode}] status write requests per workload",
            sum(attempts[n] for n in names) / count,
        )
        figures.record(f"[{write_mode}] time to dispatch all", dispatched_in, "s")

        assert hook.refused == count
        assert {n: hook.attempts[n] for n in names} == dict.fromkeys(names, 2)
        assert {n: written[n] for n in names} == dict.fromkeys(names, 1)
        assert not wrong, wrong
        assert nominator.races >= count
        assert env.kueue.manager.admitted() == count
        copies = await env.copies_by_workload()
        assert {n: len(copies.get(n, [])) for n in names} == dict.fromkeys(names, 1)


@pytest.mark.parametrize("write_mode", ["apply"])  # merge-patch was removed (README)
async def test_lost_answer_to_every_first_write(
    tmp_path: Path, crds_dir: Path, figures: Any, write_mode: str
) -> None:
    """Issue 8 scope 1, timeouts of writes: the first nomination write of every Workload is
    stored, but its answer is held past the dispatcher's request timeout (a lost answer).

    The dispatcher cannot know whether it wrote; it retries on fresh data. The write it could
    not confirm is not repeated against a changed object (a retry carries the resourceVersion
    it decided on, C48, and gets 409) and is not lost from what operators see: each Workload
    has one stored nomination write, one ``Nominated`` Event and one nomination counted, and
    is admitted once where it was nominated (C36).
    """
    count = 30
    lines = small_cpu_jobs(f"lost-{write_mode}", count)
    recorder = NominationRecorder()
    tracker = PlacementTracker()
    settings = {
        "write_mode": write_mode,
        "manager_client.request_timeout_seconds": LOST_ANSWER_TIMEOUT,
    }
    async with leading(tmp_path, crds_dir, settings, journal=200_000) as (env, nominator, retries):
        assert env.dispatcher is not None
        manager = env.sandbox.manager
        recorder.install(manager)
        tracker.install(env)

        def timeouts() -> int:
            return sum(1 for r in retries.retries if r.status == 0)

        held = [
            manager.faults.latency(
                LOST_ANSWER_HOLD,
                verbs=("patch",),
                path=f"/workloads/{workload_name_pattern(line.name)}/status$",
                count=1,
                user_agent=DISPATCHER,
                hold=True,
            )
            for line in lines
        ]
        started = time.monotonic()
        names = workload_names(await env.submit(lines))
        await tracker.wait_for(names, within=120)
        dispatched_in = time.monotonic() - started
        await wait_until(lambda: env.kueue.manager.admitted() >= count, within=60)
        # Kueue may admit a copy while the answer to its nomination is still held: wait until
        # every held write has timed out on the dispatcher's side and been retried.
        await wait_until(lambda: timeouts() >= count, within=60)
        await wait_drained(nominator.queue, within=60)

        def journaled() -> Counter[str]:
            # A held request is journaled when its answer is finally sent.
            return status_writes_by_workload(manager.journal.entries(), "multikueue-dispatcher")

        await wait_until(lambda: names <= journaled().keys(), within=30)
        attempts = journaled()
        written = write_counts(recorder.writes)
        wrong = contradicting(recorder.writes, tracker.placed)
        events = Counter(
            e["involvedObject"]["name"] for e in await dispatcher_events(env, "Nominated")
        )
        samples = await scrape(env.dispatcher)
        counted = sum(value for _, value in samples.get(NOMINATIONS_SERIES, []))

        figures.record(f"[lost answer, {write_mode}] workloads dispatched", len(tracker.placed))
        figures.record(f"[lost answer, {write_mode}] answers held", sum(f.fired for f in held))
        figures.record(f"[lost answer, {write_mode}] reconciles timed out", timeouts())
        figures.record(
            f"[lost answer, {write_mode}] status write requests per workload",
            sum(attempts[n] for n in names) / count,
        )
        figures.record(f"[lost answer, {write_mode}] time to dispatch all", dispatched_in, "s")

        assert [f.fired for f in held] == [1] * count
        assert timeouts() == count
        assert {n: written[n] for n in names} == dict.fromkeys(names, 1)
        assert not wrong, wrong
        assert {n: events[n] for n in names} == dict.fromkeys(names, 1)
        assert counted == count
        assert env.kueue.manager.admitted() == count
        copies = await env.copies_by_workload()
        assert {n: len(copies.get(n, [])) for n in names} == dict.fromkeys(names, 1)
