// A live progress line for `onecard validate` and `bench-serve`: a bar redrawn in place on stderr a few
// times a second while requests run. It draws only when enabled (stderr is a terminal and no
// --no-progress), so logs and CI output get nothing from it; disabled, note() is a plain line on
// stderr, which keeps the commands' own status lines identical either way.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace onecard::client {

// Whether stderr is a terminal (where a redrawn line makes sense).
bool stderr_is_tty();

// The line drawn for a phase: "LABEL [#####-----] DONE/TOTAL[ TOKENS tok] SECS s", cut to `width`
// columns. `total` <= 0 draws no bar; `tokens` < 0 leaves the token count out.
std::string progress_line(const std::string& label, int64_t done, int64_t total, int64_t tokens, double elapsed_s,
                          size_t width);

class Progress {
public:
    explicit Progress(bool enabled);
    ~Progress();  // stops drawing and clears the line
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    bool enabled() const { return enabled_; }
    // Starts a phase: the label, 0 of `total` done, the clock and the token count reset.
    void begin(const std::string& label, int64_t total);
    void add_total(int64_t n);                        // work found after begin()
    void advance(int64_t n = 1, int64_t tokens = 0);  // `tokens` > 0 shows a token count
    void end();                                       // clears the line until the next begin()
    // A regular status line on stderr (the line is cleared first and redrawn after).
    void note(const std::string& line);

private:
    void draw_loop();
    void draw_locked();   // mu_ held
    void clear_locked();  // mu_ held

    const bool enabled_;
    std::mutex mu_;  // guards label_, t0_, active_, stop_ and every write to stderr
    std::condition_variable cv_;
    std::string label_;
    std::chrono::steady_clock::time_point t0_;
    bool active_ = false, stop_ = false, drawn_ = false;
    std::atomic<int64_t> done_{0}, total_{0}, tokens_{-1};
    std::thread drawer_;
};

}  // namespace onecard::client
