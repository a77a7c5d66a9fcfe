"""python -m flashattn doctor: diagnose the installation (see flashattn/doctor.py)."""

import sys

_USAGE = "usage: python -m flashattn doctor\n  doctor   print the build, torch, CUDA and GPUs, and the fix for each problem"


def main(argv) -> int:
    if argv[:1] == ["doctor"]:
        from .doctor import main as doctor

        return doctor(argv[1:])
    print(_USAGE, file=sys.stderr if argv[:1] not in (["-h"], ["--help"]) else sys.stdout)
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
