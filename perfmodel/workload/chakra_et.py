"""MLCommons Chakra execution traces (ET): the schema's messages and a small protobuf codec.

A Chakra ET file is a stream of length-delimited protobuf messages: one ``GlobalMetadata``, then
one ``Node`` per operation, each preceded by its byte length as a varint (the framing of Chakra's
``third_party/utils/protolib.py`` ``encodeMessage`` / ``decodeMessage``). ASTRA-sim reads one file
per rank, ``<prefix>.<rank>.et``.

Schema followed: ``schema/protobuf/et_def.proto`` of github.com/mlcommons/chakra at commit
f5124d76bb7c (ET version string ``"0.0.4"``, the one Chakra's own generator writes). Field numbers
used here:

- ``GlobalMetadata``: ``version = 1`` (string), ``attr = 2`` (repeated AttributeProto).
- ``Node``: ``id = 1`` (uint64), ``name = 2``, ``type = 3`` (NodeType), ``ctrl_deps = 4`` and
  ``data_deps = 5`` (repeated uint64, packed), ``start_time_micros = 6``, ``duration_micros = 7``
  (uint64), ``inputs = 8`` / ``outputs = 9`` (IOInfo, read and ignored), ``attr = 10``.
- ``AttributeProto``: ``name = 1``, ``doc_string = 2``, and one value of ``double_val = 3``,
  ``int32_val = 7``, ``int64_val = 9``, ``int64_list = 10``, ``uint64_val = 13``,
  ``uint64_list = 14``, ``bool_val = 27``, ``string_val = 29``, ``string_list = 30`` (the other
  value kinds of the schema are skipped when read).
- ``NodeType``: ``METADATA_NODE = 1``, ``MEM_LOAD_NODE = 2``, ``MEM_STORE_NODE = 3``,
  ``COMP_NODE = 4``, ``COMM_SEND_NODE = 5``, ``COMM_RECV_NODE = 6``, ``COMM_COLL_NODE = 7``.
- ``CollectiveCommType``: ``ALL_REDUCE = 0``, ``REDUCE = 1``, ``ALL_GATHER = 2``,
  ``BROADCAST = 5``, ``ALL_TO_ALL = 6``, ``REDUCE_SCATTER = 7`` (others kept as numbers).

Attribute names and value kinds that ASTRA-sim's ET feeder reads (``src/feeder/et_feeder_node.cpp``
of the same repository): ``is_cpu_op`` (bool), ``num_ops`` (int64), ``tensor_size`` (uint64),
``comm_type`` (int64), ``comm_priority`` / ``comm_src`` / ``comm_dst`` / ``comm_tag`` (int32),
``comm_size`` (int64).

The codec writes proto3 wire format (varint, 64-bit, length-delimited); no protobuf package is
needed. Decoding accepts packed and unpacked repeated integers and skips unknown fields, as
protobuf parsers do.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from perfmodel.errors import ParseError

ET_VERSION = "0.0.4"
CHAKRA_SCHEMA = "mlcommons/chakra schema/protobuf/et_def.proto @ f5124d76bb7c"


class NodeType(enum.IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CommType(enum.IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


class AttrKind(str, enum.Enum):
    """Value kind of an attribute, with its ``AttributeProto`` field number."""

    DOUBLE = "double"
    INT32 = "int32"
    INT64 = "int64"
    INT64_LIST = "int64_list"
    UINT64 = "uint64"
    UINT64_LIST = "uint64_list"
    BOOL = "bool"
    STRING = "string"
    STRING_LIST = "string_list"


_ATTR_FIELD = {
    AttrKind.DOUBLE: 3,
    AttrKind.INT32: 7,
    AttrKind.INT64: 9,
    AttrKind.INT64_LIST: 10,
    AttrKind.UINT64: 13,
    AttrKind.UINT64_LIST: 14,
    AttrKind.BOOL: 27,
    AttrKind.STRING: 29,
    AttrKind.STRING_LIST: 30,
}
_FIELD_ATTR = {v: k for k, v in _ATTR_FIELD.items()}
_ATTR_WIRE = {k: 1 if k is AttrKind.DOUBLE else 0 for k in _ATTR_FIELD} | {
    k: 2 for k in (AttrKind.STRING, AttrKind.STRING_LIST, AttrKind.INT64_LIST, AttrKind.UINT64_LIST)
}


@dataclass(frozen=True)
class Attr:
    """One ``AttributeProto``: a name, a value kind and the value."""

    name: str
    kind: AttrKind
    value: Any


def attr_value(attrs: tuple[Attr, ...], name: str, default: Any = None) -> Any:
    """Value of the first attribute of ``attrs`` named ``name`` (``default`` when none is)."""
    for a in attrs:
        if a.name == name:
            return a.value
    return default


@dataclass(frozen=True)
class Node:
    """One ``Node`` message. Times in microseconds (the schema's unit)."""

    id: int
    name: str
    type: NodeType
    ctrl_deps: tuple[int, ...] = ()
    data_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    attrs: tuple[Attr, ...] = field(default_factory=tuple)

    def attr(self, name: str, default: Any = None) -> Any:
        """Value of the attribute ``name`` (``default`` when absent)."""
        return attr_value(self.attrs, name, default)


@dataclass(frozen=True)
class Trace:
    """A decoded ET file: the metadata's version and attributes, and the nodes in file order."""

    version: str
    metadata: tuple[Attr, ...]
    nodes: tuple[Node, ...]
    source: str = ""

    def meta(self, name: str, default: Any = None) -> Any:
        """Value of the metadata attribute ``name`` (``default`` when absent)."""
        return attr_value(self.metadata, name, default)


# --------------------------------------------------------------------------- encoding


def _varint(n: int) -> bytes:
    """Base-128 varint; a negative integer is written as its 64-bit two's complement."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field_no: int, wire: int) -> bytes:
    return _varint((field_no << 3) | wire)


def _len_field(field_no: int, payload: bytes) -> bytes:
    return _key(field_no, 2) + _varint(len(payload)) + payload


def _uint_field(field_no: int, n: int) -> bytes:
    return _key(field_no, 0) + _varint(int(n)) if n else b""


def _packed(field_no: int, values: Iterable[int]) -> bytes:
    body = b"".join(_varint(int(v)) for v in values)
    return _len_field(field_no, body) if body else b""


def _encode_attr(a: Attr) -> bytes:
    f = _ATTR_FIELD[a.kind]
    out = _len_field(1, a.name.encode())
    if a.kind is AttrKind.DOUBLE:
        return out + _key(f, 1) + struct.pack("<d", float(a.value))
    if a.kind in (AttrKind.INT32, AttrKind.INT64, AttrKind.UINT64, AttrKind.BOOL):
        return out + _key(f, 0) + _varint(int(a.value))
    if a.kind is AttrKind.STRING:
        return out + _len_field(f, str(a.value).encode())
    if a.kind in (AttrKind.INT64_LIST, AttrKind.UINT64_LIST):
        return out + _len_field(f, _packed(1, a.value))
    return out + _len_field(f, b"".join(_len_field(1, str(v).encode()) for v in a.value))


def encode_metadata(version: str = ET_VERSION, attrs: Iterable[Attr] = ()) -> bytes:
    """A ``GlobalMetadata`` message (without its length prefix)."""
    return _len_field(1, version.encode()) + b"".join(_len_field(2, _encode_attr(a)) for a in attrs)


def encode_node(n: Node) -> bytes:
    """A ``Node`` message (without its length prefix)."""
    return (
        _uint_field(1, n.id)
        + (_len_field(2, n.name.encode()) if n.name else b"")
        + _uint_field(3, int(n.type))
        + _packed(4, n.ctrl_deps)
        + _packed(5, n.data_deps)
        + _uint_field(6, n.start_time_micros)
        + _uint_field(7, n.duration_micros)
        + b"".join(_len_field(10, _encode_attr(a)) for a in n.attrs)
    )


def write_trace(
    path: str | os.PathLike[str], nodes: Iterable[Node], metadata: Iterable[Attr] = ()
) -> None:
    """Write an ET file: the length-delimited metadata, then every node (atomically: a
    reader never sees a half-written trace)."""
    from perfmodel._io import atomic_write

    chunks = [encode_metadata(ET_VERSION, metadata)] + [encode_node(n) for n in nodes]
    with atomic_write(path, "wb") as fh:
        fh.write(b"".join(_varint(len(c)) + c for c in chunks))


# --------------------------------------------------------------------------- decoding


def _read_varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ParseError(f"{where}: truncated varint at byte {pos}", where=where)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ParseError(f"{where}: varint longer than 10 bytes at byte {pos}", where=where)


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


#: wire type each known field must have (per message): 0 varint, 1 64-bit, 2 length-delimited
_WIRE = {
    "metadata": {1: 2, 2: 2},
    "node": {1: 0, 2: 2, 3: 0, 6: 0, 7: 0, 8: 2, 9: 2, 10: 2},
}


def _check_wire(msg: str, f: int, wire: int, where: str) -> None:
    want = _WIRE[msg].get(f)
    if want is not None and wire != want:
        raise ParseError(
            f"{where}: {msg} field {f} has wire type {wire}, the schema says {want} "
            "(not a Chakra ET file, or another schema version)",
            value=f,
            where=where,
        )


def _fields(buf: bytes, where: str) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of every field of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos, where)
        f, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = _read_varint(buf, pos, where)
        elif wire == 1:
            v, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = _read_varint(buf, pos, where)
            v, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            v, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ParseError(f"{where}: unsupported wire type {wire} (field {f})", where=where)
        if pos > len(buf):
            raise ParseError(f"{where}: field {f} runs past the message end", where=where)
        yield f, wire, v


def _ints(wire: int, v: Any, where: str) -> list[int]:
    """A repeated integer field: one unpacked value or a packed run."""
    if wire == 0:
        return [v]
    out, pos = [], 0
    while pos < len(v):
        x, pos = _read_varint(v, pos, where)
        out.append(x)
    return out


def _decode_attr(buf: bytes, where: str) -> Attr | None:
    name, kind, value = "", None, None
    for f, wire, v in _fields(buf, where):
        if f == 1 and wire == 2:
            name = v.decode()
        elif f in _FIELD_ATTR and wire == _ATTR_WIRE[_FIELD_ATTR[f]]:
            kind = _FIELD_ATTR[f]
            if kind is AttrKind.DOUBLE:
                value = struct.unpack("<d", v)[0]
            elif kind in (AttrKind.INT32, AttrKind.INT64):
                value = _signed(v)
            elif kind is AttrKind.UINT64:
                value = v
            elif kind is AttrKind.BOOL:
                value = bool(v)
            elif kind is AttrKind.STRING:
                value = v.decode()
            elif kind is AttrKind.STRING_LIST:
                value = tuple(x.decode() for g, _w, x in _fields(v, where) if g == 1)
            else:
                vals = [x for g, w, y in _fields(v, where) if g == 1 for x in _ints(w, y, where)]
                value = (
                    tuple(_signed(x) for x in vals) if kind is AttrKind.INT64_LIST else tuple(vals)
                )
    return None if kind is None else Attr(name, kind, value)


def decode_node(buf: bytes, where: str = "<node>") -> Node:
    d: dict[str, Any] = {"ctrl_deps": [], "data_deps": [], "attrs": []}
    for f, wire, v in _fields(buf, where):
        _check_wire("node", f, wire, where)
        if f == 1:
            d["id"] = v
        elif f == 2:
            d["name"] = v.decode()
        elif f == 3:
            d["type"] = v
        elif f == 4:
            d["ctrl_deps"] += _ints(wire, v, where)
        elif f == 5:
            d["data_deps"] += _ints(wire, v, where)
        elif f == 6:
            d["start_time_micros"] = v
        elif f == 7:
            d["duration_micros"] = v
        elif f == 10:
            a = _decode_attr(v, where)
            if a is not None:
                d["attrs"].append(a)
    try:
        ntype = NodeType(d.get("type", 0))
    except ValueError:
        ntype = NodeType.INVALID_NODE
    return Node(
        id=d.get("id", 0),
        name=d.get("name", ""),
        type=ntype,
        ctrl_deps=tuple(d["ctrl_deps"]),
        data_deps=tuple(d["data_deps"]),
        start_time_micros=d.get("start_time_micros", 0),
        duration_micros=d.get("duration_micros", 0),
        attrs=tuple(d["attrs"]),
    )


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Decode an ET file.

    Raises
    ------
    ParseError
        A missing file, a truncated message, or a file that is not a Chakra ET stream.
    """
    where = str(path)
    from perfmodel._io import read_bytes
    from perfmodel.errors import FileAccessError

    try:
        buf = read_bytes(path, where=where)  # a regular file (a FIFO or device is refused)
    except FileAccessError as exc:
        raise ParseError(str(exc), value=where, where=where) from exc
    messages = []
    pos = 0
    while pos < len(buf):
        n, pos = _read_varint(buf, pos, where)
        if pos + n > len(buf):
            raise ParseError(
                f"{where}: message of {n} bytes at byte {pos} runs past the end of the file "
                "(truncated, or not a Chakra ET file)",
                value=where,
                where=where,
            )
        messages.append(buf[pos : pos + n])
        pos += n
    if not messages:
        raise ParseError(f"{where}: empty file, no GlobalMetadata", value=where, where=where)
    version, meta = "", []
    for f, wire, v in _fields(messages[0], where):
        if _WIRE["metadata"].get(f, wire) != wire:
            raise ParseError(
                f"{where}: the first message is not a GlobalMetadata: not a Chakra ET file",
                value=where,
                where=where,
            )
        if f == 1:
            version = v.decode(errors="replace")
        elif f == 2:
            a = _decode_attr(v, where)
            if a is not None:
                meta.append(a)
    if not version:
        raise ParseError(
            f"{where}: the first message has no version: not a Chakra ET file",
            value=where,
            where=where,
        )
    nodes = tuple(decode_node(m, where) for m in messages[1:])
    return Trace(version, tuple(meta), nodes, where)
