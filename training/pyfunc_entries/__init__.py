"""``fleetmind.training.pyfunc_entries``, the folder ``training/pyfunc_entries/``.

The models-from-code files MLflow logs with each pyfunc.

MLflow copies one of these files into a logged model (``model/code/``) and runs it when the model
is loaded; the file builds the wrapper and hands it over with :func:`mlflow.models.set_model`.
Logging a file instead of a pickled object means a logged model holds no pickle (MLflow warns
about pickles on every log) and loads whichever wrapper the installed FleetMind has.

* ``rca.py``: :class:`fleetmind.training.rca_pyfunc.GATPyfunc`;
* ``placement.py``: :class:`fleetmind.training.placement_pyfunc.PlacementPyfunc`.

Not meant to be imported: importing one registers its wrapper as MLflow's current model.
"""

from pathlib import Path

RCA = Path(__file__).with_name("rca.py")
"""The entry of the GAT's pyfunc (registered as ``fleetmind-rca``)."""
PLACEMENT = Path(__file__).with_name("placement.py")
"""The entry of the placement actor's pyfunc (registered as ``fleetmind-placement``)."""
