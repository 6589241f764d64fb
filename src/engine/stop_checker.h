// Stop strings over streamed text. Text that could still be the start of a stop string is held back,
// so a partial stop string is never emitted: with stop "</end>", the deltas "abc</e" then "nd>x" emit
// "abc" and then finish with nothing more (or "</end>" when include_stop_str is set).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace onecard {

class StopChecker {
public:
    StopChecker(std::vector<std::string> stop_strings, bool include_stop_str);

    struct Result {
        std::string text;      // safe to emit now
        bool stopped = false;  // a stop string completed; emit text, then finish
        std::string matched;   // which stop string
    };
    // Feed the next text delta. After stopped == true, further pushes are an error.
    Result push(std::string_view delta);
    // The request finished for another reason (length, EOS): release the held-back text.
    std::string flush();
    const std::string& held() const { return pending_; }

private:
    std::vector<std::string> stops_;
    bool include_stop_str_;
    bool stopped_ = false;
    std::string pending_;  // held-back text: a suffix that is a proper prefix of some stop string
};

}  // namespace onecard
