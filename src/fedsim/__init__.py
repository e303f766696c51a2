"""fedsim: a compact, fast federated-learning simulator (FedAvg, FedProx, FedDANE)."""

__version__ = "0.1.0"
