"""Placeholder: filled in by the issue-17 work on this converter family."""
