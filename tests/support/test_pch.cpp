// The object that owns the tests' precompiled header (onecard_add_test_pch in cmake/onecard_helpers.cmake).
