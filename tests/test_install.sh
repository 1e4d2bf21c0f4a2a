#!/usr/bin/env bash
# The installed C++ package: `cmake --install` into a fresh prefix, then
# examples/example.cpp built out of tree against it, once with
# find_package(ffn) (tests/install_consumer) and once with pkg-config, and run.
#   tests/test_install.sh BUILD_DIR SOURCE_DIR [LIBDIR (CMAKE_INSTALL_LIBDIR, default lib)]
# FFN_CONSUMER_FLAGS: extra compile and link flags (a sanitizer build's);
# CXX: the compiler the library was built with (its OpenMP runtime must match).
set -euo pipefail
build=$1 src=$2 libdir_rel=${3:-lib}
extra=${FFN_CONSUMER_FLAGS:-}
cxx=${CXX:-c++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in include/ffn/ffn.hpp $libdir_rel/cmake/ffn/ffnConfig.cmake $libdir_rel/cmake/ffn/ffnConfigVersion.cmake \
         $libdir_rel/pkgconfig/ffn.pc; do
  [ -f "$work/prefix/$f" ] || { echo "test_install: $f not installed"; exit 1; }
done
[ ! -e "$work/prefix/ffn" ] || { echo "test_install: the Python module went into a C++ install"; exit 1; }
# Every public header is installed, and each compiles alone from the prefix
# (a header that includes one left out of the install fails here).
for h in "$src"/include/ffn/*.hpp; do
  name=$(basename "$h")
  [ -f "$work/prefix/include/ffn/$name" ] || { echo "test_install: include/ffn/$name not installed"; exit 1; }
  echo "#include \"ffn/$name\"" | "$cxx" -std=c++20 -fsyntax-only -x c++ -I"$work/prefix/include" - ||
    { echo "test_install: the installed ffn/$name does not compile alone"; exit 1; }
done
"$build/bin/ffn" init --d-model 16 --d-ff 40 --seed 1 --output "$work/w.safetensors" >/dev/null

# find_package(ffn)
cmake -S "$src/tests/install_consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DFFN_EXAMPLE="$src/examples/example.cpp" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$extra" >/dev/null  # no C++ standard set here: ffn::ffn brings C++20
cmake --build "$work/consumer" >/dev/null
"$work/consumer/example" "$work/w.safetensors" "$work/g1.safetensors" | tee "$work/out1.txt"

# pkg-config
export PKG_CONFIG_PATH="$work/prefix/$libdir_rel/pkgconfig"
flags=$(pkg-config --cflags --libs ffn)
echo "pkg-config --cflags --libs ffn: $flags"
"$cxx" -std=c++20 $extra "$src/examples/example.cpp" $flags -o "$work/example_pc"
libdir=$(pkg-config --variable=libdir ffn)
LD_LIBRARY_PATH="$libdir" "$work/example_pc" "$work/w.safetensors" "$work/g2.safetensors" | tee "$work/out2.txt"

# The two builds compute the same thing.
cmp "$work/out1.txt" "$work/out2.txt"
cmp "$work/g1.safetensors" "$work/g2.safetensors"
echo "test_install: OK"
