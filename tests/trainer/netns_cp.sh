#!/usr/bin/env bash
# netns_cp.sh - CP-4 over two "hosts" gives bitwise the parameters of CP-4 on
# one host.  The same longstraw-train run (CONFIG, f32, P = 512, G = 2, R = 8,
# `full` gradients, random adapters, two steps, seed 7, --save) twice:
#   one host:  mpirun -np 4 with Open MPI's default transports (shared memory,
#              vader, between the ranks: the BTL trace is printed);
#   two hosts: scripts/netns-cluster.sh, two network namespaces joined by a veth,
#              ranks 0-1 on the first, 2-3 on the second, TCP alone
#              (pml ob1, btl tcp,self, coll ^sm).
# Checks, each of which fails the test:
#   - both runs exit 0, and their checkpoints (weights, AdamW moments, step, RNG:
#     every byte of the --save file) are equal, compared with cmp;
#   - the two-host run's receipts name the hosts: ranks 0 and 1 the first
#     namespace's hostname, ranks 2 and 3 the second's;
#   - its BTL trace (btl_base_verbose, one file per rank): four processes, each
#     sending to itself with self and connected over tcp (in either direction)
#     to at least one rank on the other namespace, no BTL but tcp and self
#     named, and the processes of the second namespace connected over TCP to
#     the first one's address (A.B.C.1, which exists on that namespace's veth
#     only).
# Exit 77 (a skip) with the reason when the namespaces cannot be made.
#
#   tests/trainer/netns_cp.sh BUILD_DIR SOURCE_DIR WORK_DIR CONFIG_NAME
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR WORK_DIR CONFIG_NAME" >&2; exit 2; }
build=$1 src=$2 work=$3 cfg=$4
train=$build/trainer/longstraw-train
[ -x "$train" ] || { echo "$0: $train: not built" >&2; exit 2; }
[ -f "$src/configs/$cfg.json" ] || { echo "$0: $src/configs/$cfg.json: no such config" >&2; exit 2; }
rm -rf "$work" && mkdir -p "$work" || exit 2
export OMP_NUM_THREADS=1
fail() { echo "FAIL ($cfg): $*" >&2; exit 1; }

args=(--config "$src/configs/$cfg.json" --prompt-len 512 --response-len 8 --group 2 --steps 2 --seed 7
      --dtype f32 --grad-mode full --train-mode lora --lora-init random --quiet)
mpi=(--oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)

# the two namespaces first: where they cannot be made, the test is skipped at once
net="10.237.$(($$ % 200 + 20))"
t0=$(date +%s.%N)
MPIRUN=${MPIRUN:-mpirun} timeout 240 "$src/scripts/netns-cluster.sh" --net "$net" --btl-verbose -- \
  -np 4 --output-filename "$work/two-ranks" -x OMP_NUM_THREADS "$train" "${args[@]}" --save "$work/two.safetensors" --out "$work/two" \
  >"$work/two.out" 2>"$work/two.err"
rc=$?
t1=$(date +%s.%N)
if [ $rc -eq 77 ]; then
  grep 'SKIP' "$work/two.err" >&2
  exit 77
fi
[ $rc -eq 0 ] || { tail -30 "$work/two.err" >&2; fail "two-namespace CP-4 run: exit $rc"; }

OMPI_MCA_btl_base_verbose=100 timeout 200 "${MPIRUN:-mpirun}" "${mpi[@]}" -np 4 -x OMP_NUM_THREADS \
  "$train" "${args[@]}" --save "$work/one.safetensors" --out "$work/one" >"$work/one.out" 2>"$work/one.err"
rc=$?
t2=$(date +%s.%N)
[ $rc -eq 0 ] || { tail -20 "$work/one.err" >&2; fail "one-host CP-4 run: exit $rc"; }
echo "one host: $(grep -o 'Using [a-z0-9]* btl' "$work/one.err" | sort | uniq -c | tr -s ' \n' ' ')"
awk -v a="$t0" -v b="$t1" -v c="$t2" \
  'BEGIN { printf "wall: one host %.2f s, two namespaces %.2f s (btl trace on, launch included)\n", c - b, b - a }'

