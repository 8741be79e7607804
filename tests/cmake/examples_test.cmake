# The installed package as a user meets it (#13): cmake --install to a scratch prefix, build
# examples/ out of tree against that prefix alone (find_package(ddptrain) finds LibTorch
# itself), then run the examples at world 2 under the installed `ddptrain launch`: (a) trains
# and evaluates, then a second run resumes from its checkpoint; (b) and (c) train.
# Run: cmake -DSOURCE_DIR=<repo> -DBUILD_DIR=<ddptrain build> -DWORK=<dir> -P this
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/run")
function(run_step what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK}/run" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 600)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()
run_step("install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK}/prefix")
# Only the public headers are installed (#29 item 3): not the Trainer's machinery, the CLI's
# table or fault injection.
foreach(private train/trainer_impl.h train/trainer_run.h config/flag_table.h util/fault.h train/fault_hooks.h)
  if(EXISTS "${WORK}/prefix/include/ddptrain/${private}")
    message(FATAL_ERROR "the private header ${private} was installed")
  endif()
endforeach()
if(NOT EXISTS "${WORK}/prefix/include/ddptrain/train/trainer.h")
  message(FATAL_ERROR "the public header train/trainer.h was not installed")
endif()
# ccache when there is one (as the build's own): the examples' compiles are most of this test.
find_program(ccache_program ccache)
set(launcher "")
if(ccache_program)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${ccache_program}")
endif()
run_step("configure examples/ against the installed package" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples"
         -B "${WORK}/build" -G Ninja "-DCMAKE_PREFIX_PATH=${WORK}/prefix" -DCMAKE_BUILD_TYPE=Release
         ${launcher})
run_step("build examples/" "${CMAKE_COMMAND}" --build "${WORK}/build")

# The README's snippet ("Your own model in C++") is what it says: at most 40 lines that build
# against the package.
file(READ "${SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "## Your own model in C++" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md has no section \"Your own model in C++\"")
endif()
string(SUBSTRING "${readme}" ${at} -1 section)
string(REGEX MATCH "```cpp\n([^`]*)```" block "${section}")
set(snippet "${CMAKE_MATCH_1}")
string(REGEX MATCHALL "\n" newlines "${snippet}")
list(LENGTH newlines snippet_lines)
if(snippet_lines GREATER 40 OR snippet_lines LESS 10)
  message(FATAL_ERROR "the README's snippet has ${snippet_lines} lines (10 to 40 expected)")
endif()
file(WRITE "${WORK}/snippet/main.cpp" "${snippet}")
file(WRITE "${WORK}/snippet/CMakeLists.txt" "cmake_minimum_required(VERSION 3.18)
project(snippet LANGUAGES CXX)
find_package(ddptrain REQUIRED)
add_executable(snippet main.cpp)
target_link_libraries(snippet PRIVATE ddptrain::ddptrain)
")
run_step("configure the README's snippet" "${CMAKE_COMMAND}" -S "${WORK}/snippet" -B "${WORK}/snippet/build" -G Ninja ${launcher}
         "-DCMAKE_PREFIX_PATH=${WORK}/prefix")
run_step("build the README's snippet" "${CMAKE_COMMAND}" --build "${WORK}/snippet/build")
set(launch "${WORK}/prefix/bin/ddptrain" launch --nproc_per_node 2)
set(data /usr/share/datasets/fashion-mnist)

# The snippet trains (world 1, its checkpoint directory in the run directory).
run_step("the README's snippet" "${WORK}/snippet/build/snippet")
if(NOT last_output MATCHES "test accuracy 0\\.[4-9]")
  message(FATAL_ERROR "the README's snippet did not reach a test accuracy of 0.4:\n${last_output}")
endif()

# Run again, it has nothing left to train: it says why and prints no accuracy (#28 item 8).
run_step("the README's snippet again" "${WORK}/snippet/build/snippet")
if(last_output MATCHES "test accuracy" OR NOT last_output MATCHES "nothing to train: the checkpoint completed epoch 2 and epochs is 2")
  message(FATAL_ERROR "the README's snippet, run again, printed an accuracy or not why it trained nothing:\n${last_output}")
endif()

# (a): 20 steps, then on to 30 from its checkpoint.
run_step("example (a) at world 2" ${launch} "${WORK}/build/convnet_trainer" ${data} 20)
run_step("example (a) resumed" ${launch} "${WORK}/build/convnet_trainer" ${data} 30)
file(STRINGS "${WORK}/run/convnet_metrics.jsonl" records)
set(run_steps "")
set(evaluated 0)
foreach(line IN LISTS records)
  string(JSON kind GET "${line}" kind)
  string(JSON step GET "${line}" step)
  if(kind STREQUAL "run")
    list(APPEND run_steps ${step})
  elseif(kind STREQUAL "epoch")
    string(JSON acc ERROR_VARIABLE no_acc GET "${line}" test_acc)
    if(NOT no_acc AND acc GREATER 0.3)
      math(EXPR evaluated "${evaluated} + 1")
    endif()
  endif()
endforeach()
if(NOT run_steps STREQUAL "0;20")
  message(FATAL_ERROR "example (a): the runs started at steps '${run_steps}', not 0 then 20 (a resume):\n${records}")
endif()
if(NOT evaluated EQUAL 2)
  message(FATAL_ERROR "example (a): ${evaluated} of 2 epoch records have a test accuracy above 0.3:\n${records}")
endif()
if(NOT EXISTS "${WORK}/run/convnet_checkpoints/step_00000030/manifest.json")
  message(FATAL_ERROR "example (a): no checkpoint at step 30")
endif()

# (b) and (c).
run_step("example (b) at world 2" ${launch} "${WORK}/build/ddp_loop" ${data} 50)
if(NOT last_output MATCHES "trained 50 steps on 2 ranks")
  message(FATAL_ERROR "example (b) did not train 50 steps on 2 ranks:\n${last_output}")
endif()
run_step("example (c) at world 2" ${launch} "${WORK}/build/regression")
if(NOT last_output MATCHES "test mse ([0-9.]+)")
  message(FATAL_ERROR "example (c) printed no test loss:\n${last_output}")
endif()
if(NOT CMAKE_MATCH_1 LESS 0.5)
  message(FATAL_ERROR "example (c): test mse ${CMAKE_MATCH_1} is not below 0.5: it did not learn")
endif()
message(STATUS "examples: installed, built out of tree, (a) trained and resumed, (b) and (c) trained at world 2")
