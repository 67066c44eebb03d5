"""mlts.report (see SPEC.md section 1)."""