# the parameters: every byte of the checkpoints
cmp "$work/one.safetensors" "$work/two.safetensors" ||
  fail "the checkpoints differ: two namespaces over TCP did not give the one-host parameters"
echo "checkpoints equal: $(wc -c <"$work/one.safetensors") bytes, sha256 $(sha256sum "$work/one.safetensors" | cut -c1-16)"

# the hosts the ranks ran on, as their receipts name them
hosts=()
for r in 0 1 2 3; do
  h=$(tr -d ' \t\n' <"$work/two/rank-000$r/receipt.json" | grep -o '"host":"[^"]*"' | head -1 | cut -d'"' -f4)
  [ -n "$h" ] || fail "rank $r: no host in its receipt"
  hosts+=("$h")
done
echo "receipts' hosts: ${hosts[*]}"
case "${hosts[0]}" in lsnsA-*) ;; *) fail "rank 0 ran on '${hosts[0]}', not the first namespace" ;; esac
case "${hosts[2]}" in lsnsB-*) ;; *) fail "rank 2 ran on '${hosts[2]}', not the second namespace" ;; esac
[ "${hosts[1]}" = "${hosts[0]}" ] || fail "ranks 0 and 1 on '${hosts[0]}' and '${hosts[1]}' (2 slots per host)"
[ "${hosts[3]}" = "${hosts[2]}" ] || fail "ranks 2 and 3 on '${hosts[2]}' and '${hosts[3]}' (2 slots per host)"

# the transport, from each rank's own BTL trace (mpirun --output-filename: one file per rank, so that
# no two processes' lines interleave)
used=$(grep -hE '^\[[^]]+\] mca: bml: Using [a-z0-9]+ btl for send to ' "$work"/two-ranks/1/rank.*/stderr)
procs=$(echo "$used" | sed -E 's/^\[([^]]+)\].*/\1/' | sort -u)
[ "$(echo "$procs" | grep -c .)" -eq 4 ] || fail "the BTL trace names $(echo "$procs" | grep -c .) processes, not 4"
[ "$(echo "$procs" | grep -c '^lsnsB-')" -eq 2 ] || fail "the BTL trace has not 2 processes in the second namespace"
other=$(echo "$used" | grep -vE 'Using (tcp|self) btl' || true)
[ -z "$other" ] || fail "a BTL other than tcp/self carried data: $other"
# each rank: itself over self, and a TCP connection with at least one rank on the other namespace,
# made in either direction (Open MPI makes an endpoint when a pair first talks, and logs "Using tcp btl
# for send to" only on the side that sends first: which pairs talk first, and who connects, depends
# on the timing); ranks 0 and 1 are on the first namespace, 2 and 3 on the second (the receipts above)
for r in 0 1 2 3; do
  f=$work/two-ranks/1/rank.$r/stderr
  [ -s "$f" ] || fail "rank $r: no BTL trace ($f)"
  nself=$(grep -c 'mca: bml: Using self btl' "$f")
  [ "$nself" -eq 1 ] || fail "rank $r: self btl to $nself peer(s), not 1"
  case $r in 0|1) far='[23]' ;; *) far='[01]' ;; esac
  grep -Eq "Using tcp btl for send to \[\[[0-9]+,[0-9]+\],$far\]|btl:tcp: now connected to [0-9.]+, process \[\[[0-9]+,[0-9]+\],$far\]|btl: tcp: attempting to connect\(\) to \[\[[0-9]+,[0-9]+\],$far\]" "$f" ||
    fail "rank $r: no TCP connection with a rank on the other namespace"
done
# (grep reads the files itself: under pipefail, `cat | grep -q` fails when grep stops at its first
# match and cat, still writing, dies of SIGPIPE)
grep -Eqh "^\[lsnsB-[0-9]+:[0-9]+\] btl:tcp: (now connected to|connect\(\) to) ${net//./\\.}\.1[,:]" \
    "$work"/two-ranks/1/rank.[23]/stderr ||
  fail "no process of the second namespace connected over TCP to $net.1"
echo "two namespaces: $(echo "$used" | grep -o 'Using [a-z0-9]* btl' | sort | uniq -c | tr -s ' \n' ' ')" \
     "and the second namespace's ranks connected to $net.1 over the veth"
echo "PASS ($cfg)"
