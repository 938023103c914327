"""Prediction intervals from the validation record (issue 26)."""
