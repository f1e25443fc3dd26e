"""Parsing TLC's text of TLA+ values into their canonical form (`conformance.tla.values`).

Theory of operation: lark LALR with the basic lexer and the Transformer inlined into the parser (no parse tree is
built), using conformance/grammars/tlavalue.lark; every value is built through the canonical constructors of
`conformance.tla.values`. A malformed text raises `ValueSyntaxError` at an offset, which `parse_value` and
`parse_state` turn into a `ParseError` naming source:line:column. TLC repeats the same value text in many states, so
`ValueParser` memoizes per distinct text; its results are shared between callers and must not be mutated.
`split_composite` cuts a composite value's text at its top-level separators without parsing it (the DOT parser's
fast path).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Iterable

import lark

from conformance.tla.values import (
    IDENTIFIER,
    ParseError,
    Value,
    ValueSyntaxError,
    canonical_json,
    make_function,
    make_record,
    make_set,
)

__all__ = ["expected_text", "parse_raw", "parse_value", "parse_state", "split_composite", "ValueParser"]


_ESCAPE_MEANING = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "f": "\f"}


_ESCAPE = re.compile(r"\\(.)", re.S)


@lark.v_args(inline=True)
class _ToCanonical(lark.Transformer):
    """Rule name -> canonical value; runs inside the LALR parser, so no tree is ever built."""

    def integer(self, token):
        return int(token)

    def string(self, token):
        body = token[1:-1]
        if "\\" not in body:
            return str(body)

        def unescape(match: re.Match) -> str:
            meaning = _ESCAPE_MEANING.get(match.group(1))
            if meaning is None:
                raise ValueSyntaxError(token.start_pos + 1 + match.start(), f"unknown string escape {match.group()!r}")
            return meaning

        return _ESCAPE.sub(unescape, body)

    def true(self, _token):
        return True

    def false(self, _token):
        return False

    def model(self, token):
        return {"$model": str(token)}

    def sequence(self, *items):
        return list(items)

    def set(self, *members):
        return make_set(members)

    def interval(self, low, high):
        return {"$set": list(range(int(low), int(high) + 1))}

    def field(self, name, value):
        return (str(name), value)

    def record(self, *fields):
        if len({f for f, _ in fields}) != len(fields):
            raise ValueError("a record lists the same field twice")
        return make_record(fields)

    def entry(self, key, value):
        return (key, value)

    def function(self, *entries):
        return make_function(entries)

    def conjunct(self, name, value):
        return (str(name), value)

    def state(self, *conjuncts):
        return dict(conjuncts)

    def single_state(self, name, value):
        return {str(name): value}


@functools.cache
def _lark() -> lark.Lark:
    grammar = resources.files("conformance").joinpath("grammars/tlavalue.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", lexer="basic", start=["value", "state"], transformer=_ToCanonical(),
                     propagate_positions=False, maybe_placeholders=False)


def _describe(token: lark.Token) -> str:
    return "end of input" if token.type == "$END" else repr(str(token))


@functools.cache
def _terminal_texts() -> dict[str, str]:
    """Terminal name -> what a reader recognizes: the literal for punctuation, the name for NAME, INT, STRING."""
    texts = {"$END": "end of input"}
    for terminal in _lark().terminals:
        pattern = terminal.pattern
        texts[terminal.name] = repr(pattern.value) if pattern.type == "str" else terminal.name
    return texts


def expected_text(names: Iterable[str], texts: dict[str, str] | None = None) -> str:
    """lark's expected-terminal names, as a sorted, readable list."""
    texts = texts if texts is not None else _terminal_texts()
    return ", ".join(sorted(texts.get(name, name) for name in names)) or "nothing"


def parse_raw(text: str, start: str = "value") -> Value:
    """Parse `text`; a malformed text raises ValueSyntaxError with its 0-based offset into `text`."""
    try:
        return _lark().parse(text, start=start)
    except ValueSyntaxError:
        raise
    except lark.exceptions.UnexpectedCharacters as e:
        raise ValueSyntaxError(e.pos_in_stream, f"unexpected character {text[e.pos_in_stream]!r}") from None
    except lark.exceptions.UnexpectedToken as e:
        offset = len(text) if e.token.type == "$END" else e.token.start_pos
        raise ValueSyntaxError(offset, f"unexpected {_describe(e.token)}, expected one of: "
                                       f"{expected_text(e.expected)}") from None
    except lark.exceptions.UnexpectedEOF:
        raise ValueSyntaxError(len(text), "the value ends too early") from None
    except ValueError as e:  # duplicate field or key, raised by a constructor
        raise ValueSyntaxError(0, str(e)) from None


def _to_parse_error(text: str, error: ValueSyntaxError, source: str, first_line: int = 1) -> ParseError:
    line = text.count("\n", 0, error.offset)
    line_start = text.rfind("\n", 0, error.offset) + 1
    line_end = text.find("\n", error.offset)
    line_text = text[line_start:] if line_end < 0 else text[line_start:line_end]
    return ParseError(source, first_line + line, error.offset - line_start + 1, line_text, error.message)


