#!/usr/bin/env bash
# Install llama-cpp-python (the CPU backend of the target: the GGUFs' own quantized kernels) into
# the Python given as $1. The registry has no binary wheel, so it is built from source once.
#
# By default without llamafile's sgemm (-DGGML_LLAMAFILE=OFF): a verification pass over k tokens then
# gives bitwise the logits of k one-token steps (README, "The exactness contract").
# OPSCOPILOT_LLAMAFILE=gated turns sgemm on for prefill-sized calls only: scripts/patches/llama-cpp-sgemm-min-rows.patch
# gates it to calls of 8 rows or more, so verification passes (k <= 7, the engine's MAX_PASS_ROWS) keep
# ggml's own kernels. Greedy stays exact either way, but prefill's attention sums change, and with them
# some answers (7 of 30 on site2); it paid nothing measurable on an AMD EPYC (evals/results/README.md,
# "Issue 44 (items 2, 6, 7)"), so it is opt-in for CPUs where sgemm is faster (a stock build's prefill
# was 1.14x on an Intel Xeon with AVX-512).
# Always patched with scripts/patches/llama-cpp-kquant-columns.patch: a verification pass of 2-7 rows against a
# Q4_K/Q6_K weight unpacks each weight row once for all its rows (each row's sum bitwise the one-row kernel's) and
# takes row chunks as long as a one-token step's; a 2-row pass then costs 1.3 one-token steps instead of 2.1 on
# 2 AMD EPYC cores (evals/results/README.md, "Verification passes of 2–7 rows"). x86 with AVX2 only; elsewhere
# it changes nothing.
# Always patched with scripts/patches/llama-cpp-lazy-zero-buffers.patch: a CPU buffer llama.cpp allocates and zeroes
# (the KV cache: 10 sequences x 2,048 cells, 560 MiB for the 1.5B) is zeroed by handing its pages back (Linux
# MADV_DONTNEED, which leaves them reading as zeros) instead of writing every page, so the KV cells cost memory
# only once used: serving RSS 2.70 -> 2.13 GB after two questions (evals/results/issue44/memory/README.md).
# Always patched with scripts/patches/llama-cpp-flash-attn-rows.patch: flash attention attends every query row alone
# over fixed 32-cell tiles (stock llama.cpp splits a lone row's KV across threads from 512 cells and tiles 64+ rows,
# each summing differently), so with it on a verification pass stays bitwise the one-token steps; values are then
# stored a cell per row and a sequence's KV becomes resident as it fills. The loader turns flash attention on where
# llama.cpp's system info lists FA_ROWWISE (evals/results/README.md, "Row-wise flash attention").
# Native CPU code (-DGGML_NATIVE=ON), so the wheel is kept per CPU feature set under $OPSCOPILOT_WHEEL_CACHE
# (default ~/.cache/opscopilot/wheels); a later set-up installs it in seconds.
# About 8-10 minutes on 2 idle cores. If the build fails, this prints why in one line and exits 1.
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.3.36
PATCHES=$(cd "$(dirname "$0")" && pwd)/patches
ALWAYS=("$PATCHES/llama-cpp-kquant-columns.patch" "$PATCHES/llama-cpp-lazy-zero-buffers.patch"
        "$PATCHES/llama-cpp-flash-attn-rows.patch")
case "${OPSCOPILOT_LLAMAFILE:-off}" in
  off) ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=OFF"; PATCH=("${ALWAYS[@]}") ;;
  gated) ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=ON"; PATCH=("${ALWAYS[@]}" "$PATCHES/llama-cpp-sgemm-min-rows.patch") ;;
  *) echo "OPSCOPILOT_LLAMAFILE must be off or gated, got '$OPSCOPILOT_LLAMAFILE'" >&2; exit 1 ;;
esac
built="$ARGS patches $(cat "${PATCH[@]}" | sha256sum | cut -c1-12)"
cpu=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-12)
key=$(echo "$VERSION $built $cpu $("$PY" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)
dir=${OPSCOPILOT_WHEEL_CACHE:-$HOME/.cache/opscopilot/wheels}/llama-cpp-python-$VERSION-$key
marker=$(dirname "$PY")/../.llama-cpp-python-build  # which build this environment has
if [ "$(cat "$marker" 2>/dev/null)" = "$key" ] && "$PY" -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
fail() {  # one line saying why, then exit 1
  echo "llama-cpp-python did not build ($1); full log: $dir/build.log; the torch backend serves (slower on CPU)" >&2
  rm -f "$dir"/*.whl
  exit 1
}
if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  mkdir -p "$dir"
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  echo "building llama-cpp-python $VERSION from source ($ARGS, patched: $(for p in "${PATCH[@]}"; do basename "$p" .patch; done | paste -sd ' ')): about 8-10 min on 2 cores, once per machine"
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$src" "llama-cpp-python==$VERSION" > "$dir/build.log" 2>&1 \
    || fail "no source archive: $(tail -n 1 "$dir/build.log")"
  tar -xzf "$src"/llama_cpp_python-"$VERSION".tar.gz -C "$src" || fail "the source archive did not unpack"
  tree="$src/llama_cpp_python-$VERSION"
  for p in "${PATCH[@]}"; do
    patch -p1 -d "$tree" --forward --quiet < "$p" >> "$dir/build.log" 2>&1 \
      || fail "$(basename "$p") does not apply to llama-cpp-python $VERSION"
  done
  CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip wheel -q --no-deps --no-cache-dir \
      -w "$dir" "$tree" >> "$dir/build.log" 2>&1 || fail "last line: $(tail -n 1 "$dir/build.log")"
fi
"$PY" -m pip install -q --force-reinstall --no-deps "$dir"/llama_cpp_python-*.whl
"$PY" -m pip install -q "$(ls "$dir"/llama_cpp_python-*.whl)"  # its dependencies (diskcache, jinja2, numpy)
echo "$key" > "$marker"
