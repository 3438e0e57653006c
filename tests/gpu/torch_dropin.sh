#!/usr/bin/env bash
# torch_dropin.sh BUILD_DIR [NPROC]: PyTorch's torch.distributed ("nccl" backend) on libcomm's NCCL drop-in,
# on the GPU machine, in one call: NPROC processes (default 2; with fewer GPUs they share them), the drop-in
# preloaded (PyTorch's RPATH would otherwise load its own libnccl.so.2), NVLink multicast off. Runs
# tests/gpu/torch_dropin.py (every collective, send/recv, barrier, 50 DDP steps against one process).
# Output under $OUT (when set) as torch_dropin.txt. Exit 0 when every rank passed; 77 without torch (or one built
# without CUDA), or without a GPU (neither torch nor nvidia-smi sees one); 1 when a rank failed, or when torch
# sees no GPU where nvidia-smi lists one (a broken driver is not a skip).
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
[[ $# -ge 1 && -f "$1/compat/nccl/libnccl.so.2" ]] || { echo "usage: $0 BUILD_DIR [NPROC] (BUILD_DIR/compat/nccl/libnccl.so.2)" >&2; exit 2; }
lib=$(cd "$1/compat/nccl" && pwd)/libnccl.so.2
nproc=${2:-2}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python3 -c 'import torch' 2>/dev/null || { echo "torch_dropin: SKIP (torch is not installed)"; exit 77; }
python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' ||
  { echo "torch_dropin: SKIP (torch is built without CUDA)"; exit 77; }
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  smi=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [[ $smi -ge 1 ]] && { echo "torch_dropin: FAIL: torch sees no CUDA device, nvidia-smi lists $smi GPU(s)"; exit 1; }
  echo "torch_dropin: SKIP (no CUDA device: torch.cuda.is_available() is false and nvidia-smi lists none)"
  exit 77
fi
log=${OUT:-/tmp}/torch_dropin.txt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
LD_PRELOAD="$lib" LIBCOMM_DROPIN="$lib" COMM_DEBUG=${COMM_DEBUG:-WARN} timeout 600 python3 -m torch.distributed.run --standalone \
  --nproc_per_node="$nproc" "$here/torch_dropin.py" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "torch_dropin: exit $rc (log $log)"
exit "$rc"
