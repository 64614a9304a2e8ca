"""Fixtures of the Python reader's tests.

The checkpoints are written by the C++ side in the same test run: ctest's
test_python_reader (tests/test_python_reader.cpp) and, for several MPI ranks,
test_sharded_mpi_np2 (tests/test_sharded.cpp) write them into a directory and run
pytest with CKPT_PY_FIXTURES pointing at it. Without that variable the tests that need
them are skipped; with it, a skip is a failure: CI must run every test."""

import os
import shutil
from pathlib import Path

import pytest

FIXTURES = os.environ.get("CKPT_PY_FIXTURES")


def pytest_configure(config):
    config.addinivalue_line("markers", "mpi: reads checkpoints written by several MPI ranks (test_sharded_mpi_np2)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if FIXTURES and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = "skipped although CKPT_PY_FIXTURES is given: %s" % (report.longrepr,)


@pytest.fixture
def fixtures():
    """The directory of checkpoints the C++ side wrote."""
    if not FIXTURES:
        pytest.skip("CKPT_PY_FIXTURES is not set: ctest's test_python_reader writes the checkpoints and runs these tests")
    return Path(FIXTURES)


@pytest.fixture
def copy_of(fixtures, tmp_path):
    """copy_of(name): a copy of a fixture checkpoint that a test may damage."""
    made = []

    def make(name):
        made.append(name)
        dst = tmp_path / str(len(made)) / name
        shutil.copytree(fixtures / name, dst)
        return dst
    return make
