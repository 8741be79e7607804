# Note [NCCL header]: a nccl.h of another NCCL release than torch's pin is a configure error,
# the pinned one passes, and a missing one says how to get it. Fake torch installs (a
# METADATA pin and a nvidia/nccl/include beside torch) in a scratch folder, each checked by
# cmake/NcclHeader.cmake in script mode. Run: cmake -DSOURCE_DIR=<repo> -DWORK=<dir> -P this
set(check "${SOURCE_DIR}/cmake/NcclHeader.cmake")
file(REMOVE_RECURSE "${WORK}")

# fake_torch(NAME PIN HEADER_VERSION): <WORK>/NAME/site-packages/{torch, torch-*.dist-info, nvidia/nccl/include}
function(fake_torch name pin header)
  set(sp "${WORK}/${name}/site-packages")
  file(MAKE_DIRECTORY "${sp}/torch")
  file(WRITE "${sp}/torch-2.11.0.dist-info/METADATA"
       "Name: torch\nRequires-Dist: nvidia-nccl-cu13==${pin}; platform_system == \"Linux\"\n")
  if(header)
    string(REPLACE "." ";" v "${header}")
    list(GET v 0 major)
    list(GET v 1 minor)
    list(GET v 2 patch)
    file(WRITE "${sp}/nvidia/nccl/include/nccl.h"
         "#define NCCL_MAJOR ${major}\n#define NCCL_MINOR ${minor}\n#define NCCL_PATCH ${patch}\n")
  endif()
endfunction()

# run_check(NAME RC_OUT OUTPUT_OUT [extra -D args]): the check against fake torch NAME.
function(run_check name rc_out text_out)
  execute_process(COMMAND "${CMAKE_COMMAND}" "-DTORCH_PREFIX=${WORK}/${name}/site-packages/torch" ${ARGN} -P "${check}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \n]+" " " text "${out}${err}")
  message(STATUS "${name}: exit ${rc}: ${text}")
  set(${rc_out} "${rc}" PARENT_SCOPE)
  set(${text_out} "${text}" PARENT_SCOPE)
endfunction()

fake_torch(pinned 2.28.9 2.28.9)
run_check(pinned rc text)
if(NOT rc EQUAL 0 OR NOT text MATCHES "nccl.h 2.28.9 matches torch's pin 2.28.9")
  message(FATAL_ERROR "the pinned header was not accepted")
endif()

fake_torch(other 2.28.9 2.21.5)
run_check(other rc text)
if(rc EQUAL 0 OR NOT text MATCHES "is NCCL 2.21.5 but torch pins NCCL 2.28.9")
  message(FATAL_ERROR "a header of another NCCL release was accepted")
endif()

# An explicit -DDDPTRAIN_NCCL_INCLUDE is checked as well.
run_check(pinned rc text "-DDDPTRAIN_NCCL_INCLUDE=${WORK}/other/site-packages/nvidia/nccl/include")
if(rc EQUAL 0 OR NOT text MATCHES "is NCCL 2.21.5")
  message(FATAL_ERROR "an explicit header of another release was accepted")
endif()

fake_torch(missing 2.28.9 "")
run_check(missing rc text "-DCMAKE_SOURCE_DIR=${WORK}/missing")
if(rc EQUAL 0 OR NOT text MATCHES "no nccl.h of torch's NCCL 2.28.9")
  message(FATAL_ERROR "a missing header was not reported")
endif()
message(STATUS "NCCL header checks: 4 passed, 0 failed")
