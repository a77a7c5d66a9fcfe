"""Loads the compiled extension flashattn._C, turning a failure into an error that says what to do."""

import importlib
import sys

_C = None
load_error = None  # the ImportError of the last attempt, for the doctor


def _explain(err: ImportError) -> str:
    text = str(err)
    hints = []
    if "No module named" in text:
        hints.append(
            "the compiled extension is missing: flashattn was not built. Install it with `pip install .` from the "
            "source tree (or, for a development build, build with CMake and put <build>/python on PYTHONPATH)")
    if "undefined symbol" in text or "cannot open shared object" in text:
        hints.append(
            "the extension does not link against torch, so this is not a torch version mismatch: rebuild flashattn "
            "for this Python and platform (`pip install --force-reinstall --no-deps .`)")
    if "invalid ELF header" in text or "wrong ELF class" in text:
        hints.append("the extension was built for another platform: rebuild it here")
    hints.append("`python -m flashattn doctor` prints the whole diagnosis")
    return "flashattn: cannot load its compiled extension flashattn._C (" + text + "); " + "; ".join(hints)


def load():
    """Returns the extension module, raising an ImportError with the fix when it cannot be loaded."""
    global _C, load_error
    if _C is not None:
        return _C
    try:
        _C = importlib.import_module("flashattn._C")
    except ImportError as err:
        load_error = err
        raise ImportError(_explain(err)) from err
    load_error = None
    return _C


def python_tag() -> str:
    return f"cpython-{sys.version_info.major}{sys.version_info.minor}"
