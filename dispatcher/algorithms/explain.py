"""Human-readable text for a decision (used by assertion messages, Events and ``explain``)."""

from __future__ import annotations

from dispatcher.algorithms.model import Decision

__all__ = ["describe_decision"]


def describe_decision(decision: Decision) -> str:
    """A multi-line description: the nomination, then one line per candidate, then errors."""
    if decision.withheld:
        lines = [f"{decision.algorithm}: decision withheld — {decision.withheld}"]
        lines.extend(f"  !! stage {e.stage} from {e.source}: {e.message}" for e in decision.errors)
        return "\n".join(lines)
    nominated = ", ".join(decision.nominate) or "(none)"
    lines = [f"{decision.algorithm}: nominate {nominated} — {decision.reason}"]
    if decision.requeue_after is not None:
        lines.append(f"  look again in {decision.requeue_after:.0f}s")
    for v in sorted(decision.verdicts, key=lambda v: (v.rank is None, v.rank or 0, v.cluster)):
        if v.kept:
            scores = ", ".join(
                f"{s.scorer}={s.value:.3g}" + (f" ({s.detail})" if s.detail else "")
                for s in v.scores
            )
            lines.append(f"  #{v.rank} {v.cluster}: kept; {scores or 'no scores'}")
        else:
            lines.append(f"  -- {v.cluster}: dropped by {v.dropped_by}: {v.reason}")
    for e in decision.errors:
        lines.append(f"  !! stage {e.stage} from {e.source} skipped: {e.message}")
    return "\n".join(lines)
