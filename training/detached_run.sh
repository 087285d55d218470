#!/usr/bin/env bash
# Run one long command detached from the calling shell (its own session, setsid), so that it outlives a
# time-limited remote call, and wait for it or collect its files from later calls on the same machine.
# Liveness is read from the pid file (kill -0), never from `pgrep -f`, which matches the waiting call's own
# command line and so never sees the job end.
#
#   training/detached_run.sh start DIR -- python -m training.train_bundled --out DIR/out --work /tmp/work ...
#   training/detached_run.sh wait DIR SECONDS [COPY_TO]   # up to SECONDS; then copies DIR/out and the log
#
# `wait` exits 0 once the job has ended (its exit status is in DIR/rc), 3 while it still runs.
set -euo pipefail
usage() { echo "usage: $0 start DIR -- COMMAND... | $0 wait DIR SECONDS [COPY_TO]" >&2; exit 2; }
[ $# -ge 2 ] || usage
what=$1 dir=$2
shift 2
case "$what" in
start)
    [ "${1:-}" = "--" ] || usage
    shift
    [ $# -ge 1 ] || usage
    [ ! -e "$dir/pid" ] || { echo "error: $dir/pid exists: a job was started there; use another DIR" >&2; exit 2; }
    mkdir -p "$dir"
    setsid bash -c 'echo $$ > "$0/pid"; "${@}" > "$0/log" 2>&1 < /dev/null; echo $? > "$0/rc"' "$dir" "$@" > /dev/null 2>&1 < /dev/null &
    for _ in $(seq 50); do [ -s "$dir/pid" ] && break; sleep 0.1; done
    echo "started pid $(cat "$dir/pid"), log $dir/log"
    ;;
wait)
    [ $# -ge 1 ] || usage
    seconds=$1 copy_to=${2:-}
    [ -s "$dir/pid" ] || { echo "error: no job was started in $dir" >&2; exit 2; }
    end=$((SECONDS + seconds))
    while kill -0 "$(cat "$dir/pid")" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 2; done
    tail -n 5 "$dir/log" || true
    if [ -n "$copy_to" ]; then
        mkdir -p "$copy_to"
        cp "$dir/log" "$copy_to/"
        [ -d "$dir/out" ] && cp -r "$dir/out/." "$copy_to/out/" 2>/dev/null || true
    fi
    if [ -e "$dir/rc" ]; then echo "ended with status $(cat "$dir/rc")"; exit 0; fi
    echo "still running"
    exit 3
    ;;
*) usage ;;
esac
