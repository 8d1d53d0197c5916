"""``fleetmind.rca``, the folder ``rca/``.

Alert features, the GAT ranker, baselines, metrics and explanations of root-cause analysis.
"""

import fleetmind.data  # noqa: F401 - stops with a clear error when a folder shadows fleetmind
