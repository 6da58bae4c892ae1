"""Issue 8, security: "the image runs as non-root with a read-only filesystem".

No container runtime here, so the image's promise is shown two ways:

- statically: the Dockerfile's final stage runs as a numeric non-root USER, and the Deployment
  asks for runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, all capabilities
  dropped, the RuntimeDefault seccomp profile and the same uid as the image (the shape is also
  checked in tests/deploy; here the pairing of the two);
- by running the real manager process (``python -m dispatcher run``, the venv as installed) the
  way the pod runs it: in a private mount namespace whose root filesystem is remounted
  read-only, with a fresh tmpfs as its only writable directory (the Deployment's ``/tmp``
  emptyDir, given as TMPDIR), as uid/gid 65534 with no supplementary groups, no capabilities
  and no-new-privs, HOME unwritable (``/nonexistent``), cwd ``/`` and
  PYTHONDONTWRITEBYTECODE=1. It must become ready, dispatch a job on the sandbox, stop cleanly
  on SIGTERM, print no write error, and leave nothing in its tmpfs.

That run needs root (to create the namespace and switch users) and ``unshare``/``setpriv``;
it is skipped, saying so, otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import aiohttp
import anyio
import pytest
import yaml

from dispatcher.topology import default_topology
from dispatcher_sandbox.environment import environment
from dispatcher_sandbox.harness.scenario import by_job, cluster_of, cpu_jobs, placed_all

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534

# Run as root inside `unshare -m` (a private mount namespace: nothing here reaches the host).
# $1 stage dir, $2 a directory on the interpreter's path that others cannot enter (or ""),
# $3 its child on that path; the rest is the command. When the interpreter lives under such a
# directory (a pyenv build in /root), an empty read-only tmpfs is laid over that directory with
# only the interpreter's tree bound back into it, so uid 65534 can run the venv as installed.
SCRIPT = r"""
set -eu
stage=$1; blocked=$2; child=$3; shift 3
mount --make-rprivate /
if [ -n "$blocked" ]; then
    mount --bind "$child" "$stage/hold"
    mount -t tmpfs -o mode=0755,size=1m tmpfs "$blocked"
    mkdir -p "$child"
    mount --bind "$stage/hold" "$child"
    mount -o remount,bind,ro "$child"
    mount -o remount,bind,ro "$stage/hold"
    mount -o remount,ro "$blocked"
fi
mount -o remount,bind,ro /
mount -t tmpfs -o mode=1777,size=16m tmpfs "$stage/tmp"
cd /
# Unquoted on purpose (split into words); the stage path has no spaces (mkdtemp under /tmp).
nobody="setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=-all --bounding-set=-all
    --no-new-privs env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR=$stage/tmp
    PYTHONDONTWRITEBYTECODE=1"
if touch /.probe 2>/dev/null; then echo "PROBE root-writable"; else echo "PROBE root-read-only"; fi
# /tmp is world-writable on the host: only the read-only mount stops uid 65534 here.
if $nobody touch "/tmp/.mkd-readonly-probe-$$" 2>/dev/null; then echo "PROBE tmp-writable"; \
    rm -f "/tmp/.mkd-readonly-probe-$$"; else echo "PROBE tmp-read-only"; fi
# setpriv and env exec: the background job's pid is the manager's.
$nobody "$@" &
pid=$!
echo "PID $pid"
rc=0
wait "$pid" || rc=$?
echo "EXIT $rc"
echo "WRITTEN-BEGIN"
find "$stage/tmp" -mindepth 1
echo "WRITTEN-END"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _stage() -> Path:
    """A directory everyone may enter, for the kubeconfig and the mount points."""
    stage = Path(tempfile.mkdtemp(prefix="mkd-readonly-", dir="/tmp"))
    stage.chmod(0o755)
    for name in ("hold", "tmp"):
        (stage / name).mkdir()
    return stage


def _status(pid: int) -> dict[str, str]:
    """The process's identity lines from /proc/PID/status."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _files_of_nobody_in_shm() -> set[Path]:
    return {p for p in Path("/dev/shm").iterdir() if p.stat().st_uid == NOBODY}


def _start(command: list[str]) -> subprocess.Popen[str]:
    """Start ``command`` in its own process group (so it can be ended as a whole)."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _blocked_ancestor(executable: str) -> tuple[str, str]:
    """The first directory on the interpreter's real path that others cannot enter, and its
    child on that path ("" and "" when there is none)."""
    parts = Path(os.path.realpath(executable)).parts
    for i in range(1, len(parts) - 1):
        directory = Path(*parts[: i + 1])
        if not directory.stat().st_mode & stat.S_IXOTH:
            return str(directory), str(Path(*parts[: i + 2]))
    return "", ""


