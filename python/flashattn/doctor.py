"""`python -m flashattn doctor`: what is installed, what flashattn can run here, and the fix for each problem found.

It prints the C++ library's own report (the build, the CUDA driver and runtime, every visible GPU and whether
flashattn supports it) and adds the Python side: the interpreter, torch and its CUDA, and whether the compiled
extension loads. Exit status 0 when no problem was found, 1 otherwise.
"""

import os
import platform
import sys
from typing import List, Optional, Tuple

from . import _ext

Problem = Tuple[str, str]  # (what is wrong, how to fix it)


def _torch_section(lines: List[str], problems: List[Problem]):
    try:
        import torch
    except ImportError as err:
        lines.append(f"  torch:             not importable ({err})")
        problems.append(("torch is not installed: flashattn's flash_attn_* functions need it",
                         "pip install torch (any version >= 2.4: flashattn does not link torch, so any build works)"))
        return None
    lines.append(f"  torch:             {torch.__version__} at {os.path.dirname(torch.__file__)}")
    cuda = torch.version.cuda
    lines.append(f"  torch's CUDA:      {cuda if cuda else 'none (a CPU-only build of torch)'}")
    if not hasattr(torch.library, "custom_op"):
        problems.append((f"torch {torch.__version__} lacks torch.library.custom_op, which flashattn's operators use",
                         "pip install --upgrade 'torch>=2.4'"))
    available = cuda is not None and torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    lines.append(f"  torch sees GPUs:   {count}")
    return torch if available else None


def _gpu_problems(torch, C, problems: List[Problem], lines: List[str]):
    info = C.build_info()
    if not info["with_cuda"]:
        problems.append((
            "torch sees a GPU but this build of flashattn has no GPU kernels (it was built without nvcc), so CUDA "
            "tensors are refused",
            "install the CUDA toolkit (nvcc on PATH or CUDA_HOME set), then reinstall: "
            "`pip install --force-reinstall --no-deps .`"))
        return
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        supported, why = C.gpu_support(major, minor)
        name = torch.cuda.get_device_name(index)
        lines.append(f"  GPU {index} via torch: {name}, compute capability {major}.{minor}: "
                     f"{'supported' if supported else 'NOT supported'} ({why})")
        if not supported and major >= 8:
            problems.append((f"GPU {index} ({name}, sm_{major}{minor}) has no compiled flashattn code",
                             f"reinstall with its architecture: FLASHATTN_CUDA_ARCHS='{info['cuda_archs'].replace(',', ';')};"
                             f"{major}{minor}' pip install --force-reinstall --no-deps ."))
        elif not supported:
            problems.append((f"GPU {index} ({name}, sm_{major}{minor}) is older than Ampere (8.0), which flashattn's "
                             "kernels need", "use an sm_80 or newer GPU; CPU tensors still run the reference path"))


def report() -> Tuple[str, List[Problem]]:
    lines = ["Python"]
    problems: List[Problem] = []
    lines.append(f"  interpreter:       {sys.version.split()[0]} ({platform.machine()}) at {sys.executable}")
    lines.append(f"  flashattn package: {os.path.dirname(os.path.abspath(__file__))}")
    C = None
    try:
        C = _ext.load()
        lines.append(f"  extension:         loads ({C.__file__})")
    except ImportError as err:
        lines.append("  extension:         DOES NOT LOAD")
        problems.append((str(err.__cause__ or err), str(err)))
    torch = _torch_section(lines, problems)
    native = C.doctor_report() if C is not None else "(the C++ report needs the extension)\n"
    if C is not None and torch is not None:
        _gpu_problems(torch, C, problems, lines)
    if C is not None:
        for line in native.splitlines():
            if line.strip().startswith("warning:"):
                problems.append((line.strip()[len("warning:"):].strip(),
                                 "update the NVIDIA driver, or build flashattn with an older CUDA toolkit"))
    text = native + "\n".join(lines) + "\n"
    if problems:
        text += f"Problems ({len(problems)})\n"
        for number, (what, fix) in enumerate(problems, 1):
            text += f"  {number}. {what}\n     fix: {fix}\n"
    else:
        text += "No problem found.\n"
    return text, problems


def main(argv: Optional[List[str]] = None) -> int:
    text, problems = report()
    sys.stdout.write(text)
    return 1 if problems else 0
