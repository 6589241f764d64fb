// The test suite's precompiled header (cmake/onecard_helpers.cmake, onecard_add_test): the library
// headers most test sources include, parsed once for all of them instead of once per test binary.
// Only third-party and standard headers: a project header here would rebuild every test when it changes.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
