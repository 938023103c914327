"""perfmodel.report."""
