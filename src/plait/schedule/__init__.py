"""Multi-job cluster scheduling: a trace of training jobs over a cluster with topology, each job's speed at every
allocation and placement from plait's own planner, and the policies that share the GPUs (``plait schedule``).

- :mod:`~plait.schedule.trace` the typed job trace and its CSV file; :mod:`~plait.schedule.synthetic` traces drawn
  from published distributions (Philly, Helios, Alibaba PAI);
- :mod:`~plait.schedule.speed` a job's tokens/s at a size and placement (the planner, memoised);
- :mod:`~plait.schedule.pool` nodes, racks and placements; :mod:`~plait.schedule.simulate` the event loop;
  :mod:`~plait.schedule.columns` the jobs' progress as arrays for vectorized passes;
- :mod:`~plait.schedule.policies` FIFO, SRTF, Tiresias' 2D-LAS, network-aware consolidation with delay scheduling,
  elastic resizing;
- :mod:`~plait.schedule.result` completion times, makespan, utilization; :mod:`~plait.schedule.trace_export` and
  :mod:`~plait.schedule.plots` the cluster's trace and pictures.
"""
