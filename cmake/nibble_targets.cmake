# CUDA sources stay out of unity batches (NIBBLE_UNITY_BUILD; CMake batches CUDA from 3.31): each
# .cu is one kernel family's instantiations, compiled in parallel.
function(nibble_cuda_sources_alone)
  foreach(src IN LISTS ARGN)
    if(src MATCHES "\\.cu$")
      set_source_files_properties(${src} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()

# nibble_library(NAME SOURCES ... DEPS ...): one folder, one library, include root = src/.
function(nibble_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  nibble_cuda_sources_alone(${A_SOURCES})
  add_library(${name} STATIC ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

# nibble_test(NAME SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary registered with ctest.
function(nibble_test name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  nibble_cuda_sources_alone(${A_SOURCES})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    NIBBLE_SOURCE_DIR="${PROJECT_SOURCE_DIR}" NIBBLE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${A_LABELS}" DISCOVERY_TIMEOUT 60)
endfunction()

# nibble_fuzz_target(NAME SOURCE DEPS ...): with NIBBLE_FUZZ (clang) a libFuzzer binary; otherwise
# the same entry point linked to a small driver that replays the seed corpus as a ctest, so the
# target builds and runs in every configuration.
function(nibble_fuzz_target name source)
  cmake_parse_arguments(A "" "" "DEPS" ${ARGN})
  if(NIBBLE_FUZZ)
    add_executable(${name} ${source})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  else()
    add_executable(${name} ${source} ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cpp)
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${name})
  if(NOT NIBBLE_FUZZ AND EXISTS ${corpus})
    add_test(NAME ${name}_replay COMMAND ${name} ${corpus})
    set_tests_properties(${name}_replay PROPERTIES LABELS "unit;fuzz")
  endif()
endfunction()
