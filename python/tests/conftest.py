"""Shared fixtures of the Python package's tests."""
import atexit
import os
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
