"""The project's own test harness: builders, backends and kits the tests, benchmarks and scripts
of this repository share.

Not for plugin authors (their kit is :mod:`dispatcher.testing`, in the product). Everything here
runs from a checkout of the repository: some kits read files of the checkout (the e2e topology,
the deploy fixtures, docs/metrics.md) through :data:`dispatcher_sandbox.harness.paths.REPO`.
"""
