"""perfmodel.sim."""
