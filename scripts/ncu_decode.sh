#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: one decode call under the profiler, for each of several shapes
# and layouts side by side: the Hopper kv-cache kernel on a dense cache and on paged ones, and PyTorch SDPA's cuDNN
# backend on the contiguous cache (the peer), to see where a call's time goes (bench/NOTES.md, "kv-cache: several kv
# heads a block" and "what one block an SM waits on"). Needs the Python package importable (PYTHONPATH). Writes to
# $OUT (default ./out):
#   ncu_decode_summary.txt  the lines that compare: duration, DRAM throughput, L2 hit rates, stalls
#   ncu_decode.tar.gz       per shape and layout: the sections of the profiled launches (<shape>_<layout>.txt), for
#                           flashattn's kernel its warps' stall samples by reason and instruction (_top.txt) and the
#                           source page as CSV (_source.csv), and Nsight Compute's console (run_<shape>_<layout>.log)
#   NCU_DECODE_SHAPES  shapes "batch nheads_k cache_len", separated by ";" (default "16 8 16384;16 8 1024"; 32 query
#                      heads, head dim 128, bf16, one query row, causal)
#   NCU_DECODE_PAGES   page sizes to profile beside the dense cache (default "16")
#   NCU_DECODE_CUDNN   1 (default) to profile SDPA's cuDNN backend too
#   NCU_DECODE_PAGE_ORDER  the block tables' order (bench/bench_decode.py's --page-order; default random)
# Every kernel of the profiled call is profiled (an NVTX range marks it), after three unprofiled calls; the caches are
# flushed before each profiled kernel (Nsight Compute's default), as the benchmark flushes L2 before each call. Clocks
# are left to the GPU (--clock-control none), as the timings elsewhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
detail=/tmp/flashattn_ncu_decode; rm -rf "$detail"; mkdir -p "$detail"
driver="$root/bench/ncu_decode_call.py"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
          --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy
          --section SourceCounters)
summary="$out/ncu_decode_summary.txt"; : > "$summary"
metrics="Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit Rate|L2 Hit Rate|Mem Busy|Max Bandwidth|Grid Size"
metrics+="|Block Size|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction|SM Frequency"
metrics+="|No Eligible|Issued Warp Per Scheduler"
IFS=';' read -r -a shapes <<< "${NCU_DECODE_SHAPES:-16 8 16384;16 8 1024}"
for shape in "${shapes[@]}"; do
  read -r batch nheads_k cache_len <<< "$shape"
  tag="b${batch}_hk${nheads_k}_L${cache_len}"
  layouts=(0 ${NCU_DECODE_PAGES:-16}); [ "${NCU_DECODE_CUDNN:-1}" = 1 ] && layouts+=(cudnn)
  for layout in "${layouts[@]}"; do
    case $layout in
      0) name=dense; page=0; peer="";;
      cudnn) name=cudnn; page=0; peer=cudnn;;
      *) name=page$layout; page=$layout; peer="";;
    esac
    rep=/tmp/flashattn_ncu_decode_${tag}_$name
    rm -f "$rep.ncu-rep"
    t0=$(date +%s)
    timeout 300 ncu --clock-control none --nvtx --nvtx-include "profiled/" "${sections[@]}" -o "$rep" \
      python3 "$driver" "$batch" "$nheads_k" "$cache_len" "$page" $peer > "$detail/run_${tag}_$name.log" 2>&1
    echo "ncu $tag $name: rc $? in $(( $(date +%s) - t0 )) s"
    ncu --import "$rep.ncu-rep" --page details > "$detail/${tag}_$name.txt" 2>&1
    if [ -z "$peer" ]; then
      ncu --import "$rep.ncu-rep" --page source --csv --print-source sass --kernel-name regex:kvcache_sm90 \
        > "$detail/${tag}_${name}_source.csv" 2>&1
      python3 "$root/scripts/ncu_top_stalls.py" "$detail/${tag}_${name}_source.csv" --top 30 \
        > "$detail/${tag}_${name}_top.txt" 2>&1
    fi
    { echo "== $tag $name"
      grep -E "^  [a-zA-Z_].*\(|^\s+($metrics)" "$detail/${tag}_$name.txt"
    } >> "$summary"
  done
done
(cd "$detail" && tar czf "$out/ncu_decode.tar.gz" .)
cat "$summary"
