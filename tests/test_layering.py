#!/usr/bin/env python3
"""The rooms of src/ depend downward only, and the program, the bindings, the
benchmarks and the examples use only the public API (CONTRIBUTING.md).

Reads every `#include "..."` of src/, include/, tools/, python/, bench/,
examples/ and fuzz/ and fails, naming file, line and rule, on
  - an include that goes up or sideways between rooms of src/ (the levels are
    LEVELS below: a room may include only rooms of a lower level, and the
    public headers include/ffn/, which any room may use);
  - an include of a public header (include/ffn/) from a room of src/ below
    the room that owns it (PUBLIC_OWNERS: where the header's API is
    implemented; decoding may not include ffn/causal_lm.hpp for the sampling
    settings, say: they live in ffn/sampling.hpp, decoding's own);
  - a public header (include/ffn/) that includes anything but public headers;
  - a public header without an owner in PUBLIC_OWNERS;
  - a file of tools/, python/, bench/, examples/ or fuzz/ that includes
    anything but include/ffn/ or a file of its own folder;
  - an include that names no file ("..."; a <...> include counts when it
    names a file of the repository, e.g. one of src/ reached through an
    include path);
  - a file of src/ outside the rooms of LEVELS;
  - a cycle between files (header A includes B, which includes A);
  - a file of src/ over MAX_LINES lines, unless it is a kernel (KERNELS);
  - an entry of EXCEPTIONS that no longer matches anything (so the list
    only shrinks with the code).
Before it reads the tree it checks itself: a planted up-edge, a sideways
edge, a tool reaching into src/, a cycle and a stale exception in a
synthetic tree must each be reported, and that tree's clean form must pass.

  test_layering.py [REPO_ROOT]      exit 0 clean, 1 violations (listed)
"""
import os
import re
import sys
import tempfile

# Room -> level. A file of a room may include files of rooms of a LOWER level
# only (and its own room). tools -> models/modules -> ops -> backends -> core.
# decoding (the sampler, later the decoding engine) sits beside modules: the
# models drive it.
# reference sits between ops and backends: the ops call it as their reference
# path and it is written against the number formats the backend defines
# (bf16 rounding, the int8 quantization rules, the epilogue's approximations).
LEVELS = {
    "core": 0,
    "backends": 1,
    "io": 1,
    "text": 1,
    "reference": 2,
    "ops": 3,
    "modules": 4,
    "decoding": 4,
    "models": 5,
    "train": 5,
    "dist": 6,
    "serve": 6,
}
# Public header -> the room of src/ that owns it (implements its API). A room
# may include the public headers of its own level and below only.
PUBLIC_OWNERS = {
    "types.hpp": "core", "quant.hpp": "core", "random.hpp": "core", "parallel.hpp": "core",
    "diagnostics.hpp": "backends",
    "io.hpp": "io", "gguf.hpp": "io",
    "tokenizer.hpp": "text", "chat_template.hpp": "text", "marian_tokenizer.hpp": "text",
    "forward_cache.hpp": "ops",
    "sampling.hpp": "decoding",
    "feed_forward.hpp": "modules", "encoder.hpp": "modules", "decoder.hpp": "modules",
    "ffn.hpp": "modules",  # the layer's umbrella header: feed_forward.hpp and what it needs
    "causal_lm.hpp": "models", "chat.hpp": "models", "sentence.hpp": "models", "translation.hpp": "models",
    "cross_encoder.hpp": "models",
    "train.hpp": "train", "seq2seq.hpp": "train",
    "mpi.hpp": "dist",
    "serve.hpp": "serve",
}
# A file of src/ longer than this is a hub to split, unless it is a kernel.
MAX_LINES = 800
KERNELS = "src/backends/cpu/kernels/"
# Folders that may include only the public API and their own files.
CLIENTS = ("tools", "python", "bench", "examples", "fuzz")

