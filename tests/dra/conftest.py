"""The DRA core needs Google's CEL runtime (`cel-expr-python`); without it these tests are
not collected (and say so), rather than failing on import."""

from __future__ import annotations

import importlib.util

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("cel_expr_python") is None:  # pragma: no cover
    print("tests/dra: cel-expr-python is not installed; the DRA tests are not collected")
    collect_ignore_glob = ["test_*.py"]
