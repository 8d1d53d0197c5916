"""``fleetmind.serving.rca``, the folder ``serving/rca/``.

The synchronous RCA path, ``POST /api/v1/rca``: :mod:`.router` holds the route and
:mod:`.fast_lane` its ASGI shortcut to the ranking processes; :mod:`.request` validates a body and
writes the answer, with :mod:`.parse` as its fast parser; :mod:`.batcher` ranks requests together
on the server's ranking thread and :mod:`.pool` in separate ranking processes.
"""
