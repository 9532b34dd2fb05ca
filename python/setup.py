# Builds gdn_torch: the PyTorch binding (csrc/) plus libgdn's own sources, compiled in place from
# ../src and ../include (nothing is copied), against the torch that is installed.
#
#   pip install --no-build-isolation ./python
#
# --no-build-isolation is required: the extension must be built against the user's torch, and pip's
# isolated build environment would fetch a different one (or none). pip builds a local directory
# in place, so ../src resolves; the paths below are absolute for that reason too.
#
# CUDA arms: built when torch has CUDA and nvcc is found (torch.utils.cpp_extension.CUDA_HOME),
# with the same -gencode flags as CMake (sm_90a + sm_80); override with
# GDN_CUDA_ARCH_FLAGS="-gencode=arch=compute_90a,code=sm_90a". GDN_FORCE_CPU=1 builds the CPU arm
# only. GDN_LIBGDN=/path/to/libgdn.a links a library CMake already built (same checkout, built with
# CUDA) instead of compiling its sources a second time: only the binding is compiled then.
import glob
import os
import shlex
from pathlib import Path

from setuptools import setup

try:
    import torch
    from torch.utils import cpp_extension
except ImportError as e:
    raise RuntimeError(
        "gdn_torch builds against the installed torch, which this build environment cannot import "
        f"({e}). Install torch first, then: pip install --no-build-isolation ./python") from e

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SRC = ROOT / "src"
INCLUDE = ROOT / "include"

if not (INCLUDE / "gdn" / "gdn.hpp").is_file():
    raise RuntimeError(
        f"gdn sources not found at {ROOT} (expected include/gdn/gdn.hpp): build from a checkout of "
        "the gdn repository with `pip install --no-build-isolation ./python`")

# Same flags as CMakeLists.txt (GDN_CUDA_GENCODE, GDN_CUDA_FLAGS).
DEFAULT_GENCODE = ("-gencode=arch=compute_90a,code=sm_90a "
                   "-gencode=arch=compute_80,code=[sm_80,compute_80]")


def sources(pattern):
    return sorted(str(p) for p in glob.glob(str(SRC / pattern), recursive=True))


with_cuda = (torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
             and os.environ.get("GDN_FORCE_CPU", "0") != "1")

# libgdn: the API layer, the CPU arm, the C API (if present) and, with CUDA, every .cu arm.
# Same globs as CMake's GDN_CORE_SOURCES (keep in step with CMakeLists.txt).
lib_sources = (sources("core/*.cpp") + sources("cpu/*.cpp") + sources("capi/*.cpp")
               + sources("layer/*.cpp") + sources("cp/*.cpp"))
binding_sources = [str(HERE / "csrc" / "binding.cpp")]

cxx_flags = ["-std=c++20", "-O3", "-march=x86-64-v3", "-Wall", "-Wno-unused-parameter"]
defines = [("GDN_VERSION_STRING", '"0.1.0"')]
include_dirs = [str(INCLUDE), str(SRC)]
# The layer's checkpoint loader uses nlohmann-json (Debian nlohmann-json3-dev); on a machine
# without it, scripts/fetch_deps.sh's extracted copy in .deps is used.
if (ROOT / ".deps/root/usr/include/nlohmann").is_dir():
    include_dirs.append(str(ROOT / ".deps/root/usr/include"))

prebuilt = os.environ.get("GDN_LIBGDN")
extra_objects = []
if prebuilt:
    if not Path(prebuilt).is_file():
        raise RuntimeError(f"GDN_LIBGDN={prebuilt}: no such file")
    lib_sources, extra_objects = [], [str(Path(prebuilt).resolve())]

if with_cuda and not prebuilt:
    lib_sources += sources("cuda/**/*.cu")
if with_cuda:
    gencode = shlex.split(os.environ.get("GDN_CUDA_ARCH_FLAGS", DEFAULT_GENCODE))
    nvcc_flags = gencode + [
        "-std=c++20", "-O3", "-lineinfo", "-Xptxas=--warn-on-spills", "--expt-relaxed-constexpr",
        # torch adds -D__CUDA_NO_HALF_OPERATORS__ & co. for its own kernels; libgdn's kernels are
        # written against the plain cuda_fp16/cuda_bf16 headers, as CMake builds them.
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    ]
    defines.append(("GDN_WITH_CUDA", "1"))
    if "sm_90a" in " ".join(gencode):  # wgmma kernels (wy-tc v6 state pass) have an sm_90a image
        defines.append(("GDN_SM90A", "1"))
    ext = cpp_extension.CUDAExtension(
        name="gdn_torch._C",
        sources=binding_sources + lib_sources,
        include_dirs=include_dirs,
        define_macros=defines,
        libraries=["cublas", "cublasLt"],
        extra_objects=extra_objects,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )
else:
    ext = cpp_extension.CppExtension(
        name="gdn_torch._C",
        sources=binding_sources + lib_sources,
        include_dirs=include_dirs,
        define_macros=defines,
        extra_compile_args={"cxx": cxx_flags},
    )

setup(
    name="gdn_torch",
    version="0.1.0",
    description="Gated delta rule (Gated DeltaNet) prefill for PyTorch, fla-compatible API",
    packages=["gdn_torch"],
    package_dir={"gdn_torch": "gdn_torch"},
    ext_modules=[ext],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.9",
    zip_safe=False,
)
