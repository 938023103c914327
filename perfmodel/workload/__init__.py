"""perfmodel.workload."""
