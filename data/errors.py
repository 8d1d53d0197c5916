"""The library's user-facing errors, re-exported from :mod:`fleetmind.errors`, where they live.

They were defined here up to 0.2.0; ``from fleetmind.data.errors import ConfigError`` keeps working
and names the same classes.
"""

from fleetmind.errors import (
    ConfigError,
    DataError,
    FleetMindError,
    ModelLoadError,
    NotAvailableError,
)

__all__ = ["ConfigError", "DataError", "FleetMindError", "ModelLoadError", "NotAvailableError"]
