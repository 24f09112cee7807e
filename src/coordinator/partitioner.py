"""Key partitioners: the partition of each row, from the values of its key columns.

A topic names its partitioner in its config entry ``partitioner``; :func:`partition_for` reads it, so the Python
producer and the Spark writer (on any executor) place a key in the same partition, and a topic keeps its placement
whatever txnlog version writes to it.

``txnlog-v2`` (:data:`CURRENT`, recorded by :func:`coordinator.topics.create_topic` in every new topic) is
vectorised with numpy and defined on the values alone, byte for byte, so it gives the same answer on every machine,
numpy and pyarrow version:

- a value becomes 64-bit words: integers, dates, times, timestamps and durations their integer value in the
  column's type (sign-extended), booleans 0 or 1, floats the IEEE-754 bits of the value as a float64 (``-0.0`` as
  ``0.0``, every NaN as one NaN), decimals their unscaled two's-complement integer (one sign-extended word for
  decimal32 and decimal64, two little-endian words for decimal128, four for decimal256);
- strings and binaries: ``P = sum(b[i] * M**i) mod 2**64`` over their bytes, then the words ``P`` and the length;
- a value's hash is ``h = SEED; for each word w: h = fmix64(h ^ w)`` (MurmurHash3's 64-bit finaliser); a null's is
  :data:`NULL_HASH`;
- a row's hash is ``r = SEED; for each key column's hash c: r = fmix64(r * ROW_MULTIPLIER + c)``, and its partition
  is ``r mod partitions``.

``txnlog-v1`` (:data:`LEGACY`, every topic without the entry) is the CRC-32 of the values' Python text joined by
``\\x1f`` (nulls as empty text), computed row by row; it is kept so topics created before ``txnlog-v2`` keep their
placement.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from coordinator.errors import InvalidOptionError

if TYPE_CHECKING:
    from coordinator.topics import TopicMeta

__all__ = [
    "CONFIG_KEY",
    "CURRENT",
    "LEGACY",
    "PARTITIONERS",
    "check_key",
    "check_partitioner",
    "hash_columns",
    "legacy_partition",
    "partition_for",
    "partitioner_of",
]

#: The topic config entry naming the topic's partitioner.
CONFIG_KEY = "partitioner"
#: The vectorised partitioner, recorded in every topic created by this version.
CURRENT = "txnlog-v2"
#: CRC-32 of the values' text: topics without a ``partitioner`` entry.
LEGACY = "txnlog-v1"
PARTITIONERS = (LEGACY, CURRENT)

SEED = 0x9E3779B97F4A7C15
NULL_HASH = 0x6A09E667F3BCC909
ROW_MULTIPLIER = 0x100000001B3
#: Odd multiplier of the byte polynomial of strings and binaries, and its inverse modulo 2**64.
BYTE_MULTIPLIER = 0xC2B2AE3D27D4EB4F
_BYTE_INVERSE = pow(BYTE_MULTIPLIER, -1, 1 << 64)
_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_U64 = np.dtype("<u8")
#: Bytes of string data hashed per numpy pass (bounds the temporary arrays to a few times 8 bytes per byte).
_CHUNK_BYTES = 1 << 16

_powers_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def partitioner_of(meta: TopicMeta) -> str:
    """The partitioner topic ``meta`` uses: its ``partitioner`` config entry, :data:`LEGACY` without one.

    Raises:
        InvalidOptionError: the entry names a partitioner this version does not know (a newer txnlog created the
            topic); writing with another one would put keys in the wrong partitions.
    """
    name = meta.config.get(CONFIG_KEY, LEGACY)
    if name not in PARTITIONERS:
        raise InvalidOptionError(
            f"topic {meta.name!r} uses partitioner {name!r}, which this txnlog version does not know "
            f"(it knows {', '.join(PARTITIONERS)}); upgrade txnlog to write keyed records to it"
        )
    return name


def check_partitioner(config: Mapping[str, str]) -> None:
    """Refuse a topic config whose ``partitioner`` entry names an unknown partitioner.

    Raises:
        InvalidOptionError: naming the value and the known partitioners.
    """
    name = config.get(CONFIG_KEY)
    if name is not None and name not in PARTITIONERS:
        raise InvalidOptionError(f"topic config partitioner={name!r} is not one of {', '.join(PARTITIONERS)}")


def partition_for(table: pa.Table, columns: Sequence[str], partitions: int, topic_meta: TopicMeta) -> np.ndarray:
    """The partition (``int64``, in ``[0, partitions)``) of every row of ``table``, by the key ``columns`` and the
    partitioner that ``topic_meta`` records (:func:`partitioner_of`).

    Raises:
        InvalidOptionError: no key column, a column ``table`` lacks, a key type the partitioner cannot hash,
            ``partitions`` below 1, or a partitioner this version does not know.
    """
    name = partitioner_of(topic_meta)
    _check_args(table, columns, partitions)
    if name == LEGACY:
        return np.asarray(legacy_partition(table, columns, partitions), dtype=np.int64)
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    return (hash_columns(table, columns) % np.uint64(partitions)).astype(np.int64)


def check_key(topic_meta: TopicMeta, columns: Sequence[str]) -> None:
    """Refuse, before any data is hashed, key ``columns`` that the topic's partitioner cannot hash.

    Raises:
        InvalidOptionError: a column the topic lacks, a type the partitioner has no rule for (naming both), or a
            partitioner this version does not know.
    """
    name = partitioner_of(topic_meta)
    empty = topic_meta.schema.empty_table()
    _check_args(empty, columns, 1)
    if name == CURRENT:
        hash_columns(empty, columns)


def legacy_partition(table: pa.Table, columns: Sequence[str], partitions: int) -> list[int]:
    """``txnlog-v1``: CRC-32 of the key values' text (joined by ``\\x1f``, nulls as empty text) modulo
    ``partitions``, row by row.

    Raises:
        KeyError: a column ``table`` lacks.
    """
    cols = [table.column(c).to_pylist() for c in columns]
    crc = zlib.crc32
    if len(cols) == 1:
        return [crc(("" if v is None else str(v)).encode()) % partitions for v in cols[0]]
    return [
        crc("\x1f".join("" if v is None else str(v) for v in vals).encode()) % partitions
        for vals in zip(*cols, strict=True)
    ]


def hash_columns(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """The ``txnlog-v2`` 64-bit hash (``uint64``) of every row's key ``columns``.

    Raises:
        InvalidOptionError: a key column's type cannot be hashed (nested types).
    """
    row = np.full(table.num_rows, SEED, dtype=np.uint64)
    for name in columns:
        col = table.column(name)
        try:
            h = _hash_chunked(col)
        except _Unhashable as exc:
            raise InvalidOptionError(
                f"key column {name!r} has type {exc.args[0]}, which the partitioner cannot hash; key on columns of "
                "strings, binaries, integers, floats, decimals, booleans, dates, times or timestamps"
            ) from None
        row *= np.uint64(ROW_MULTIPLIER)
        row += h
        _fmix64(row)
    return row


# -- internals --------------------------------------------------------------------------------------------------


class _Unhashable(Exception):
    """A type the partitioner has no rule for (args[0]: the type)."""


def _check_args(table: pa.Table, columns: Sequence[str], partitions: int) -> None:
    if isinstance(partitions, bool) or not isinstance(partitions, int | np.integer) or partitions < 1:
        raise InvalidOptionError(f"partitions must be a positive integer, got {partitions!r}")
    if isinstance(columns, str) or not columns:
        raise InvalidOptionError(f"key columns must be a non-empty list of column names, got {columns!r}")
    for c in columns:
        if c not in table.column_names:
            raise InvalidOptionError(f"key column {c!r} is not one of the columns {table.column_names}")


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place on a ``uint64`` array (wrapping arithmetic)."""
    h ^= h >> _S33
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


