"""A cluster: FL jobs that arrive over time, wait for compute slots, are placed on the network's
nodes, run their rounds and end (pure: no I/O beyond reading a job trace, no torch).

- :mod:`~fedmst.core.cluster.jobs`: a job as a trace gives it;
- :mod:`~fedmst.core.cluster.traces`: job traces (CSV or JSON lines, a Poisson draw, Philly, Helios);
- :mod:`~fedmst.core.cluster.slots`: the compute each node offers, and who holds it;
- :mod:`~fedmst.core.cluster.startup`: how long a placed job takes to set up;
- :mod:`~fedmst.core.cluster.policies`: the policy points (queue order, placement, preemption);
- :mod:`~fedmst.core.cluster.loop`: the event loop over arrivals and job ends, for any back end;
- :mod:`~fedmst.core.cluster.simulate`: the back end that runs jobs on the fluid model.
"""
