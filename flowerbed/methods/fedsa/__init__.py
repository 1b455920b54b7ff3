"""FedSA (Federated Selective Aggregation for Knowledge Amalgamation): see ``protocol``;
what the owners' replies must hold: ``replies``."""

from .phases import AMALGAMATE, PRETRAIN, SALIENCY
from .protocol import PROTOCOL, SETTINGS

__all__ = ["AMALGAMATE", "PRETRAIN", "PROTOCOL", "SALIENCY", "SETTINGS"]
