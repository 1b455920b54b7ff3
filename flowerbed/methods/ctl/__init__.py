"""CTL, collaborative transfer learning ("Distributed Collaborative Learning with Representative
Knowledge Sharing", Casey et al., Mathematics 2025), in five modules:

* ``protocol``: the equations, the run-config keys, the two phases (server half) and the
  registered ``PROTOCOL``;
* ``node``: the client half (a node's logistic model, its share and round steps);
* ``replies``: what the nodes' replies must hold (the server's checks);
* ``rules``: tasks, guest selection, lambda and coefficient rows, shared by both paths;
* ``reference``: a NumPy reference simulator of the same algorithm, for sweeps.
"""

from .protocol import PROTOCOL, ROUND, SETTINGS, SHARE

__all__ = ["PROTOCOL", "ROUND", "SETTINGS", "SHARE"]
