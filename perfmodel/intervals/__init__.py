"""Prediction intervals from the validation record (issue 26)."""

#: The default interval level (80 %: issue 26). Here, in the package's own module, so that the
#: CLI's ``--interval`` default (``perfmodel.cli._common.add_interval_arg``) and its help text
#: read it without loading the interval machinery
#: (:mod:`perfmodel.intervals.conformal` re-exports it).
DEFAULT_LEVEL = 0.8
