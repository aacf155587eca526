"""pipeline.codec: the data-only format of artifacts and store entries. Values round-trip
exactly (types, dtypes, dict order), the bytes are a function of the value alone, and
anything that is not ours -- a pickle, a truncated file, another format, a newer schema, an
object array, a type outside the allowlist -- is refused in one line without running code."""
from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from compiler.plan import Candidate  # noqa: E402
from compiler.plan.matmul import Grid  # noqa: E402
from compiler.result import Rejection  # noqa: E402
from pipeline import codec  # noqa: E402
from pipeline.codec import CodecError  # noqa: E402


class Marker:
    """Unpickling this creates ``path``: the proof that a loader ran code from a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def sample():
    return {
        "none": None, "t": True, "i": -(2 ** 70), "f": 0.1, "neg0": -0.0, "nan": float("nan"),
        "inf": float("-inf"), "s": "héllo", "b": b"\x00\x80\xff", "l": [1, [2, (3, 4)]],
        "tuple": (1, "x", ()), "set": {3, 1, 2}, "fs": frozenset({"b", "a"}),
        "int_keys": {3: "c", 1: "a", (0, 1): "t"}, "odd": {"$odd": 1, "x": 2},
        "i64": np.array([[0, 7], [-3, 1 << 40]], np.int64), "small": np.arange(5, dtype=np.int64),
        "u16": np.arange(3, dtype=np.uint16), "f16": np.linspace(0, 1, 7, dtype=np.float16),
        "f8": np.array([0.5, -2, 448], ml_dtypes.float8_e4m3fn), "bool": np.array([True, False]),
        "empty": np.zeros((0, 3), np.int64), "0d": np.array(2.5), "F": np.ones((2, 3), order="F"), "strided": np.arange(20.0)[::3],
        "np_scalars": [np.int64(5), np.float32(1.5), np.bool_(True), ml_dtypes.float8_e4m3fn(2.0)],
        "dc": [Rejection("place", "memory", "tile 3", {"tile": 3}),
               Candidate(((0, Grid(1, 2, 2, 1, 1, 16, 64, 32, 100, 4096)),), 10, frozenset({1, 0}))],
    }


def same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, float) and a != a:
        assert b != b
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    elif isinstance(a, (set, frozenset)):     # iteration order (and repr) follow the hash seed
        assert a == b
    else:
        assert a == b and repr(a) == repr(b)


def test_round_trip_is_exact_and_deterministic():
    v = sample()
    blob = codec.dumps(v)
    got = codec.loads(blob)
    same(v, got)
    assert codec.dumps(got) == blob == codec.dumps(sample())
    assert got["fs"] == frozenset({"a", "b"}) and got["dc"][1].resident == frozenset({0, 1})
    assert got["i64"].flags.writeable and got["i64"].dtype == np.int64
    # int64 columns of small values are stored narrow: this one in 1 byte per element
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        doc = json.loads(zf.read("data.json"))
        assert doc["format"] == "tessera-data" and doc["schema"] == codec.SCHEMA
        small = doc["value"]["small"]
        assert small["as"] == "<i8"
        assert np.lib.format.read_array(zf.open(f"{small['$array']}.npy")).dtype == np.uint8
        # readable by numpy itself without pickle (an .npz)
    with np.load(io.BytesIO(blob), allow_pickle=False) as z, zipfile.ZipFile(io.BytesIO(blob)) as zf:
        assert len(z.files) == len(zf.namelist()) and z["0"].shape == v["i64"].shape


def test_bytes_do_not_depend_on_hash_seed_or_time():
    """Sets of strings (whose iteration order follows the hash seed), of tuples and of dataclasses
    (Candidate.resident), and the whole sample: the same bytes under five hash seeds."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
            "from pipeline import codec; from test_codec import sample; "
            "sys.stdout.buffer.write(codec.dumps({'s': {'p', 'q', 'r', 'zz'}, 'f': frozenset(range(50, 0, -7)), "
            "'t': {('b', 1), ('a', 2), ('a', 1)}, 'all': sample()}))")
    outs = {subprocess.run([sys.executable, "-c", code, str(REPO), str(Path(__file__).parent)],
                           capture_output=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("0", "1", "2", "5", "random")}
    assert len(outs) == 1
    with zipfile.ZipFile(io.BytesIO(outs.pop())) as zf:
        assert {zi.date_time for zi in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_sharing_does_not_change_the_bytes():
    """A fresh result may share an array with another; one read back does not: same bytes."""
    a = np.arange(1000)
    assert codec.dumps([a, a]) == codec.dumps([a, a.copy()])


@pytest.mark.parametrize("bad", [lambda: 1, object(), Path("x"), np.array([object()]),
                                 {"k": {frozenset({1}): [print]}}, np.zeros(2, [("a", "i4")])])
def test_only_data_can_be_stored(bad):
    with pytest.raises(CodecError, match="cannot store value"):
        codec.dumps(bad)


def test_dataclass_outside_the_allowlist_is_refused():
    from dataclasses import dataclass

    @dataclass
    class Foreign:
        x: int = 1
    with pytest.raises(CodecError, match="RESULT_TYPES"):
        codec.dumps([Foreign()])


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    return buf.getvalue()


def doc_of(value, schema=codec.SCHEMA, fmt=codec.FORMAT, types=()) -> bytes:
    return json.dumps({"format": fmt, "schema": schema, "types": list(types), "value": value}).encode()


REJ = "compiler.result.Rejection"


def npy(a, allow_pickle=False) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, a, allow_pickle=allow_pickle)
    return f.getvalue()


def refused(tmp_path, blob: bytes, *words):
    """Refused one line by loads() and load(); returns the message."""
    with pytest.raises(CodecError) as e1:
        codec.loads(blob)
    p = tmp_path / "x.npz"
    p.write_bytes(blob)
    with pytest.raises(CodecError) as e2:
        codec.load(p)
    msg = str(e1.value)
    assert msg == str(e2.value) and "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)
    return msg


def test_refusals_run_no_code(tmp_path):
    marker = tmp_path / "marker"
    good = codec.dumps({"a": np.arange(3)})
    planted_obj_array = np.array([Marker(marker)], dtype=object)
    cases = [
        (pickle.dumps(Marker(marker), protocol=2), ["pickle"]),
        (pickle.dumps([Marker(marker)], protocol=5), ["pickle"]),
        (good[: len(good) // 2], ["truncated"]),
        (good[:-1], ["truncated"]),
        (b"", ["truncated"]),
        (b"PK\x03\x04" + os.urandom(100), ["truncated"]),
        (b"just text", ["not a Tessera data file"]),
        (zip_of({"x.npy": npy(np.arange(3))}), ["no data.json"]),
        (zip_of({"data.json": b"{not json"}), ["not valid JSON"]),
        (zip_of({"data.json": doc_of(1, fmt="other")}), ["format 'other'"]),
        (zip_of({"data.json": doc_of(1, schema=codec.SCHEMA + 1)}), ["newer", str(codec.SCHEMA + 1)]),
        (zip_of({"data.json": doc_of({"$array": 0}), "0.npy": npy(planted_obj_array, True)}),
         ["0.npy", "allow_pickle"]),
        (zip_of({"data.json": doc_of({"$array": 3})}), ["out of range"]),
        (zip_of({"data.json": doc_of({"$dc": 0, "v": ["ls"]}, types=[["os.system", ["command"]]])}),
         ["'os.system'"]),
        (zip_of({"data.json": doc_of(1, types=[[REJ, ["phase", "evil"]]])}), ["unknown field 'evil'"]),
        (zip_of({"data.json": doc_of({"$dc": 1, "v": []}, types=[[REJ, ["phase", "reason", "message"]]])}),
         ["out of range"]),
        (zip_of({"data.json": doc_of({"$dc": 0, "v": [1]}, types=[[REJ, ["phase", "reason", "message"]]])}),
         ["1 values for 3 fields"]),
        (zip_of({"data.json": doc_of({"$scalar": "O", "hex": ""})}), ["dtype"]),
        (zip_of({"data.json": doc_of({"$array": 0, "view": "object"}), "0.npy": npy(np.zeros(2, np.uint8))}),
         ["dtype"]),
        (zip_of({"data.json": doc_of({"$nope": 1})}), ["unknown tag"]),
    ]
    # a member whose bytes were altered after writing: zip's CRC-32 catches it
    crc = bytearray(good)
    at = crc.index(b"\x93NUMPY") + 128
    crc[at] ^= 0xFF
    cases.append((bytes(crc), ["CRC"]))
    np.savez(tmp_path / "plain.npz", a=np.arange(3))
    cases.append(((tmp_path / "plain.npz").read_bytes(), ["no data.json"]))
    for blob, words in cases:
        refused(tmp_path, blob, *words)
    assert not marker.exists()
    # the same planted object array really would run code if loaded with pickle allowed
    np.lib.format.read_array(io.BytesIO(npy(planted_obj_array, True)), allow_pickle=True)
    assert marker.exists()


def test_missing_field_takes_its_default():
    blob = zip_of({"data.json": doc_of({"$dc": 0, "v": ["p", "r", "m"]}, types=[[REJ, ["phase", "reason", "message"]]])})
    r = codec.loads(blob)
    assert r == Rejection("p", "r", "m") and r.figures == {}
    with pytest.raises(CodecError, match="field 'message' missing"):
        codec.loads(zip_of({"data.json": doc_of({"$dc": 0, "v": ["p", "r"]}, types=[[REJ, ["phase", "reason"]]])}))


def test_allowlist_names_resolve_to_dataclasses():
    from compiler.result import RESULT_TYPES
    types, names = codec._allowlist()
    assert set(types) == set(RESULT_TYPES) and all(names[c] == n for n, c in types.items())


def test_narrowed_when_written_one_array_at_a_time():
    """The codec narrows int columns as it writes each (not all first): the same bytes as
    narrowing them up front, and the value it was given is left as it was."""
    cols = {"x": np.arange(-3, 300, dtype=np.int64), "y": np.full(7, 1 << 40, np.int64),
            "z": np.arange(5, dtype=np.int32), "w": np.zeros(0, np.int64)}
    keep = {k: v.copy() for k, v in cols.items()}
    data = codec.dumps(cols)
    back = codec.loads(data)
    for k, v in keep.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v) and np.array_equal(cols[k], v)
    # the stored members: x and z narrower, y still int64 (no narrower type holds 2^40)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        doc = json.loads(zf.read("data.json"))["value"]
        size = {k: np.lib.format.read_array(zf.open(f"{doc[k]['$array']}.npy")).dtype.itemsize for k in "xyz"}
    assert size["x"] < 8 and size["y"] == 8 and size["z"] == 1