# Deliberate exceptions: (file, included path, why). Each must still match.
EXCEPTIONS = [
    ("fuzz/fuzz_serve_request.cpp", "serve/api.hpp",
     "the fuzzer decodes request bodies below the HTTP layer, which has no public API of its own"),
    ("bench/serve_log_cost.cpp", "serve/metrics.hpp",
     "it times the server's per-request metrics and access-log work below the HTTP layer, which has no public API"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')


def room_of(rel):
    """('src', room) for src/<room>/..., ('public', None) for include/ffn/...,
    ('client', folder) for the client folders, (None, None) otherwise."""
    parts = rel.split("/")
    if parts[0] == "src":
        return "src", parts[1] if len(parts) > 2 else "(src/ itself)"
    if parts[0] == "include":
        return "public", None
    if parts[0] in CLIENTS:
        return "client", parts[0]
    return None, None


def resolve(root, rel, target):
    """The repository path an include names, or None: the including file's own
    folder first, then include/, src/, and for clients their own folder."""
    here = os.path.dirname(rel)
    kind, folder = room_of(rel)
    bases = [here, "include", "src"]
    if kind == "client":
        bases.insert(1, folder)
    for base in bases:
        p = os.path.normpath(os.path.join(base, target))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def scan(root):
    edges = []  # (file, line number, include text, resolved path or None)
    for top in ("src", "include") + CLIENTS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".cpp", ".hpp", ".h", ".cc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, rel, m.group(1))
                        # <...>: a system or library header unless it names a
                        # file of this repository (src/ on a client's path)
                        if line.split("include", 1)[1].strip().startswith("<") and target is None:
                            continue
                        edges.append((rel, n, m.group(1), target))
    return edges


def check(root, exceptions, owners=None):
    owners = PUBLIC_OWNERS if owners is None else owners
    problems = []
    used = set()
    graph = {}
    for rel, n, text, target in scan(root):
        where = f"{rel}:{n}: #include \"{text}\""
        if target is None:
            problems.append(f"{where}: names no file of the repository")
            continue
        graph.setdefault(rel, set()).add(target)
        kind, room = room_of(rel)
        tkind, troom = room_of(target)
        rule = None
        if kind == "public" and tkind != "public":
            rule = "a public header includes only include/ffn/"
        elif kind == "client" and tkind != "public" and not target.startswith(room + "/"):
            rule = f"{room}/ includes only include/ffn/ and its own files"
        elif kind == "src" and tkind == "src" and troom != room:
            if room not in LEVELS or troom not in LEVELS:
                rule = f"src/{room if room not in LEVELS else troom}/ is not a known room (LEVELS)"
            elif LEVELS[troom] >= LEVELS[room]:
                rule = (f"src/{room}/ (level {LEVELS[room]}) may not include src/{troom}/ "
                        f"(level {LEVELS[troom]}): arrows point down")
        elif kind == "src" and tkind == "public" and room in LEVELS:
            owner = owners.get(os.path.basename(target))
            if owner in LEVELS and LEVELS[owner] > LEVELS[room]:
                rule = (f"src/{room}/ (level {LEVELS[room]}) may not include {target}, the public header of "
                        f"src/{owner}/ (level {LEVELS[owner]}): arrows point down")
        elif kind == "src" and tkind == "client":
            rule = f"src/ may not include {troom}/"
        if rule is None:
            continue
        hit = [i for i, (f, t, _) in enumerate(exceptions) if f == rel and t == text]
        if hit:
            used.add(hit[0])
        else:
            problems.append(f"{where}: {rule}")
    # every public header has an owner
    for name in sorted(os.listdir(os.path.join(root, "include", "ffn")) if os.path.isdir(os.path.join(root, "include", "ffn")) else []):
        if name.endswith(".hpp") and name not in owners:
            problems.append(f"include/ffn/{name}: no owner room in PUBLIC_OWNERS (tests/test_layering.py)")
    # every file of src/ lives in a room of LEVELS, and one a reader can hold
    for dirpath, _, names in os.walk(os.path.join(root, "src")):
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            room = room_of(rel)[1]
            if room not in LEVELS:
                where = "directly in src/" if room == "(src/ itself)" else f"in src/{room}/"
                problems.append(f"{rel}: {where}, not a known room (LEVELS in tests/test_layering.py)")
            if not rel.startswith(KERNELS):
                with open(os.path.join(root, rel), errors="replace") as f:
                    lines = sum(1 for _ in f)
                if lines > MAX_LINES:
                    problems.append(f"{rel}: {lines} lines, over {MAX_LINES}: split it (only kernels, in "
                                    f"{KERNELS}, may be longer)")
    for i, (f, t, why) in enumerate(exceptions):
        if i not in used:
            problems.append(f"EXCEPTIONS: ({f}, {t}) no longer matches an include: remove it")
    # cycles between files (iterative DFS, colors)
    color = {}
    for start in sorted(graph):
        if color.get(start):
            continue
        stack = [(start, iter(sorted(graph.get(start, ()))))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
            elif color.get(nxt) == 1:
                cyc = path[path.index(nxt):] + [nxt]
                problems.append("include cycle: " + " -> ".join(cyc))
            elif not color.get(nxt):
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
    return problems


def self_test():
    """The checker must report each kind of violation in a synthetic tree."""
    def tree(files):
        d = tempfile.mkdtemp(prefix="ffn-layering-")
        for path, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as f:
                f.write(text)
        return d
    clean = {
        "include/ffn/ffn.hpp": "",
        "src/core/a.hpp": '#include "ffn/ffn.hpp"\n',
        "src/ops/b.hpp": '#include "core/a.hpp"\n',
        "src/ops/b.cpp": '#include "ops/b.hpp"\n#include "core/a.hpp"\n',
        "tools/main.cpp": '#include "ffn/ffn.hpp"\n#include "cmd.hpp"\n',
        "tools/cmd.hpp": "",
    }
    failures = []
    owners = {"ffn.hpp": "core", "up.hpp": "ops"}
    if check(tree(clean), [], owners):
        failures.append(f"the clean tree was reported: {check(tree(clean), [], owners)}")
    planted = {
        "up-edge": ({"src/core/a.hpp": '#include "ops/b.hpp"\n'}, "arrows point down"),
        "sideways": ({"src/io/c.hpp": '#include "backends/d.hpp"\n', "src/backends/d.hpp": ""}, "arrows point down"),
        "tool into src": ({"tools/main.cpp": '#include "core/a.hpp"\n'}, "includes only include/ffn/"),
        "public into src": ({"include/ffn/ffn.hpp": '#include "core/a.hpp"\n'}, "public header"),
        "cycle": ({"src/ops/b.hpp": '#include "ops/e.hpp"\n', "src/ops/e.hpp": '#include "ops/b.hpp"\n'}, "cycle"),
        "missing file": ({"src/ops/b.cpp": '#include "ops/nothing.hpp"\n'}, "names no file"),
        "angle include into src": ({"tools/main.cpp": '#include <core/a.hpp>\n'}, "includes only include/ffn/"),
        "file outside the rooms": ({"src/loose.cpp": ""}, "not a known room"),
        "unknown room": ({"src/attic/old.cpp": ""}, "not a known room"),
        "up through a public header": ({"include/ffn/up.hpp": "", "src/core/f.hpp": '#include "ffn/up.hpp"\n'},
                                       "the public header of src/ops/"),
        "public header without an owner": ({"include/ffn/stray.hpp": ""}, "no owner room"),
        "a hub over the line limit": ({"src/ops/b.cpp": "//\n" * (MAX_LINES + 1)}, "split it"),
    }
    for name, (change, expect) in planted.items():
        problems = check(tree({**clean, **change}), [], owners)
        if not any(expect in p for p in problems):
            failures.append(f"planted {name} not reported (got {problems})")
    stale = check(tree(clean), [("src/ops/b.cpp", "modules/x.hpp", "test")], owners)
    if not any("no longer matches" in p for p in stale):
        failures.append("a stale exception was not reported")
    allowed = check(tree({**clean, "src/core/a.hpp": '#include "ops/b.hpp"\n'}),
                    [("src/core/a.hpp", "ops/b.hpp", "test")], owners)
    if any("arrows" in p for p in allowed):
        failures.append(f"a listed exception was still reported: {allowed}")
    return failures


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    failures = self_test()
    if failures:
        print("test_layering: the checker itself is broken:")
        for f in failures:
            print("  " + f)
        return 1
    problems = check(root, EXCEPTIONS)
    for p in problems:
        print(p)
    n = len(scan(root))
    print(f"test_layering: {n} includes read, {len(problems)} problems, {len(EXCEPTIONS)} listed exceptions")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
