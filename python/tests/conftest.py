"""pytest setup: import the binding from this checkout, load the library (a failure to load
it fails the run: under ctest MLAVERIFY_LIBRARY points at the build), find the CLI."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import mlaverify as mv  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def library():
    """The loaded library; the whole run fails (not skips) without it."""
    try:
        lib = mv._lib.load()
    except mv.LibraryNotFoundError as e:
        pytest.exit("libmlaverify not loadable: %s (set MLAVERIFY_LIBRARY to "
                    "build/libmlaverify.so)" % e, returncode=3)
    print("libmlaverify %s from %s" % (mv.version(), mv._lib.path()))
    return lib


@pytest.fixture(scope="session")
def cli():
    """Path of the mlaverify command (MLAVERIFY_CLI, PATH, or beside the library)."""
    try:
        return mv.bundle.find_cli()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture
def seed(request):
    from mlav_testutil import fresh_seed
    return fresh_seed(request.node.name)
