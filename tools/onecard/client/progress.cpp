#include "progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace onecard::client {

namespace {

constexpr auto kRedraw = std::chrono::milliseconds(150);

size_t terminal_width() {
    winsize ws{};
    if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

}  // namespace

bool stderr_is_tty() {
    return ::isatty(STDERR_FILENO) == 1;
}

std::string progress_line(const std::string& label, int64_t done, int64_t total, int64_t tokens, double elapsed_s,
                          size_t width) {
    std::string s = label;
    if (total > 0) {
        constexpr int64_t kBar = 24;
        const int64_t filled = std::clamp<int64_t>(done * kBar / total, 0, kBar);
        s += " [" + std::string(static_cast<size_t>(filled), '#') +
             std::string(static_cast<size_t>(kBar - filled), '-') + "] " + fmt::format("{}/{}", done, total);
    } else {
        s += fmt::format(" {}", done);
    }
    if (tokens >= 0) s += fmt::format(" {} tok", tokens);
    s += fmt::format(" {:.1f} s", elapsed_s);
    // Never wrap: a wrapped line cannot be redrawn in place. Cut on a UTF-8 boundary.
    if (width > 1 && s.size() > width - 1) {
        size_t cut = width - 1;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        s.resize(cut);
    }
    return s;
}

Progress::Progress(bool enabled) : enabled_(enabled) {
    if (enabled_) drawer_ = std::thread([this] { draw_loop(); });
}

Progress::~Progress() {
    if (!enabled_) return;
    {
        std::lock_guard lk(mu_);
        stop_ = true;
        clear_locked();
    }
    cv_.notify_all();
    drawer_.join();
}

void Progress::begin(const std::string& label, int64_t total) {
    std::lock_guard lk(mu_);
    label_ = label;
    t0_ = std::chrono::steady_clock::now();
    done_ = 0;
    total_ = total;
    tokens_ = -1;
    active_ = true;
    draw_locked();  // at once: a short phase shows too
}

void Progress::add_total(int64_t n) {
    total_ += n;
}

void Progress::advance(int64_t n, int64_t tokens) {
    done_ += n;
    if (tokens > 0) {
        int64_t cur = tokens_.load();
        while (!tokens_.compare_exchange_weak(cur, std::max<int64_t>(cur, 0) + tokens)) {
        }
    }
}

void Progress::end() {
    std::lock_guard lk(mu_);
    active_ = false;
    clear_locked();
}

void Progress::note(const std::string& line) {
    std::lock_guard lk(mu_);
    clear_locked();
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    if (active_) draw_locked();
}

void Progress::draw_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
        if (active_) draw_locked();
        cv_.wait_for(lk, kRedraw, [this] { return stop_; });
    }
}

void Progress::draw_locked() {
    if (!enabled_) return;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const std::string s = progress_line(label_, done_.load(), total_.load(), tokens_.load(), secs, terminal_width());
    // \r and erase-to-end-of-line: the shorter new line leaves nothing of the old one behind.
    std::fprintf(stderr, "\r%s\x1b[K", s.c_str());
    std::fflush(stderr);
    drawn_ = true;
}

void Progress::clear_locked() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stderr, "\r\x1b[K");
    std::fflush(stderr);
    drawn_ = false;
}

}  // namespace onecard::client
