# Helpers that turn the folder tree into targets, so adding a file never needs a CMake edit.

add_library(hspmd_all INTERFACE)

# hspmd_layer(NAME DEPS targets... [NEVER layers...] [INCLUDES dirs...])
# Builds src/hspmd/NAME/**/*.cc into the static library hspmd_NAME (an interface
# library while the layer has no sources yet).
# The layers form a stack: a layer may name in DEPS only layers declared before it, so the order of
# the hspmd_layer calls is the order of the layers and no two layers can need each other. NEVER
# names layers this one must not reach, directly or through its DEPS: configuring fails when it
# does, so a design rule (the planner prices strategies without the runtime) cannot be lost by
# adding a dependency. What each layer reaches is also what its sources and tests may include,
# which the test `layers_include_check` enforces (hspmd_layer_check below).
function(hspmd_layer name)
  cmake_parse_arguments(L "" "" "DEPS;NEVER;INCLUDES" ${ARGN})
  set(reaches "")
  foreach(dep ${L_DEPS})
    if(dep MATCHES "^hspmd_(.+)$")
      set(layer ${CMAKE_MATCH_1})
      get_property(declared GLOBAL PROPERTY HSPMD_LAYERS)
      if(NOT layer IN_LIST declared)
        message(FATAL_ERROR "hspmd_layer(${name}): DEPS names ${dep}, which is not a layer declared before "
                            "${name}; a layer depends only on the layers below it (architecture §2)")
      endif()
      get_property(below GLOBAL PROPERTY HSPMD_LAYER_${layer}_REACHES)
      list(APPEND reaches ${layer} ${below})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES reaches)
  foreach(forbidden ${L_NEVER})
    if(forbidden IN_LIST reaches)
      message(FATAL_ERROR "hspmd_layer(${name}): reaches the layer ${forbidden} through its DEPS (${L_DEPS}), "
                          "but is declared NEVER ${forbidden} (architecture §2)")
    endif()
  endforeach()
  set_property(GLOBAL APPEND PROPERTY HSPMD_LAYERS ${name})
  set_property(GLOBAL PROPERTY HSPMD_LAYER_${name}_REACHES ${reaches})

  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/hspmd/${name}/*.cc)
  # A layer's cuda/ folder is the CUDA backend's (the library hspmd_cuda, built with HSPMD_CUDA).
  list(FILTER sources EXCLUDE REGEX "/src/hspmd/${name}/cuda/")
  if(sources)
    add_library(hspmd_${name} STATIC ${sources})
    target_include_directories(hspmd_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${L_INCLUDES})
    target_link_libraries(hspmd_${name} PUBLIC ${L_DEPS})
  else()
    add_library(hspmd_${name} INTERFACE)
    target_include_directories(hspmd_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${L_INCLUDES})
    target_link_libraries(hspmd_${name} INTERFACE ${L_DEPS})
  endif()
  target_link_libraries(hspmd_all INTERFACE hspmd_${name})
endfunction()

# Writes what each layer reaches (build/.../layer_rules.cmake) and adds two tests: every
# `#include "hspmd/LAYER/..."` under src/hspmd/NAME/ and tests/NAME/ names NAME or a layer NAME
# reaches (cmake/check_layer_includes.cmake); and the check itself refuses a planner file that
# includes the runtime (tests/layering/, a tree made to break the rule).
function(hspmd_layer_check)
  get_property(layers GLOBAL PROPERTY HSPMD_LAYERS)
  set(rules "set(HSPMD_LAYERS ${layers})\n")
  foreach(layer ${layers})
    get_property(reaches GLOBAL PROPERTY HSPMD_LAYER_${layer}_REACHES)
    string(APPEND rules "set(HSPMD_LAYER_${layer}_REACHES ${reaches})\n")
  endforeach()
  file(WRITE ${PROJECT_BINARY_DIR}/layer_rules.cmake "${rules}")
  add_test(NAME layers_include_check
           COMMAND ${CMAKE_COMMAND} -DRULES=${PROJECT_BINARY_DIR}/layer_rules.cmake
                   -DROOT=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/check_layer_includes.cmake)
  add_test(NAME layers_include_check_refuses
           COMMAND ${CMAKE_COMMAND} -DRULES=${PROJECT_BINARY_DIR}/layer_rules.cmake
                   -DROOT=${PROJECT_SOURCE_DIR}/tests/layering -P ${PROJECT_SOURCE_DIR}/cmake/check_layer_includes.cmake)
  set_tests_properties(layers_include_check layers_include_check_refuses PROPERTIES LABELS layers)
  # Passes only when the check names the planted include of the runtime, and not the planner's
  # allowed include of specialize beside it.
  set_tests_properties(layers_include_check_refuses PROPERTIES
    PASS_REGULAR_EXPRESSION "src/hspmd/planner/prices_by_running.h includes hspmd/runtime/trainer.h"
    FAIL_REGULAR_EXPRESSION "includes hspmd/specialize/")
endfunction()

# Every tests/LAYER/NAME_test.cc is one test executable linked to hspmd_LAYER, labelled LAYER.
# Files named *_dist_test.cc run real processes and are labelled `dist` as well.
# all_tests builds every test program (`make test`; the programs the tests run are added to it).
function(hspmd_tests)
  add_custom_target(all_tests)
  file(GLOB layer_dirs LIST_DIRECTORIES true ${PROJECT_SOURCE_DIR}/tests/*)
  foreach(dir ${layer_dirs})
    if(NOT IS_DIRECTORY ${dir})
      continue()
    endif()
    get_filename_component(layer ${dir} NAME)
    if(NOT TARGET hspmd_${layer})
      continue()
    endif()
    file(GLOB tests CONFIGURE_DEPENDS ${dir}/*_test.cc)
    file(GLOB support CONFIGURE_DEPENDS ${dir}/*_testlib.cc)
    # tests_LAYER builds every test of one layer (the sanitizer build builds only some layers).
    add_custom_target(tests_${layer})
    add_dependencies(all_tests tests_${layer})
    # The layer's shared test helpers are compiled once, not once per test.
    add_library(${layer}_testlib STATIC ${support} ${PROJECT_SOURCE_DIR}/cmake/empty.cc)
    target_include_directories(${layer}_testlib PUBLIC ${PROJECT_SOURCE_DIR}/tests)
    target_link_libraries(${layer}_testlib PUBLIC hspmd_${layer} GTest::gtest GTest::gtest_main GTest::gmock)
    foreach(src ${tests})
      get_filename_component(name ${src} NAME_WE)
      set(target ${layer}_${name})
      add_executable(${target} ${src})
      target_link_libraries(${target} PRIVATE ${layer}_testlib)
      add_dependencies(tests_${layer} ${target})
      add_test(NAME ${target} COMMAND ${target})
      set(labels ${layer})
      if(name MATCHES "_dist_test$")
        list(APPEND labels dist)
      endif()
      set_tests_properties(${target} PROPERTIES LABELS "${labels}" TIMEOUT 300
        ENVIRONMENT "HSPMD_BINARY_DIR=${PROJECT_BINARY_DIR}")
    endforeach()
  endforeach()
endfunction()

# Every tests/gpu/NAME_test.cc is one test executable linked to hspmd_cuda and labelled gpu. Their
# main (tests/gpu/gpu_main.cc) exits with 77 when no CUDA device is visible, which ctest reports as
# skipped (SKIP_RETURN_CODE), never as passed. The kernel tests' helpers (random inputs, all_close)
# are compiled in, without gtest_main.
function(hspmd_gpu_tests)
  file(GLOB tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*_test.cc)
  # *_host_test.cc: checks of the CUDA backend that need no GPU (the kernel registry's coverage).
  # They always run, here too, and are not GPU tests (not labelled gpu, not packed).
  file(GLOB host_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*_host_test.cc)
  list(FILTER tests EXCLUDE REGEX "_host_test\\.cc$")
  file(GLOB support CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*_testlib.cc)
  add_custom_target(tests_gpu)
  add_dependencies(all_tests tests_gpu)
  add_library(gpu_support STATIC ${support} ${PROJECT_SOURCE_DIR}/tests/kernels/kernel_testlib.cc)
  target_include_directories(gpu_support PUBLIC ${PROJECT_SOURCE_DIR}/tests)
  # hspmd_tuning: the profile test measures the GPU as `hspmd profile --device cuda` does.
  target_link_libraries(gpu_support PUBLIC hspmd_cuda hspmd_runtime hspmd_tuning GTest::gtest GTest::gmock)
  add_library(gpu_testlib STATIC ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_main.cc)
  target_link_libraries(gpu_testlib PUBLIC gpu_support)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    set(target gpu_${name})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE gpu_testlib)
    add_dependencies(tests_gpu ${target})
    add_test(NAME ${target} COMMAND ${target})
    set_tests_properties(${target} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
  foreach(src ${host_tests})
    get_filename_component(name ${src} NAME_WE)
    set(target cuda_${name})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE gpu_support GTest::gtest_main)
    add_dependencies(tests_gpu ${target})
    add_test(NAME ${target} COMMAND ${target})
    set_tests_properties(${target} PROPERTIES LABELS "graph;cuda" TIMEOUT 300)
  endforeach()
endfunction()

# Every bench/NAME_bench.cc is one Google Benchmark program bench_NAME; all_benchmarks builds them
# (`make bench`).
function(hspmd_benchmarks)
  add_custom_target(all_benchmarks)
  file(GLOB benches CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/*_bench.cc)
  foreach(src ${benches})
    get_filename_component(name ${src} NAME_WE)
    add_executable(bench_${name} ${src})
    target_link_libraries(bench_${name} PRIVATE hspmd_all benchmark::benchmark)
    target_include_directories(bench_${name} PRIVATE ${OpenBLAS_INCLUDE_DIRS})
    add_dependencies(all_benchmarks bench_${name})
  endforeach()
endfunction()
