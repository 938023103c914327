"""perfmodel.compute."""
