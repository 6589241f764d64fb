// onecard error type: every recoverable failure (bad checkpoint, bad config, bad request) is an
// onecard::Error whose message names the offending file/tensor/field. Programming errors use assert.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace onecard {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace onecard

// ONECARD_CHECK(cond, "fmt", args...): throw onecard::Error with the formatted message if !cond.
#define ONECARD_CHECK(cond, ...)                   \
    do {                                           \
        if (!(cond)) ::onecard::fail(__VA_ARGS__); \
    } while (0)
