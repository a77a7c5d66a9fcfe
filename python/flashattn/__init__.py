"""flashattn: exact, fused, IO-aware attention for NVIDIA GPUs.

The functions of flash_attn 2.x, with the same names, arguments, defaults and return values::

    from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

They need torch (any version with torch.library.custom_op: 2.4 or newer); the compiled extension does not link
torch, so upgrading torch never breaks it. CPU tensors run the exact reference implementation. A diagnosis of the
installation: ``python -m flashattn doctor``.
"""

from ._ext import load as _load

__version__ = "0.1.0"

try:
    _load()
    from ._C import Error  # noqa: F401  (a RuntimeError naming the bad argument)
except ImportError:
    # Importing the package still works, so that `python -m flashattn doctor` can say what is wrong; the
    # functions below raise the loader's explanation when called.
    class Error(RuntimeError):
        """flashattn's error (the extension is not loaded: see `python -m flashattn doctor`)."""

_API = (
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
    "merge_attention",
)

__all__ = ["Error", "__version__", *_API]


def __getattr__(name):
    # The torch-facing API is imported on first use, so that `import flashattn` (and the doctor) work without torch.
    if name in _API or name == "flash_attn_interface":
        import importlib

        interface = importlib.import_module(".flash_attn_interface", __name__)
        return interface if name == "flash_attn_interface" else getattr(interface, name)
    raise AttributeError(f"module 'flashattn' has no attribute {name!r}")
