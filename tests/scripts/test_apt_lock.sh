#!/usr/bin/env bash
# scripts/apt_get.sh waits for a held dpkg lock, with one line, instead of
# exiting 100 as plain apt-get does. Holds the lock for 3 s from a second
# process and installs a package that is already installed (cmake: a no-op
# that still takes the lock). Needs root (it takes the system's lock).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null || ! dpkg-query -W cmake >/dev/null 2>&1; then
  echo "apt_lock: SKIPPED: needs root, apt-get and an installed cmake"; exit 77
fi
hold() {  # hold the dpkg frontend lock for $1 seconds; prints "held" once it has it
  /usr/bin/python3 - "$1" <<'PY' &
import fcntl, sys, time
f = open("/var/lib/dpkg/lock-frontend", "r+")
fcntl.lockf(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[1]))
PY
}
wait_held() { for _ in $(seq 100); do grep -q held "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT

# The check can fail: plain apt-get under the same hold exits 100.
hold 3 >"$tmp/h1"; wait_held "$tmp/h1" || { echo "apt_lock: could not take the lock"; exit 1; }
apt-get -o DPkg::Lock::Timeout=0 install -y -q cmake >/dev/null 2>&1; rc=$?
wait
[ "$rc" -eq 100 ] || { echo "apt_lock: FAIL: plain apt-get under a held lock exited $rc, expected 100 (the test cannot see the lock)"; exit 1; }

hold 3 >"$tmp/h2"; wait_held "$tmp/h2" || { echo "apt_lock: could not take the lock"; exit 1; }
start=$(date +%s)
FFN_APT_LOCK_TIMEOUT=60 "$root/scripts/apt_get.sh" install -y -q --no-install-recommends cmake >/dev/null 2>"$tmp/err"; rc=$?
took=$(( $(date +%s) - start ))
wait
[ "$rc" -eq 0 ] || { echo "apt_lock: FAIL: scripts/apt_get.sh exited $rc under a held lock:"; cat "$tmp/err"; exit 1; }
grep -q "waiting up to 60 s" "$tmp/err" || { echo "apt_lock: FAIL: no note that it waits:"; cat "$tmp/err"; exit 1; }
[ "$took" -ge 2 ] || { echo "apt_lock: FAIL: returned after ${took} s, before the lock was free"; exit 1; }
echo "apt_lock: waited ${took} s for the lock, exit 0, note: $(head -1 "$tmp/err")"
