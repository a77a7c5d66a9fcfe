#!/usr/bin/env bash
# scratch: ncu's warp states and per-instruction stall samples of 16 x 8 x 4k (page 16, random; folds on and off;
# dense) with this tree's library (0d7853e's kernel) and fa2a93c's (flat_src, untracked; 1-4 us slower there)
set -u
root=$(pwd); L=$OUT/logs; mkdir -p $L
trap 'cd $OUT && tar czf logs.tar.gz logs && rm -rf logs' EXIT
export PYTHONUNBUFFERED=1
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a $L/steps.txt; }
( FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/cur . > $L/pip_cur.log 2>&1; el "pip cur rc $?" ) &
( cd flat_src && FLASHATTN_CUDA_ARCHS=90a CMAKE_BUILD_PARALLEL_LEVEL=8 python3 -m pip install --no-build-isolation --no-deps --target /tmp/flat . > $L/pip_flat.log 2>&1; el "pip flat rc $?" ) &
wait; el built
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1); echo $NCU > $L/ncu_which.txt; $NCU --version >> $L/ncu_which.txt 2>&1
N="$NCU --clock-control none -k regex:kvcache_sm90_kernel --launch-skip 2 --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight --section LaunchStats --section Occupancy"
for lib in cur flat; do
  for c in "p16:16:8:4096:16:1" "nofold:16:8:4096:16:0" "dense:16:8:4096:0:1"; do
    IFS=: read tag b h n pg fold <<< "$c"
    FLASHATTN_KVC_K_FOLD=$fold FLASHATTN_KVC_V_FOLD=$fold PYTHONPATH=/tmp/$lib timeout 90 $N -o $L/${lib}_$tag python3 $root/dev_ncu.py $b:$h:$n:$pg random > $L/${lib}_$tag.log 2>&1; el "$lib $tag rc $?"
    timeout 60 $NCU --import $L/${lib}_$tag.ncu-rep --page details --csv > $L/${lib}_${tag}_details.csv 2>&1; el "details rc $?"
    timeout 60 $NCU --import $L/${lib}_$tag.ncu-rep --page source --csv --print-source sass > $L/${lib}_${tag}_source.csv 2>&1; el "source rc $?"
    gzip -f $L/${lib}_${tag}_source.csv
  done
done
el done
