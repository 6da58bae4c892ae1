"""The nomination controller: work queue, reconcile, in-flight bookkeeping, nomination writes."""
