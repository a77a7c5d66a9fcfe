# Build-time help for the problems users of attention libraries hit most: no nvcc found, a GPU architecture flashattn
# or the toolkit cannot build for, and compilers killed for lack of memory. Included by the top-level CMakeLists.

# nvcc: PATH and CUDACXX are what CMake looks at; CUDA_HOME / CUDA_PATH and the usual install folder are what users
# set or have, so look there too before deciding that there is no CUDA compiler.
function(flashattn_find_nvcc)
  if(DEFINED ENV{CUDACXX} OR DEFINED CMAKE_CUDA_COMPILER)
    return()
  endif()
  find_program(_nvcc nvcc)
  if(_nvcc)
    return()
  endif()
  foreach(_home "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" "/usr/local/cuda")
    if(_home AND EXISTS "${_home}/bin/nvcc")
      message(STATUS "flashattn: using ${_home}/bin/nvcc (not on PATH)")
      set(CMAKE_CUDA_COMPILER "${_home}/bin/nvcc" CACHE FILEPATH "CUDA compiler" FORCE)
      return()
    endif()
  endforeach()
endfunction()

# Each entry of FLASHATTN_CUDA_ARCHS must be sm_80 or newer and known to this nvcc.
function(flashattn_check_archs archs nvcc)
  execute_process(COMMAND "${nvcc}" --list-gpu-arch OUTPUT_VARIABLE _known RESULT_VARIABLE _rc ERROR_QUIET)
  foreach(_arch ${archs})
    string(REGEX MATCH "^[0-9]+" _number "${_arch}")
    if(NOT _number)
      message(FATAL_ERROR "flashattn: FLASHATTN_CUDA_ARCHS entry '${_arch}' is not an architecture: expected "
                          "numbers like 80;90a (optionally -real or -virtual). Set FLASHATTN_CUDA_ARCHS and retry.")
    endif()
    if(_number LESS 80)
      message(FATAL_ERROR "flashattn: FLASHATTN_CUDA_ARCHS entry '${_arch}' is older than sm_80 (Ampere), which "
                          "flashattn's kernels need (mma.sync with bf16, cp.async). Remove it, e.g. "
                          "FLASHATTN_CUDA_ARCHS='80;90a'.")
    endif()
    if(_rc EQUAL 0 AND NOT _known MATCHES "compute_${_number}")
      string(REPLACE "\n" " " _known "${_known}")
      message(FATAL_ERROR "flashattn: this nvcc (${CMAKE_CUDA_COMPILER_VERSION}) cannot build for '${_arch}'; it "
                          "knows: ${_known}. Use a newer CUDA toolkit or drop that architecture from "
                          "FLASHATTN_CUDA_ARCHS.")
    endif()
  endforeach()
endfunction()

# Parallel compile jobs: MAX_JOBS (the variable FlashAttention users know) or FLASHATTN_JOBS bound them through a
# Ninja job pool, whatever -j the build is given.
function(flashattn_limit_jobs)
  foreach(_var FLASHATTN_JOBS MAX_JOBS)
    if(DEFINED ENV{${_var}} AND "$ENV{${_var}}" MATCHES "^[1-9][0-9]*$")
      message(STATUS "flashattn: at most $ENV{${_var}} compile jobs at once (${_var})")
      set_property(GLOBAL APPEND PROPERTY JOB_POOLS flashattn_compile=$ENV{${_var}})
      set(CMAKE_JOB_POOL_COMPILE flashattn_compile PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Every compile runs through cmake/explain_failure.sh, which passes the compiler's output through and, when it
# fails, says which file failed and the likely fix (out of memory, unsupported architecture, missing headers).
function(flashattn_explain_failures)
  if(CMAKE_HOST_UNIX)
    set_property(GLOBAL PROPERTY RULE_LAUNCH_COMPILE "bash ${PROJECT_SOURCE_DIR}/cmake/explain_failure.sh")
  endif()
endfunction()
