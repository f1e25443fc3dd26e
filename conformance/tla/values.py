"""The canonical form of TLA+ values: parse TLC's text, print it back, order and serialize it.

Theory of operation: one Python/JSON shape per TLA+ value, so that comparing the spec's state with the
implementation's is comparing two JSON texts (docs/values.md has the full table and the reasons):

    integer 3 -> 3        string "a" -> "a"        TRUE -> True        model value s1 -> {"$model": "s1"}
    <<a, b>> and any function on 1..n -> [a, b]        {b, a} -> {"$set": [a, b]}
    [f |-> v] and any function on identifier strings -> {"f": v}
    (k :> v @@ ...) on any other domain -> {"$fun": [[k, v], ...]}, pairs sorted by key

Each value has exactly one form: the constructors `make_set`, `make_record` and `make_function` normalize (sort,
drop duplicate set members, turn a 1..n function into a list and a string-keyed one into a record, the empty
function into []), and the parser builds every value through them. `sort_key` is the one total order (documented
there); `canonical_json` is the one serialization. Python's `True == 1` makes `==` on canonical values blind to
TRUE versus 1, so compare `canonical_json` texts (or use `equal`) where that matters.

Parsing TLC's text into this form is `conformance.tla.valueparse`.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Iterable

from conformance.errors import InputError, Location

__all__ = [
    "IDENTIFIER", "ValueSyntaxError", "ParseError", "format_value", "format_state", "canonical_json",
    "sort_key", "equal", "model", "make_set", "make_record", "make_function", "canonicalize", "is_canonical",
]

Value = Any  # int | str | bool | list | dict, nested; see the module docstring

IDENTIFIER = re.compile(r"[A-Za-z0-9_]*[A-Za-z][A-Za-z0-9_]*")  # a TLA+ name: variable, record field, model value
_EXCERPT_WIDTH = 100  # characters of a (possibly multi-megabyte) line shown around the column


class ParseError(InputError):
    """Text that is not what TLC writes; names source:line:column and quotes the line with a caret.

    Unlike `InputError` it carries the offending line itself (the source may be a Spark partition or a 1 GB file
    that must not be re-read), and quotes at most a window of it around the column.
    """

    def __init__(self, source: str, line: int | None, column: int, text: str, message: str) -> None:
        # line is None for a line whose number is unknown (a Spark partition's line); the column still counts.
        self.location = Location(source, line, column)
        where = str(self.location) if line is not None else f"{source}: column {column}"
        self.source, self.line, self.column, self.text, self.reason = source, line, column, text, message
        start = max(0, column - 1 - _EXCERPT_WIDTH // 2)
        window = text[start:start + _EXCERPT_WIDTH].replace("\t", " ")
        prefix = "..." if start else ""
        suffix = "..." if start + _EXCERPT_WIDTH < len(text) else ""
        caret = " " * (len(prefix) + column - 1 - start) + "^"
        Exception.__init__(self, f"{where}: {message}\n    {prefix}{window}{suffix}\n    {caret}")


class ValueSyntaxError(Exception):
    """A value text is malformed at `offset` (0-based, into the text given); callers turn it into a ParseError."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset, self.message = offset, message


# ---------------------------------------------------------------------------------------------------------------
# Construction and order


def model(name: str) -> dict:
    """The model value `name` (a bare identifier in TLC's output)."""
    if not IDENTIFIER.fullmatch(name) or name in ("TRUE", "FALSE"):
        raise ValueError(f"{name!r} cannot name a model value")
    return {"$model": name}


def sort_key(value: Value) -> tuple:
    """The total order on canonical values, used for set members and function keys.

    Values of different kinds order by kind: booleans < integers < strings < model values < sequences < records
    < sets < functions. Within a kind: FALSE < TRUE; integers numerically; strings and model-value names by code
    point; sequences lexicographically by elements (a proper prefix first); records by their (field, value) pairs
    in field-name order, lexicographically; sets by their sorted members, lexicographically; functions by their
    key-sorted (key, value) pairs, lexicographically. TLC itself refuses to compare most mixed kinds; the order is
    total anyway so that sorting never fails.
    """
    kind = type(value)
    if kind is bool:
        return (0, value)
    if kind is int:
        return (1, value)
    if kind is str:
        return (2, value)
    if kind is list:
        return (4, tuple(map(sort_key, value)))
    if kind is dict:
        if len(value) == 1:
            tag, body = next(iter(value.items()))
            if tag == "$model":
                return (3, body)
            if tag == "$set":
                return (6, tuple(map(sort_key, body)))
            if tag == "$fun":
                return (7, tuple((sort_key(k), sort_key(v)) for k, v in body))
        return (5, tuple((field, sort_key(v)) for field, v in sorted(value.items())))
    raise TypeError(f"not a canonical TLA+ value: {value!r}")


def make_set(members: Iterable[Value]) -> dict:
    """The set of `members`: sorted by `sort_key`, duplicates dropped."""
    keyed = sorted(((sort_key(m), m) for m in members), key=lambda pair: pair[0])
    out, last = [], None
    for key, member in keyed:
        if key != last:
            out.append(member)
            last = key
    return {"$set": out}


