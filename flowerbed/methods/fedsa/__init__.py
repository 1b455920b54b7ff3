"""FedSA (Federated Selective Aggregation for Knowledge Amalgamation), in six modules.

The protocol and its keys: ``protocol``; its phases: ``phases``; the owners' half: ``owner``;
the server's: ``target``; the rules: ``rules``; what the owners' replies must hold: ``replies``.
"""

from .phases import AMALGAMATE, PRETRAIN, SALIENCY
from .protocol import PROTOCOL, SETTINGS

__all__ = ["AMALGAMATE", "PRETRAIN", "PROTOCOL", "SALIENCY", "SETTINGS"]
