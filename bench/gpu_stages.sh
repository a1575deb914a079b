# Sourced by the bench/run_gpu_*.sh scripts: timed, logged stages that run even if an
# earlier one failed.  Needs OUT set; sets STATUS=1 when a stage fails.
STATUS=0
T0=$(date +%s)
STAGE_TAIL=${STAGE_TAIL:-40}  # lines of each stage's log copied into run.log

log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/run.log"; }
stage() { # stage NAME SECONDS CMD... : run with a time limit, log to $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    log "== $name (limit ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n "$STAGE_TAIL" "$OUT/$name.log" | tee -a "$OUT/run.log" >/dev/null
    log "== $name rc=$rc"
    [ $rc -eq 0 ] || STATUS=1
    return $rc
}
