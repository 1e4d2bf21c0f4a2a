"""Our safetensors and .npy readers against the official ones, file by file:
the `safetensors` package (PyPI, a test dependency only) and
numpy.load(allow_pickle=False). Over a generated corpus of valid and
malformed files, ours accepts exactly the files the official reader accepts
(and then reads the same tensors, dtypes, shapes, values and metadata) and
rejects the others; `ffn run` on a rejected file exits 2 with one line
naming it. Every file ours writes loads in the official reader unchanged."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import ffn
from ffn import _ffn

safetensors = pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402

FFN = os.environ.get("FFN_BINARY", "build/bin/ffn")


def assert_ffn_run_refuses(tmp, bad_path, weights, x):
    """`ffn run` on a refused file: exit 2, one line naming it, no output file."""
    y = os.path.join(tmp, "y.npy")
    r = subprocess.run([FFN, "run", "--weights", weights, "--input", x, "--output", y], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and bad_path in r.stderr, r.stderr
    assert not os.path.exists(y)


# ---- safetensors ---------------------------------------------------------------

def st_bytes(header, data=b"", raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def valid_parts():
    a = np.arange(6, dtype="<f4").reshape(2, 3) - 2.5
    b = np.array([-128, -1, 0, 127], dtype="i1")
    c = np.array([0x3F80, 0xC040], dtype="<u2")  # bf16 1.0, -3.0
    d = np.array([1.5, -0.25, 65504], dtype="<f2")
    e = np.array([1e-3], dtype="<f8")
    blobs = [a.tobytes(), b.tobytes(), c.tobytes(), d.tobytes(), e.tobytes()]
    offs = np.cumsum([0] + [len(x) for x in blobs])
    header = {"a": t("F32", [2, 3], offs[0], offs[1]), "b": t("I8", [4], offs[1], offs[2]),
              "c": t("BF16", [2], offs[2], offs[3]), "d": t("F16", [3], offs[3], offs[4]),
              "e": t("F64", [1], offs[4], offs[5]), "__metadata__": {"format": "pt", "k": "v"}}
    header = json.loads(json.dumps(header, default=int))
    return header, b"".join(blobs)


def corpus():
    h, data = valid_parts()
    f32 = np.array([1, 2], dtype="<f4").tobytes()
    cases = {"valid": st_bytes(h, data)}
    text = json.dumps(h).encode()
    cases["header padded with spaces"] = st_bytes(None, data, text + b"   ")
    cases["header starts with a space"] = st_bytes(None, data, b" " + text)
    cases["header padded with NULs"] = st_bytes(None, data, text + b"\0\0")
    cases["trailing bytes"] = st_bytes(h, data + b"\0" * 4)
    cases["data truncated"] = st_bytes(h, data[:-1])
    cases["header length past the end"] = struct.pack("<Q", len(text) + 100) + text + data
    cases["header length huge"] = struct.pack("<Q", 200_000_000) + text + data
    cases["header length zero"] = struct.pack("<Q", 0)
    cases["shorter than 8 bytes"] = b"\x05\0\0"
    cases["empty file"] = b""
    cases["empty header"] = st_bytes({})
    cases["not an object"] = st_bytes(None, b"", b"[]")
    cases["not JSON"] = st_bytes(None, b"", b"{'a': 1}")
    cases["invalid UTF-8 name"] = st_bytes(None, f32, b'{"\xff":' + json.dumps(t("F32", [2], 0, 8)).encode() + b"}")
    cases["unicode name"] = st_bytes({"\u00e9t\u00e9": t("F32", [2], 0, 8)}, f32)
    cases["duplicate names"] = st_bytes(None, f32, b'{"a":' + json.dumps(t("F32", [1], 0, 4)).encode() +
                                        b', "a":' + json.dumps(t("F32", [2], 0, 8)).encode() + b"}")
    cases["gap"] = st_bytes({"a": t("F32", [1], 4, 8)}, f32)
    cases["overlap"] = st_bytes({"a": t("F32", [2], 0, 8), "b": t("F32", [1], 4, 8)}, f32)
    cases["same range twice"] = st_bytes({"a": t("F32", [2], 0, 8), "b": t("F32", [2], 0, 8)}, f32)
    cases["offsets out of name order"] = st_bytes({"a": t("F32", [1], 4, 8), "b": t("F32", [1], 0, 4)}, f32)
    cases["end past the data"] = st_bytes({"a": t("F32", [3], 0, 12)}, f32)
    cases["begin after end"] = st_bytes({"a": t("F32", [0], 8, 0)}, f32)
    cases["zero-size tensor"] = st_bytes({"a": t("F32", [0, 3], 0, 0), "b": t("F32", [2], 0, 8)}, f32)
    cases["scalar"] = st_bytes({"a": t("F32", [], 0, 4)}, f32[:4])
    cases["shape needs more bytes"] = st_bytes({"a": t("F32", [3], 0, 8)}, f32)
    cases["shape needs fewer bytes"] = st_bytes({"a": t("F32", [1], 0, 8)}, f32)
    cases["negative dimension"] = st_bytes({"a": t("F32", [-2], 0, 8)}, f32)
    cases["float dimension"] = st_bytes({"a": t("F32", [2.0], 0, 8)}, f32)
    cases["huge shape"] = st_bytes({"a": t("F32", [2**40, 2**40], 0, 8)}, f32)
    cases["shape overflowing 64 bits"] = st_bytes({"a": t("F32", [2**62, 2**62, 16], 0, 8)}, f32)
    cases["negative offset"] = st_bytes({"a": t("F32", [2], -1, 7)}, f32)
    cases["three offsets"] = st_bytes({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, f32)
    cases["no dtype"] = st_bytes({"a": {"shape": [2], "data_offsets": [0, 8]}}, f32)
    cases["no shape"] = st_bytes({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, f32)
    cases["no offsets"] = st_bytes({"a": {"dtype": "F32", "shape": [2]}}, f32)
    cases["extra field"] = st_bytes({"a": {**t("F32", [2], 0, 8), "note": 1}}, f32)
    cases["unknown dtype"] = st_bytes({"a": t("F17", [2], 0, 8)}, f32)
    cases["lower-case dtype"] = st_bytes({"a": t("f32", [2], 0, 8)}, f32)
    cases["dtype not a string"] = st_bytes({"a": {**t("F32", [2], 0, 8), "dtype": 4}}, f32)
    for dt, n in (("I32", 2), ("U8", 8), ("BOOL", 8), ("I64", 1), ("U16", 4), ("F8_E4M3", 8)):
        cases[f"dtype {dt}"] = st_bytes({"a": t(dt, [n], 0, 8)}, f32)
    cases["tensor not an object"] = st_bytes({"a": [1, 2]}, f32)
    cases["metadata null"] = st_bytes({"__metadata__": None, "a": t("F32", [2], 0, 8)}, f32)
    cases["metadata number value"] = st_bytes({"__metadata__": {"k": 1}, "a": t("F32", [2], 0, 8)}, f32)
    cases["metadata not an object"] = st_bytes({"__metadata__": "x", "a": t("F32", [2], 0, 8)}, f32)
    cases["metadata empty"] = st_bytes({"__metadata__": {}, "a": t("F32", [2], 0, 8)}, f32)
    cases["metadata only"] = st_bytes({"__metadata__": {"a": "b"}})
    cases["a PyTorch zip"] = b"PK\x03\x04" + b"\0" * 60
    cases["an npy file"] = b"\x93NUMPY\x01\x00" + b"\0" * 60
    return cases


CORPUS = corpus()


def official(path):
    """(tensors {name: (dtype, shape, float64 values or None)}, metadata) or the exception."""
    try:
        with safe_open(path, framework="pt") as f:
            out = {}
            for k in f.keys():
                sl = f.get_slice(k)
                dtype, shape = sl.get_dtype(), list(sl.get_shape())
                values = None
                if dtype in ("F32", "F16", "BF16", "F64", "I8"):
                    values = f.get_tensor(k).double().numpy().reshape(-1)
                out[k] = (dtype, shape, values)
            return out, dict(f.metadata() or {})
    except Exception as e:  # noqa: BLE001 - any refusal counts
        return e


def ours(path):
    try:
        tensors, meta = _ffn._safetensors_header(path)
    except ffn.Error as e:
        return e
    return {k: (d, list(s)) for k, (d, s) in tensors.items()}, meta


@pytest.mark.parametrize("name", list(CORPUS))
def test_safetensors_reader_agrees_with_the_official_one(name, tmp_path):
    path = str(tmp_path / "f.safetensors")
    with open(path, "wb") as f:
        f.write(CORPUS[name])
    want, got = official(path), ours(path)
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"{name}: official refuses ({want}), ours accepts"
        assert path in str(got) and "\n" not in str(got)
        x = tmp_path / "x.npy"
        np.save(x, np.zeros((2, 4), np.float32))
        assert_ffn_run_refuses(str(tmp_path), path, weights=path, x=str(x))
        return
    assert not isinstance(got, Exception), f"{name}: official accepts, ours refuses: {got}"
    tensors, meta = want
    assert got[1] == meta
    assert got[0] == {k: (d, s) for k, (d, s, _) in tensors.items()}
    convertible = {k for k, (d, _, _) in tensors.items() if d in ("F32", "F16", "BF16", "F64", "I8")}
    if convertible == set(tensors):
        values = _ffn._read_safetensors(path)
        for k in convertible:
            np.testing.assert_array_equal(values[k].reshape(-1).astype(np.float64),
                                          tensors[k][2].astype(np.float32).astype(np.float64), err_msg=k)


def test_the_corpus_has_both_verdicts():
    verdicts = []
    for name, data in CORPUS.items():
        path = f"/tmp/ffn-corpus-{os.getpid()}.safetensors"
        with open(path, "wb") as f:
            f.write(data)
        verdicts.append(isinstance(official(path), Exception))
        os.remove(path)
    assert 10 <= sum(verdicts) <= len(verdicts) - 10


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "int8"])
def test_files_ffn_writes_load_in_the_official_reader(dtype, tmp_path):
    layer = ffn.init(ffn.Config(d_model=16, d_ff=24, activation="swiglu", norm="pre"), seed=2).converted(dtype)
    path = str(tmp_path / "w.safetensors")
    layer.save(path)
    want = official(path)
    assert not isinstance(want, Exception), want
    tensors, meta = want
    got_tensors, got_meta = ours(path)
    assert meta == got_meta and meta.get("ffn.weights_dtype", "fp32") == dtype
    assert {k: (d, s) for k, (d, s, _) in tensors.items()} == got_tensors
    values = _ffn._read_safetensors(path)
    for k, (_, _, v) in tensors.items():
        np.testing.assert_array_equal(values[k].reshape(-1).astype(np.float64), v.astype(np.float32), err_msg=k)


# ---- .npy -----------------------------------------------------------------------

def npy_raw(header, data=b"", version=(1, 0), pad=True):
    h = header.encode("latin1" if version < (3, 0) else "utf8")
    if pad:
        pre = 10 if version == (1, 0) else 12
        h += b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    length = struct.pack("<H", len(h)) if version == (1, 0) else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + length + h + data


def npy_written(arr, version):
    import io
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=False)
    return buf.getvalue()


def npy_corpus():
    a = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5) / 3
    f4 = np.array([1.5, -2.0], dtype="<f4").tobytes()
    cases = {}
    for v in ((1, 0), (2, 0), (3, 0)):
        cases[f"v{v[0]} 2-d"] = npy_written(a, v)
    cases["3-d"] = npy_written(a.reshape(3, 2, 2), (1, 0))
    cases["scalar"] = npy_written(np.float32(2.5).reshape(()), (1, 0))
    cases["empty"] = npy_written(np.zeros((0, 4), np.float32), (1, 0))
    cases["fortran order"] = npy_written(np.asfortranarray(a), (1, 0))
    cases["big endian"] = npy_written(a.astype(">f4"), (1, 0))
    cases["big endian fortran"] = npy_written(np.asfortranarray(a.astype(">f4")), (2, 0))
    cases["float64 (not ours)"] = npy_written(a.astype(np.float64), (1, 0))
    cases["int32 (not ours)"] = npy_written(np.arange(3, dtype=np.int32), (1, 0))
    ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    cases["keys in another order"] = npy_raw("{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}", f4)
    cases["double quotes"] = npy_raw('{"descr": "<f4", "fortran_order": False, "shape": (2,)}', f4)
    cases["descr |f4"] = npy_raw(ok.replace("<f4", "|f4"), f4)
    cases["descr f4"] = npy_raw(ok.replace("<f4", "f4"), f4)
    cases["descr float32"] = npy_raw(ok.replace("<f4", "float32"), f4)
    cases["descr <f5"] = npy_raw(ok.replace("<f4", "<f5"), f4)
    cases["descr object"] = npy_raw(ok.replace("<f4", "|O"), f4)
    cases["no newline, no padding"] = npy_raw(ok, f4, pad=False)
    cases["trailing bytes"] = npy_raw(ok, f4 + b"\0" * 4)
    cases["truncated"] = npy_raw(ok, f4[:6])
    cases["bad magic"] = b"\x93NUMPZ\x01\x00" + npy_raw(ok, f4)[8:]
    cases["version 1.1"] = npy_raw(ok, f4, version=(1, 1))
    cases["version 4.0"] = npy_raw(ok, f4, version=(4, 0))
    cases["header length past the end"] = b"\x93NUMPY\x01\x00" + struct.pack("<H", 5000) + ok.encode()
    cases["header over 10000 bytes"] = npy_raw(ok[:-1] + " " * 10050 + "}", f4, version=(2, 0))
    cases["header not a dict"] = npy_raw("[1, 2]", f4)
    cases["header not a literal"] = npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1+1,), }", f4)
    cases["missing key"] = npy_raw("{'descr': '<f4', 'shape': (2,), }", f4)
    cases["extra key"] = npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4)
    cases["fortran_order 1"] = npy_raw(ok.replace("False", "1"), f4)
    cases["fortran_order 'False'"] = npy_raw(ok.replace("False", "'False'"), f4)
    cases["shape a list"] = npy_raw(ok.replace("(2,)", "[2]"), f4)
    cases["shape (2) not a tuple"] = npy_raw(ok.replace("(2,)", "(2)"), f4)
    cases["shape negative"] = npy_raw(ok.replace("(2,)", "(-2,)"), f4)
    cases["shape float"] = npy_raw(ok.replace("(2,)", "(2.0,)"), f4)
    cases["shape empty tuple"] = npy_raw(ok.replace("(2,)", "()"), f4[:4])
    cases["garbage after the dict"] = npy_raw(ok + " x", f4)
    cases["shape with a leading zero"] = npy_raw(ok.replace("(2,)", "(02,)"), f4)
    cases["Python 2 longs, v1"] = npy_raw(ok.replace("(2,)", "(2L,)"), f4)
    cases["Python 2 longs, v3"] = npy_raw(ok.replace("(2,)", "(2L,)"), f4, version=(3, 0))
    cases["u'' strings"] = npy_raw("{u'descr': u'<f4', u'fortran_order': False, u'shape': (2,)}", f4)
    cases["a comment"] = npy_raw("{'descr': '<f4', # the dtype\n 'fortran_order': False, 'shape': (2,)}", f4)
    cases["form feed"] = npy_raw(ok.replace(" 'shape'", "\f'shape'"), f4)
    cases["a safetensors file"] = struct.pack("<Q", 2) + b"{}"
    cases["empty file"] = b""
    return cases


NPY_CORPUS = npy_corpus()

# Where ours refuses a file NumPy 1.24 reads, on purpose: a negative dimension
# is a NumPy quirk (its count -1 means "read everything" and reshape infers the
# length), not a shape anyone wrote.
NPY_STRICTER_THAN_NUMPY = {"shape negative": "non-negative integers"}


@pytest.mark.parametrize("name", list(NPY_CORPUS))
def test_npy_reader_agrees_with_numpy(name, tmp_path):
    path = str(tmp_path / "a.npy")
    with open(path, "wb") as f:
        f.write(NPY_CORPUS[name])
    try:
        want = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - any refusal counts
        want = e
    try:
        got = _ffn._read_npy(path)
    except ffn.Error as e:
        got = e
    if name in NPY_STRICTER_THAN_NUMPY:
        assert not isinstance(want, Exception), f"{name}: numpy now refuses it too; drop the exception"
        assert isinstance(got, Exception) and NPY_STRICTER_THAN_NUMPY[name] in str(got), got
        return
    float32 = not isinstance(want, Exception) and want.dtype.kind == "f" and want.dtype.itemsize == 4
    if not float32:
        # Refused by NumPy, or a dtype this reader does not take: refused here,
        # with one line naming the file (and the dtype where that is why).
        assert isinstance(got, Exception), f"{name}: numpy gives {want!r}, ours accepts"
        assert path in str(got) and "\n" not in str(got)
        if not isinstance(want, Exception):
            assert "expected float32" in str(got)
        w = tmp_path / "w.safetensors"
        ffn.init(ffn.Config(d_model=4, d_ff=8), seed=0).save(str(w))
        assert_ffn_run_refuses(str(tmp_path), path, weights=str(w), x=path)
        return
    assert not isinstance(got, Exception), f"{name}: numpy accepts, ours refuses: {got}"
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_zip_archives_are_named_by_what_they_hold(tmp_path):
    """A zip is torch.save's (data.pkl), numpy.savez's (.npy members) or
    another; each is named as what it is, for both readers (issue 31, item 8:
    an .npz was called a PyTorch checkpoint)."""
    import zipfile

    files = {"pt": "a PyTorch checkpoint (torch.save), not {}", "npz": "a NumPy .npz archive (numpy.savez), not {}",
             "zip": "a zip archive, not {}"}
    torch.save({"w": torch.zeros(2)}, str(tmp_path / "pt"))
    np.savez(str(tmp_path / "npz.npz"), w=np.zeros(2, np.float32))
    os.rename(tmp_path / "npz.npz", tmp_path / "npz")
    with zipfile.ZipFile(tmp_path / "zip", "w") as z:
        z.writestr("notes.txt", "hello")
    for name, want in files.items():
        path = str(tmp_path / name)
        with pytest.raises(ffn.Error) as e:
            _ffn._read_npy(path)
        assert str(e.value).startswith(f"{path}: " + want.format(".npy")), e.value
        with pytest.raises(ffn.Error) as e:
            ffn.Layer.load(path)
        assert str(e.value).startswith(f"{path}: " + want.format("safetensors")), e.value
