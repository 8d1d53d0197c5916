"""``fleetmind.training.recipes``, the folder ``training/recipes/``.

Training recipes of the PPO placement agent, one module per simulation mode.

* :mod:`.fgd`: ``fleetmind sched train --mode fgd`` (``fleetmind/GpuPlacement-v0``), settings
  :class:`~.fgd.FgdArgs`, entry point :func:`~.fgd.run`.
* :mod:`.dynamic`: ``fleetmind sched train --mode dynamic`` (``fleetmind/MultiClusterPlacement-v0``),
  settings :class:`~.dynamic.DynamicArgs`, entry point :func:`~.dynamic.run`.
* :mod:`.common`: the settings both recipes share (:class:`~.common.PPOArgs`) and shared steps
  (seeding, PPO hyperparameters, model card, CEM search logging).
* :mod:`.tracking`: MLflow run naming, parameters (logged once per run), pyfunc logging and
  registration.

Importing a recipe imports torch, stable-baselines3 and MLflow; the CLI loads one only for
``fleetmind sched train``.
"""
