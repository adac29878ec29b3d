"""Reading input files and decoding YAML or JSON text with limits: one loader for every file.

Whatever a file holds, reading it either gives plain data (dicts, lists, strings, numbers,
booleans, None) or raises `InputError` with one line naming the file and, where the parser
knows it, the line and column. The limits (each stated in its error):

- `MAX_INPUT_BYTES` per file, and the text must be UTF-8;
- `MAX_DEPTH` levels of nested mappings and lists (kube's own objects need about 15);
- integers of at most `MAX_INT_DIGITS` characters (kube's are int64: 19 digits);
- no key written twice in one mapping (kube's strict decoding: ``key "x" already set in map``);
- `MAX_EXPANDED_NODES` values once YAML aliases are expanded (an alias "bomb" fits in a few
  hundred bytes but expands to billions of values for whoever walks it);
- `MAX_WRITTEN_VALUES` values written out in a YAML file (the parser keeps several hundred
  bytes per value while it reads: a 64 MiB list of one-digit numbers would take gigabytes).

Numbers are read as kube's YAML decoder reads them (no YAML 1.1 base-60 forms: `1:20` is a
string). YAML timestamps are read as strings, as kube's YAML decoding (via JSON) reads them: a date
field is whatever string was written, and `2020-02-30` is a string, not a crash.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPANDED_NODES",
    "MAX_INPUT_BYTES",
    "MAX_INT_DIGITS",
    "MAX_WRITTEN_VALUES",
    "InputError",
    "decode_text",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "one_line",
    "read_input",
    "with_origin",
]

MAX_INPUT_BYTES = 64 * 2**20
MAX_DEPTH = 100
MAX_INT_DIGITS = 100
MAX_EXPANDED_NODES = 10_000_000
MAX_WRITTEN_VALUES = 4_000_000

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"


class InputError(ValueError):
    """A file that cannot be read as the data it should hold; the message is one line."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _where(origin: str, mark: Any) -> str:
    if mark is None:
        return f"{origin}: "
    return f"{origin}: line {mark.line + 1}, column {mark.column + 1}: "


_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: object) -> str:
    """An error message as one printed line: line breaks in it (a field name can hold any)
    are shown escaped."""
    return str(message).translate(_LINE_BREAKS)


def with_origin(origin: str, message: str) -> str:
    """`origin: message`, unless the message already starts with the origin."""
    return message if message.startswith(f"{origin}: ") else f"{origin}: {message}"


def decode_text(data: bytes, origin: str) -> str:
    """UTF-8 bytes -> text; InputError names the first bad byte."""
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{origin}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{origin}: not UTF-8 text (byte {exc.start})") from None


def read_input(path: str | Path, origin: str | None = None) -> str:
    """The text of a file (`-`: standard input), read as UTF-8 and within the size limit."""
    origin = origin or str(path)
    try:
        if str(path) == "-":
            stream = getattr(sys.stdin, "buffer", None)  # a text-only stdin (tests) has none
            if stream is None:
                data = sys.stdin.read(MAX_INPUT_BYTES + 1).encode("utf-8", "surrogateescape")
            else:
                data = stream.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{origin}: {exc.strerror or exc}") from None
    return decode_text(data, origin)