def make_record(fields: Iterable[tuple[str, Value]]) -> Value:
    """The record with these (field, value) pairs, as a dict with sorted keys; the empty record is [].

    A field must be a TLA+ identifier (so never starts with "$"): ValueError otherwise.
    """
    record = dict(sorted(fields))
    for field in record:
        if type(field) is not str or not IDENTIFIER.fullmatch(field):
            raise ValueError(f"{field!r} is not a record field name")
    return record if record else []


def make_function(pairs: Iterable[tuple[Value, Value]]) -> Value:
    """The function with these (key, value) pairs, in its one canonical form.

    Domain {} or 1..n: a list (TLA+ sequences are such functions and TLC prints them alike). Domain of strings
    that are all identifiers: a record (TLC prints it as one; `[s \\in {"a"} |-> 1] = [a |-> 1]`). Otherwise
    {"$fun": [[k, v], ...]} sorted by key (TLC prints `("a b" :> 1)`). A key given twice raises ValueError.
    """
    pairs = list(pairs)
    keys = [k for k, _ in pairs]
    if all(type(k) is int for k in keys) and sorted(keys) == list(range(1, len(keys) + 1)):
        return [v for _, v in sorted(pairs, key=lambda kv: kv[0])]
    if all(type(k) is str and IDENTIFIER.fullmatch(k) for k in keys):
        if len(set(keys)) != len(keys):
            raise ValueError("a function lists the same key twice")
        return make_record(pairs)
    keyed = sorted(((sort_key(k), k, v) for k, v in pairs), key=lambda t: t[0])
    for before, after in zip(keyed, keyed[1:]):
        if before[0] == after[0]:
            raise ValueError(f"a function lists the key {format_value(after[1])} twice")
    return {"$fun": [[k, v] for _, k, v in keyed]}


def canonicalize(obj: Any) -> Value:
    """Build the canonical form from plain Python: for mapping implementation state to spec variables.

    bool/int/str stay; list/tuple -> sequence; set/frozenset -> set; a dict with only str keys -> record; any
    other dict -> function (normalized by `make_function`); canonical dicts ({"$model"|"$set"|"$fun": ...}) are
    re-normalized.
    """
    if isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [canonicalize(x) for x in obj]
    if isinstance(obj, (set, frozenset)):
        return make_set(canonicalize(x) for x in obj)
    if isinstance(obj, dict):
        if len(obj) == 1:
            tag, body = next(iter(obj.items()))
            if tag == "$model" and isinstance(body, str):
                return model(body)
            if tag == "$set":
                return make_set(canonicalize(x) for x in body)
            if tag == "$fun":
                return make_function((canonicalize(k), canonicalize(v)) for k, v in body)
        return make_function((canonicalize(k), canonicalize(v)) for k, v in obj.items())
    raise TypeError(f"no TLA+ value for {type(obj).__name__}: {obj!r}")


def is_canonical(value: Value) -> bool:
    """True when `value` is already in canonical form (canonicalize would return an equal JSON text)."""
    try:
        return canonical_json(canonicalize(value)) == canonical_json(value)
    except (TypeError, ValueError):
        return False


def canonical_json(value: Value) -> str:
    """The one JSON text of a canonical value: compact, keys sorted, non-ASCII kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def equal(a: Value, b: Value) -> bool:
    """Equality that, unlike `==`, tells TRUE from 1 and FALSE from 0."""
    return canonical_json(a) == canonical_json(b)


# ---------------------------------------------------------------------------------------------------------------
# Printing (TLC's notation, on one line)

_STRING_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'["\\\n\t\r\f]')


@functools.lru_cache(maxsize=4096)  # the same few strings ("n/a", state names) again and again in a long run
def _format_string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _STRING_ESCAPES[m.group()], text) + '"'


def format_value(value: Value) -> str:
    """TLA+ text for a canonical value, as TLC prints it but on one line, sets and records in canonical order."""
    kind = type(value)
    if kind is bool:
        return "TRUE" if value else "FALSE"
    if kind is int:
        return str(value)
    if kind is str:
        return _format_string(value)
    if kind is list:
        return "<<" + ", ".join(map(format_value, value)) + ">>"
    if kind is dict:
        if len(value) == 1:
            tag, body = next(iter(value.items()))
            if tag == "$model":
                return body
            if tag == "$set":
                return "{" + ", ".join(map(format_value, body)) + "}"
            if tag == "$fun":
                return "(" + " @@ ".join(f"{format_value(k)} :> {format_value(v)}" for k, v in body) + ")"
        if not value:
            return "<<>>"
        return "[" + ", ".join(f"{f} |-> {format_value(v)}" for f, v in sorted(value.items())) + "]"
    raise TypeError(f"not a canonical TLA+ value: {value!r}")


def format_state(state: dict[str, Value]) -> str:
    """A node label's text for `state`: "/\\ var = value" lines, or "var = value" for a one-variable spec."""
    if len(state) == 1:
        (name, value), = state.items()
        return f"{name} = {format_value(value)}"
    return "\n".join(f"/\\ {name} = {format_value(value)}" for name, value in state.items())


# ---------------------------------------------------------------------------------------------------------------
# Parsing


