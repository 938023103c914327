"""Setuptools shim: maps the top-level data folders into the installed package.

``topologies/``, ``calibration/`` and ``validation/`` (the published measurements) live at the
repository root (where users look for them) and install as ``perfmodel.catalogue.topologies``,
``perfmodel.catalogue.calibration`` and ``perfmodel.catalogue.validation``
so that a non-editable ``pip install .`` ships the catalogue with the wheel.
"""

from setuptools import find_packages, setup

DATA_PACKAGES = {
    "perfmodel.catalogue.topologies": "topologies",
    "perfmodel.catalogue.calibration": "calibration",
    "perfmodel.catalogue.validation": "validation",
}

packages = find_packages(include=["perfmodel", "perfmodel.*"]) + list(DATA_PACKAGES)

setup(
    packages=packages,
    package_dir={"": ".", **DATA_PACKAGES},
    package_data={
        "perfmodel": ["**/*.toml", "**/*.json", "**/*.txt", "**/*.xml"],
        "perfmodel.catalogue.topologies": ["*.toml", "*.md"],
        "perfmodel.catalogue.calibration": [
            "*.json",
            "*.md",
            "**/*.json",
            "**/*.txt",
            "**/*.jsonl",
        ],
        "perfmodel.catalogue.validation": ["*.jsonl", "*.md"],
    },
)
