#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: one launch of the Hopper forward profiled with its per-instruction
# warp-stall samples, to see what a main-loop step waits on (bench/NOTES_sm90.md). Builds libflashattn.so (all cores)
# unless FLASHATTN_LIB names one; writes to $OUT (default ./out):
#   ncu_fwd_details.txt   the sections (speed of light, compute and memory workload, warp states, scheduler, ...)
#   ncu_fwd_source.csv.gz every SASS instruction of the kernel with its samples, by stall reason
#   ncu_fwd_top.txt       scripts/ncu_top_stalls.py's summary of that CSV: stall reasons, hottest instructions
#   NCU_SHAPE   bench/bench_sweep.py arguments naming the shape (default "--hdims 128 --seqlens 8192"): the first
#               forward launched after NCU_SKIP (default 2) warm-up launches is profiled (non-causal comes first)
#   NCU_AB_ARGS  instead, bench/bench_ab.py with these arguments (one shape, e.g. "--hdims 128 --seqlens 512 --causal
#               yes"), the library as its only variant and no anchor: a causal shape without the non-causal before it
# Clocks are left to the GPU (--clock-control none), as the timings elsewhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
lib=${FLASHATTN_LIB:-}
if [ -z "$lib" ]; then
  build=${FLASHATTN_BUILD_DIR:-$root/build-gpu}
  t0=$(date +%s)
  { [ -f "$build/build.ninja" ] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFLASHATTN_CUDA_ARCHS="${FLASHATTN_CUDA_ARCHS:-90a}" -DFLASHATTN_BUILD_PYTHON=OFF; } > "$out/ncu_build.log" 2>&1 &&
    ninja -C "$build" -j "$(nproc)" libflashattn.so >> "$out/ncu_build.log" 2>&1 || { tail -30 "$out/ncu_build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  lib=$build/libflashattn.so
fi
rep=/tmp/flashattn_fwd_ncu
rm -f "$rep.ncu-rep"
t0=$(date +%s)
timeout 400 ncu --clock-control none --kernel-name regex:fwd_sm90 --launch-skip "${NCU_SKIP:-2}" --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --section InstructionStats --section SourceCounters -o "$rep" \
  $(if [ -n "${NCU_AB_ARGS:-}" ]; then
      echo python3 "$root/bench/bench_ab.py" --variant "tree=$lib" --anchor none --rounds 2 $NCU_AB_ARGS
    else
      echo python3 "$root/bench/bench_sweep.py" --lib "$lib" --forward-only ${NCU_SHAPE:---hdims 128 --seqlens 8192}
    fi) > "$out/ncu_fwd_run.log" 2>&1
echo "ncu: rc $? in $(( $(date +%s) - t0 )) s"
ncu --import "$rep.ncu-rep" --page details > "$out/ncu_fwd_details.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > /tmp/ncu_fwd_source.csv 2>&1
python3 "$root/scripts/ncu_top_stalls.py" /tmp/ncu_fwd_source.csv > "$out/ncu_fwd_top.txt" 2>&1
gzip -c /tmp/ncu_fwd_source.csv > "$out/ncu_fwd_source.csv.gz"
head -60 "$out/ncu_fwd_top.txt"
