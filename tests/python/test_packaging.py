"""The extension is independent of torch: it links no torch library and imports without torch, so one build works
with every torch version."""

import shutil
import subprocess

import pytest

import flashattn


def _needed_libraries(path):
    result = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in result.stdout.splitlines() if "(NEEDED)" in line]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
def test_extension_links_no_torch_or_cuda_runtime_library():
    needed = _needed_libraries(flashattn._C.__file__)
    assert needed, "readelf found no NEEDED entry at all"
    for library in needed:
        assert not any(name in library for name in ("torch", "c10", "python")), needed
        # The CUDA runtime is linked statically: no libcudart to find (or to clash with torch's).
        assert "cudart" not in library, needed


def test_extension_reports_its_build():
    info = flashattn._C.build_info()
    assert info["version"] == flashattn.__version__
    assert isinstance(info["with_cuda"], bool)
    supported, why = flashattn._C.gpu_support(7, 5)
    assert not supported and why


@pytest.mark.skipif(shutil.which("nm") is None or shutil.which("readelf") is None, reason="binutils not installed")
def test_extension_keeps_its_cxx_runtime_to_itself():
    # A torch process holds other copies of the C++ runtime loaded RTLD_GLOBAL; a module that exported symbols or
    # bound to the shared libstdc++ could have its exceptions and locales resolved into theirs.
    needed = _needed_libraries(flashattn._C.__file__)
    assert not any(lib.startswith(("libstdc++", "libgcc_s")) for lib in needed), needed
    result = subprocess.run(["nm", "-D", "--defined-only", flashattn._C.__file__], capture_output=True, text=True,
                            check=True)
    exported = [line.split()[-1] for line in result.stdout.splitlines() if line.strip()]
    assert exported == ["PyInit__C"], exported[:20]
