"""Shared pytest configuration.

Hypothesis profiles (select with HYPOTHESIS_PROFILE, default "default"):

* ``default`` — 200 examples per property test, so a local run stays fast;
* ``ci`` — 10 000 examples, derandomized (the same examples every run, so a red build is
  reproducible from the log alone) and without the example database (~5 minutes for
  tests/test_fuzz.py on one core of a 2-core machine);
* ``dev`` — 20 examples, for iterating on a test.

Every profile turns the deadline off: an example's time is dominated by onnxruntime session
creation, which varies with machine load, and a deadline would turn that into flaky failures.

Tests marked ``slow`` (multi-GB models) run only with FUSION_SLOW_TESTS=1.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("default", max_examples=200, deadline=None)
settings.register_profile(
    "ci",
    max_examples=10_000,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("FUSION_SLOW_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="slow (multi-GB model): set FUSION_SLOW_TESTS=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
