"""``fleetmind.serving.migrations.versions``, the folder ``serving/migrations/versions/``.

The Alembic revisions of the service database, one module per revision.
"""