def _read_until(proc: subprocess.Popen[str], marker: str, seen: list[str], limit: float) -> bool:
    """Read output lines into ``seen`` until one starts with ``marker`` (False at the end)."""
    assert proc.stdout is not None
    timer = threading.Timer(limit, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            seen.append(line.rstrip("\n"))
            if line.startswith(marker):
                return True
        return False
    finally:
        timer.cancel()


def _dockerfile_user() -> tuple[int, int]:
    final = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    [user] = [line.split()[1] for line in final.splitlines() if line.startswith("USER ")][-1:]
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def test_image_user_and_deployment_security_context_agree() -> None:
    """Issue 8, security: the image runs as a numeric non-root user, and the Deployment runs it
    as that user, non-root, with a read-only root filesystem, no privilege escalation, no
    capabilities and the RuntimeDefault seccomp profile."""
    uid, gid = _dockerfile_user()
    assert uid != 0
    assert gid != 0
    deployment = next(
        d
        for d in yaml.safe_load_all((ROOT / "manifests" / "base" / "deployment.yaml").read_text())
        if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        uid,
        gid,
    )
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod.get("automountServiceAccountToken") is not False  # it needs its token
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security or security["privileged"] is False
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert writable == ["/tmp"], "the only writable path is the /tmp emptyDir"


async def _ready(port: int, within: float) -> None:
    """Poll ``/readyz`` (no event to wait on across processes) until it answers 200."""
    with anyio.fail_after(within):
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await anyio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.crds
@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to create a mount namespace and switch to uid 65534"
)
@pytest.mark.skipif(
    not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="needs util-linux's unshare and setpriv",
)
async def test_manager_runs_as_nobody_on_a_read_only_root(tmp_path: Path, crds_dir: Path) -> None:
    """Issue 8, security: "the image runs as non-root with a read-only filesystem": the real
    manager process as uid/gid 65534 (no groups, no capabilities, no-new-privs, checked in
    /proc) on a read-only root becomes ready, dispatches, stops cleanly on SIGTERM and writes
    nothing (its tmpfs is empty after it exits)."""
    for needed in (ROOT, Path(sys.prefix)):
        closed, _ = _blocked_ancestor(str(needed / "x"))
        if closed:
            pytest.skip(f"uid {NOBODY} cannot enter {closed}, on the way to {needed}")
    stage = _stage()
    try:
        blocked, child = _blocked_ancestor(sys.executable)
        health, metrics = _free_port(), _free_port()
        shm_before = _files_of_nobody_in_shm()
        async with environment(
            tmp_path, default_topology(), crds=crds_dir, run_dispatcher=False
        ) as env:
            kubeconfig = stage / "manager.kubeconfig"
            shutil.copy(env.sandbox.kubeconfig_path(env.sandbox.manager), kubeconfig)
            kubeconfig.chmod(0o644)
            command = [
                *("unshare", "-m", "sh", "-c", SCRIPT, "sh", str(stage), blocked, child),
                *(sys.executable, "-m", "dispatcher", "run"),
                *("--kubeconfig", str(kubeconfig), "--no-leader-election"),
                *("--health-address", f"127.0.0.1:{health}"),
                *("--metrics-address", f"127.0.0.1:{metrics}", "--log-format", "json"),
            ]
            seen: list[str] = []
            proc = _start(command)
            try:
                started = await anyio.to_thread.run_sync(_read_until, proc, "PID ", seen, 30)
                if not started:
                    pytest.skip("cannot set up the read-only namespace here: " + " | ".join(seen))
                pid = int(seen[-1].split()[1])
                reader = threading.Thread(target=_read_until, args=(proc, "WRITTEN-END", seen, 120))
                reader.start()
                await _ready(health, within=60)
                status = _status(pid)
                jobs = cpu_jobs("nobody", 1)
                await env.submit(jobs)
                final = by_job(
                    await env.wait_for_manager(placed_all({j.name for j in jobs}), within=60)
                )
                assert cluster_of(final[jobs[0].name]) == "worker-cpu"
                os.kill(pid, signal.SIGTERM)
                await anyio.to_thread.run_sync(reader.join, 60)
                rc = await anyio.to_thread.run_sync(proc.wait, 30)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)  # the shell and the manager we started
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        output = "\n".join(seen)
        print(output[-4000:])
        assert rc == 0, output[-3000:]
        assert "PROBE root-read-only" in seen
        assert "PROBE tmp-read-only" in seen
        assert "EXIT 0" in seen, output[-3000:]
        assert status["Uid"].split() == [str(NOBODY)] * 4, status
        assert status["Gid"].split() == [str(NOBODY)] * 4, status
        assert status["Groups"] == "", status
        assert int(status["CapEff"], 16) == 0, status
        assert status["NoNewPrivs"] == "1", status
        written = seen[seen.index("WRITTEN-BEGIN") + 1 : seen.index("WRITTEN-END")]
        assert written == [], f"left behind in its tmpfs: {written}"
        logs = [json.loads(line) for line in seen if line.startswith("{")]
        assert any(entry["message"].startswith("workload team-b/") for entry in logs), logs[-5:]
        errors = [e for e in logs if e["level"] in ("error", "critical") or "exception" in e]
        assert not errors, errors
        assert not re.search(r"Read-only file system|Permission denied|Traceback", output)
        shm = _files_of_nobody_in_shm() - shm_before
        assert not shm, f"files of uid {NOBODY} in /dev/shm: {shm}"
    finally:
        shutil.rmtree(stage, ignore_errors=True)
