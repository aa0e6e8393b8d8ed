#!/usr/bin/env bash
# Nothing loads NCCL with the process: the CUDA backend opens libnccl.so.2
# when a GPU plan first needs it (runtime/cuda/nccl_library.h), so that a
# process that also uses PyTorch gets torch's own NCCL. The command and the
# Python module neither need it (readelf -d) nor load it through another
# library (ldd), and `import tessera` maps no libnccl.
#   no_nccl_at_load_test.sh TESSERA_CLI [PYTHON BUILD_PYTHON_DIR]
set -euo pipefail
cli=$1 python=${2:-} pydir=${3:-}
files=("$cli")
if [ -n "$python" ]; then
  module=$(ls "$pydir"/tessera/_tessera*.so)
  files+=("$module")
fi
fail=0
for f in "${files[@]}"; do
  if readelf -d "$f" | grep -i 'NEEDED.*nccl'; then
    echo "FAIL: $f needs NCCL at load time" >&2
    fail=1
  elif ldd "$f" | grep -i nccl; then
    echo "FAIL: loading $f loads NCCL" >&2
    fail=1
  else
    echo "$f: no NCCL at load time"
  fi
done
if [ -n "$python" ]; then
  PYTHONPATH="$pydir" "$python" -c "
import tessera
maps = open('/proc/self/maps').read()
assert 'libnccl' not in maps, [l for l in maps.splitlines() if 'libnccl' in l][:1]
print('import tessera: no libnccl mapped')"
fi
exit $fail
