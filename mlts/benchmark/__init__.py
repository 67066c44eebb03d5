"""mlts.benchmark (see SPEC.md section 1)."""
