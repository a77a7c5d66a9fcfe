#!/usr/bin/env bash
# Installs what building and testing flashattn needs, when it is missing: from Debian's packages a C++20 compiler,
# CMake, Ninja, GoogleTest and Python's headers; from PyPI (for the Python package and its tests) nanobind,
# scikit-build-core, pytest, numpy and torch. The CUDA toolkit (nvcc) is optional: without it the library builds its
# CPU path only.
#   FLASHATTN_UPGRADE_TORCH=1   install the newest torch from PyPI even when one is installed (CI does)
#   FLASHATTN_NO_PYTHON=1       skip the Python packages
set -euo pipefail

missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev libgmock-dev)
command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip python3-venv)
if command -v python3 >/dev/null 2>&1 &&
   ! python3 -c 'import os, sysconfig; raise SystemExit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))'; then
  missing+=(python3-dev)
fi

install_python_packages() {
  [ "${FLASHATTN_NO_PYTHON:-0}" = 1 ] && return 0
  local wanted=()
  for module in nanobind scikit_build_core pytest numpy; do
    python3 -c "import $module" >/dev/null 2>&1 || wanted+=("${module//_/-}")
  done
  if [ "${FLASHATTN_UPGRADE_TORCH:-0}" = 1 ]; then
    echo "install_deps: installing the newest torch from PyPI"
    python3 -m pip install -q --upgrade torch
  elif ! python3 -c "import torch" >/dev/null 2>&1; then
    wanted+=(torch)
  fi
  if [ ${#wanted[@]} -gt 0 ]; then
    echo "install_deps: pip install ${wanted[*]}"
    python3 -m pip install -q "${wanted[@]}"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  install_python_packages
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install_deps: need root to install: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}"
install_python_packages
