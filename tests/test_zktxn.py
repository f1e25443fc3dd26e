"""`zabref.core.zktxn`: a transaction's value as the ZooKeeper create a ZooKeeper follower applies, and back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.zk.txns import decode_txn
import zabref
from zabref.core import jute, payloads, zktxn
from zabref.errors import CodecError

Z = (7 << 32) | 3
DIGEST = jute.INT.pack(2) + jute.LONG.pack(0x1234)  # a TxnDigest: version, treeDigest
#: A client's values: anything but a first byte 0xff, which marks a ZooKeeper transaction kept whole (FOREIGN).
VALUES = st.binary(max_size=64).filter(lambda v: v[:1] not in zktxn.MARKERS)


def test_a_value_is_the_create_of_its_own_node_as_zookeeper_reads_it() -> None:
    """What ZooKeeper's SerializeUtils.deserializeTxn would read, by the recordings' full transaction reader."""
    txn = decode_txn(payloads.encode_proposal_data(Z, b"c1-42"), "test")
    assert txn == {"op": "create", "session": "0x0", "cxid": 0, "zxid": Z, "time": 0, "path": "/zabref-7-3",
                   "data_len": 5, "data": "c1-42", "acl": ["world:anyone:31"], "ephemeral": False,
                   "parentCVersion": -1}


@given(st.integers(1, (1 << 63) - 1), VALUES, st.integers(-(1 << 63), (1 << 63) - 1),
       st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, 1 << 40), st.booleans())
def test_a_create_of_the_node_as_a_zookeeper_leader_writes_it_is_read(zxid, value, session, cxid, time_ms, digest):
    """A ZooKeeper leader's create of the node (its client's session, cxid and time, a digest after it) carries the
    same value."""
    data = zktxn.encode_create(zxid, zktxn.node_of(zxid), value, session=session, cxid=cxid, time_ms=time_ms,
                               parent_cversion=5)
    if digest:
        data += DIGEST
    assert payloads.decode_proposal_data(zxid, data) == value


def _set_data(zxid: int) -> bytes:
    header = jute.LONG.pack(0) + jute.INT.pack(0) + jute.LONG.pack(zxid) + jute.LONG.pack(0) + jute.INT.pack(5)
    return header + jute.ustring("path", zktxn.node_of(zxid)) + jute.buffer("data", b"v") + jute.INT.pack(0)


# offsets: the header is 32 bytes (zxid at 12, type at 28), the path /zabref-7-3 15, the value 4 + 1, the ACL 32
@pytest.mark.parametrize(("data", "offset", "reason"), [
    (payloads.encode_proposal_data(Z + 1, b"v"), 12, "the transaction's zxid is 0x700000004, the packet's 0x700000003"),
    (_set_data(Z)[:28] + jute.INT.pack(99) + _set_data(Z)[32:], 32, "unknown transaction type 99"),
    (_set_data(Z)[:-2], 52, "version needs 4 bytes"),
    (_set_data(Z) + b"\0", 56, "trailing"),
    (zktxn.encode_create(Z, "/zabref-7-3", None), 47, "data length is -1"),
    (zktxn.encode_create(Z, "/zabref-7-3", b"v").replace(b"anyone\x00", b"anyone\x01"), 79,
     "a transaction's node is persistent"),
    (payloads.encode_proposal_data(Z, b"v") + b"\x00", 84, "trailing"),
    (payloads.encode_proposal_data(Z, b"v")[:-1], 80, "parentCVersion needs 4 bytes"),
])
def test_anything_but_the_create_of_its_node_is_refused_where_it_goes_wrong(data, offset, reason) -> None:
    with pytest.raises(CodecError) as e:
        payloads.decode_proposal_data(Z, data)
    assert e.value.offset == offset and reason in e.value.reason, e.value
    assert "PROPOSAL data" in str(e.value)


@pytest.mark.parametrize("data", [
    _set_data(Z),  # a ZooKeeper client's setData
    zktxn.encode_create(Z, "/app", b"v", session=0x10000a, cxid=4) + DIGEST,  # a ZooKeeper client's own node
    zktxn.encode_create(Z, "/zabref-7-4", b"v"),  # another transaction's node: its creator was not zabref
    jute.LONG.pack(0x10000a) + jute.INT.pack(0) + jute.LONG.pack(Z) + jute.LONG.pack(5) + jute.INT.pack(-10)
    + jute.INT.pack(30000),  # createSession
])
def test_a_zookeeper_leaders_transaction_is_kept_whole_and_sent_again_as_it_came(data) -> None:
    """A zabref follower of a ZooKeeper leader keeps each of its transactions as its value (FOREIGN, then the bytes);
    a later zabref leader's PROPOSAL carries the same bytes, which a ZooKeeper follower applies as the first leader
    proposed it. Reads show its fields, never text a client could have written."""
    value = payloads.decode_proposal_data(Z, data)
    assert value == zktxn.FOREIGN + data
    assert payloads.encode_proposal_data(Z, value) == data
    form = zktxn.read_form(value)
    assert isinstance(form, dict) and form["zookeeper"] == decode_txn(data, "t")["op"] and form["zxid"] == Z
    with pytest.raises(ValueError, match="another zxid's"):
        payloads.encode_proposal_data(Z + 1, value)


def test_a_value_reads_as_its_text_and_a_zookeeper_transaction_as_its_fields() -> None:
    assert zktxn.read_form(b"mixed-0") == "mixed-0"
    form = zktxn.read_form(payloads.decode_proposal_data(Z, zktxn.encode_create(Z, "/app", b"\xc3\xa9\xff")))
    assert form == {"zookeeper": "create", "session": "0x0", "cxid": 0, "zxid": Z, "time": 0, "path": "/app",
                    "data": "\u00e9\\xff", "acl": ["world:anyone:31"], "ephemeral": False, "parentCVersion": -1}
    multi = (jute.LONG.pack(1) + jute.INT.pack(1) + jute.LONG.pack(Z) + jute.LONG.pack(0) + jute.INT.pack(14)
             + jute.INT.pack(1) + jute.INT.pack(2) + jute.buffer("d", jute.ustring("p", "/gone")))
    assert zktxn.read_form(payloads.decode_proposal_data(Z, multi))["ops"] == [{"op": "delete", "path": "/gone"}]


def test_a_null_proposal_is_refused() -> None:
    with pytest.raises(CodecError, match="data is null"):
        payloads.decode_proposal_data(Z, None)


@given(st.integers(1, (1 << 63) - 1), VALUES, st.booleans(),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3), st.integers(-3, 3))
def test_the_quick_read_agrees_with_the_strict_one(zxid, value, digest, edits, cut):
    """`decode_value` reads zabref's own form with a few slices and anything else field by field: on bytes mutated
    from a valid body (a byte changed, a digest, a body cut short or lengthened), whenever the quick read gives a
    value, the strict read gives the same one."""
    data = bytearray(payloads.encode_proposal_data(zxid, value) + (bytes(DIGEST) if digest else b""))
    for at, byte in edits:
        data[at % len(data)] = byte
    data = data[:len(data) + cut] if cut < 0 else data + bytes(cut)
    quick = zktxn._quick_value(zxid, bytes(data))
    if quick is not None:
        assert zktxn._strict_value(zxid, bytes(data), "test") == quick


def test_the_quick_read_takes_zabrefs_own_form() -> None:
    data = payloads.encode_proposal_data(Z, b"v")
    assert zktxn._quick_value(Z, data) == b"v" and zktxn._quick_value(Z, data + bytes(DIGEST)) == b"v"


_ACLS = st.one_of(st.none(), st.just([(31, "world", "anyone")]),
                  st.lists(st.tuples(st.integers(0, 31), st.sampled_from(["world", "digest", "ip"]),
                                     st.text(max_size=12)), max_size=3))


def _create(zxid: int, path: str, data: bytes | None, acls, ephemeral: bool, digest: bool) -> bytes:
    """A ZooKeeper client's create as a ZooKeeper leader (or zabref's, zkprep) writes it, built field by field."""
    acl = jute.INT.pack(-1) if acls is None else jute.INT.pack(len(acls)) + b"".join(
        jute.INT.pack(perms) + jute.ustring("scheme", scheme) + jute.ustring("id", ident)
        for perms, scheme, ident in acls)
    body = zktxn.HEADER.pack(0x1234, 9, zxid, 1700000000000, zktxn.OP_CREATE) + jute.ustring("path", path) + \
        (jute.INT.pack(-1) if data is None else jute.buffer("data", data)) + acl + bytes([ephemeral]) + jute.INT.pack(2)
    return body + (bytes(DIGEST) if digest else b"")


CREATES = st.builds(_create, st.integers(1, (1 << 63) - 1), st.text(min_size=1, max_size=20).map(lambda t: "/" + t),
                    st.one_of(st.none(), st.binary(max_size=40)), _ACLS, st.booleans(), st.booleans())


@given(CREATES)
def test_a_zookeeper_clients_create_is_taken_by_the_quick_check_and_kept_whole(data) -> None:
    zxid = zktxn.HEADER.unpack_from(data)[2]
    assert zktxn._quick_create(zxid, data)
    assert zktxn.decode_value(zxid, data, "test") == zktxn._strict_value(zxid, data, "test") == zktxn.FOREIGN + data


@given(CREATES, st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=3), st.integers(-3, 3))
def test_the_quick_check_of_a_create_agrees_with_the_strict_read(data, edits, cut) -> None:
    """On bytes mutated from a client's create (a byte changed, cut short or lengthened), whenever the quick check
    takes them, the strict read keeps them whole too (it raises on nothing the quick check takes)."""
    zxid = zktxn.HEADER.unpack_from(data)[2]
    body = bytearray(data)
    for at, byte in edits:
        body[at % len(body)] = byte
    body = body[:len(body) + cut] if cut < 0 else body + bytes(cut)
    if zktxn._quick_create(zxid, bytes(body)):
        assert zktxn._strict_value(zxid, bytes(body), "test") == zktxn.FOREIGN + bytes(body)


def test_the_quick_check_leaves_the_transactions_own_node_and_other_types_to_the_strict_read() -> None:
    own = zktxn.encode_create(Z, zktxn.node_of(Z), b"v", session=5)
    assert not zktxn._quick_create(Z, own) and zktxn.decode_value(Z, own, "test") == b"v"
    other = bytearray(_create(Z, "/a", b"x", None, False, False))
    other[zktxn.HEADER.size - 1] = 5  # setData's type: another record
    assert not zktxn._quick_create(Z, bytes(other))
    assert not zktxn._quick_create(Z + 1, _create(Z, "/a", b"x", None, False, False))


@pytest.mark.pure_build
def test_a_create_read_at_its_proposal_is_read_again_at_its_commit_only_once_kept(monkeypatch) -> None:
    """A follower reads a ZooKeeper client's create at its PROPOSAL (`decode_value`) and applies it at its COMMIT
    (`DataTree.apply_txn`): the one read serves both (`foreign_create`), and the tree holds what a fresh read gives;
    what was kept is taken once, so a second tree applying the same value reads it again. Patches the module (pure
    build only)."""
    from zabref.core import zktree  # noqa: PLC0415
    from zabref.core.types import Txn  # noqa: PLC0415

    reads: list[int] = []
    real = zktxn.read_create
    monkeypatch.setattr(zktxn, "read_create", lambda data, start=0: reads.append(start) or real(data, start))
    monkeypatch.setattr(zktxn, "_KEPT", {})
    data = _create(Z, "/a", b"x", [(31, "world", "anyone")], False, True)
    value = zktxn.decode_value(Z, data, "test")
    assert value == zktxn.FOREIGN + data and reads == [1] and list(zktxn._KEPT) == [value]
    tree, again = zktree.DataTree(), zktree.DataTree()
    assert tree.apply_txn(Txn(Z, value)) == again.apply_txn(Txn(Z, value)) == 0
    assert reads == [1, 1] and tree.snapshot() == again.snapshot() and tree.nodes["/a"].data == b"x"
    assert not zktxn._KEPT  # taken by the first tree's apply


@pytest.mark.pure_build
def test_the_creates_kept_are_bounded_and_the_oldest_go_first(monkeypatch) -> None:
    """At most `_KEPT_MAX` creates are kept (proposals a sync truncated are never applied): the next one pushes the
    oldest out, which is then read again; a check of a value kept already makes it the newest, and a check that
    refuses a create keeps nothing. Patches the module (pure build only)."""
    monkeypatch.setattr(zktxn, "_KEPT", {})
    monkeypatch.setattr(zktxn, "_KEPT_MAX", 3)
    bodies = [_create(Z + i, f"/n{i}", b"x", None, False, False) for i in range(4)]
    values = [zktxn.FOREIGN + body for body in bodies]
    for i, body in enumerate(bodies):
        assert zktxn._quick_create(Z + i, body) == values[i]
    assert list(zktxn._KEPT) == values[1:]
    kept = zktxn._KEPT[values[1]]
    assert zktxn._quick_create(Z + 1, bodies[1]) == values[1] and list(zktxn._KEPT) == [*values[2:], values[1]]
    assert zktxn._KEPT[values[1]] is kept
    kept = zktxn._KEPT[values[3]]
    assert zktxn.foreign_create(values[3]) is kept and values[3] not in zktxn._KEPT
    assert zktxn.foreign_create(values[0]).path == "/n0" and zktxn.foreign_create(b"\xffnot a create") is None
    assert list(zktxn._KEPT) == [values[2], values[1]]
    assert zktxn._quick_create(Z + 9, bodies[0]) is None and list(zktxn._KEPT) == [values[2], values[1]]


@pytest.mark.parametrize("data", [_create(Z, "/app/é", b"data", [(31, "world", "anyone"), (1, "digest", "u:hé")],
                                          True, True), _create(Z, "/n", None, None, False, False),
                                  _create(Z, "/w", b"d", [(31, "world", "anyone")], False, True)])
def test_every_byte_of_a_create_changed_the_quick_check_agrees_with_the_strict_read(data) -> None:
    """Each byte in turn set to 0x00, 0x02, 0x80 and 0xff (a boolean that is not one, a UTF-8 that is not, a length
    or count that runs past the end) and the body cut at every length: the quick check takes nothing the strict read
    refuses."""
    bodies = [data[:k] for k in range(len(data))]
    bodies += [data[:k] + bytes([b]) + data[k + 1:] for k in range(len(data)) for b in (0x00, 0x02, 0x80, 0xFF)]
    taken = 0
    for body in bodies:
        if zktxn._quick_create(Z, body):
            taken += 1
            assert zktxn._strict_value(Z, body, "test") == zktxn.FOREIGN + body
    assert taken > len(data)  # the bytes no check reads (session, time, the node's data, perms) still pass


class _FieldByField(zktxn.TxnReader):
    """The same reader, so that `zktxn.decode_txn` takes no quick path, reading every ACL entry by entry."""

    __slots__ = ()

    acls = zktxn.TxnReader.acl_entries


def _strict_fields(body: bytes) -> dict | None:
    try:
        return zktxn.decode_txn(body, "test", _FieldByField)
    except CodecError:
        return None


def _quick_fields(body: bytes) -> dict | None:
    """`zktxn.read_create`'s read as `decode_txn`'s fields, None where it leaves the body to the field-by-field read."""
    create = zktxn.read_create(body)
    return None if create is None else create.fields()


@given(CREATES)
def test_a_creates_fields_are_read_quickly_and_as_the_field_by_field_read_gives_them(data) -> None:
    quick = _quick_fields(data)
    assert quick is not None and quick == _strict_fields(data) == zktxn.decode_txn(data, "test")
    create = zktxn.read_create(data)
    assert zktxn.read_create(zktxn.FOREIGN + data, 1) == create  # as a value keeps it, after its marker
    assert create.session == zktxn.HEADER.unpack_from(data)[0]  # signed, as ZooKeeper's long


def test_world_anyones_acl_is_read_as_the_one_tuple_and_any_other_acl_field_by_field() -> None:
    """The ACL of nearly every create is world:anyone's one entry: read as `OPEN_ACL` itself (no strings made; on the
    compiled build a tuple equal to it, mypyc making the module's constant tuple where it is used); the same entry
    among others, or another permission, is read entry by entry."""
    acl = zktxn.read_create(_create(Z, "/a", b"x", [(31, "world", "anyone")], False, False)).acl
    assert acl == zktxn.OPEN_ACL and (acl is zktxn.OPEN_ACL or zabref.build() == "compiled")
    assert zktxn.read_create(_create(Z, "/a", b"x", [(31, "world", "anyone")] * 2, False, False)).acl == \
        ("world:anyone:31", "world:anyone:31")
    assert zktxn.read_create(_create(Z, "/a", b"x", [(1, "world", "anyone")], False, False)).acl == ("world:anyone:1",)
    assert zktxn.read_create(_create(Z, "/a", b"x", None, False, False)).acl == ()


@given(CREATES, st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=3), st.integers(-3, 3))
def test_the_quick_read_of_a_creates_fields_agrees_with_the_field_by_field_read(data, edits, cut) -> None:
    body = bytearray(data)
    for at, byte in edits:
        body[at % len(body)] = byte
    body = bytes(body[:len(body) + cut] if cut < 0 else body + bytes(cut))
    quick = _quick_fields(body)
    assert quick is None or quick == _strict_fields(body)


@pytest.mark.parametrize("data", [_create(Z, "/app/é", b"data", [(31, "world", "anyone"), (1, "digest", "u:hé")],
                                          True, True), _create(Z, "/n", None, None, False, False),
                                  _create(Z, "/w", b"d", [(31, "world", "anyone")], False, True)])
def test_every_byte_of_a_create_changed_the_quick_read_of_its_fields_agrees(data) -> None:
    """Each byte set to 0x00, 0x02, 0x80 and 0xff, and every cut: the quick read gives what the field-by-field read
    gives, or leaves the body to it -- and decode_txn's answer (or error) is the field-by-field read's."""
    bodies = [data[:k] for k in range(len(data))]
    bodies += [data[:k] + bytes([b]) + data[k + 1:] for k in range(len(data)) for b in (0x00, 0x02, 0x80, 0xFF)]
    taken = 0
    for body in bodies:
        quick, strict = _quick_fields(body), _strict_fields(body)
        if quick is not None:
            taken += 1
            assert quick == strict
        if strict is None:
            with pytest.raises(CodecError):
                zktxn.decode_txn(body, "test")
        else:
            assert zktxn.decode_txn(body, "test") == strict
    assert taken > len(data)


def test_the_quick_read_of_fields_leaves_other_types_to_the_field_by_field_read() -> None:
    other = bytearray(_create(Z, "/a", b"x", None, False, False))
    other[zktxn.HEADER.size - 1] = 5  # setData's type
    assert _quick_fields(bytes(other)) is None
    assert _quick_fields(b"") is None
