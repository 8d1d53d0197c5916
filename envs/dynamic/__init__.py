"""``fleetmind.envs.dynamic``, the folder ``envs/dynamic/``.

Dynamic simulation mode: a multi-cluster fleet, jobs that arrive, queue, run and depart.

The model and every constant are documented, with sources, in ``docs/dynamic.md``. In short:

* **Fleet** (:class:`.fleet.DynFleet`): the nodes of several clusters concatenated into one
  :class:`fleetmind.envs.core.ClusterState` (``N`` nodes, up to 8 GPUs each), plus per node its cluster, GPU
  relative speed and ``(8, 8)`` GPU-to-GPU bandwidth (GB/s, from :mod:`fleetmind.data.topology`), and per
  cluster pair a WAN bandwidth (GB/s) and round-trip time (s).
* **Jobs** (:class:`.jobs.DynJobs`, built by :func:`.jobs.build_jobs`): a stream of ``n_jobs`` pods
  taken from the trace in ``creation_time`` order (circularly, from a random start) with the trace's
  own inter-arrival gaps (a synthetic Poisson process for traces without times), compressed by one
  factor so that the offered GPU load during the arrival window equals ``target_util``; the work of
  a job (seconds on the reference placement) from ``deletion_time - scheduled_time``; a
  communication intensity per multi-GPU job; a data home cluster and a dataset size per job.
* **Runtime model** (:func:`.model.runtime_factor`): ``run = work * ((1 - c) / s + c * B_ref /
  B_min)`` for a job of ``k >= 2`` GPUs (``work / s`` otherwise), with ``s`` the GPU model's relative
  throughput, ``B_min`` the slowest link among the job's GPUs and ``c`` its communication intensity;
  remote data adds ``RTT + size_GB / WAN_GB/s`` before the run.
* **Scheduling** (:class:`.sim.DynamicSim`): event driven; a FIFO queue with a bounded backfill
  window (the head first, then up to ``backfill_depth`` later jobs that fit now, no reservations),
  or, with a :class:`.order.LinearOrder`, the job of that window the order ranks first; a job that
  no node of the empty fleet could host is rejected on arrival.
* **Metrics** (:meth:`.sim.DynamicSim.metrics`): mean and p99 JCT, mean slowdown (JCT / ideal
  runtime), p99 queueing delay, GPU allocation ratio (time average over the arrival window).

Policies implement :class:`.sim.DynamicPolicy` (``select(sim, j) -> (node, gpus)``); the
single-cluster node scorers of :mod:`fleetmind.envs.policies` are applied to the whole fleet through
:class:`.policies.NodeScorerPolicy`. :func:`.evaluate.evaluate_dynamic` runs every policy on the
same job streams.

Modules, each importing only the ones before it: :mod:`.model` (constants, runtime formula),
:mod:`.fleet`, :mod:`.jobs`, :mod:`.order` (which startable queued job starts next), :mod:`.sim`,
:mod:`.policies`, :mod:`.evaluate`. This package
re-exports nothing: import from the module that defines a name.
"""
