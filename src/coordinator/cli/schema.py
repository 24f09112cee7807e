"""``create-topic --schema``: column lists in Arrow's notation or as Spark DDL.

```
id:int64!, amount:decimal128(10, 2), at:timestamp[ms, tz=UTC], tags:list<item: string>
id BIGINT NOT NULL, amount DECIMAL(10,2), at TIMESTAMP, tags ARRAY<STRING>, m MAP<STRING, INT>
```

A column is a name, an optional ``:``, a type, and optionally ``NOT NULL`` (or a trailing ``!``) and a Spark
``COMMENT '...'`` (ignored). Types are every Arrow type a topic can hold, written as pyarrow prints them (so
``str(field.type)`` of any topic parses back), their short aliases, and Spark SQL's type names. Names may be
quoted with backticks.
"""

from __future__ import annotations

import pyarrow as pa

from coordinator.errors import InvalidOptionError

#: Type names without parameters (lower case) -> Arrow type. Spark SQL names included.
SIMPLE: dict[str, pa.DataType] = {
    "int8": pa.int8(), "tinyint": pa.int8(), "byte": pa.int8(),
    "int16": pa.int16(), "smallint": pa.int16(), "short": pa.int16(),
    "int32": pa.int32(), "int": pa.int32(), "integer": pa.int32(),
    "int64": pa.int64(), "bigint": pa.int64(), "long": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "float16": pa.float16(), "halffloat": pa.float16(),
    "float32": pa.float32(), "float": pa.float32(), "real": pa.float32(),
    "float64": pa.float64(), "double": pa.float64(),
    "bool": pa.bool_(), "boolean": pa.bool_(),
    "string": pa.string(), "str": pa.string(), "utf8": pa.string(), "text": pa.string(),
    "large_string": pa.large_string(), "large_utf8": pa.large_string(),
    "binary": pa.binary(), "bytes": pa.binary(), "large_binary": pa.large_binary(),
    "date": pa.date32(), "date32": pa.date32(), "date64": pa.date64(),
    "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ltz": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
#: Names that take ``(n)`` and mean a string (Spark's VARCHAR(n), CHAR(n)).
STRING_WITH_LENGTH = ("varchar", "char")
UNITS = ("s", "ms", "us", "ns")
MAX_DECIMAL128 = 38
MAX_DECIMAL256 = 76


class _Parser:
    """A recursive-descent parser over the schema text; errors name the position and what was expected."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0

    # -- scanning ---------------------------------------------------------------------------------------------

    def error(self, what: str) -> InvalidOptionError:
        near = self.text[self.i:self.i + 20] or "the end"
        return InvalidOptionError(f"--schema: {what} at position {self.i + 1} (near {near!r}) of {self.text!r}")

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.i)

    def accept(self, s: str) -> bool:
        if self.peek(s):
            self.i += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            raise self.error(f"expected {s!r}")

    def word(self, what: str = "a name") -> str:
        self.skip()
        if self.accept("`"):
            end = self.text.find("`", self.i)
            if end < 0:
                raise self.error("unclosed backtick")
            name, self.i = self.text[self.i:end], end + 1
            return name
        start = self.i
        while self.i < len(self.text) and (self.text[self.i].isalnum() or self.text[self.i] in "_-."):
            self.i += 1
        if self.i == start:
            raise self.error(f"expected {what}")
        return self.text[start:self.i]

    def keyword(self, kw: str) -> bool:
        """Accept a case-insensitive keyword followed by a non-name character."""
        self.skip()
        end = self.i + len(kw)
        if self.text[self.i:end].lower() == kw and (end >= len(self.text) or not
                                                    (self.text[end].isalnum() or self.text[end] == "_")):
            self.i = end
            return True
        return False

    def integer(self) -> int:
        self.skip()
        start = self.i
        while self.i < len(self.text) and self.text[self.i].isdigit():
            self.i += 1
        if self.i == start:
            raise self.error("expected a number")
        return int(self.text[start:self.i])

    # -- grammar ----------------------------------------------------------------------------------------------

    def field(self) -> pa.Field:
        """``name [:] type [NOT NULL | !] [COMMENT '...']``."""
        name = self.word("a column name")
        self.accept(":")
        typ = self.type_()
        nullable = True
        if self.accept("!"):
            nullable = False
        elif self.keyword("not"):
            if not self.keyword("null"):
                raise self.error("expected NULL after NOT")
            nullable = False
        if self.keyword("comment"):
            self.skip()
            quote = self.text[self.i:self.i + 1]
            if quote not in ("'", '"'):
                raise self.error("expected a quoted comment")
            end = self.text.find(quote, self.i + 1)
            if end < 0:
                raise self.error("unclosed comment")
            self.i = end + 1
        if not name:
            raise self.error("empty column name")
        return pa.field(name, typ, nullable=nullable)

    def type_(self) -> pa.DataType:
        name = self.word("a type").lower()
        if name in ("decimal", "dec", "numeric", "decimal128", "decimal256"):
            precision, scale = (10, 0) if name in ("decimal", "dec", "numeric") else (-1, 0)
            if self.accept("("):
                precision = self.integer()
                if self.accept(","):
                    scale = self.integer()
                self.expect(")")
            if precision < 0:
                raise self.error(f"{name} needs (precision, scale)")
            return self._decimal(name, precision, scale)
        if name in STRING_WITH_LENGTH:
            if self.accept("("):
                self.integer()
                self.expect(")")
            return pa.string()
        if name == "fixed_size_binary":
            self.expect("[")
            width = self.integer()
            self.expect("]")
            return pa.binary(width)
        if name in ("timestamp", "time32", "time64", "duration", "date32", "date64") and self.peek("["):
            return self._bracketed(name)
        if name in ("list", "large_list", "array"):
            self.expect("<")
            item = self._item()
            self.expect(">")
            return pa.large_list(item) if name == "large_list" else pa.list_(item)
        if name == "map":
            self.expect("<")
            key = self.type_()
            self.expect(",")
            value = self._item()
            self.expect(">")
            return pa.map_(key, pa.field("value", value.type, nullable=value.nullable))
        if name == "struct":
            self.expect("<")
            fields = []
            if not self.peek(">"):
                fields.append(self.field())
                while self.accept(","):
                    fields.append(self.field())
            self.expect(">")
            return pa.struct(fields)
        typ = SIMPLE.get(name)
        if typ is None:
            raise self.error(f"unknown type {name!r}")
        return typ

    def _item(self) -> pa.Field:
        """A list or map value: ``T``, ``item: T`` or ``value: T``, optionally ``not null``."""
        save = self.i
        try:
            return self.field()
        except InvalidOptionError:
            self.i = save
        typ = self.type_()
        nullable = not (self.keyword("not") and self.keyword("null"))
        return pa.field("item", typ, nullable=nullable)

    def _decimal(self, name: str, precision: int, scale: int) -> pa.DataType:
        limit = MAX_DECIMAL128 if name == "decimal128" else MAX_DECIMAL256
        if not 1 <= precision <= limit or not 0 <= scale <= precision:
            raise self.error(f"{name}({precision}, {scale}): precision must be 1-{limit} and 0 <= scale <= "
                             "precision")
        if name == "decimal256" or precision > MAX_DECIMAL128:
            return pa.decimal256(precision, scale)
        return pa.decimal128(precision, scale)

    def _bracketed(self, name: str) -> pa.DataType:
        self.expect("[")
        unit = self.word("a unit").lower()
        tz = None
        if name == "timestamp" and self.accept(","):
            self.skip()
            if not self.keyword("tz"):
                raise self.error("expected tz=ZONE")
            self.expect("=")
            end = self.text.find("]", self.i)
            if end < 0:
                raise self.error("expected ']'")
            tz, self.i = self.text[self.i:end].strip(), end
        self.expect("]")
        try:
            if name == "timestamp":
                return pa.timestamp(unit, tz=tz)
            if name == "date32" and unit == "day":
                return pa.date32()
            if name == "date64" and unit == "ms":
                return pa.date64()
            if name == "time32":
                return pa.time32(unit)
            if name == "time64":
                return pa.time64(unit)
            if name == "duration":
                return pa.duration(unit)
        except (ValueError, pa.ArrowInvalid) as exc:
            raise self.error(f"{name}[{unit}]: {exc}") from None
        raise self.error(f"{name} has no unit {unit!r}")


def parse_schema(text: str) -> pa.Schema:
    """Parse a column list (see the module docstring).

    Raises:
        InvalidOptionError: an empty schema, a malformed column, an unknown type or bad parameters, a duplicate
            column; the message names the position.
    """
    p = _Parser(text)
    fields = [p.field()]
    while p.accept(","):
        fields.append(p.field())
    p.skip()
    if p.i != len(text):
        raise p.error("expected ',' or the end")
    names = [f.name for f in fields]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidOptionError(f"--schema: duplicate column(s) {dupes}")
    try:
        return pa.schema(fields)
    except (ValueError, pa.ArrowInvalid) as exc:  # pragma: no cover - fields are valid by construction
        raise InvalidOptionError(f"--schema: {exc}") from None
