"""``fleetmind.models``, the folder ``models/``.

Released model artifacts and model cards, shipped as package data (``fleetmind.models``).

``fleetmind.data.paths.MODELS_DIR`` is this folder. Each subfolder is one artifact with its card.
"""
