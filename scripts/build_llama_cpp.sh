#!/usr/bin/env bash
# Install llama-cpp-python (the CPU backend of the target: the GGUFs' own quantized kernels) into
# the Python given as $1. The registry has no binary wheel, so it is built from source once, with
# the flags under which a verification pass over k tokens gives bitwise the logits of k one-token
# steps (README, "The exactness contract"): no llamafile sgemm (-DGGML_LLAMAFILE=OFF). Native CPU code
# (-DGGML_NATIVE=ON), so the wheel is kept per CPU feature set under $OPSCOPILOT_WHEEL_CACHE
# (default ~/.cache/opscopilot/wheels); a later set-up installs it in seconds.
# About 8-10 minutes on 2 idle cores. If the build fails, this prints why in one line and exits 1.
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.3.36
ARGS="-DGGML_NATIVE=ON -DGGML_LLAMAFILE=OFF"
cpu=$( (grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m) | sha256sum | cut -c1-12)
key=$(echo "$VERSION $ARGS $cpu $("$PY" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)
dir=${OPSCOPILOT_WHEEL_CACHE:-$HOME/.cache/opscopilot/wheels}/llama-cpp-python-$VERSION-$key
marker=$(dirname "$PY")/../.llama-cpp-python-build  # which build this environment has
if [ "$(cat "$marker" 2>/dev/null)" = "$key" ] && "$PY" -c "import llama_cpp" 2>/dev/null; then
  exit 0
fi
if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
  mkdir -p "$dir"
  echo "building llama-cpp-python $VERSION from source ($ARGS): about 8-10 min on 2 cores, once per machine"
  if ! CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip wheel -q --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$dir" "llama-cpp-python==$VERSION" > "$dir/build.log" 2>&1; then
    echo "llama-cpp-python did not build (last line: $(tail -n 1 "$dir/build.log")); full log: $dir/build.log;" \
         "the torch backend serves (slower on CPU)" >&2
    rm -f "$dir"/*.whl
    exit 1
  fi
fi
"$PY" -m pip install -q --force-reinstall --no-deps "$dir"/llama_cpp_python-*.whl
"$PY" -m pip install -q "$(ls "$dir"/llama_cpp_python-*.whl)"  # its dependencies (diskcache, jinja2, numpy)
echo "$key" > "$marker"