class _Loader(yaml.SafeLoader):
    """SafeLoader with a nesting limit, bounded integers and timestamps as strings."""

    def __init__(self, stream: str, origin: str) -> None:
        self.origin = origin
        super().__init__(stream)
        self.depth = 0
        self.aliases = False
        self.values = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner's work per token grows with the flow depth: stop before it is quadratic.
        if self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()
            raise InputError(f"{_where(self.origin, mark)}nested more than {MAX_DEPTH} levels deep")
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases = True
        self.depth += 1
        self.values += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise InputError(
                    f"{_where(self.origin, mark)}nested more than {MAX_DEPTH} levels deep"
                )
            if self.values > MAX_WRITTEN_VALUES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise InputError(
                    f"{_where(self.origin, mark)}more than {MAX_WRITTEN_VALUES:,} values"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        # go-yaml's strict decoding, as kube reads its configuration: a key written twice is
        # an error, not the last one silently winning (merge keys still override)
        seen: set[tuple[str, Any]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise InputError(
                    f"{_where(self.origin, key_node.start_mark)}key {json.dumps(key_node.value)} "
                    "already set in map"
                )
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> Any:
        text = str(node.value)
        if len(text) > MAX_INT_DIGITS:
            raise InputError(
                f"{_where(self.origin, node.start_mark)}integer of {len(text):,} characters "
                f"(at most {MAX_INT_DIGITS})"
            )
        return self.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)
_Loader.add_constructor(_TIMESTAMP, _Loader.construct_yaml_str)  # type: ignore[type-var]
# Numbers as kube's YAML decoder (go-yaml v2) reads them: no base-60 forms, so `1:20` is the
# string it looks like, not 80 (YAML 1.1's sexagesimal, which only PyYAML still resolves).
_NUMBERS = {
    "tag:yaml.org,2002:int": re.compile(
        r"""^(?:[-+]?0b[0-1_]+
            |[-+]?0[0-7_]+
            |[-+]?(?:0|[1-9][0-9_]*)
            |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    "tag:yaml.org,2002:float": re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
            |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
            |[-+]?\.(?:inf|Inf|INF)
            |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
}
_Loader.yaml_implicit_resolvers = {
    first: [(tag, _NUMBERS.get(tag, regexp)) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _expanded_size(data: Any, origin: str) -> None:
    """Raise when `data`, with shared (aliased) values counted each time, is too large."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if isinstance(value, Mapping):
            children: Any = list(value.keys()) + list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            return 1
        known = sizes.get(id(value))
        if known is not None:
            return known
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                raise InputError(
                    f"{origin}: more than {MAX_EXPANDED_NODES:,} values once aliases are expanded"
                )
        sizes[id(value)] = total
        return total

    size(data)


def _yaml_documents(text: str, origin: str) -> list[Any]:
    documents: list[Any] = []
    loader: _Loader | None = None
    try:
        loader = _Loader(text, origin)  # refuses control characters at once
        while loader.check_data():  # type: ignore[no-untyped-call]
            documents.append(loader.get_data())
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid"
        where = _where("not valid YAML", mark)
        raise InputError(f"{origin}: {where}{_one_line(problem)}") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # A scalar an explicit tag makes Python refuse (`!!int x`, `!!binary` garbage).
        raise InputError(f"{origin}: not valid YAML: {_one_line(str(exc))}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader is not None and loader.aliases:
        _expanded_size(documents, origin)
    return documents


def load_yaml_all(text: str, origin: str) -> list[Any]:
    """Every document of a YAML stream (empty documents are None)."""
    return _yaml_documents(text, origin)


def load_yaml(text: str, origin: str) -> Any:
    """The one document of a YAML text (None when empty)."""
    documents = _yaml_documents(text, origin)
    if len(documents) > 1:
        raise InputError(f"{origin}: holds {len(documents)} YAML documents, expected one")
    return documents[0] if documents else None


def _json_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"integer of {len(text):,} characters (at most {MAX_INT_DIGITS})")
    return int(text)


def _json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _json_depth(data: Any, origin: str) -> None:
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{origin}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def load_json(text: str, origin: str) -> Any:
    """A JSON text with the same limits as YAML; NaN and Infinity are not JSON."""
    if len(text) > MAX_INPUT_BYTES:
        raise InputError(f"{origin}: larger than {MAX_INPUT_BYTES // 2**20} MiB")
    try:
        data = json.loads(text, parse_int=_json_int, parse_constant=_json_constant)
    except RecursionError:
        raise InputError(f"{origin}: nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{origin}: not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise InputError(f"{origin}: not valid JSON: {_one_line(str(exc))}") from None
    _json_depth(data, origin)
    return data
