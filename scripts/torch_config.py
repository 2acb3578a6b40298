"""Describes the torch installation meson builds against (run at configure time).

Run by the Python whose `torch` package is the LibTorch (the project's .venv
by default, see meson_options.txt). Prints one `key=value` line per fact and
writes FARM/: an include folder of links to the wheel's include/ entries less
the third-party copies that would shadow Debian's headers (the wheel carries
fmt 12 while spdlog and meshrun link Debian's libfmt 9).

Bad installations end here, naming what was found: a torch that is not 2.x,
a CUDA torch whose NCCL or CUDA headers cannot be found.
"""
import os
import sys

SHADOWING = {"fmt", "google", "pybind11"}  # the wheel's copies of libraries meshrun takes from Debian


def fail(message):
    print(f"meshrun: {message}", file=sys.stderr)
    sys.exit(1)


def first_dir_with(candidates, name):
    for folder in candidates:
        if folder and os.path.isfile(os.path.join(folder, name)):
            return folder
    return ""


def main():
    if len(sys.argv) != 2:
        fail("usage: torch_config.py FARM_DIR")
    farm = sys.argv[1]
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure is reported the same way
        fail(f"{sys.executable} cannot import torch ({error}); run scripts/setup.sh or pass -Dtorch_python=PYTHON")
    version = torch.__version__.split("+")[0]
    if not version.startswith("2."):
        fail(f"{sys.executable} has torch {torch.__version__} at {os.path.dirname(torch.__file__)}; meshrun needs torch 2.x")
    root = os.path.dirname(torch.__file__)
    include = os.path.join(root, "include")
    lib = os.path.join(root, "lib")
    if not os.path.isfile(os.path.join(include, "torch", "csrc", "api", "include", "torch", "torch.h")):
        fail(f"torch {torch.__version__} at {root} has no C++ headers (include/torch/csrc/api/include/torch/torch.h)")

    os.makedirs(farm, exist_ok=True)
    for entry in os.listdir(farm):
        os.unlink(os.path.join(farm, entry))
    for entry in sorted(os.listdir(include)):
        if entry not in SHADOWING:
            os.symlink(os.path.join(include, entry), os.path.join(farm, entry))

    cuda = torch.version.cuda or ""
    has_cuda = bool(cuda) and os.path.isfile(os.path.join(lib, "libtorch_cuda.so"))
    site = os.path.dirname(root)
    nvidia = os.path.join(site, "nvidia")
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cuda_include = nccl_include = nccl_version = cudart = ""
    if has_cuda:
        major = cuda.split(".")[0]
        cuda_include = first_dir_with(
            [os.path.join(nvidia, f"cu{major}", "include"), os.path.join(nvidia, "cuda_runtime", "include"),
             os.path.join(cuda_home, "include"), "/usr/include"], "cuda_runtime_api.h")
        if not cuda_include:
            fail(f"torch {torch.__version__} is built with CUDA {cuda} but no cuda_runtime_api.h was found "
                 f"(looked in {nvidia}/cu{major}/include, {nvidia}/cuda_runtime/include, {cuda_home}/include)")
        # The CUDA runtime the wheel loads: meshrun calls it directly where it
        # drives streams, events and graphs (rollout/decode_graphs.cpp).
        for folder in [os.path.join(nvidia, f"cu{major}", "lib"), os.path.join(nvidia, "cuda_runtime", "lib"),
                       os.path.join(cuda_home, "lib64")]:
            found = sorted(name for name in os.listdir(folder) if name.startswith("libcudart.so.")) \
                if os.path.isdir(folder) else []
            if found:
                cudart = os.path.join(folder, found[0])
                break
        if not cudart:
            fail(f"torch {torch.__version__} is built with CUDA {cuda} but no libcudart.so.* was found "
                 f"(looked in {nvidia}/cu{major}/lib, {nvidia}/cuda_runtime/lib, {cuda_home}/lib64)")
        nccl_include = first_dir_with(
            [os.path.join(nvidia, "nccl", "include"), os.path.join(cuda_home, "include"), "/usr/local/include",
             "/usr/include"], "nccl.h")
        try:
            nccl_version = ".".join(str(part) for part in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - a CUDA torch without NCCL raises from its binding
            nccl_version = ""
        if not nccl_version or not nccl_include:
            fail(f"torch {torch.__version__} is built with CUDA {cuda} but "
                 + ("without NCCL" if not nccl_version else f"NCCL {nccl_version}'s nccl.h was not found "
                    f"(looked in {nvidia}/nccl/include, {cuda_home}/include, /usr/local/include, /usr/include)")
                 + ": meshrun's CUDA build needs NCCL")

    facts = {
        "version": version,
        "full_version": torch.__version__,
        "root": root,
        "lib": lib,
        "cxx11_abi": "1" if torch.compiled_with_cxx11_abi() else "0",
        "cuda": cuda if has_cuda else "",
        "cuda_include": cuda_include,
        "nccl": nccl_version,
        "nccl_include": nccl_include,
        "cudart": cudart,
        "python": sys.executable,
    }
    for key, value in facts.items():
        print(f"{key}={value}")


main()
