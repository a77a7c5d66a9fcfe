#!/usr/bin/env bash
# A/B of kv-cache decode variants, on a machine with a GPU. The decode benchmark (bench/bench_decode.py) runs through
# the Python package, so each variant is the tree with one patch applied, pip-installed into a folder of its own;
# the benchmark then runs on each installation in turn, A B C A B C ..., each run in its own process.
#   DECODE_AB_PATCHES  patch files (relative to the repository root), space separated; the tree itself is "tree";
#                      "a.patch+b.patch" is one variant with both applied in that order (named a+b)
#   DECODE_AB_TESTS    pytest paths (relative to the repository root, space separated, e.g.
#                      "tests/python/test_kvcache.py") run on each patch's installation before any timing; a variant
#                      whose tests fail is left out of the timings (DECODE_AB_TESTS_TIMEOUT: seconds each, 300)
#   DECODE_AB_ENV_VARIANTS  variants of an installation under environment variables, space separated, each
#                      "name[@install]:VAR=value[,VAR=value...]": the tree's installation, or with @install a patch's
#                      (its file name without .patch) (e.g. "nogroup:FLASHATTN_KVC_HEAD_GROUP=1")
#   DECODE_AB_ARGS     arguments for bench/bench_decode.py (default "--quick")
#   DECODE_AB_REPEAT   runs per variant (default 2)
#   DECODE_AB_WORK     the working folder (default a fresh one under /tmp): variant v is installed in site_v there
#                      (an installation already there is used as it is)
# Writes $OUT/decode_ab.tar.gz (each run's log and JSON) and $OUT/decode_ab_summary.txt (each run's table);
# bench/decode_ab_compare.py, run in the extracted archive, sets the variants side by side.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/out}; mkdir -p "$out"
work=${DECODE_AB_WORK:-$(mktemp -d /tmp/flashattn-decode-ab.XXXX)}; mkdir -p "$work"
summary="$out/decode_ab_summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
trap '(cd "$work" && tar czf "$out/decode_ab.tar.gz" --exclude="site_*" --exclude="src_*" .)' EXIT

variants=(tree)
declare -A src_of=([tree]=$root) env_of=([tree]="")
for spec in ${DECODE_AB_PATCHES:-}; do
  name=""; for patch in ${spec//+/ }; do name+=${name:++}$(basename "$patch" .patch); done
  src="$work/src_$name"; mkdir -p "$src"
  # The tree's files (tracked and untracked, not ignored), without build folders.
  (cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$src"
  applied=1
  for patch in ${spec//+/ }; do
    (cd "$src" && patch -p1 -s < "$root/$patch") || { note "patch $patch does not apply ($name)"; applied=0; break; }
  done
  [ "$applied" = 1 ] || continue
  variants+=("$name"); src_of[$name]=$src; env_of[$name]=""
done
installed=("${variants[@]}")

# The installations in parallel, the cores shared among them.
jobs=$(( $(nproc) / ${#variants[@]} )); [ "$jobs" -ge 1 ] || jobs=1
t0=$(date +%s)
for v in "${installed[@]}"; do
  [ -d "$work/site_$v/flashattn" ] && continue
  FLASHATTN_CUDA_ARCHS=${FLASHATTN_CUDA_ARCHS:-90a} CMAKE_BUILD_PARALLEL_LEVEL=$jobs python3 -m pip install \
    --no-build-isolation --no-deps --target "$work/site_$v" "${src_of[$v]}" > "$work/pip_$v.log" 2>&1 &
done
wait
for v in "${installed[@]}"; do
  [ -d "$work/site_$v/flashattn" ] || { note "install of $v FAILED"; tail -20 "$work/pip_$v.log"; exit 1; }
done
note "installs (${installed[*]}): $(( $(date +%s) - t0 )) s"
declare -A site_of
for v in "${installed[@]}"; do site_of[$v]=$work/site_$v; done
if [ -n "${DECODE_AB_TESTS:-}" ]; then  # the patches' installations tested first; failing ones are not timed
  tests=(); for t in $DECODE_AB_TESTS; do tests+=("$root/$t"); done
  kept=()
  for v in "${variants[@]}"; do
    if [ "$v" != tree ]; then
      (cd /tmp && PYTHONPATH="${site_of[$v]}" timeout "${DECODE_AB_TESTS_TIMEOUT:-300}" python3 -m pytest -q -x \
         -p no:cacheprovider --rootdir "$root" "${tests[@]}") > "$work/tests_$v.log" 2>&1
      rc=$?
      note "tests on $v: rc $rc, $(tail -1 "$work/tests_$v.log")"
      [ "$rc" -eq 0 ] || continue
    fi
    kept+=("$v")
  done
  variants=("${kept[@]}")
fi
for spec in ${DECODE_AB_ENV_VARIANTS:-}; do  # an installation (the tree's by default), under its variables
  head=${spec%%:*}; name=${head%%@*}; install=tree
  [ "$head" != "$name" ] && install=${head#*@}
  [ -d "$work/site_$install/flashattn" ] || { note "variant $name: no installation $install"; continue; }
  variants+=("$name"); site_of[$name]=$work/site_$install; env_of[$name]=$(echo "${spec#*:}" | tr ',' ' ')
done

for rep in $(seq 1 "${DECODE_AB_REPEAT:-2}"); do
  for v in "${variants[@]}"; do
    mkdir -p "$work/run_${v}_$rep"
    (cd /tmp && env ${env_of[$v]} PYTHONPATH="${site_of[$v]}" timeout "${DECODE_AB_TIMEOUT:-200}" python3 \
       "$root/bench/bench_decode.py" --out "$work/run_${v}_$rep" ${DECODE_AB_ARGS:---quick}) > "$work/run_${v}_$rep.log" 2>&1
    note "== $v${env_of[$v]:+ (${env_of[$v]})} #$rep: rc $?"
    grep -v '^wrote' "$work/run_${v}_$rep.log" | tee -a "$summary"
  done
done
