// Wall-clock bounds in tests that time the server (a deadline fires within X s, the engine drains
// within Y s) hold on a plain build; under a sanitizer the same work runs several times slower.
// scripts/sanitize.sh sets ONECARD_TEST_TIME_SCALE (asan 3, tsan 10) and those tests multiply their
// upper bounds by it. The bounds still separate what they test: e.g. a 300 ms handshake deadline
// scaled to 20 s stays below the 30 s header deadline it must not be confused with.
#pragma once

#include <cstdlib>
#include <string>

namespace onecard::test {

inline double time_scale() {
    const char* env = std::getenv("ONECARD_TEST_TIME_SCALE");
    if (env == nullptr || *env == '\0') return 1.0;
    const double v = std::strtod(env, nullptr);
    return v >= 1.0 ? v : 1.0;
}

// "timeout N " for a child command bounded at secs seconds on a plain build.
inline std::string timeout_prefix(int secs) {
    return "timeout " + std::to_string(static_cast<int>(secs * time_scale())) + " ";
}

}  // namespace onecard::test
