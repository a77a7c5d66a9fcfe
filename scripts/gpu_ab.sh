#!/usr/bin/env bash
# A/B runs of kernel changes in one call on a machine with a GPU: builds libflashattn.so from the tree as it is and
# runs the sweep on it; then, for each patch named in AB_PATCHES (paths relative to the repository root), applies
# the patch, rebuilds (only the translation units it touches), runs the same sweep, and reverts the patch. Each
# sweep measures the peers (PyTorch SDPA's flash and cuDNN) in its own process, so ratios compare across variants.
#   AB_PATCHES     patch files, space separated (default: none, the tree alone)
#   AB_SWEEP_ARGS  arguments for bench/bench_sweep.py (default "--quick")
#   AB_ENV_VARIANTS  variants of the tree's library under environment variables, space separated, each
#                  "name:VAR=value[,VAR=value...]" (e.g. "spec3:FLASHATTN_SM90_SCHEDULE=specialised3"), or of a
#                  patch's library: "name@patch:VAR=value" (patch: the patch file's name without .patch)
#   AB_REPEAT      sweeps per variant, interleaved A B A B ... (default 1)
#   AB_SWEEP_TIMEOUT  seconds a sweep may take (default 300)
#   AB_INTERLEAVED_ARGS  instead of whole sweeps one after another, one run of bench/bench_ab.py with every variant
#                  interleaved in the same process, with these arguments (e.g. "--hdims 128 --causal yes")
# Writes $OUT/ab.tar.gz (each sweep's log and JSON) and $OUT/ab_summary.txt (each sweep's geometric means).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
build=${FLASHATTN_BUILD_DIR:-$root/build-gpu}
work=$(mktemp -d /tmp/flashattn-ab.XXXX)
summary="$out/ab_summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
trap '(cd "$work" && tar czf "$out/ab.tar.gz" --exclude="*.so" .)' EXIT

build_lib() {  # into $work/lib_$1.so
  local t0=$(date +%s)
  { [ -f "$build/build.ninja" ] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFLASHATTN_CUDA_ARCHS="${FLASHATTN_CUDA_ARCHS:-90a}" -DFLASHATTN_BUILD_PYTHON=OFF; } >> "$work/build.log" 2>&1 &&
    ninja -C "$build" libflashattn.so >> "$work/build.log" 2>&1 || { note "build of $1 FAILED"; tail -30 "$work/build.log"; return 1; }
  cp "$build/libflashattn.so" "$work/lib_$1.so"
  note "build $1: $(( $(date +%s) - t0 )) s"
}

# The machine's own state first: a slow GPU makes every variant slow and the ratios noise.
python3 "$root/scripts/gpu_sanity.py" 2>&1 | tee -a "$summary"

variants=(base)
declare -A lib_of=([base]=base) env_of=([base]="")
build_lib base || exit 1
for spec in ${AB_ENV_VARIANTS:-}; do
  name=${spec%%:*}; lib=base
  if [[ $name == *@* ]]; then lib=${name#*@}; name=${name%%@*}; fi
  variants+=("$name"); lib_of[$name]=$lib; env_of[$name]=$(echo "${spec#*:}" | tr ',' ' ')
done
for patch in ${AB_PATCHES:-}; do
  name=$(basename "$patch" .patch)
  git -C "$root" apply "$root/$patch" || { note "patch $patch does not apply"; continue; }
  build_lib "$name" && variants+=("$name") && lib_of[$name]=$name && env_of[$name]=""
  git -C "$root" apply -R "$root/$patch"
done
ninja -C "$build" libflashattn.so >> "$work/build.log" 2>&1  # the tree as it was

if [ -n "${AB_INTERLEAVED_ARGS:-}" ]; then  # every variant in one process, interleaved (bench/bench_ab.py)
  args=()
  for v in "${variants[@]}"; do
    args+=(--variant "$v=$work/lib_${lib_of[$v]}.so${env_of[$v]:+:$(echo ${env_of[$v]} | tr ' ' ',')}")
  done
  t0=$(date +%s)
  (cd "$root/bench" && timeout "${AB_SWEEP_TIMEOUT:-300}" python3 bench_ab.py "${args[@]}" $AB_INTERLEAVED_ARGS \
     --json "$work/interleaved.json") > "$work/interleaved.log" 2>&1
  note "interleaved A/B (${variants[*]}): rc $? in $(( $(date +%s) - t0 )) s"
  cat "$work/interleaved.log" | tee -a "$summary"
  python3 "$root/scripts/gpu_sanity.py" 2>&1 | tee -a "$summary"  # and after: did it change under the run?
  exit 0
fi

for rep in $(seq 1 "${AB_REPEAT:-1}"); do
  for v in "${variants[@]}"; do
    t0=$(date +%s)
    env ${env_of[$v]} timeout "${AB_SWEEP_TIMEOUT:-300}" python3 "$root/bench/bench_sweep.py" \
      --lib "$work/lib_${lib_of[$v]}.so" --json "$work/sweep_${v}_$rep.json" \
      ${AB_SWEEP_ARGS:---quick} > "$work/sweep_${v}_$rep.log" 2>&1
    note "sweep $v #$rep (${env_of[$v]:-no variables}): rc $? in $(( $(date +%s) - t0 )) s"
    grep -E 'geometric' "$work/sweep_${v}_$rep.log" | tee -a "$summary"
  done
done
