"""perfmodel.comm."""
