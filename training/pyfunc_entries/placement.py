"""Models-from-code entry of the placement actor's MLflow pyfunc: MLflow runs this file when it loads
the model."""

from mlflow.models import set_model

from fleetmind.training.placement_pyfunc import PlacementPyfunc

set_model(PlacementPyfunc())
