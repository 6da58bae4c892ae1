"""How long the real control plane of the e2e topology takes to come up.

Not a test: it prints figures (and writes them as JSON with ``--json FILE``). Each run starts a
fresh real control plane of ``tests/e2e/topology.yaml`` (a manager and two workers: etcd,
kube-apiserver, the garbage collector and Kueue v0.19.2 as processes on loopback, ``make
real-binaries``) and reports two moments, counted from the start:

- **ready**: every cluster's processes answer and Kueue's API is installed (the plane's own
  "clusters ready" log line);
- **Active**: the topology is applied and Kueue's manager reports every MultiKueueCluster
  ``Active`` (what the e2e backend waits for before its first test).

    .venv/bin/python benchmarks/real_start_up.py [--runs 3] [--json F]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import anyio

from dispatcher.topology import load_topology
from dispatcher_sandbox.real_kueue import plane as real_plane
from dispatcher_sandbox.real_kueue.topology import real_topology

TOPOLOGY = Path(__file__).resolve().parent.parent / "tests" / "e2e" / "topology.yaml"


class _ReadyMark(logging.Handler):
    """Notes when the plane logs that its clusters are ready."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.at: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("real control plane: %d clusters ready"):
            self.at = time.monotonic()


async def one_run() -> dict[str, float]:
    """Start and stop one control plane; the seconds to ready and to Active."""
    mark = _ReadyMark()
    logger = logging.getLogger(real_plane.__name__)
    logger.addHandler(mark)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory(prefix="mkd-real-start-up-") as directory:
            started = time.monotonic()
            async with real_topology(
                Path(directory),
                load_topology(TOPOLOGY),
                dispatcher_name="example.com/start-up-benchmark",
                remedy="policy",
                time_scale=1.0,
            ):
                active = time.monotonic()
    finally:
        logger.removeHandler(mark)
        logger.setLevel(level)
    if mark.at is None:
        raise RuntimeError("the plane did not log that its clusters were ready")
    return {"ready_s": round(mark.at - started, 1), "active_s": round(active - started, 1)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    runs = [anyio.run(one_run) for _ in range(args.runs)]
    print(f"real control plane of {TOPOLOGY.name} (a manager and two workers), {args.runs} runs:")
    for i, run in enumerate(runs):
        print(f"  run {i + 1}: ready after {run['ready_s']} s, Active after {run['active_s']} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
