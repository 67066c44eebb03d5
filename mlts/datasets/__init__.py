"""mlts.datasets (see SPEC.md section 1)."""
