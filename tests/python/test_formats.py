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
        y = tmp_path / "y.npy"
        r = subprocess.run([FFN, "run", "--weights", path, "--input", str(x), "--output", str(y)],
                           capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and path in r.stderr, r.stderr
        assert not y.exists()
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
