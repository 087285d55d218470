"""Fixtures for workflow tests: dummy node classes and a small valid workflow."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import dummy_nodes

BASE = {
    "1": {"class_type": "Test_Number", "inputs": {"value": 3}},
    "2": {"class_type": "Test_Seeded", "inputs": {"x": ["1", 0], "seed": 4, "mode": "add", "scale": 2.0}},
    "3": {"class_type": "Test_SaveText", "inputs": {"value": ["2", 0], "prefix": "result"}},
}


@pytest.fixture
def nodes() -> dict:
    dummy_nodes.CALLS.clear()
    return dummy_nodes.NODE_CLASS_MAPPINGS


@pytest.fixture
def workflow() -> dict:
    return copy.deepcopy(BASE)
