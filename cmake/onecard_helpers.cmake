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
function(onecard_add_test file label)
    get_filename_component(stem ${file} NAME_WE)
    set(target test_${label}_${stem})
    add_executable(${target} ${file})
    target_link_libraries(${target} PRIVATE ${ARGN} GTest::gtest GTest::gtest_main)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # support/test_support.h
    target_compile_definitions(${target} PRIVATE
        ONECARD_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        ONECARD_BINARY_DIR="${PROJECT_BINARY_DIR}")
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
