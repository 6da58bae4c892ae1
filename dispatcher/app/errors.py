"""Expected failures of the commands, for the command line's one error boundary.

The command line (``dispatcher.cli.main``) prints ``str()`` of these as one line on stderr and
exits with ``exit_code``; so do :class:`~dispatcher.app.settings.ConfigError` and
:class:`~dispatcher.k8s.errors.ManagerConfigError` (exit 2). Only ``--debug`` adds a traceback.
"""

from __future__ import annotations

from dispatcher.k8s.errors import ApiError, ApiUnreachable
from dispatcher.k8s.loading import ManagerConnection

__all__ = ["CommandError", "ManagerApiError", "describe_api_error"]


class CommandError(Exception):
    """An expected failure: ``str()`` is one line naming what is wrong and where.

    ``exit_code`` is 2 for usage and configuration errors, 1 for failures at run time.
    """

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ManagerApiError(CommandError):
    """The manager cluster did not answer the first request (unreachable, TLS, timeout) or
    refused it (401, 403…): exit 1, naming the server and where its address came from."""

    def __init__(self, connection: ManagerConnection, error: ApiError) -> None:
        super().__init__(
            f"manager cluster {connection.describe()}: {describe_api_error(error)}", exit_code=1
        )
        self.connection = connection
        self.error = error


def describe_api_error(error: ApiError) -> str:
    """``unreachable: …`` for a request without an answer, ``STATUS REASON: message`` else."""
    if isinstance(error, ApiUnreachable):
        return f"unreachable: {error.message}"
    return str(error)
