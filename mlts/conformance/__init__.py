"""Conformance suites that run published test vectors on any driver (see nnapi_cts)."""
