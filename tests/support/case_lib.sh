# case_lib.sh - sourced by the shell tests that print one line per case (audit_sequence.sh,
# replay_checkpoint.sh, state_tier.sh): ok CASE / bad CASE WHY ("FAIL CASE: why", and the script's exit
# status $failed becomes 1), and MPI: the mpirun prefix of a CP-2 run (--oversubscribe, as root
# --allow-run-as-root), empty when mpirun is not found (the CP cases are then skipped).
failed=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1: $2"; failed=1; }
MPI=()
if command -v mpirun >/dev/null; then
  MPI=(mpirun --oversubscribe -np 2)
  [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
fi
