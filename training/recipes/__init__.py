"""``fleetmind.training.recipes``, the folder ``training/recipes/``.

Training recipes of the PPO placement agent, one module per simulation mode.

* :mod:`.settings`: every setting, once: :class:`~.settings.PPOArgs` (shared),
  :class:`~.settings.FgdArgs` and :class:`~.settings.DynamicArgs` (also importable from their
  recipe modules); :mod:`.flags` generates the ``sched train`` flags from these fields.
* :mod:`.fgd`: ``fleetmind sched train --mode fgd`` (``fleetmind/GpuPlacement-v0``), entry point
  :func:`~.fgd.run`.
* :mod:`.dynamic`: ``fleetmind sched train --mode dynamic`` (``fleetmind/MultiClusterPlacement-v0``),
  entry point :func:`~.dynamic.run`.
* :mod:`.common`: shared steps (seeding, PPO hyperparameters, model card, CEM search logging).
* :mod:`.tracking`: MLflow run naming, parameters (logged once per run), pyfunc logging and
  registration (with :mod:`fleetmind.training.tracking`, which the RCA trainer shares).

Each recipe's ``run()`` reads as its steps: warm start, learn, export, register. The MLflow
callback of the learning step is :class:`fleetmind.rl.callbacks.MlflowEvalCallback`.

Importing a recipe imports torch, stable-baselines3 and MLflow; the CLI loads one only for
``fleetmind sched train`` (:mod:`.settings` and :mod:`.flags` import nothing heavy).
"""
