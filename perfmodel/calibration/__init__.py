"""perfmodel.calibration."""
