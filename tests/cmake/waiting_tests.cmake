# Read by ctest after the tests are known (TEST_INCLUDE_FILES): the tests of
# tests/waiting_tests.txt take one process slot, every other test two (Note [Waiting tests] in
# the Makefile). WAITING_TESTS_FILE is set by the line that includes this file.
file(STRINGS "${WAITING_TESTS_FILE}" waiting_lines)
foreach(line IN LISTS waiting_lines)
  string(STRIP "${line}" name)
  if(name STREQUAL "" OR name MATCHES "^#")
    continue()
  endif()
  set_tests_properties("${name}" PROPERTIES PROCESSORS 1)
endforeach()
