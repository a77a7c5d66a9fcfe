#!/usr/bin/env bash
# ncu of the backward kernel and of FA2's (PyTorch SDPA flash) at one shape (HD=64|128|256, seqlen 2048, hidden
# 2048): reports, details and the top stall-sampled SASS lines under $OUT (default ./out). Needs a GPU and ncu.
set -u
root=$(pwd)
out=${OUT:-$root/out}; mkdir -p $out
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_TESTS=OFF > $out/build.log 2>&1 && ninja -C build-gpu flashattn >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
HD=${HD:-128}
SECS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section InstructionStats --section SourceCounters"
ncu --kernel-name regex:bwd_kernel --launch-count 1 $SECS -o $out/ours -f build-gpu/flashattn run --batch 1 --seqlen 2048 --nheads $((2048/HD)) --head-dim $HD --backward --warmup 0 --repeat 1 > $out/ours_run.log 2>&1
ncu -i $out/ours.ncu-rep --print-details all > $out/ours.txt 2>&1
cat > /tmp/fa2.py <<PY
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
hd=$HD; h=2048//hd
q,k,v=[torch.randn(1,h,2048,hd,device='cuda',dtype=torch.bfloat16,requires_grad=True) for _ in range(3)]
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    o=F.scaled_dot_product_attention(q,k,v); o.backward(torch.randn_like(o))
torch.cuda.synchronize()
PY
ncu --kernel-name regex:flash_bwd_dq_dk_dv --launch-count 1 $SECS -o $out/fa2 -f python3 /tmp/fa2.py > $out/fa2_run.log 2>&1
ncu -i $out/fa2.ncu-rep --print-details all > $out/fa2.txt 2>&1
ncu -i $out/ours.ncu-rep --page source --csv --print-source sass > $out/ours_sass.csv 2>&1
python3 - <<PY
import csv,sys
rows=list(csv.reader(open("$out/ours_sass.csv")))
hdr=None
for i,r in enumerate(rows):
    if 'Source' in r and any('Sampling' in c for c in r): hdr=i; break
if hdr is None: print('no header'); print(rows[:3]); sys.exit()
h=rows[hdr]; print(h)
si=h.index('Source'); ci=[j for j,c in enumerate(h) if c.startswith('Warp Stall Sampling (All')][0]
data=[r for r in rows[hdr+1:] if len(r)==len(h)]
tot=sum(float(r[ci] or 0) for r in data)
print('total samples',tot)
for r in sorted(data,key=lambda r:-float(r[ci] or 0))[:45]:
    print(f"{float(r[ci])/tot*100:5.1f}%  {r[si][:110]}")
PY
