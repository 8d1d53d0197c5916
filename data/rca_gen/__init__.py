"""``fleetmind.data.rca_gen``, the folder ``data/rca_gen/``.

Synthetic RCA data: multi-cluster dependency graphs, a GPU-fleet fault catalog, an alert simulator.

* :mod:`data.rca_gen.graphs` - seeded AI-platform dependency graphs (:class:`data.graph.DependencyGraph`).
* :mod:`data.rca_gen.faults` - the fault catalog: origins, propagation rules, alerts per hop.
* :mod:`data.rca_gen.alerts` - the alert simulator (Alertmanager webhook v4 alert objects) and its knobs.
* :mod:`data.rca_gen.generate` - whole datasets (topology-disjoint splits) on disk.
"""
