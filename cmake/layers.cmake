# Helpers that turn the folder tree into targets, so adding a file never needs a CMake edit.

add_library(hspmd_all INTERFACE)

# hspmd_layer(NAME DEPS targets... [INCLUDES dirs...])
# Builds src/hspmd/NAME/**/*.cc into the static library hspmd_NAME (an interface
# library while the layer has no sources yet).
function(hspmd_layer name)
  cmake_parse_arguments(L "" "" "DEPS;INCLUDES" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/hspmd/${name}/*.cc)
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
