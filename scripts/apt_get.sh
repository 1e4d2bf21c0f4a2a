#!/usr/bin/env bash
# apt-get that waits for another apt-get or dpkg (an unattended upgrade, a
# second setup) instead of exiting 100 at once, with one line saying so.
#   scripts/apt_get.sh install -y -q cmake      (as root, or through sudo)
# FFN_APT_LOCK_TIMEOUT: seconds to wait for the lock (default 600).
set -euo pipefail
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
timeout="${FFN_APT_LOCK_TIMEOUT:-600}"
# The locks apt-get takes (fcntl locks: flock cannot see them). A held one is
# reported once; apt-get itself then waits (DPkg::Lock::Timeout covers the
# dpkg locks and, since apt 2.1, the lists lock of `update`).
for lock in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock; do
  [ -e "$lock" ] || continue
  if ! $sudo /usr/bin/python3 - "$lock" <<'PY' 2>/dev/null; then
import fcntl, sys
with open(sys.argv[1], "r+") as f:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
PY
    echo "setup: another apt-get or dpkg holds $lock; waiting up to ${timeout} s for it" >&2
    break
  fi
done
DEBIAN_FRONTEND=noninteractive exec $sudo apt-get -o DPkg::Lock::Timeout="$timeout" "$@"
