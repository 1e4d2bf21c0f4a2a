#!/usr/bin/env python3
"""Fails when an ISA's activation epilogue or softmax rows are compiled scalar.

    check_vector_code.py LIBRARY          (ctest vector_code: the built libffn)
    check_vector_code.py --self-test      (the rules on planted listings)

Issue 34 found `ffn::nn::avx2::activate` and `avx2::exp_rows` without a single
ymm instruction (GCC had not vectorized the portable form for AVX2): GELU cost
1.7x ReLU there and nothing failed. This disassembles the library
(`objdump -d -C`) and counts, per function, the instructions that name a vector
register of the ISA (ymm for avx2, zmm for avx512) and the scalar float
arithmetic (v?(add|sub|mul|div|max|min|fma..)s[sd]).

Rules, per ISA in {avx2, avx512}:
  activate, exp_rows      vector >= 50 and vector >= scalar: the loop bodies
                          are vector code (GCC's remainder loops may be scalar);
  softmax_step, sum_rows  vector >= 8 and scalar <= 64: the rescaling factor
                          e^(m_old - m_new), the combine of the 16 partial
                          maxima and the sums' remainders are scalar by design,
                          a scalar loop body of exp is ~100 instructions.
Run on 400621f's `ffn` (before the AVX2 intrinsics) it fails with
avx2::activate 35 ymm / 617 scalar, exp_rows 0 / 66, softmax_step 14 / 145;
the self-test plants the same shapes.
"""
import collections
import re
import shutil
import subprocess
import sys

VEC = {"avx2": "ymm", "avx512": "zmm"}
SCALAR = re.compile(r"v?(add|sub|mul|div|max|min|f[n]?m(add|sub)\d*)s[sd]$")
LOOPS = ("activate", "exp_rows")
STEPS = ("softmax_step", "sum_rows")


def count(listing):
    """{(isa, entry): Counter(vector=, scalar=)} for the entry points of each ISA's epilogue."""
    counts = collections.defaultdict(collections.Counter)
    key = None
    for line in listing.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            f = re.match(r"ffn::nn::(avx2|avx512)::(\w+)\(", m.group(1))
            key = (f.group(1), f.group(2)) if f and f.group(2) in LOOPS + STEPS else None
            continue
        if key is None:
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[1].strip():
            continue
        op = parts[1].strip()
        if VEC[key[0]] in op:
            counts[key]["vector"] += 1
        if SCALAR.match(op.split()[0]):
            counts[key]["scalar"] += 1
    return counts


def problems(counts):
    out = []
    for isa in VEC:
        for entry in LOOPS + STEPS:
            c = counts.get((isa, entry))
            if c is None:
                out.append(f"{isa}::{entry}: not found in the library")
                continue
            v, s = c["vector"], c["scalar"]
            if entry in LOOPS and (v < 50 or v < s):
                out.append(f"{isa}::{entry}: {v} {VEC[isa]} instructions, {s} scalar float ones: compiled scalar")
            if entry in STEPS and (v < 8 or s > 64):
                out.append(f"{isa}::{entry}: {v} {VEC[isa]} instructions, {s} scalar float ones: compiled scalar")
    return out


def listing_of(fns):
    """A fake objdump listing: {name: [instructions]}."""
    lines = []
    for i, (name, ins) in enumerate(fns.items()):
        lines.append(f"{i:016x} <ffn::nn::{name}(float*, long)>:")
        lines += [f"  {i:x}:\t{op}" for op in ins]
    return "\n".join(lines)


def self_test():
    good = {}
    for isa, reg in VEC.items():
        for e in LOOPS:
            good[f"{isa}::{e}"] = [f"vmulps %{reg}1,%{reg}2,%{reg}3"] * 60 + ["vaddss %xmm0,%xmm1,%xmm1"] * 20
        for e in STEPS:
            good[f"{isa}::{e}"] = [f"vmaxps %{reg}1,%{reg}2,%{reg}2"] * 10 + ["vmulss %xmm0,%xmm1,%xmm1"] * 40
    assert problems(count(listing_of(good))) == [], problems(count(listing_of(good)))
    planted = {
        "avx2::activate": ["vmulss %xmm0,%xmm1,%xmm1"] * 1138,             # 752d0f5's shape
        "avx2::softmax_step": ["vmaxps %ymm1,%ymm2,%ymm2"] * 14 + ["vfmadd132ss %xmm1,%xmm2,%xmm3"] * 237,
        "avx512::exp_rows": ["vmulps %ymm1,%ymm2,%ymm3"] * 80,              # AVX2 width on avx512
    }
    bad = dict(good, **planted)
    found = problems(count(listing_of(bad)))
    assert len(found) == 3 and all(any(p.startswith(k) for p in found) for k in planted), found
    missing = dict(good)
    del missing["avx512::sum_rows"]
    assert problems(count(listing_of(missing))) == ["avx512::sum_rows: not found in the library"]
    print("check_vector_code self-test: the clean listing passes, 3 planted scalar functions and 1 missing one are reported")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_vector_code.py LIBRARY | --self-test")
    self_test()
    if sys.argv[1] == "--self-test":
        return
    if shutil.which("objdump") is None:
        print("vector_code: SKIPPED: objdump (binutils) not found")
        sys.exit(77)
    r = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", sys.argv[1]], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"vector_code: objdump {sys.argv[1]} failed: {r.stderr.strip()}")
    counts = count(r.stdout)
    for (isa, entry), c in sorted(counts.items()):
        print(f"{isa}::{entry}: {c['vector']} {VEC[isa]}, {c['scalar']} scalar float")
    found = problems(counts)
    for p in found:
        print(f"vector_code: {p}", file=sys.stderr)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