def _hash_chunked(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return _hash_array(col.chunk(0))
        if col.num_chunks == 0:
            return np.zeros(0, dtype=np.uint64)
        return np.concatenate([_hash_array(c) for c in col.chunks])
    return _hash_array(col)


def _hash_array(arr: pa.Array) -> np.ndarray:
    """The per-value hash of ``arr`` (nulls: :data:`NULL_HASH`)."""
    t = arr.type
    if isinstance(t, pa.ExtensionType):
        return _hash_array(arr.storage)
    if pa.types.is_dictionary(t):
        assert isinstance(arr, pa.DictionaryArray)
        values = _hash_array(arr.dictionary)
        indices = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        h = values[indices] if len(values) else np.full(len(arr), NULL_HASH, dtype=np.uint64)
        return _nulls(arr.indices, h)
    if pa.types.is_null(t):
        return np.full(len(arr), NULL_HASH, dtype=np.uint64)
    hasher = _word_hasher(t)
    if hasher is not None:
        return _nulls(arr, _hash_words(hasher(arr)))
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return _hash_array(arr.cast(pa.large_binary()))
    if (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        return _nulls(arr, _hash_bytes(arr))
    raise _Unhashable(str(t))


def _nulls(arr: pa.Array, h: np.ndarray) -> np.ndarray:
    if arr.null_count:
        valid = pc.is_valid(arr).to_numpy(zero_copy_only=False)
        h[~valid] = np.uint64(NULL_HASH)
    return h


def _hash_words(words: list[np.ndarray]) -> np.ndarray:
    h = np.full(len(words[0]), SEED, dtype=np.uint64)
    for w in words:
        h ^= w
        _fmix64(h)
    return h


def _fixed(arr: pa.Array, dtype: str) -> np.ndarray:
    """The values buffer of a fixed-width array as numpy (values under nulls are arbitrary)."""
    dt = np.dtype(dtype)
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dtype=dt)
    return np.frombuffer(buf, dtype=dt, count=arr.offset + len(arr))[arr.offset:]


def _word_hasher(t: pa.DataType) -> Callable[[pa.Array], list[np.ndarray]] | None:
    """How a fixed-width type becomes 64-bit words (None: not a fixed-width type)."""
    types = pa.types
    if types.is_boolean(t):
        return lambda a: [pc.fill_null(a, False).to_numpy(zero_copy_only=False).astype(np.uint64)]
    if types.is_floating(t):
        return lambda a: [_float_bits(_fixed(a, f"<f{t.bit_width // 8}"))]
    if types.is_signed_integer(t) or types.is_date(t) or types.is_time(t) or types.is_timestamp(t) or \
            types.is_duration(t):
        width = t.bit_width // 8
        return lambda a: [_fixed(a, f"<i{width}").astype(np.int64).view(np.uint64)]
    if types.is_unsigned_integer(t):
        width = t.bit_width // 8
        return lambda a: [_fixed(a, f"<u{width}").astype(np.uint64)]
    if types.is_decimal(t):
        width = t.bit_width // 8
        if width < 8:
            return lambda a: [_fixed(a, f"<i{width}").astype(np.int64).view(np.uint64)]
        return lambda a: _decimal_words(a, width // 8)
    return None


def _float_bits(v: np.ndarray) -> np.ndarray:
    f = v.astype(np.float64)  # a copy: the normalisation below must not touch Arrow's buffer
    f[f == 0.0] = 0.0
    f[np.isnan(f)] = np.nan
    return f.view(np.uint64)


def _decimal_words(arr: pa.Array, words: int) -> list[np.ndarray]:
    flat = _fixed_bytes(arr, words * 8).view(_U64).reshape(len(arr), words)
    return [flat[:, i].astype(np.uint64) for i in range(words)]


def _fixed_bytes(arr: pa.Array, width: int) -> np.ndarray:
    buf = arr.buffers()[1]
    n = len(arr)
    if buf is None:
        return np.zeros(n * width, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8, count=(arr.offset + n) * width)[arr.offset * width:]


def _hash_bytes(arr: pa.Array) -> np.ndarray:
    """Strings and binaries: the words (byte polynomial, length) hashed as in :func:`_hash_words`."""
    n = len(arr)
    t = arr.type
    bufs = arr.buffers()
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = _fixed_bytes(arr, width)
        offsets = np.arange(n + 1, dtype=np.int64) * width
    else:
        odt = "<i8" if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else "<i4"
        offsets = np.frombuffer(bufs[1], dtype=odt, count=arr.offset + n + 1)[arr.offset:].astype(np.int64)
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
    lengths = np.diff(offsets).view(np.uint64)
    return _hash_words([_byte_polynomial(data, offsets), lengths])


def _powers(m: int) -> tuple[np.ndarray, np.ndarray]:
    """``M**i`` and ``M**-i`` modulo 2**64 for ``i < m`` (cached up to :data:`_CHUNK_BYTES`)."""
    size = max(m, _CHUNK_BYTES)
    cached = _powers_cache.get(size)
    if cached is None:
        pw = np.empty(size, dtype=np.uint64)
        pw[0] = 1
        pw[1:] = BYTE_MULTIPLIER
        np.cumprod(pw, out=pw)
        inv = np.empty(size, dtype=np.uint64)
        inv[0] = 1
        inv[1:] = _BYTE_INVERSE
        np.cumprod(inv, out=inv)
        cached = (pw, inv)
        if size == _CHUNK_BYTES:
            _powers_cache[size] = cached
    return cached


def _byte_polynomial(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``sum(b[i] * M**i)`` modulo 2**64 over the bytes of each value ``data[offsets[r]:offsets[r + 1]]``.

    Each pass takes whole values worth up to :data:`_CHUNK_BYTES` bytes: the bytes, weighted by ``M`` to the power
    of their position in the pass, are summed with one cumulative sum; a value's sum is the difference of two
    prefix sums, brought back to its own first byte by ``M`` to minus the position of that byte.
    """
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    row = 0
    while row < n:
        lo = int(offsets[row])
        end = int(np.searchsorted(offsets, lo + _CHUNK_BYTES - 1, side="right")) - 1
        end = min(max(end, row + 1), n)
        hi = int(offsets[end])
        m = hi - lo
        pw, inv = _powers(m + 1)
        weighted = np.multiply(data[lo:hi], pw[:m], dtype=np.uint64)
        sums = np.empty(m + 1, dtype=np.uint64)
        sums[0] = 0
        np.cumsum(weighted, out=sums[1:])
        starts = offsets[row:end] - lo
        ends = offsets[row + 1:end + 1] - lo
        part = sums[ends] - sums[starts]
        part *= inv[starts]
        out[row:end] = part
        row = end
    return out

