"""Models-from-code entry of the GAT's MLflow pyfunc: MLflow runs this file when it loads the model."""

from mlflow.models import set_model

from fleetmind.training.rca_pyfunc import GATPyfunc

set_model(GATPyfunc())
