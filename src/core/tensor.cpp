#include "core/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace onecard {

std::string shape_str(const std::vector<int64_t>& shape) {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace onecard
