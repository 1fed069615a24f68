# Helpers that turn the folder tree into targets, so adding a file never needs a CMake edit.

add_library(hspmd_all INTERFACE)

# hspmd_layer(NAME DEPS targets... [INCLUDES dirs...])
# Builds src/hspmd/NAME/**/*.cc into the static library hspmd_NAME (an interface
# library while the layer has no sources yet).
function(hspmd_layer name)
  cmake_parse_arguments(L "" "" "DEPS;INCLUDES" ${ARGN})
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

# Every tests/LAYER/NAME_test.cc is one test executable linked to hspmd_LAYER, labelled LAYER.
# Files named *_dist_test.cc run real processes and are labelled `dist` as well.
function(hspmd_tests)
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
  file(GLOB support CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/gpu/*_testlib.cc)
  add_custom_target(tests_gpu)
  add_library(gpu_testlib STATIC ${support} ${PROJECT_SOURCE_DIR}/tests/gpu/gpu_main.cc
              ${PROJECT_SOURCE_DIR}/tests/kernels/kernel_testlib.cc)
  target_include_directories(gpu_testlib PUBLIC ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(gpu_testlib PUBLIC hspmd_cuda GTest::gtest GTest::gmock)
  foreach(src ${tests})
    get_filename_component(name ${src} NAME_WE)
    set(target gpu_${name})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE gpu_testlib)
    add_dependencies(tests_gpu ${target})
    add_test(NAME ${target} COMMAND ${target})
    set_tests_properties(${target} PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# Every bench/NAME_bench.cc is one Google Benchmark program bench_NAME.
function(hspmd_benchmarks)
  file(GLOB benches CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/*_bench.cc)
  foreach(src ${benches})
    get_filename_component(name ${src} NAME_WE)
    add_executable(bench_${name} ${src})
    target_link_libraries(bench_${name} PRIVATE hspmd_all benchmark::benchmark)
    target_include_directories(bench_${name} PRIVATE ${OpenBLAS_INCLUDE_DIRS})
  endforeach()
endfunction()
