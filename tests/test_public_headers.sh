#!/bin/sh
# Each public header compiles on its own (it includes what it uses), with
# -Wall -Wextra -Werror, and the deprecated name ffn::Layer still compiles,
# warning that it is deprecated.
#   test_public_headers.sh CXX INCLUDE_DIR
cxx=$1 inc=$2
fail=0
for h in "$inc"/ffn/*.hpp; do
  name=$(basename "$h")
  if ! printf '#include <ffn/%s>\nint main() { return 0; }\n' "$name" |
       "$cxx" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I"$inc" -x c++ - 2>/tmp/ffn_header_$$.err; then
    echo "FAIL: ffn/$name does not compile on its own:"; head -5 /tmp/ffn_header_$$.err; fail=1
  else
    echo "ok: ffn/$name"
  fi
done
printf '#include <ffn/feed_forward.hpp>\nint main() { ffn::Layer l(ffn::Config{}, 1); return int(l.config().d_model) - 512; }\n' |
  "$cxx" -std=c++20 -fsyntax-only -I"$inc" -x c++ - 2>/tmp/ffn_header_$$.err
st=$?
if [ $st -ne 0 ] || ! grep -q "deprecated" /tmp/ffn_header_$$.err; then
  echo "FAIL: ffn::Layer (the deprecated alias) should compile with a deprecation warning (exit $st):"
  head -5 /tmp/ffn_header_$$.err; fail=1
else
  echo "ok: ffn::Layer compiles and is reported deprecated"
fi
rm -f /tmp/ffn_header_$$.err
exit $fail
