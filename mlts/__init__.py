"""mlts: an ML Test Suite for neural-network drivers, with an NNAPI-style runtime."""
__version__ = "0.1.0"
