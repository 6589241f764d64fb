# onecard_add_library(NAME SOURCES... DEPS ...): a module library with include root at src/.
function(onecard_add_library name)
    cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
    if(NOT ARG_SOURCES)
        # A module with no sources yet is a header-only interface target.
        add_library(${name} INTERFACE)
        target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
        target_link_libraries(${name} INTERFACE ${ARG_DEPS})
        return()
    endif()
    add_library(${name} STATIC ${ARG_SOURCES})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# onecard_add_test(FILE LABEL DEPS...): one GoogleTest executable per test file; tests are
# discovered so ctest lists each case.
#
# Test sources compile at ONECARD_TEST_OPT (default -O1) against one precompiled header shared by every
# test (tests/support/test_pch.h, built by onecard_test_pch below). On CI's two cores the test sources
# were half the build, most of it optimising gtest bodies and re-parsing the same library headers: -O1
# with the shared header takes two thirds as long per source as -O2 without it. The libraries keep the
# build type's level. An inline or template function a test shares with a library (a json parser, a
# container) may be linked from the test's -O1 copy: the suite ran 5% longer for it (539 s against 515
# s on two cores); -O0 built faster still but ran each server test about 3.5 s slower. Debug builds keep -O0.
function(onecard_add_test file label)
    get_filename_component(stem ${file} NAME_WE)
    set(target test_${label}_${stem})
    add_executable(${target} ${file})
    target_link_libraries(${target} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main)
    onecard_test_flags(${target})
    if(ONECARD_TEST_PCH)
        target_precompile_headers(${target} REUSE_FROM onecard_test_pch)
    endif()
    gtest_discover_tests(${target} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()

# onecard_add_module(NAME DEPS ...): a module library from every *.cpp (and *.cu when CUDA is on)
# in the calling directory. Globbing keeps parallel work on one module from fighting over lists.
function(onecard_add_module name)
    cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
    file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cpp)
    if(ONECARD_CUDA)
        file(GLOB cu_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/*/*.cu)
        list(APPEND srcs ${cu_srcs})
    endif()
    onecard_add_library(${name} SOURCES ${srcs} DEPS ${ARG_DEPS})
endfunction()

# onecard_test_paths(TARGET): the include root and the source and build directories (fixtures) every
# test executable, and tests/tools/tame_floor, compile against.
function(onecard_test_paths target)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # support/test_support.h
    target_compile_definitions(${target} PRIVATE
        ONECARD_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        ONECARD_BINARY_DIR="${PROJECT_BINARY_DIR}")
endfunction()

# onecard_test_flags(TARGET): a test executable's paths and optimisation level; onecard_add_test adds the
# precompiled header on top, onecard_test_pch builds it with exactly these, so the header is valid there.
function(onecard_test_flags target)
    onecard_test_paths(${target})
    set(release_cxx "$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<CONFIG:Debug>>>")
    target_compile_options(${target} PRIVATE "$<${release_cxx}:${ONECARD_TEST_OPT}>")
endfunction()

# onecard_test_pch: the object library that owns the tests' precompiled header, with a test's flags and
# libraries (their usage requirements are part of what the header was compiled with).
function(onecard_add_test_pch)
    if(NOT ONECARD_TEST_PCH)
        return()
    endif()
    add_library(onecard_test_pch OBJECT ${PROJECT_SOURCE_DIR}/tests/support/test_pch.cpp)
    target_link_libraries(onecard_test_pch PRIVATE ${ARGN} GTest::gtest)
    onecard_test_flags(onecard_test_pch)
    target_precompile_headers(onecard_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/tests/support/test_pch.h)
endfunction()
