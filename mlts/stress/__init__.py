"""mlts.stress (see SPEC.md section 1)."""
