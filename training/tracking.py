"""MLflow tracking shared by both trainers: the RCA GAT (:mod:`fleetmind.training.rca_train`) and
the placement PPO recipes (:mod:`fleetmind.training.recipes.tracking`).

* :func:`tracking_uri`: where runs are tracked (an explicit URI, else ``MLFLOW_TRACKING_URI``, else
  the embedded :data:`DEFAULT_TRACKING_URI`);
* :func:`ready_store`: create an embedded SQLite store's tables under a file lock, so that runs
  started together on a new store do not race to create them;
* :func:`pip_requirements`: the pinned requirements a logged pyfunc model declares (pinned to the
  installed versions; no slow inference of requirements);
* :func:`promote_if_better`: tag a registered model version with its score and move the
  :data:`CHAMPION` alias to it when it beats the champion's;
* :func:`log_pyfunc_model`: log a model to the active run as an MLflow pyfunc, then register and
  promote it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetmind.data.mlflow_store import bounded_requests, reason
from fleetmind.errors import ConfigError

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
"""The embedded SQLite store, in the current folder."""
CHAMPION = "champion"
"""The registry alias of the best version of a registered model."""


def tracking_uri(explicit: str | None = None) -> str:
    """The MLflow tracking URI to use: explicit, else ``MLFLOW_TRACKING_URI``, else the embedded one."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def ready_store(uri: str) -> None:
    """Make sure the tracking store at ``uri`` answers, an SQLite store's tables created and
    migrated; called before a command does any work it would track.

    MLflow creates an SQLite store's tables on first use; two processes that first use a new
    store at the same moment (two training runs started together, the default
    ``sqlite:///mlflow.db``) both try, and the slower one fails with ``table ... already
    exists``. Here the first use happens under an exclusive lock on ``<db>.lock`` beside the
    database, so the others wait and then find the tables made.

    Every store is asked for one experiment and one registered model, with MLflow's HTTP retries
    bounded (:func:`fleetmind.data.mlflow_store.bounded_requests`), so that a server that is down,
    a file that is not a database or a URI scheme MLflow does not take stops the command at once
    instead of after minutes of retries or a whole training run.

    Raises:
        fleetmind.errors.ConfigError: the store cannot be used; one line naming it and why.
    """
    import mlflow

    def probe() -> None:
        client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
        client.search_experiments(max_results=1)
        client.search_registered_models(max_results=1)

    try:
        with bounded_requests():
            if not uri.startswith("sqlite:///"):
                probe()
                return
            import fcntl

            db = Path(uri.removeprefix("sqlite:///"))
            db.parent.mkdir(parents=True, exist_ok=True)
            with open(db.with_name(db.name + ".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    probe()
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        raise  # a path the store needs (the CLI names it)
    except Exception as err:  # MLflow, SQLAlchemy and driver errors alike: the store is unusable
        raise ConfigError(
            f"MLflow tracking store {uri} cannot be used: {reason(err)} (set MLFLOW_TRACKING_URI "
            f"or --tracking-uri; the default is {DEFAULT_TRACKING_URI})"
        ) from None


def pip_requirements(packages: Sequence[str]) -> list[str]:
    """``packages`` pinned to their installed versions (``name==version``; a package that is not
    installed is listed unpinned)."""
    from importlib.metadata import version

    out = []
    for pkg in packages:
        try:
            out.append(f"{pkg}=={version(pkg)}")
        except Exception:  # pragma: no cover
            out.append(pkg)
    return out


def promote_if_better(
    client: Any, name: str, version: str, *, tag: str, score: float, higher_is_better: bool
) -> tuple[bool, str | None]:
    """Tag ``version`` of registered model ``name`` with ``tag`` = ``score`` (6 decimals) and move
    :data:`CHAMPION` to it if it beats the champion's ``tag``.

    A version beats the champion when its score is strictly better (a tie keeps the champion);
    with no champion yet, or one without a readable tag, the new version becomes champion.

    Returns:
        ``(promoted, previous champion version or None)``.
    """
    from mlflow.exceptions import MlflowException

    client.set_model_version_tag(name, version, tag, f"{score:.6f}")
    try:
        champ = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        champ = None
    prev = None if champ is None else str(champ.version)
    worst = float("-inf") if higher_is_better else float("inf")
    best = worst
    if champ is not None:
        try:
            best = float(champ.tags.get(tag, worst))
        except ValueError:
            best = worst
    wins = score > best if higher_is_better else score < best
    if champ is None or wins:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        return True, prev
    return False, prev


def _param_type(value: int | float | str | bool) -> str:
    """The MLflow parameter type of a default value (``bool`` before ``int``: it is one)."""
    for kind, name in ((bool, "boolean"), (int, "long"), (float, "double"), (str, "string")):
        if isinstance(value, kind):
            return name
    raise TypeError(f"no MLflow parameter type for {value!r}")


def log_pyfunc_model(
    entry: Path,
    artifacts: dict[str, str],
    packages: Sequence[str],
    registered_model: str | None,
    *,
    tag: str,
    score: float,
    higher_is_better: bool,
    params: dict[str, int | float | str | bool] | None = None,
) -> dict[str, Any]:
    """Log the pyfunc built by the models-from-code file ``entry`` (see
    :mod:`fleetmind.training.pyfunc_entries`; with ``artifacts``, requiring ``packages`` pinned) as
    ``model`` in the active MLflow run; with a ``registered_model`` name, register it and
    :func:`promote_if_better`.

    ``params`` (name to default) become the signature's parameter schema, so that
    ``predict(..., params={...})`` and the ``params`` of a scoring server's ``/invocations`` body
    reach the wrapper (MLflow drops, with a warning, every parameter a signature does not declare).
    The inputs are left without a schema: the wrappers take free-form JSON rows.

    Returns:
        ``{"model_uri"}``, plus ``registered_model``, ``version``, ``champion`` (moved to this
        version?) and ``previous_champion`` when registered.
    """
    import mlflow
    import mlflow.pyfunc
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ParamSchema, ParamSpec

    signature = None
    if params:
        signature = ModelSignature(
            params=ParamSchema([ParamSpec(k, _param_type(v), v) for k, v in params.items()])
        )
    with warnings.catch_warnings():
        # A signature without an input example draws a warning; the inputs are free-form JSON
        # rows, so there is no input schema that an example could check.
        warnings.filterwarnings("ignore", message=".*input example was not provided.*")
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(entry),
            artifacts=artifacts,
            pip_requirements=pip_requirements(packages),
            registered_model_name=registered_model,
            signature=signature,
        )
    out: dict[str, Any] = {"model_uri": info.model_uri}
    if registered_model is not None:
        version = str(info.registered_model_version)
        promoted, prev = promote_if_better(
            mlflow.MlflowClient(),
            registered_model,
            version,
            tag=tag,
            score=score,
            higher_is_better=higher_is_better,
        )
        out.update(
            registered_model=registered_model,
            version=version,
            champion=promoted,
            previous_champion=prev,
        )
    return out
