// StopChecker: stop strings over text deltas with hold-back; nothing emitted is ever retracted.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <random>

namespace onecard {
namespace {

TEST(StopChecker, HoldsBackPartialStopString) {
    StopChecker sc({"</end>"}, false);
    auto r = sc.push("abc</e");
    EXPECT_EQ(r.text, "abc");
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(sc.held(), "</e");
    r = sc.push("nd>xyz");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.matched, "</end>");
}

TEST(StopChecker, IncludeStopString) {
    StopChecker sc({"</end>"}, true);
    EXPECT_EQ(sc.push("ab</").text, "ab");
    auto r = sc.push("end>tail");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "</end>");
}

TEST(StopChecker, FalseAlarmReleasesText) {
    StopChecker sc({"<|x|>"}, false);
    EXPECT_EQ(sc.push("ab<").text, "ab");
    EXPECT_EQ(sc.push("|").text, "");
    EXPECT_EQ(sc.push("y").text, "<|y");
    EXPECT_EQ(sc.flush(), "");
}

TEST(StopChecker, FlushReleasesHeldText) {
    StopChecker sc({"STOP"}, false);
    EXPECT_EQ(sc.push("go ST").text, "go ");
    EXPECT_EQ(sc.flush(), "ST");
}

TEST(StopChecker, EarliestMatchWins) {
    StopChecker sc({"cd", "bcdx", "b"}, false);
    auto r = sc.push("abcdx");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.matched, "bcdx");  // starts at 1 like "b", and is longer
    EXPECT_EQ(r.text, "a");
}

TEST(StopChecker, StopInsideOneDelta) {
    StopChecker sc({"\n\n"}, false);
    auto r = sc.push("line one\n\nline two");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "line one");
}

// Random texts cut into random deltas: the emitted stream is always a prefix of the expected output
// (text before the first stop string), and the final emission equals it exactly.
TEST(StopChecker, RandomDeltasNeverEmitPartialStops) {
    std::mt19937 rng(17);
    const std::vector<std::string> stops = {"abc", "bcb", "ccccd", "a\xc3\xa9"};
    for (int trial = 0; trial < 3000; ++trial) {
        std::string text;
        const size_t len = 1 + rng() % 40;
        for (size_t i = 0; i < len; ++i) text.push_back("abcd"[rng() % 4]);
        size_t first = std::string::npos;
        for (const auto& s : stops) first = std::min(first, text.find(s));
        const std::string expected = first == std::string::npos ? text : text.substr(0, first);
        StopChecker sc(stops, false);
        std::string emitted;
        bool stopped = false;
        for (size_t pos = 0; pos < text.size() && !stopped;) {
            const size_t n = 1 + rng() % 5;
            auto r = sc.push(std::string_view(text).substr(pos, n));
            pos += n;
            emitted += r.text;
            ASSERT_EQ(expected.compare(0, emitted.size(), emitted), 0) << "emitted '" << emitted << "' for " << text;
            ASSERT_LE(emitted.size(), expected.size());
            stopped = r.stopped;
        }
        if (!stopped) emitted += sc.flush();
        ASSERT_EQ(stopped, first != std::string::npos) << text;
        ASSERT_EQ(emitted, expected) << text;
    }
}

}  // namespace
}  // namespace onecard
