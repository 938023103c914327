"""Fixtures of the communication tests (catalogue systems, built once per session)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dgx1():
    from perfmodel.topology import load_system

    return load_system("dgx1-v100")


@pytest.fixture(scope="session")
def dgx_a100_2():
    from perfmodel.topology import load_system

    return load_system("dgx-a100", nodes=2)
