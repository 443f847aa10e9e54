"""docs/python.md is the reference: every public name of the package, and
every public method and attribute of its classes, is described there and
carries a docstring."""
import inspect
import os
import re

import ferry

DOC = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")).read()
_SKIP = {"count", "index", "n_fields", "n_sequence_fields", "n_unnamed_fields"}  # tuple/enum plumbing


def _mentioned(word):
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(word) + r"(?![A-Za-z0-9_])", DOC) is not None


def test_every_public_name_is_documented():
    missing = [n for n in ferry.__all__ if not _mentioned(n)]
    assert not missing, f"docs/python.md does not describe: {missing}"


def test_every_public_member_is_documented_and_has_a_docstring():
    undocumented, no_docstring = [], []
    for name in ferry.__all__:
        obj = getattr(ferry, name)
        if not inspect.isclass(obj) or issubclass(obj, BaseException) or issubclass(obj, tuple):
            if callable(obj) and not inspect.isclass(obj) and not (obj.__doc__ or "").strip():
                no_docstring.append(name)
            continue
        if not (obj.__doc__ or "").strip():
            no_docstring.append(name)
        if issubclass(obj, int):  # Status: its members are the C codes
            continue
        for attr in dir(obj):
            if attr.startswith("_") or attr in _SKIP:
                continue
            if not _mentioned(attr):
                undocumented.append(f"{name}.{attr}")
            member = getattr(obj, attr)
            if not (getattr(member, "__doc__", None) or "").strip():
                no_docstring.append(f"{name}.{attr}")
    assert not undocumented, f"docs/python.md does not mention: {undocumented}"
    assert not no_docstring, f"no docstring: {no_docstring}"


def test_delta_module_is_documented():
    for name in dir(ferry.delta):
        if not name.startswith("_") and name not in ("annotations",):
            assert _mentioned(name), f"docs/python.md does not mention delta.{name}"
            obj = getattr(ferry.delta, name)
            if callable(obj):
                assert (obj.__doc__ or "").strip(), f"delta.{name} has no docstring"


def test_named_tuples_fields_are_documented():
    for t in (ferry.TensorInfo, ferry.BufferInfo, ferry.Piece, ferry.PublishInfo, ferry.UpdateInfo,
              ferry.ChannelUpdateInfo, ferry.DeltaInfo, ferry.CopyOp, ferry.PlanBucket, ferry.PlanPair):
        missing = [f for f in t._fields if not _mentioned(f)] if hasattr(t, "_fields") else \
                  [f for f in dir(t) if not f.startswith("_") and f not in _SKIP and not _mentioned(f)]
        assert not missing, f"{t.__name__}: fields not in docs/python.md: {missing}"
