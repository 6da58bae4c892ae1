"""Prometheus text expositions read back: what a test or a benchmark scrapes from ``/metrics``
(the dispatcher's, Kueue's, a kube-apiserver's)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def samples_of(text: str) -> Samples:
    """The samples of a Prometheus text exposition by sample name, with labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples
