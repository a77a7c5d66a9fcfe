#!/usr/bin/env bash
# Nsight Compute profiles of flashattn's kernels beside the peers' at the shapes where the gaps are, in one call.
# Needs a GPU and ncu. Writes under $OUT (default ./out) one archive, profiles.tar.gz, holding for each target:
#   NAME.txt        ncu's details (speed of light, pipes, warp stalls, scheduler, occupancy, launch, instructions)
#   NAME_top.txt    the SASS instructions with the most stall samples, and the totals by stall reason (ours only)
#   NAME_sass.csv   every SASS instruction with its samples and executed count (ours only)
# and profile_summary.txt. PROFILE_TARGETS picks targets by name (default: all of them):
#   fwd90        the Hopper forward, hd128 seqlen 8k, bf16 (the default schedule)
#   fwd90_pers   the same, persistent (FLASHATTN_SM90_PERSISTENT=1)
#   fwd90_n128   the same, one block a tile with the persistent kernel's 128-key tiles (FLASHATTN_SM90_BLOCK_N=128)
#   fwd90_causal / fwd90_pers_causal   hd128 seqlen 8k causal, one block a tile / persistent
#   fwd90_short  the Hopper forward, hd128 seqlen 512, batch 32
#   cudnn_fwd    PyTorch SDPA's cuDNN forward at hd128 8k and 512 (details only)
#   bwd80        the Ampere-class backward, hd128 seqlen 2k; and FA2's backward (PyTorch SDPA flash), details only
#   bwd80_hd256  the same at head dim 256 (FA2's with its stall-sampled lines too)
#   bwd80_hd64   the same at head dim 64 (likewise)
#   fwd80_hd256  the Ampere-class forward at hd256 (batch 2, seqlen 8k) and FA2's forward, both stall-sampled
#   kvc          the kv-cache decode kernel and its combine: batch 1 cache 4k, and batch 64 cache 16k (nheads 32/8)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
work=$(mktemp -d /tmp/flashattn-prof.XXXX)
build=${FLASHATTN_BUILD_DIR:-$root/build-gpu}
targets=${PROFILE_TARGETS:-"fwd90 fwd90_pers fwd90_short cudnn_fwd bwd80 kvc"}
summary="$out/profile_summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
pack() { (cd "$work" && tar czf "$out/profiles.tar.gz" . ) ; }
trap pack EXIT
want() { [[ " $targets " == *" $1 "* ]]; }

SECS=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
      --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section InstructionStats
      --section SourceCounters)

t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA_ARCHS=90a \
  -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_PYTHON=OFF > "$work/build.log" 2>&1 &&
  ninja -C "$build" libflashattn.so >> "$work/build.log" 2>&1 || ninja -C "$build" >> "$work/build.log" 2>&1 ||
  { note "build FAILED"; tail -30 "$work/build.log"; exit 1; }
note "build: $(( $(date +%s) - t0 )) s"
# One shape through the C ABI (bench_sweep.py's bindings): ours [fwd|bwd] batch seqlen headdim reps [causal]
cat > "$work/ours.py" <<'PY'
import ctypes, sys, torch
sys.path.insert(0, sys.argv[1])
import bench_sweep as bs
fa = bs.Flashattn(sys.argv[2])
what, b, s, d, reps = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
causal = len(sys.argv) > 8 and sys.argv[8] == "1"
h = 2048 // d
q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
out, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda", dtype=torch.float32)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
fwd = fa.make_fwd(q, k, v, out, lse, causal)
bwd, ws = fa.make_bwd(dout, q, k, v, out, lse, dq, dk, dv, causal)
for _ in range(reps):
    fa.check(fa.lib.flashattn_forward(ctypes.byref(fwd)), "fwd")
    if what == "bwd": fa.check(fa.lib.flashattn_backward(ctypes.byref(bwd)), "bwd")
torch.cuda.synchronize()
PY
OURS=(python3 "$work/ours.py" "$root/bench" "$build/libflashattn.so")

# The stall-sampled SASS lines of one report, most first, and the samples by reason.
top_lines() {  # report csv-out top-out
  ncu -i "$1" --page source --csv --print-source sass > "$2" 2>/dev/null
  python3 - "$2" > "$3" 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if 'Source' in r and any('Sampling' in c for c in r)), None)
if hdr is None:
    print('no source table'); print(rows[:3]); sys.exit()
h = rows[hdr]
si = h.index('Source')
ci = next(j for j, c in enumerate(h) if c.startswith('Warp Stall Sampling (All'))
ei = next((j for j, c in enumerate(h) if c.startswith('Instructions Executed')), None)
data = [r for r in rows[hdr + 1:] if len(r) == len(h)]
num = lambda s: float(s.replace(',', '') or 0)
tot = sum(num(r[ci]) for r in data) or 1
print('columns:', h)
print('instructions', len(data), 'samples', tot)
for r in sorted(data, key=lambda r: -num(r[ci]))[:60]:
    print(f"{num(r[ci]) / tot * 100:5.1f}%  exec {r[ei] if ei is not None else '?':>10}  {r[si][:120]}")
# samples by stall reason, over the whole kernel
reasons = [(j, c) for j, c in enumerate(h) if c.startswith('stall_') or c.startswith('Warp Stall Sampling (All Samples):')]
for j, c in reasons:
    s = sum(num(r[j]) for r in data)
    if s: print(f"{c:60s} {s / tot * 100:5.1f}%")
PY
}

profile() {  # name kernel-regex launch-skip ours(1|0) command...
  local name=$1 regex=$2 skip=$3 ours=$4; shift 4
  local t=$(date +%s)
  timeout 240 ncu --clock-control none "${SECS[@]}" --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 \
    -o "$work/$name" -f "$@" > "$work/${name}_run.log" 2>&1
  local rc=$?
  ncu -i "$work/$name.ncu-rep" --print-details all > "$work/$name.txt" 2>&1
  [ "$ours" = 1 ] && top_lines "$work/$name.ncu-rep" "$work/${name}_sass.csv" "$work/${name}_top.txt"
  rm -f "$work/$name.ncu-rep"
  note "$name: rc $rc, $(( $(date +%s) - t )) s; $(grep -m1 -E 'Duration' "$work/$name.txt" | tr -s ' ')"
}

want fwd90 && profile fwd90 fwd_sm90 1 1 "${OURS[@]}" fwd 2 8192 128 3
want fwd90_pers && FLASHATTN_SM90_PERSISTENT=1 profile fwd90_pers fwd_sm90 1 1 "${OURS[@]}" fwd 2 8192 128 3
want fwd90_n128 && FLASHATTN_SM90_BLOCK_N=128 profile fwd90_n128 fwd_sm90 1 1 "${OURS[@]}" fwd 2 8192 128 3
want fwd90_causal && profile fwd90_causal fwd_sm90 1 1 "${OURS[@]}" fwd 2 8192 128 3 1
want fwd90_pers_causal && FLASHATTN_SM90_PERSISTENT=1 profile fwd90_pers_causal fwd_sm90 1 1 "${OURS[@]}" fwd 2 8192 128 3 1
want fwd90_short && profile fwd90_short fwd_sm90 1 1 "${OURS[@]}" fwd 32 512 128 3

if want cudnn_fwd; then
  cat > "$work/cudnn_fwd.py" <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
b, s = int(sys.argv[1]), int(sys.argv[2])
q, k, v = [torch.randn(b, 16, s, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3)]
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3): F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
  profile cudnn_fwd_8k 'cudnn|fmha|sm90|flash' 1 0 python3 "$work/cudnn_fwd.py" 2 8192
  profile cudnn_fwd_512 'cudnn|fmha|sm90|flash' 1 0 python3 "$work/cudnn_fwd.py" 32 512
fi

# FA2's backward (PyTorch SDPA flash) at batch 1, seqlen 2048, head dim $1 (2048 / head dim heads).
cat > "$work/fa2_bwd.py" <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
d = int(sys.argv[1])
q, k, v = [torch.randn(1, 2048 // d, 2048, d, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    o = F.scaled_dot_product_attention(q, k, v); o.backward(torch.randn_like(o))
torch.cuda.synchronize()
PY
if want bwd80; then
  profile bwd80 bwd_kernel 1 1 "${OURS[@]}" bwd 1 2048 128 3
  profile fa2_bwd flash_bwd_dq_dk_dv 0 0 python3 "$work/fa2_bwd.py" 128
fi
for d in 256 64; do
  if want bwd80_hd$d; then
    profile bwd80_hd$d bwd_kernel 1 1 "${OURS[@]}" bwd 1 2048 $d 3
    profile fa2_bwd_hd$d flash_bwd_dq_dk_dv 0 1 python3 "$work/fa2_bwd.py" $d
  fi
done

# The Ampere-class forward (FLASHATTN_FORWARD_PATH=sm80) at head dim 256, batch 2, seqlen 8k (8 heads), and FA2's.
if want fwd80_hd256; then
  cat > "$work/fa2_fwd.py" <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
d, b, s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
q, k, v = [torch.randn(b, 2048 // d, s, d, device='cuda', dtype=torch.bfloat16) for _ in range(3)]
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(3): F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
  FLASHATTN_FORWARD_PATH=sm80 profile fwd80_hd256 fwd_kernel 1 1 "${OURS[@]}" fwd 2 8192 256 3
  profile fa2_fwd_hd256 flash_fwd_kernel 1 1 python3 "$work/fa2_fwd.py" 256 2 8192
fi

if want kvc; then
  site=${PROFILE_SITE:-/tmp/flashattn-prof-site}; t=$(date +%s)
  # An installation already there (gpu_check.sh's, PROFILE_SITE) is used as it is.
  if [ -d "$site/flashattn" ] || { rm -rf "$site"; FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation \
       --no-deps --target "$site" "$root" > "$work/pip.log" 2>&1; }; then
    note "pip install: $(( $(date +%s) - t )) s"
    for cfg in "1 4096" "64 16384"; do
      set -- $cfg
      cat > "$work/kvc.py" <<PY
import torch, flashattn
b, n = $1, $2
q = torch.randn(b, 1, 32, 128, device='cuda', dtype=torch.bfloat16)
kc, vc = [torch.randn(b, n, 8, 128, device='cuda', dtype=torch.bfloat16) for _ in range(2)]
lens = torch.full((b,), n, dtype=torch.int32, device='cuda')
for _ in range(4): flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True)
torch.cuda.synchronize()
PY
      (cd /tmp && PYTHONPATH="$site" profile "kvc_b$1" 'kvcache_kernel' 2 1 python3 "$work/kvc.py")
      [ "$1" = 1 ] && (cd /tmp && PYTHONPATH="$site" profile "kvc_b$1_combine" 'kvcache_combine' 2 1 python3 "$work/kvc.py")
    done
  else
    note "pip install FAILED"; tail -20 "$work/pip.log"
  fi
fi
command -v cuobjdump > /dev/null && cuobjdump -sass "$build/CMakeFiles/flashattn_objects.dir/src/kernels/sm90/fwd_launch.cu.o" \
  2>/dev/null | gzip > "$work/fwd_sm90_sass.txt.gz"
cat "$summary"
