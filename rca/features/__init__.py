"""``fleetmind.rca.features``, the folder ``rca/features/``.

Per-node alert features for the GAT ranker: ``(graph, alerts) -> float32 array (|V|, F)``.

Every alert (an Alertmanager v4 alert object) is mapped to a node with
:meth:`fleetmind.data.graph.DependencyGraph.node_for_alert`; alerts that match no node are ignored (and counted in
:attr:`AlertFeatures.unmapped`). The features of node ``v`` (column blocks, in order, see
:data:`FEATURE_NAMES`):

==================  =====  ==============================================================================
block               width  meaning
==================  =====  ==============================================================================
``alert``           1      1 if at least one alert maps onto ``v``
``sev:*``           4      ``log1p`` count of ``v``'s alerts by severity: critical, warning, info, other
``name:*``          |N|+1  ``log1p`` count by alertname over :data:`ALERTNAME_VOCAB`, plus ``other``
``kw:*``            |K|    ``log1p`` count of alerts whose name contains a keyword group
                           (:data:`KEYWORD_GROUPS`; lets unseen alert names, e.g. PetShop's, still say
                           "latency" or "GPU")
``time:*``          9      the incident starts at ``t0``, the first ``startsAt`` within
                           :data:`HORIZON_S` before the latest one (``t_last``); older alerts are
                           ``stale`` (Watchdog, long-running background noise). Columns: first / last
                           ``startsAt`` minus ``t0`` over the span ``t_last - t0`` (clipped to [-1, 1]);
                           their ages ``t_last - startsAt`` (``log1p`` minutes, capped at 10); ``stale``
                           flag; ``earliest`` flag (first recent alert within 1 s of ``t0``); dense rank
                           of the first recent alert among recently alerting nodes in [0, 1]; mean
                           alert duration (``log1p`` minutes, open alerts end at ``t_last``); share of
                           the node's alerts still firing. Nodes without alerts get 1.0 for the relative
                           times and the rank, 0 elsewhere.
``nbr:*``           24     for each edge kind and direction (``out`` = dependencies, ``in`` =
                           dependents): the share of neighbours with a recent (non-stale) alert, and
                           ``log1p`` neighbour count
``kind:*``          12     one-hot node kind (:data:`fleetmind.data.graph.NODE_KINDS`)
``deg:*``           2      ``log1p`` in- and out-degree over all edge kinds
==================  =====  ==============================================================================

Vocabulary changes change :data:`.layout.FEATURE_VERSION`; a model stores the version it was trained with and
refuses features of another one. Structural arrays are cached per graph object, so a 1,000-node graph
with 200 alerts takes a few milliseconds (numpy only, no torch).

Modules, each importing only the ones before it: :mod:`.layout` (vocabularies, column names and
offsets), :mod:`.times` (timestamps), :mod:`.mapping` (alerts to nodes, per-graph cache),
:mod:`.dense` (:func:`~.dense.alert_features` over the whole graph, :func:`~.dense.candidate_mask`)
and :mod:`.columnar` (the serving fast path: :class:`~.columnar.AlertColumns`,
:func:`~.columnar.incident_crop`); :mod:`.neighbours` (per-edge caller/callee comparisons, the
propagation ranker's verdict and alert label values, read only by a model with
``GATConfig.neighbours``) imports :mod:`.layout` and :mod:`.mapping`, and the propagation ranker. This package re-exports nothing: import from the module that
defines a name.
"""
