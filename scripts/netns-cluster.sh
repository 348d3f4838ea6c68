#!/usr/bin/env bash
# netns-cluster.sh - a two-"host" cluster on one machine, to run an MPI job over
# TCP between hosts that share no memory: two network namespaces joined by a
# veth pair, each with its own address and hostname, and mpirun launching the
# second host's daemon through an rsh agent as it would over ssh.
#
#   scripts/netns-cluster.sh [--slots N] [--net A.B.C] [--btl-verbose] [--keep-dir DIR] \
#                            -- MPIRUN_ARGS...        e.g. -- -np 4 build/trainer/longstraw-train ...
#
# What it makes (names carry this script's PID, so runs never share them):
#   - namespaces lsnsA-PID and lsnsB-PID, loopback up in each, and a veth pair
#     between them with A.B.C.1/24 and A.B.C.2/24 (default 10.237.C.0/24, C from
#     the PID; the addresses exist inside the namespaces only);
#   - a hostfile naming the two hosts by address, N slots each (default 2);
#   - the rsh agent, called by mpirun like ssh (`AGENT [opts] HOST CMD...`): it
#     runs CMD with `sh -c` inside HOST's namespace, in a UTS namespace of its
#     own whose hostname is lsnsB-PID (or lsnsA-PID), so each rank's receipt
#     names its host;
#   - then mpirun itself inside the first namespace (hostname lsnsA-PID), so the
#     daemon of the second host connects back over the veth, with
#       --hostfile H --mca plm_rsh_agent AGENT --mca plm_rsh_no_tree_spawn 1
#       --mca pml ob1 --mca btl tcp,self --mca coll ^sm          (no shared memory)
#       --mca btl_tcp_if_include A.B.C.0/24 --mca oob_tcp_if_include A.B.C.0/24
#       --oversubscribe [--allow-run-as-root]  MPIRUN_ARGS...
#     Open MPI 4.1 (Debian 12) decides that the first hostfile line is the local
#     host because that address is one of its interfaces (names are never
#     compared, so no hosts file is needed); every other host is launched through
#     the agent.
# Everything is removed on exit (trap), on failure too; --keep-dir DIR also
# copies the hostfile and the agent to DIR.  --btl-verbose adds
# `--mca btl_base_verbose 100`: the ranks then log which BTL reaches which peer.
#
# MPIRUN names the mpirun to use (default: mpirun on PATH).
# Exit: mpirun's status; 2 bad usage; 77 when the namespaces cannot be made
# (not root, no CAP_NET_ADMIN, no `ip` or `unshare`, no veth), with the reason
# on stderr: a test treats 77 as a skip.
set -euo pipefail
PROG=$(basename "$0")
usage() {
  echo "usage: $PROG [--slots N] [--net A.B.C] [--btl-verbose] [--keep-dir DIR] -- MPIRUN_ARGS..." >&2
  exit 2
}
skip() { echo "$PROG: SKIP: $*" >&2; exit 77; }

