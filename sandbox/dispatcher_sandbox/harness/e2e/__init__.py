"""The end-to-end scenarios' backends (sandbox, real Kueue, kind) and their trace recorder."""
