"""fedmst: federated learning over emulated links, MST trees with in-path aggregation vs SPFF.

Data flows one way: topology -> tasks -> scheduler -> plan -> emulation/agents -> results.
"""

__version__ = "0.1.0"
