"""``fleetmind.data.rca_gen``, the folder ``data/rca_gen/``.

Synthetic RCA data: multi-cluster dependency graphs, a GPU-fleet fault catalog, an alert simulator.

* :mod:`fleetmind.data.rca_gen.graphs` - seeded AI-platform dependency graphs (:class:`fleetmind.data.graph.DependencyGraph`).
* :mod:`fleetmind.data.rca_gen.faults` - the fault catalog (a subpackage): fault types and their origins,
  propagation rules, alerts per effect, background noise.
* :mod:`fleetmind.data.rca_gen.alerts` - the alert simulator (Alertmanager webhook v4 alert objects) and its knobs.
* :mod:`fleetmind.data.rca_gen.generate` - whole datasets (topology-disjoint splits) on disk.
"""
