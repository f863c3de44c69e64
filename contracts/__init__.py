"""Engine-agnostic DSpark contracts: invariants with stable ids, strategies, adapters.

Layers (one direction of dependency): `catalog` (the contracts) and
`scenarios` talk to an engine only through the adapter protocol in `protocol`
and the boundary types in `boundary`; `adapters.reference` is the one place
that knows the reference engine in `dspark`.
"""

__version__ = "0.1.0"
