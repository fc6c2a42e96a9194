"""Mechanism families: one home per family (its requests, calibration, planner and run together)."""