def parse_value(text: str, source: str = "<value>") -> Value:
    """The canonical form of one TLA+ value printed by TLC; ParseError names source:line:column if malformed."""
    try:
        return parse_raw(text)
    except ValueSyntaxError as e:
        raise _to_parse_error(text, e, source) from None


def parse_state(text: str, source: str = "<state>") -> dict[str, Value]:
    """An unescaped node label ("/\\ var = value" lines, or "var = value") -> {var: canonical value}."""
    try:
        return parse_raw(text, start="state")
    except ValueSyntaxError as e:
        raise _to_parse_error(text, e, source) from None


# A composite value's top level: strings are skipped whole, brackets nest, separators count only at depth 1.
_TOP_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|<<|>>|:>|@@|[\[\](){},]', re.S)


_CLOSER = {"<<": ">>", "(": ")", "[": "]", "{": "}"}


_CLOSERS = frozenset(_CLOSER.values())


_SEPARATOR = {"<<": ",", "{": ",", "[": ",", "(": "@@"}


def split_composite(text: str) -> tuple[str, list[str], list[int]] | None:
    """(opener, item texts, top-level ":>" offsets into text or -1) of a stripped composite value, or None.

    None means "not a well-formed composite at the top level"; the caller lets the grammar decide (and report).
    """
    opener = "<<" if text.startswith("<<") else text[:1]
    closer = _CLOSER.get(opener)
    if closer is None or not text.endswith(closer):
        return None
    separator, depth, start, items, maps_to, arrow = _SEPARATOR[opener], 0, len(opener), [], [], -1
    for match in _TOP_TOKEN.finditer(text):
        token = match.group()
        if token in _CLOSER:
            depth += 1
        elif token in _CLOSERS:
            depth -= 1
            if depth == 0:
                if match.end() != len(text):
                    return None
                items.append(text[start:match.start()])
                maps_to.append(arrow)
                return opener, items, maps_to
        elif depth == 1:
            if token == separator:
                items.append(text[start:match.start()])
                maps_to.append(arrow)
                start, arrow = match.end(), -1
            elif token == ":>" and opener == "(" and arrow < 0:
                arrow = match.start() - start
            elif token != ":>":
                return None
    return None


class ValueParser:
    """Memoized value parsing: one per process or Spark partition, since value texts repeat across states.

    `parse(text)` returns the canonical value and `parse_json(text)` its canonical JSON, each cached per distinct
    text in an LRU of `maxsize` entries. Malformed text raises ValueSyntaxError (offset into `text`).

    A long composite text that misses the cache (a channel whose contents changed) is split at its top level and
    each member is looked up in the same cache: a new `msgs` text is mostly members seen before. Short texts, and
    any text the split does not fully understand, go to the grammar, which also reports every error.
    """

    SPLIT_ABOVE = 40  # characters; below this the grammar is about as fast as splitting

    def __init__(self, maxsize: int = 1 << 16) -> None:
        self.parse = functools.lru_cache(maxsize=maxsize)(self._parse)
        self.parse_json = functools.lru_cache(maxsize=maxsize)(lambda text: canonical_json(self.parse(text)))

    def _parse(self, text: str) -> Value:
        stripped = text.strip()
        if len(stripped) > self.SPLIT_ABOVE:
            split = split_composite(stripped)
            if split is not None:
                try:
                    return self._build(*split)
                except (ValueSyntaxError, ValueError):
                    pass  # the grammar, on the whole text, says where the error is
        return parse_raw(text)

    def _build(self, opener: str, items: list[str], maps_to: list[int]) -> Value:
        parse = self.parse
        if len(items) == 1 and not items[0].strip():
            if opener == "<<":
                return []
            if opener == "{":
                return {"$set": []}
            raise ValueSyntaxError(0, "empty record or function")
        if opener == "<<":
            return [parse(item.strip()) for item in items]
        if opener == "{":
            return make_set(parse(item.strip()) for item in items)
        if opener == "[":
            fields = []
            for item in items:
                name, arrow, value = item.partition("|->")
                name = name.strip()
                if not arrow or not IDENTIFIER.fullmatch(name):  # TRUE and FALSE too: [TRUE |-> 1] is a record
                    raise ValueSyntaxError(0, "not a record field")
                fields.append((name, parse(value.strip())))
            if len({f for f, _ in fields}) != len(fields):
                raise ValueSyntaxError(0, "duplicate field")
            return make_record(fields)
        pairs = []
        for item, arrow in zip(items, maps_to):
            if arrow < 0:
                raise ValueSyntaxError(0, "not a function entry")
            pairs.append((parse(item[:arrow].strip()), parse(item[arrow + 2:].strip())))
        return make_function(pairs)

    def cache_info(self) -> str:
        """Hits and misses of the value cache, for progress and benchmark lines."""
        info = self.parse.cache_info()
        return f"value cache: {info.hits} hits, {info.misses} misses, {info.currsize} entries"
