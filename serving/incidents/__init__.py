"""``fleetmind.serving.incidents``, the folder ``serving/incidents/``.

Alerts grouped into incidents, each kept ranked by the served RCA analyzer, by one elected worker.

:class:`IncidentManager` (:mod:`.manager`) composes the parts: the pure grouping rules
(:class:`~fleetmind.serving.incidents.grouper.Grouper`, no SQL, threads or clock), their SQL
(:mod:`.store`) and the background thread with its leader lease and lag gauge (:mod:`.worker`).
The HTTP routes are in :mod:`fleetmind.serving.routers.incidents`.
"""

from fleetmind.serving.incidents.grouper import Grouper, OpenIncident
from fleetmind.serving.incidents.manager import IncidentConfig, IncidentManager
from fleetmind.serving.incidents.store import alert_dict

__all__ = ["Grouper", "IncidentConfig", "IncidentManager", "OpenIncident", "alert_dict"]
