"""Eager operators: the lowering table, its registration and op tracking."""
