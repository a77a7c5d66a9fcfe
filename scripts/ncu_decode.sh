#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: the Hopper kv-cache kernel on one decode shape, dense and paged,
# side by side, to see where a paged cache's time goes (bench/NOTES.md, "kv-cache: several kv heads a block": page 16
# on grids of one block an SM reads 1.04-1.07x dense on an H100, 1.3-1.4x on an H200, and neither more stages nor more
# kv heads a block changed that). Needs the Python package importable (PYTHONPATH). Writes to $OUT (default ./out):
#   ncu_decode_<layout>.txt   the sections of one attention launch (speed of light, memory workload with its tables,
#                             warp states, launch) for layout "dense" and "page<N>"
#   ncu_decode_summary.txt    the lines that compare: duration, DRAM throughput and bytes, L2 hit rates, stalls
#   NCU_DECODE_SHAPE  "batch nheads_k cache_len" (default "16 8 16384"; 32 query heads, head dim 128, bf16, one query
#                     row, causal)
#   NCU_DECODE_PAGES  page sizes to profile beside the dense cache (default "16 64")
# Clocks are left to the GPU (--clock-control none), as the timings elsewhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
read -r batch nheads_k cache_len <<< "${NCU_DECODE_SHAPE:-16 8 16384}"
driver=/tmp/flashattn_ncu_decode.py
cat > "$driver" <<'EOF'
import sys

import torch

from flashattn import flash_attn_with_kvcache

batch, nheads_k, cache_len, page = (int(a) for a in sys.argv[1:5])
dev, dt = "cuda", torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
q = torch.randn(batch, 1, 32, 128, device=dev, dtype=dt, generator=g)
k = torch.randn(batch, cache_len, nheads_k, 128, device=dev, dtype=dt, generator=g)
v = torch.randn_like(k)
lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=dev)
table = None
if page:  # the dense cache's rows, pages in a random order (as bench/bench_decode.py)
    blocks = batch * cache_len // page
    order = torch.randperm(blocks, device=dev, generator=g)
    placed = order.argsort()  # pool block order[j] holds logical block j
    k = k.reshape(blocks, page, nheads_k, 128)[placed].contiguous()
    v = v.reshape(blocks, page, nheads_k, 128)[placed].contiguous()
    table = order.to(torch.int32).reshape(batch, -1)
for _ in range(4):  # the profiled launch is the last: warm caches of the table and the clocks alike
    flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths, block_table=table, causal=True)
torch.cuda.synchronize()
EOF
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables
          --section WarpStateStats --section LaunchStats --section Occupancy)
summary="$out/ncu_decode_summary.txt"; : > "$summary"
for page in 0 ${NCU_DECODE_PAGES:-16 64}; do
  layout=$([ "$page" = 0 ] && echo dense || echo "page$page")
  rep=/tmp/flashattn_ncu_decode_$layout
  rm -f "$rep.ncu-rep"
  t0=$(date +%s)
  timeout 300 ncu --clock-control none --kernel-name regex:kvcache_sm90 --launch-skip 3 --launch-count 1 \
    "${sections[@]}" -o "$rep" python3 "$driver" "$batch" "$nheads_k" "$cache_len" "$page" \
    > "$out/ncu_decode_run_$layout.log" 2>&1
  echo "ncu $layout: rc $? in $(( $(date +%s) - t0 )) s"
  ncu --import "$rep.ncu-rep" --page details > "$out/ncu_decode_$layout.txt" 2>&1
  { echo "== $layout (batch $batch, $nheads_k kv heads, cache $cache_len)"
    grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit Rate|L2 Hit Rate|Mem Busy|Max Bandwidth|Grid Size|Registers Per Thread|Achieved Occupancy|Warp Cycles Per Issued Instruction)" \
      "$out/ncu_decode_$layout.txt"
  } >> "$summary"
done
cat "$summary"
