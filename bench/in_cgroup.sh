#!/bin/bash
# in_cgroup.sh LIMIT_MIB COMMAND [ARGS...]: runs COMMAND in a memory cgroup of its own, limited
# to LIMIT_MIB (swap included where the kernel accounts it), so that going over the limit is an
# OOM kill, as on a device with that much memory. Needs root and a writable cgroup file system
# (v2: memory.max; v1: the memory controller). Under `ddptrain launch ... bench/in_cgroup.sh N
# ddptrain train ...` every rank gets its own (named by RANK and the pid); bench/run_bench.sh
# section 13 removes them afterwards.
set -eu
limit=$(( $1 * 1024 * 1024 )); shift
name="ddptrain_bench_${RANK:-0}_$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  dir=/sys/fs/cgroup/$name
  mkdir "$dir"
  echo "$limit" > "$dir/memory.max"
  echo 0 > "$dir/memory.swap.max" 2> /dev/null || true
else
  dir=/sys/fs/cgroup/memory/$name
  mkdir "$dir"
  echo "$limit" > "$dir/memory.limit_in_bytes"
  echo "$limit" > "$dir/memory.memsw.limit_in_bytes" 2> /dev/null || true
fi
echo $$ > "$dir/cgroup.procs"
exec "$@"
