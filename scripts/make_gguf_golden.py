#!/usr/bin/env python3
"""Writes small GGUF files with the `gguf` package (0.10.0, the version
scripts/setup.sh pins) and what gguf-py dequantizes them to, for
tests/io/test_gguf.cpp.

    .venv/bin/python scripts/make_gguf_golden.py tests/data/gguf
    .venv/bin/python scripts/make_gguf_golden.py --smollm2 ~/.cache/ffn/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/gguf

types.gguf (GGUF v3, alignment 32): one tensor of every type the reader
dequantizes -- F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, Q5_0, Q5_1,
Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS -- of odd shapes (2 to 5 rows; rows a
whole number of blocks). The quantized tensors' blocks
are random bytes (every bit pattern is a valid block) with their f16 scales
drawn as finite values, so every code of every field occurs; F16/BF16 hold
random finite values, one subnormal and one negative zero. Metadata: one
scalar of every value type, arrays of u8, i32, f32, bool, string and an
array of arrays.

types_v2.gguf: the same file with the version field set to 2 (versions 2
and 3 share the layout; 3 only added big-endian files) and
general.alignment 64.

expected.safetensors: for every tensor, gguf-py's dequantization
(gguf.quants.dequantize; F16/BF16 by numpy's widening) as float32
[rows, cols] under the tensor's name.

With --smollm2 FILE (the GGUF scripts/setup.sh extracts): smollm2_rows.safetensors,
gguf-py's dequantization of the first two rows of token_embd.weight (Q8_0)
and blk.0.ffn_down.weight (Q4_1), the last row of blk.29.attn_v.weight and
all of blk.0.attn_norm.weight (F32), with the file's sha256 in the metadata.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize
from safetensors.numpy import save_file


def f16_bytes(rng, n):
    """n finite f16 scales of either sign, some tiny, as raw bytes."""
    v = (rng.standard_normal(n) * 0.05).astype(np.float16)
    v[::7] = np.float16(rng.uniform(-1e-6, 1e-6))  # subnormal range of f16
    return v.view(np.uint8).reshape(n, 2)


def quant_tensor(rng, qtype, rows, cols):
    """Random blocks of qtype for a [rows, cols] tensor, f16 fields finite."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype in (T.Q8_0, T.Q4_0):
        raw[:, 0:2] = f16_bytes(rng, nb)
    elif qtype in (T.Q4_1, T.Q4_K):
        raw[:, 0:2] = f16_bytes(rng, nb)
        raw[:, 2:4] = f16_bytes(rng, nb)
    elif qtype == T.Q6_K:
        raw[:, 208:210] = f16_bytes(rng, nb)
    # The f16 fields of the types added later (gguf/quants.py's dequantize_blocks):
    elif qtype in (T.Q5_0, T.IQ4_NL, T.IQ4_XS):  # {f16 d; ...} (IQ4_XS: then u16 scales_h, 6-bit scales)
        raw[:, 0:2] = f16_bytes(rng, nb)
    elif qtype in (T.Q5_1, T.Q5_K):  # {f16 d, m (dmin); ...}
        raw[:, 0:2] = f16_bytes(rng, nb)
        raw[:, 2:4] = f16_bytes(rng, nb)
    elif qtype == T.Q2_K:  # {u8 scales[16]; u8 qs[64]; f16 d, dmin}
        raw[:, 80:82] = f16_bytes(rng, nb)
        raw[:, 82:84] = f16_bytes(rng, nb)
    elif qtype == T.Q3_K:  # {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
        raw[:, 108:110] = f16_bytes(rng, nb)
    else:
        raise ValueError(f"no f16 fields known for {qtype.name}")
    return raw.reshape(rows, cols // block * size)


def build(path, version, alignment, rng_seed=1):
    rng = np.random.default_rng(rng_seed)
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment != 32:
        w.add_custom_alignment(alignment)  # general.alignment, and the writer's own padding
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1e300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo wörld ✓")
    w.add_array("test.array_u8", [1, 2, 255])
    w.add_array("test.array_i32", [-1, 0, 7])
    w.add_array("test.array_f32", [0.5, -2.25])
    w.add_array("test.array_bool", [True, False, True])
    w.add_array("test.array_string", ["a", "", "ℓ"])
    w.add_array("test.array_array", [[1, 2], [3]])
    expected = {}
    f32 = rng.standard_normal((3, 7)).astype(np.float32)
    w.add_tensor("t.f32", f32)
    expected["t.f32"] = f32
    f16 = rng.standard_normal((2, 5)).astype(np.float16)
    f16[0, 0], f16[0, 1] = np.float16(3e-6), np.float16(-0.0)
    w.add_tensor("t.f16", f16)
    expected["t.f16"] = f16.astype(np.float32)
    bf = (rng.standard_normal((4, 3)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    bf[0, 0] = 0x8000  # -0
    bf[0, 1] = 0x0001  # the smallest subnormal
    w.add_tensor("t.bf16", bf.view(np.uint8).reshape(4, 6), raw_dtype=T.BF16)  # shape from the bytes
    expected["t.bf16"] = (bf.astype(np.uint32) << 16).view(np.float32)
    for name, qtype, rows, cols in (("t.q8_0", T.Q8_0, 3, 96), ("t.q4_0", T.Q4_0, 5, 64), ("t.q4_1", T.Q4_1, 2, 32),
                                    ("t.q4_k", T.Q4_K, 3, 512), ("t.q6_k", T.Q6_K, 2, 768),
                                    # added after the first eight, so that their bytes stay as they were:
                                    ("t.q5_0", T.Q5_0, 3, 96), ("t.q5_1", T.Q5_1, 5, 64), ("t.q2_k", T.Q2_K, 3, 512),
                                    ("t.q3_k", T.Q3_K, 3, 768), ("t.q5_k", T.Q5_K, 3, 512),
                                    ("t.iq4_nl", T.IQ4_NL, 3, 96), ("t.iq4_xs", T.IQ4_XS, 3, 768)):
        raw = quant_tensor(rng, qtype, rows, cols)
        w.add_tensor(name, raw, raw_dtype=qtype)  # [rows, cols] from the bytes
        expected[name] = dequantize(raw, qtype).reshape(rows, cols).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(np.uint32(version).tobytes())
    return expected


def smollm2_rows(path, out):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    r = gguf.GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    rows = {}
    for name, pick in (("token_embd.weight", slice(0, 2)), ("blk.0.ffn_down.weight", slice(0, 2)),
                       ("blk.29.attn_v.weight", slice(-1, None)), ("blk.0.attn_norm.weight", slice(None))):
        t = by_name[name]
        data = np.asarray(t.data)
        if t.tensor_type == T.F32:
            rows[name] = data.astype(np.float32).reshape(1, -1)
        else:
            rows[name] = dequantize(data[pick], t.tensor_type).astype(np.float32)
    save_file({k: np.ascontiguousarray(v) for k, v in rows.items()}, os.path.join(out, "smollm2_rows.safetensors"),
              metadata={"sha256": h.hexdigest()})
    for k, v in rows.items():
        print(f"{k}: {v.shape}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--smollm2":
        return smollm2_rows(sys.argv[2], sys.argv[3])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    expected = build(os.path.join(out, "types.gguf"), 3, 32)
    expected_v2 = build(os.path.join(out, "types_v2.gguf"), 2, 64)
    for k in expected:
        assert np.array_equal(expected[k].view(np.uint32), expected_v2[k].view(np.uint32)), k
    save_file({k: np.ascontiguousarray(v) for k, v in expected.items()}, os.path.join(out, "expected.safetensors"),
              metadata={"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.10.0"})
    for k, v in expected.items():
        print(f"{k}: {v.shape}, max |x| {np.abs(v).max():.4g}")


if __name__ == "__main__":
    main()
