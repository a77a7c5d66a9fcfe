#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: the DRAM and L2 traffic of one decode call after the benchmark's
# L2 flush, with the kv-cache kernel's K/V copies marked evict-first in L2 and without (FLASHATTN_KVC_READ_ONCE=1 / 0),
# and of SDPA's cuDNN backend on the contiguous cache. Why: evict-first copies made 67 MB calls 4-13% faster and
# 268 MB - 1 GB calls 1-4% slower (bench/NOTES.md, "kv-cache: evict-first copies"), and the flush's dirty lines, whose
# writes-back the hint was meant to keep out of the call, are the same 50 MB at any size.
# Unlike scripts/ncu_decode.sh, Nsight Compute leaves the caches alone (--cache-control none) and the driver writes a
# 256 MiB buffer right before the profiled call, as bench/bench_decode.py's flush does; the application is replayed
# for each metric pass, so each pass starts from that state. Needs the Python package importable (PYTHONPATH).
#   NCU_L2_SHAPES  shapes "batch nheads_k cache_len", separated by ";" (default "16 8 1024;16 8 4096;16 8 16384";
#                  32 query heads, head dim 128, bf16, one query row, dense cache, causal)
#   NCU_L2_VARIANTS  default "normal evict_first cudnn"; other names are FLASHATTN_KVC_L2_POLICY values
# Writes $OUT/ncu_l2_policy.txt (default ./out): per shape and variant, the kernels' durations and traffic; the
# profiler's CSV for each under $OUT/ncu_l2_logs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
driver="$root/bench/ncu_decode_call.py"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum
metrics+=,lts__t_sector_op_read_hit_rate.pct,lts__t_sectors_op_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
report="$out/ncu_l2_policy.txt"; : > "$report"
IFS=';' read -r -a shapes <<< "${NCU_L2_SHAPES:-16 8 1024;16 8 4096;16 8 16384}"
for shape in "${shapes[@]}"; do
  read -r batch nheads_k cache_len <<< "$shape"
  for variant in ${NCU_L2_VARIANTS:-normal evict_first cudnn}; do
    case $variant in
      normal) envs=(FLASHATTN_KVC_READ_ONCE=0); peer="";;
      evict_first) envs=(FLASHATTN_KVC_READ_ONCE=1); peer="";;
      cudnn) envs=(); peer=cudnn;;
      *) envs=("FLASHATTN_KVC_L2_POLICY=$variant"); peer="";;  # bench/patches/kvc_l2_policy_kinds.patch
    esac
    echo "== batch $batch kv heads $nheads_k cache $cache_len: $variant" >> "$report"
    env "${envs[@]}" timeout 200 ncu --clock-control none --cache-control none --replay-mode application \
      --nvtx --nvtx-include "profiled/" --metrics "$metrics" --csv \
      python3 "$driver" "$batch" "$nheads_k" "$cache_len" 0 $peer --flush > /tmp/ncu_l2_run.log 2>&1
    echo "rc $?" >> "$report"
    mkdir -p "$out/ncu_l2_logs"
    cp /tmp/ncu_l2_run.log "$out/ncu_l2_logs/b${batch}_hk${nheads_k}_L${cache_len}_$variant.csv"
    python3 -c 'import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next((i for i, line in enumerate(lines) if line.startswith("\"ID\"")), len(lines))
for row in csv.DictReader(lines[start:]):
    print(row["Kernel Name"][:40], "|", row["Metric Name"], row["Metric Value"], row["Metric Unit"])' \
      /tmp/ncu_l2_run.log >> "$report"
  done
done
cat "$report"
