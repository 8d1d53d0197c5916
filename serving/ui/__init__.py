"""``fleetmind.serving.ui``, the folder ``serving/ui/``.

Incident pages and the fleet view at ``/ui/`` (server-rendered Jinja2, a little plain JS).

:mod:`.auth` turns the bearer token into a server-side session (an HttpOnly cookie naming it) and
guards POSTs against CSRF, :mod:`.svg` lays out propagation paths and alert timelines as SVG on the
server, and the templates in ``templates/`` are installed as package data. The routes are in
:mod:`.router`.
"""
