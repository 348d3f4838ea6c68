#!/usr/bin/env bash
# check_fresh_machine.sh - prove the README's two commands on a fresh Debian 12
# machine: build a clean bookworm root with debootstrap (minbase, Debian's
# packages only), copy this checkout into it (what `git add -A` would record:
# tracked files, untracked files .gitignore does not ignore, and .git; no
# build directories), and run the command there as root in a clean
# environment.  Each command gets its own fresh root, so neither profits from
# packages the other installed.  The exit status is the commands': 0 only
# when every command chosen ran and passed.  CI (.ci/run) runs this script.
#
# Usage: scripts/check_fresh_machine.sh [options] [test] [demo]
#   test, demo        which of the README's two commands to run (default: both,
#                     test first); they are read from the README's
#                     "## The two commands" block, not written here
#   --dir DIR         work directory (default: a new one under /var/tmp);
#                     must be empty or absent
#   --keep            leave the roots behind (default: removed at the end; a failed
#                     command's root and the logs are always kept)
#   --cache DIR       debootstrap's download cache (by hand, to save the base
#                     system's download; the roots are still built anew)
#   --env VAR=VALUE   pass VAR into the root's environment (repeatable); by
#                     default nothing of the caller's environment is passed
#   -h, --help        this text
# Environment: LS_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#   LS_DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security).
# Needs root (debootstrap, chroot, mount namespaces); installs debootstrap on
# the host with apt-get when it is missing.  If the root cannot be built (no
# network to the mirror, say) it says so and fails: it never falls back to
# running on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
PROG=check_fresh_machine
MIRROR=${LS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${LS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bookworm

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
die_usage() { echo "$PROG: $*" >&2; echo "usage: scripts/check_fresh_machine.sh [--dir DIR] [--keep] [--cache DIR] [--env VAR=VALUE]... [test] [demo]" >&2; exit 2; }
fail() { echo "$PROG: $*" >&2; exit 1; }

WORK= KEEP=0 CACHE=
ENVS=()
WHICH=()
while [ $# -gt 0 ]; do
  case $1 in
    --dir) [ $# -ge 2 ] || die_usage "--dir needs a directory"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --cache) [ $# -ge 2 ] || die_usage "--cache needs a directory"; CACHE=$2; shift 2 ;;
    --env)
      [ $# -ge 2 ] || die_usage "--env needs VAR=VALUE"
      [[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die_usage "--env '$2': not VAR=VALUE"
      ENVS+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    test|demo)
      for w in "${WHICH[@]+"${WHICH[@]}"}"; do [ "$w" != "$1" ] || die_usage "'$1' named twice"; done
      WHICH+=("$1"); shift ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
done
[ ${#WHICH[@]} -gt 0 ] || WHICH=(test demo)
[ "$(id -u)" -eq 0 ] || die_usage "must run as root (debootstrap, chroot and mount namespaces need it)"

# The commands under test are the README's, read from its block, so that the
# claim and the check cannot drift apart.
readme_commands() {
  awk '/^## The two commands/{in_sec=1; next}
       in_sec && /^## /{exit}
       in_sec && /^```/{blk = !blk; next}
       in_sec && blk && /^\.\/scripts\/[A-Za-z0-9_]+\.sh/{print $1}' README.md
}
mapfile -t CMDS < <(readme_commands)
[ ${#CMDS[@]} -eq 2 ] ||
  fail "README.md: the block under '## The two commands' names ${#CMDS[@]} commands (./scripts/NAME.sh), not two"
declare -A CMD
for c in "${CMDS[@]}"; do
  case $c in
    *test*) CMD[test]=$c ;;
    *) CMD[demo]=$c ;;
  esac
done
[ -n "${CMD[test]:-}" ] && [ -n "${CMD[demo]:-}" ] ||
  fail "README.md: cannot tell the test command from the demo command in '${CMDS[*]}'"

if ! command -v debootstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || fail "debootstrap is missing and there is no apt-get to install it"
  echo "$PROG: installing debootstrap on the host" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2 ||
    fail "cannot install debootstrap on the host"
fi
for t in unshare chroot mount tar git; do
  command -v "$t" >/dev/null 2>&1 || fail "'$t' is missing on the host"
done

if [ -z "$WORK" ]; then
  WORK=$(mktemp -d /var/tmp/longstraw-fresh.XXXXXX)
else
  mkdir -p "$WORK"
  [ -z "$(ls -A "$WORK")" ] || die_usage "--dir '$WORK' is not empty"
fi
WORK=$(cd "$WORK" && pwd)
cleanup() {
  [ "$KEEP" = 1 ] && { echo "$PROG: kept $WORK" >&2; return; }
  # the mounts live in the commands' own mount namespaces and are gone with
  # them; refuse to delete anything if one is still visible here
  if grep -q " $WORK/" /proc/self/mounts; then
    echo "$PROG: mounts are still active under $WORK; not removing it" >&2
    return
  fi
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

secs() { local s=$1; printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# 1. the base system, once; each command gets a copy of it
BASE=$WORK/base
t0=$SECONDS
echo "$PROG: building a fresh Debian 12 ($SUITE, minbase) root from $MIRROR" >&2
dbargs=(--variant=minbase)
if [ -n "$CACHE" ]; then mkdir -p "$CACHE"; dbargs+=(--cache-dir="$(cd "$CACHE" && pwd)"); fi
if ! debootstrap "${dbargs[@]}" "$SUITE" "$BASE" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
  tail -n 20 "$WORK/debootstrap.log" >&2
  KEEP=1
  fail "cannot build a Debian 12 root with debootstrap from $MIRROR (log: $WORK/debootstrap.log); there is no fallback to the host: failing"
fi
cat >"$BASE/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
cp /etc/resolv.conf "$BASE/etc/resolv.conf" 2>/dev/null || true
cp /etc/hosts "$BASE/etc/hosts" 2>/dev/null || true
rm -rf "$BASE/var/cache/apt/archives/"*.deb
ROOT_S=$((SECONDS - t0))
echo "$PROG: root built in $(secs $ROOT_S)" >&2

# 2. the checkout, as `git add -A` would record it, plus .git
TREE=$WORK/tree.tar
if git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$SRC" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
    tar -C "$SRC" --null -T - -cf "$TREE"
  tar -C "$SRC" -rf "$TREE" .git
else
  tar -C "$SRC" --exclude='./build*' --exclude=./runs -cf "$TREE" .
fi

run_in_root() { # NAME COMMAND
  local name=$1 cmd=$2 root=$WORK/root-$1
  cp -a "$BASE" "$root"
  mkdir -p "$root/root/longstraw"
  tar -C "$root/root/longstraw" --no-same-owner -xf "$TREE"
  local envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb)
  envs+=("${ENVS[@]+"${ENVS[@]}"}")
  # a private mount and pid namespace: /proc, /sys, /dev and a fresh /dev/shm
  # for the root, unmounted and every process ended when the command ends
  unshare --mount --pid --fork --propagation private bash -c '
    set -e
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --rbind /sys "$r/sys"
    mount --rbind /dev "$r/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$r/dev/shm"
    exec chroot "$r" /usr/bin/env -i "$@"
  ' _ "$root" "${envs[@]}" /bin/bash -c "cd /root/longstraw && $cmd" 2>&1 | tee "$WORK/$name.log"
  return "${PIPESTATUS[0]}"
}

declare -A RC TIME
for w in "${WHICH[@]}"; do
  echo "$PROG: running the README's $w command '${CMD[$w]}' in a fresh root (log: $WORK/$w.log)" >&2
  t0=$SECONDS
  set +e
  run_in_root "$w" "${CMD[$w]}"
  RC[$w]=$?
  set -e
  TIME[$w]=$((SECONDS - t0))
  # a failed command's root stays for inspection (the work directory is kept then)
  if [ "$KEEP" != 1 ] && [ "${RC[$w]}" = 0 ]; then rm -rf --one-file-system "$WORK/root-$w"; fi
done

status=0
echo "$PROG: Debian 12 root built in $(secs $ROOT_S) from $MIRROR"
printf '%-8s %-22s %-5s %s\n' command "README line" exit time
for w in "${WHICH[@]}"; do
  printf '%-8s %-22s %-5s %s\n' "$w" "${CMD[$w]}" "${RC[$w]}" "$(secs "${TIME[$w]}")"
  [ "${RC[$w]}" = 0 ] || status=1
done
if [ $status != 0 ]; then KEEP=1; fi
exit $status
