# Note [NCCL header]
# pip's torch ships no nccl.h: its NCCL is the nvidia-nccl wheel it pins (torch 2.11:
# nvidia-nccl-cu13==2.28.9), and that wheel carries the matching header. A nccl.h from any
# other release (the CUDA toolkit's, say) still compiles, but it changes the size of
# ncclConfig_t inside ProcessGroupNCCL's options: silent memory corruption at run time. So a
# CUDA build takes the header of the pinned wheel (beside torch, or the copy scripts/gpu_deps.sh
# puts in .gpudeps/include) ahead of every other include directory, and a header whose
# version differs from torch's pin is a configure error.

# The NCCL version a torch install pins ("" when its metadata names none).
function(ddptrain_torch_nccl_pin torch_prefix out)
  set(pin "")
  file(GLOB metas "${torch_prefix}/../torch-*.dist-info/METADATA")
  foreach(meta IN LISTS metas)
    file(STRINGS "${meta}" lines REGEX "^Requires-Dist: nvidia-nccl")
    if(lines MATCHES "==([0-9]+\\.[0-9]+\\.[0-9]+)")
      set(pin "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} "${pin}" PARENT_SCOPE)
endfunction()

# The version a nccl.h declares (NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH).
function(ddptrain_nccl_header_version header out)
  file(STRINGS "${header}" defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  set(v "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _ "${defs}")
    list(APPEND v "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN v "." v)
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

# Finds the nccl.h matching torch's pinned NCCL (into DDPTRAIN_NCCL_INCLUDE); FATAL_ERROR
# when there is none or it is another release. See Note [NCCL header].
function(ddptrain_check_nccl_header torch_prefix)
  find_path(DDPTRAIN_NCCL_INCLUDE nccl.h NO_DEFAULT_PATH
            PATHS "${torch_prefix}/../nvidia/nccl/include" "${CMAKE_SOURCE_DIR}/.gpudeps/include")
  ddptrain_torch_nccl_pin("${torch_prefix}" pin)
  if(NOT DDPTRAIN_NCCL_INCLUDE)
    message(FATAL_ERROR "no nccl.h of torch's NCCL ${pin} (see Note [NCCL header] in cmake/NcclHeader.cmake): "
                        "pip install nvidia-nccl-cu13==${pin} next to torch, run scripts/gpu_deps.sh, or pass "
                        "-DDDPTRAIN_NCCL_INCLUDE=<dir with that release's nccl.h>")
  endif()
  ddptrain_nccl_header_version("${DDPTRAIN_NCCL_INCLUDE}/nccl.h" have)
  if(pin AND NOT have VERSION_EQUAL pin)
    message(FATAL_ERROR "${DDPTRAIN_NCCL_INCLUDE}/nccl.h is NCCL ${have} but torch pins NCCL ${pin}: a header of "
                        "another release corrupts ProcessGroupNCCL's options (Note [NCCL header]); use the header "
                        "of nvidia-nccl ${pin} (scripts/gpu_deps.sh copies it) via -DDDPTRAIN_NCCL_INCLUDE")
  endif()
  set(DDPTRAIN_NCCL_VERSION "${have}" PARENT_SCOPE)
  set(DDPTRAIN_NCCL_PIN "${pin}" PARENT_SCOPE)
endfunction()

# Script mode (cmake -DTORCH_PREFIX=... [-DDDPTRAIN_NCCL_INCLUDE=...] -P NcclHeader.cmake):
# the check alone, for tests/cmake/nccl_header_test.cmake.
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  ddptrain_check_nccl_header("${TORCH_PREFIX}")
  message(STATUS "nccl.h ${DDPTRAIN_NCCL_VERSION} matches torch's pin ${DDPTRAIN_NCCL_PIN}")
endif()