slots=2
net="10.237.$(($$ % 200 + 20))"
verbose=0
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    --slots) [ $# -ge 2 ] || usage; slots=$2; shift 2 ;;
    --net) [ $# -ge 2 ] || usage; net=$2; shift 2 ;;
    --btl-verbose) verbose=1; shift ;;
    --keep-dir) [ $# -ge 2 ] || usage; keep=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "$PROG: unknown argument '$1' (the mpirun arguments go after --)" >&2; usage ;;
  esac
done
[ $# -gt 0 ] || { echo "$PROG: no mpirun arguments after --" >&2; usage; }
case "$slots" in ''|*[!0-9]*|0) echo "$PROG: --slots '$slots': not a positive integer" >&2; exit 2 ;; esac
echo "$net" | grep -Eq '^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$' ||
  { echo "$PROG: --net '$net': not three dotted numbers (A.B.C of a /24)" >&2; exit 2; }
for octet in ${net//./ }; do
  [ "$octet" -le 255 ] || { echo "$PROG: --net '$net': $octet is over 255" >&2; exit 2; }
done

[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_NET_ADMIN)"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (Debian package iproute2)"
command -v unshare >/dev/null 2>&1 || skip "no 'unshare' command (Debian package util-linux)"
command -v nsenter >/dev/null 2>&1 || skip "no 'nsenter' command (Debian package util-linux)"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null 2>&1 || { echo "$PROG: '$mpirun': no such command (set MPIRUN or PATH)" >&2; exit 2; }

nsA="lsnsA-$$"
nsB="lsnsB-$$"
vA="lsva$$"
vB="lsvb$$"
ipA="$net.1"
ipB="$net.2"
work=$(mktemp -d "${TMPDIR:-/tmp}/netns-cluster.XXXXXX")
made=()
job=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  local ns pid
  if [ -n "$job" ]; then # mpirun, interrupted: asked to end its job first, killed below if it lingers
    kill "$job" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      kill -0 "$job" 2>/dev/null || break
      sleep 0.2
    done
  fi
  for ns in "${made[@]}"; do
    # processes this run left in its namespace (a daemon of a failed job)
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true # deleting a namespace deletes its end of the veth, and so the pair
  done
  ip link del "$vA" 2>/dev/null || true  # if the pair was made but never moved
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# every step of the setup: a failure means this machine cannot make the cluster (a skip)
must() { "$@" 2>"$work/err" || skip "$*: $(tr '\n' ' ' <"$work/err")"; }
# inside a namespace by nsenter (ip -n and ip netns exec also remount / and /sys, which a chroot
# whose root is not a mount point refuses)
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }
must ip netns add "$nsA"
made+=("$nsA")
must ip netns add "$nsB"
made+=("$nsB")
must ip link add "$vA" type veth peer name "$vB"
must ip link set "$vA" netns "$nsA"
must ip link set "$vB" netns "$nsB"
must in_ns "$nsA" ip addr add "$ipA/24" dev "$vA"
must in_ns "$nsB" ip addr add "$ipB/24" dev "$vB"
for ns in "$nsA" "$nsB"; do must in_ns "$ns" ip link set lo up; done
must in_ns "$nsA" ip link set "$vA" up
must in_ns "$nsB" ip link set "$vB" up
# what the launch needs: entering a namespace with a hostname of its own
for ns in "$nsA" "$nsB"; do must in_ns "$ns" unshare --uts /bin/sh -c "hostname $ns"; done

printf '%s slots=%s\n%s slots=%s\n' "$ipA" "$slots" "$ipB" "$slots" >"$work/hostfile"

# the rsh agent: skips ssh-style options, maps HOST (address or hostname) to its
# namespace, runs the remote command line as a remote shell would (sh -c)
cat >"$work/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
  case "\$1" in
    -o|-p|-l|-i|-F|-E|-b|-c|-m|-J) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
[ \$# -ge 2 ] || { echo "netns agent: usage: agent [opts] HOST CMD..." >&2; exit 255; }
host=\$1; shift
case "\$host" in
  $ipA|$nsA) ns=$nsA ;;
  $ipB|$nsB) ns=$nsB ;;
  *) echo "netns agent: unknown host '\$host' (this cluster has $ipA and $ipB)" >&2; exit 255 ;;
esac
exec nsenter --net="/run/netns/\$ns" unshare --uts /bin/sh -c "hostname \$ns && \$*"
EOF
chmod +x "$work/agent"
if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$work/hostfile" "$work/agent" "$keep/"; fi

# shellcheck disable=SC2054  # tcp,self is one value
flags=(--hostfile "$work/hostfile" --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1
       --mca pml ob1 --mca btl tcp,self --mca coll ^sm
       --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" --oversubscribe)
[ "$(id -u)" -ne 0 ] || flags+=(--allow-run-as-root)
[ "$verbose" -eq 0 ] || flags+=(--mca btl_base_verbose 100)
echo "$PROG: hosts $ipA ($nsA) and $ipB ($nsB), $slots slot(s) each; mpirun over TCP only" >&2
# shellcheck disable=SC2016  # $0 and $@ are the inner shell's
# in the background and waited for, so that a signal runs the cleanup at once
in_ns "$nsA" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$nsA" "$mpirun" "${flags[@]}" "$@" &
job=$!
rc=0
wait "$job" || rc=$?
job=""
exit "$rc"
