#!/usr/bin/env bash
# torch_config_test.sh SOURCE_DIR: the build refuses a torch it cannot use,
# at configure time, naming what it found: a torch that is not 2.x, a CUDA
# torch without NCCL, a Python without torch (scripts/torch_config.py), and
# a missing Python or virtual environment (meson setup itself, on a copy of
# the committed tree, which has no .venv). The probe runs under an
# interpreter environment of the test's own (a venv without the system's
# site-packages), so a torch the machine has installed (Debian's
# python3-torch) is never what it finds.
# shellcheck disable=SC2317  # the case functions are called through run_case
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../integration/lib/common.sh
source "$here/../integration/lib/common.sh"
SOURCE=$(cd "${1:?usage: torch_config_test.sh SOURCE_DIR}" && pwd)

mr_init torch_config

# A Python that sees the standard library and PYTHONPATH only.
/usr/bin/python3 -m venv --without-pip "$MR_TMP/python" || fail "cannot create a virtual environment for the probe"
PYTHON=$MR_TMP/python/bin/python3
"$PYTHON" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is not None)' ||
  fail "the probe's own environment can import a torch"

# fake_torch DIR VERSION CUDA NCCL: a `torch` package in DIR that looks like
# an installation of VERSION (CUDA "" for a CPU build; NCCL "" for none).
fake_torch() {
  local dir=$1/torch
  mkdir -p "$dir/include/torch/csrc/api/include/torch" "$dir/lib"
  touch "$dir/include/torch/csrc/api/include/torch/torch.h"
  [[ -n $3 ]] && touch "$dir/lib/libtorch_cuda.so"
  cat >"$dir/__init__.py" <<PY
import types
__version__ = "$2"
version = types.SimpleNamespace(cuda="$3" or None)
def compiled_with_cxx11_abi():
    return True
def _nccl_version():
    if not "$4":
        raise RuntimeError("torch was built without NCCL")
    return tuple(int(part) for part in "$4".split("."))
cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=_nccl_version))
PY
}

# configure_probe DIR: runs torch_config.py with DIR's fake torch.
configure_probe() {
  assert_exit "$2" env PYTHONPATH="$1" "$PYTHON" "$SOURCE/scripts/torch_config.py" "$1/farm"
}

case_old_torch() {
  fake_torch "$MR_TMP/old" 1.13.1 "" ""
  configure_probe "$MR_TMP/old" 1
  assert_contains "$MR_ERR" "has torch 1.13.1" "the error"
  assert_contains "$MR_ERR" "needs torch 2.x" "the error"
}

case_cuda_without_nccl() {
  fake_torch "$MR_TMP/nonccl" 2.11.0 13.0 ""
  mkdir -p "$MR_TMP/nvidia/cu13/include" && touch "$MR_TMP/nvidia/cu13/include/cuda_runtime_api.h"
  mv "$MR_TMP/nvidia" "$MR_TMP/nonccl/"
  configure_probe "$MR_TMP/nonccl" 1
  assert_contains "$MR_ERR" "torch 2.11.0 is built with CUDA 13.0 but without NCCL" "the error"
}

case_cpu_torch_accepted() {
  fake_torch "$MR_TMP/cpu" 2.11.0 "" ""
  configure_probe "$MR_TMP/cpu" 0
  assert_contains "$MR_OUT" "version=2.11.0" "the facts"
  assert_contains "$MR_OUT" "cuda=" "the facts"
  [[ -L $MR_TMP/cpu/farm/torch && ! -e $MR_TMP/cpu/farm/fmt ]] || fail "the include farm is not as expected"
}

case_python_without_torch() {
  mkdir -p "$MR_TMP/empty"
  configure_probe "$MR_TMP/empty" 1
  assert_contains "$MR_ERR" "cannot import torch" "the error"
  assert_contains "$MR_ERR" "scripts/setup.sh" "the error"
}

case_missing_python() {
  require_cmd meson
  assert_exit 1 meson setup "$MR_TMP/build" "$SOURCE" -Dtorch_python="$MR_TMP/no/such/python3"
  assert_contains "$MR_OUT$MR_ERR" "$MR_TMP/no/such/python3" "meson's error"
}

