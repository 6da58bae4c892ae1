"""Process wiring of ``multikueue-dispatcher run``: settings, the task tree, shutdown order."""
