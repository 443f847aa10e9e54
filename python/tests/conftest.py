"""Shared fixtures of the Python package's tests."""
import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

# Every service of the suite writes its generated token under a private
# directory (the per-user default would be shared with other runs).
_TOKENS = tempfile.mkdtemp(prefix="ferry-pytest-tokens-")
os.chmod(_TOKENS, 0o700)
atexit.register(shutil.rmtree, _TOKENS, True)
os.environ["FERRY_TOKEN_DIR"] = _TOKENS
os.environ.setdefault("FERRY_LOG", "error")


@pytest.fixture
def job(request):
    """A job name unique to the test."""
    return f"py-{request.node.name}-{os.getpid()}"[:60]


@pytest.fixture
def ferry_cli():
    """The ferry CLI: $FERRY_CLI, else a build in the checkout; skip when there is none."""
    env = os.environ.get("FERRY_CLI")
    if env:
        if not os.access(env, os.X_OK):
            pytest.fail(f"FERRY_CLI={env} is not an executable")
        return env
    root = pathlib.Path(__file__).resolve().parents[2]
    for d in ("build-rel", "build-ci", "build"):
        if os.access(root / d / "ferry", os.X_OK):
            return str(root / d / "ferry")
    pytest.skip("ferry CLI not built (set FERRY_CLI)")