case_missing_venv() {
  require_cmd meson git
  git -C "$SOURCE" rev-parse HEAD >/dev/null 2>&1 || skip "the source is not a git checkout"
  mkdir -p "$MR_TMP/source"
  git -C "$SOURCE" archive HEAD | tar -x -C "$MR_TMP/source"
  assert_exit 1 meson setup "$MR_TMP/build-novenv" "$MR_TMP/source"
  assert_contains "$MR_OUT$MR_ERR" "no project virtual environment ($MR_TMP/source/.venv/bin/python3)" "meson's error"
  assert_contains "$MR_OUT$MR_ERR" "run scripts/setup.sh" "meson's error"
}

# The CUDA kernels' build option (meson.build's gpu_kernels) on the real
# tree and torch: auto builds them where nvcc is, leaves them out where it
# is not, disabled leaves them out, enabled without nvcc is an error; the
# stand-in a CPU-only build links compiles against the kernels' header.
no_nvcc_path() {
  local dir kept=()
  IFS=: read -ra dirs <<<"$PATH"
  for dir in "${dirs[@]}"; do [[ -x $dir/nvcc ]] || kept+=("$dir"); done
  (IFS=:; echo "${kept[*]}")
}

# kernel_targets BUILD_DIR: "cuda-lib" or "no-cuda-lib", then "absent" or
# "no-absent" (whether the stand-in is among the torch library's unity
# sources, which meson writes at configure time).
kernel_targets() {
  if meson introspect --targets "$1" | grep -q '"name": "meshrun_cuda_kernels"'; then echo cuda-lib; else echo no-cuda-lib; fi
  if grep -qs 'fused_kernels_absent.cpp' "$1"/libmeshrun_torch.a.p/*.cpp; then echo absent; else echo no-absent; fi
}

case_gpu_kernels_option() {
  require_cmd meson
  [[ -x $SOURCE/.venv/bin/python3 ]] || skip "no .venv in the source tree"
  local plain
  plain=$(no_nvcc_path)
  assert_exit 0 meson setup "$MR_TMP/disabled" "$SOURCE" -Dtests=disabled -Dgpu_kernels=disabled
  assert_contains "$MR_OUT" "CUDA kernels: not built" "meson's message"
  assert_contains "$(kernel_targets "$MR_TMP/disabled")" $'no-cuda-lib\nabsent' "the targets"
  assert_exit 0 env PATH="$plain" meson setup "$MR_TMP/auto-no-nvcc" "$SOURCE" -Dtests=disabled
  assert_contains "$MR_OUT" "CUDA kernels: not built" "meson's message without nvcc"
  assert_exit 1 env PATH="$plain" meson setup "$MR_TMP/enabled-no-nvcc" "$SOURCE" -Dtests=disabled -Dgpu_kernels=enabled
  if command -v nvcc >/dev/null && "$SOURCE/.venv/bin/python3" -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
    assert_exit 0 meson setup "$MR_TMP/auto" "$SOURCE" -Dtests=disabled -Dgpu_architectures=80
    assert_contains "$MR_OUT" "CUDA kernels: sm_80" "meson's message with nvcc"
    assert_contains "$(kernel_targets "$MR_TMP/auto")" $'cuda-lib\nno-absent' "the targets with nvcc"
  fi
  assert_exit 0 c++ -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$SOURCE" "$SOURCE/src/model/fused_kernels_absent.cpp"
}

run_case "a torch that is not 2.x is refused, naming its version" case_old_torch
run_case "a CUDA torch without NCCL is refused" case_cuda_without_nccl
run_case "a CPU torch 2.x is accepted; the include farm leaves out the wheel's fmt" case_cpu_torch_accepted
run_case "a Python without torch is refused, pointing at scripts/setup.sh" case_python_without_torch
run_case "meson setup with a Python that does not exist names it" case_missing_python
run_case "meson setup without the project's .venv says to run scripts/setup.sh" case_missing_venv
run_case "-Dgpu_kernels: built with nvcc, left out without it or when disabled; enabled without nvcc fails" case_gpu_kernels_option
mr_finish
