"""User-facing errors of the whole library (``fleetmind.errors``).

Every error that a user can cause (bad file, unknown node, impossible job, corrupt model, wrong config)
is raised as a :class:`FleetMindError` subclass with a one-line message that names what is wrong. The CLI
prints ``fleetmind: error: <message>`` and exits with status 2; the service maps them to 4xx responses.

Any subpackage may import this module (it imports nothing). :mod:`fleetmind.data.errors`, where
these classes lived up to 0.2.0, re-exports them, so older imports keep working.
"""

from __future__ import annotations


class FleetMindError(Exception):
    """Base class for errors caused by user input; ``str(err)`` is a one-line explanation."""


class DataError(FleetMindError):
    """A data file or folder is missing, malformed, or inconsistent."""


class ConfigError(FleetMindError):
    """A configuration value or command-line option is invalid."""


class RenderModeError(ConfigError, TypeError):
    """An environment was asked for a ``render_mode`` it does not have.

    A :class:`TypeError` too: stable-baselines3's ``make_vec_env`` asks every environment id for
    ``render_mode="rgb_array"`` and falls back to none on a ``TypeError`` only."""


class ModelLoadError(FleetMindError):
    """A model artifact is missing, corrupt, or incompatible with this version."""


class NotAvailableError(FleetMindError):
    """A feature needs something absent here (NVML, an optional package, a model not yet released)."""


class Terminated(KeyboardInterrupt):  # noqa: N818 - a stop, not an error: named as the signal says
    """SIGTERM (``kill``, ``timeout``, a CI job's cancel, systemd, Kubernetes) raised in the main
    thread by the handler of :func:`fleetmind.cli.runner.run_main`, where the command was.

    A :class:`KeyboardInterrupt`, so that everything that cleans up after a Ctrl-C (``finally``
    blocks, context managers, an MLflow run ended ``KILLED``, a half-written folder named) does
    the same for SIGTERM; the CLI then prints ``fleetmind: interrupted`` and exits with 143
    (128 + SIGTERM) instead of Ctrl-C's 130. ``signum`` is the signal's number."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.signum = signum
