// Marker scanning shared by the streaming output parsers: find the earliest of several markers in a buffer,
// and measure how much of the buffer's tail could still become a marker once more text arrives (that tail
// is held back so no partial marker ever reaches the client).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace onecard {

struct MarkerHit {
    size_t pos = std::string_view::npos;  // npos: none of the markers occurs
    size_t marker = 0;                    // index into the marker list
    bool found() const { return pos != std::string_view::npos; }
};

// Earliest occurrence of any marker in `buf` (ties go to the earlier marker in the list).
MarkerHit find_first_marker(std::string_view buf, std::initializer_list<std::string_view> markers);

// Length of the longest suffix of `buf` that is a proper, non-empty prefix of one of `markers`.
size_t partial_marker_suffix(std::string_view buf, std::initializer_list<std::string_view> markers);

// Number of '\n' characters (at most `max_n`) that end `buf`.
size_t trailing_newlines(std::string_view buf, size_t max_n);

}  // namespace onecard
