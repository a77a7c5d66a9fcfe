#!/usr/bin/env bash
# scratch: the copy probe with a sequence's kv heads paced through global memory (modes 22-26)
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/env.txt 2>&1
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc -Iinclude bench/probe_kv_stream.cu -o /tmp/probe -lcuda > $L/nvcc.log 2>&1; el "nvcc rc $?"
for round in 1 2 3; do
  for cfg in "16 4096 8 0 1" "4 4096 32 0 1" "16 16384 8 0 2" "4 65536 8 0 8" "64 1024 8 0 1" "16 4096 8 1 1"; do
    timeout 60 /tmp/probe $cfg > "$L/probe_${round}_${cfg// /_}.txt" 2>&1; el "probe $round $cfg rc $?"
  done
done
el done
