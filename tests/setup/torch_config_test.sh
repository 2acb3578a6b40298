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

run_case "a torch that is not 2.x is refused, naming its version" case_old_torch
run_case "a CUDA torch without NCCL is refused" case_cuda_without_nccl
run_case "a CPU torch 2.x is accepted; the include farm leaves out the wheel's fmt" case_cpu_torch_accepted
run_case "a Python without torch is refused, pointing at scripts/setup.sh" case_python_without_torch
run_case "meson setup with a Python that does not exist names it" case_missing_python
run_case "meson setup without the project's .venv says to run scripts/setup.sh" case_missing_venv
mr_finish
