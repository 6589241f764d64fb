// The pure parts of bench-serve/validate's client (tools/onecard/client): numpy-style percentiles,
// the summary, the table, the SVG writer's ticks and well-formed output, base-URL splitting and the
// live progress line's layout.
#include "http_client.h"
#include "progress.h"
#include "stats.h"
#include "svg_plot.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace onecard::client {
namespace {

// Report samples are cut to a byte budget without splitting a UTF-8 character (a split one made
// `onecard validate --out` fail on dump against the demo model's output).
TEST(ClientStats, Utf8PrefixNeverSplitsACharacter) {
    const std::string s =
        "ab\xC3\xA9"
        "c\xE2\x82\xAC\xF0\x9F\x98\x80";  // a b é c € 😀
    EXPECT_EQ(utf8_prefix(s, 100), s);
    EXPECT_EQ(utf8_prefix(s, 2), "ab");
    EXPECT_EQ(utf8_prefix(s, 3), "ab");  // inside é
    EXPECT_EQ(utf8_prefix(s, 4), "ab\xC3\xA9");
    EXPECT_EQ(utf8_prefix(s, 6),
              "ab\xC3\xA9"
              "c");  // inside €
    EXPECT_EQ(utf8_prefix(s, 8),
              "ab\xC3\xA9"
              "c\xE2\x82\xAC");
    EXPECT_EQ(utf8_prefix(s, 11),
              "ab\xC3\xA9"
              "c\xE2\x82\xAC");  // inside the 4-byte emoji
    EXPECT_EQ(utf8_prefix(s, 0), "");
    for (size_t n = 0; n <= s.size(); ++n)
        EXPECT_NO_THROW((void)nlohmann::json(utf8_prefix(s, n)).dump()) << n << " bytes";
}

TEST(ClientStats, PercentilesInterpolateLikeNumpy) {
    const std::vector<double> v = {4, 1, 3, 2};  // sorted 1 2 3 4
    EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
    EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
    EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
    EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
    EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
    EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
    EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
    const Summary s = summarize(v);
    EXPECT_EQ(s.n, 4u);
    EXPECT_DOUBLE_EQ(s.mean, 2.5);
    EXPECT_DOUBLE_EQ(s.max, 4);
}

TEST(ClientStats, TablePadsColumns) {
    const std::string t = format_table({{"a", "bb"}, {"ccc", "d"}});
    EXPECT_EQ(t, "a    bb\n-------\nccc  d\n");
    EXPECT_EQ(fmt_num(-1, 2), "-");
    EXPECT_EQ(fmt_num(1.234, 1), "1.2");
}

TEST(ClientSvg, NiceTicksAndWellFormedDocument) {
    const auto t = nice_ticks(0, 97);
    EXPECT_EQ(t.front(), 0);
    EXPECT_GE(t.back(), 97);
    EXPECT_EQ(t[1] - t[0], 20);
    PlotPanel p{"TTFT <ms>", "x & y", "ms", {{"s1", {1, 2, 3}, {10, 20, 15}, {"c1", "c2", "c4"}}}};
    const std::string svg = render_svg("title", {p, p});
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
    EXPECT_NE(svg.find("TTFT &lt;ms&gt;"), std::string::npos);
    EXPECT_NE(svg.find("x &amp; y"), std::string::npos);
    EXPECT_NE(svg.find("<polyline"), std::string::npos);
    EXPECT_EQ(std::count(svg.begin(), svg.end(), '<'), std::count(svg.begin(), svg.end(), '>'));
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(ClientHttp, BaseUrlAndPrometheus) {
    EXPECT_EQ(split_base_url("http://h:8000/v1/"), (std::pair<std::string, std::string>{"http://h:8000", ""}));
    EXPECT_EQ(split_base_url("https://h/api/v1"), (std::pair<std::string, std::string>{"https://h", "/api"}));
    const std::string m = "# HELP x\nvllm:prompt_tokens_total{model_name=\"m\"} 42\nvllm:other 3\n";
    EXPECT_EQ(prometheus_value(m, "vllm:prompt_tokens_total"), 42);
    EXPECT_EQ(prometheus_value(m, "vllm:other"), 3);
    EXPECT_EQ(prometheus_value(m, "vllm:missing"), -1);
}

TEST(ClientProgress, LineLayout) {
    EXPECT_EQ(progress_line("validate [1/7] tool_calls", 50, 100, -1, 3.26, 200),
              "validate [1/7] tool_calls [############------------] 50/100 3.3 s");
    EXPECT_EQ(progress_line("bench", 3, 0, 1200, 0.5, 200), "bench 3 1200 tok 0.5 s");
    EXPECT_EQ(progress_line("b", 200, 100, -1, 1, 200), "b [########################] 200/100 1.0 s");
    // Cut to the terminal, never wrapped, never inside a UTF-8 sequence.
    EXPECT_EQ(progress_line("ééé", 1, 2, -1, 1, 4), "é");
    EXPECT_EQ(progress_line("abcdef", 1, 2, -1, 1, 5), "abcd");
    // Disabled: note() is a plain line and nothing else is drawn.
    testing::internal::CaptureStderr();
    {
        Progress p(false);
        p.begin("x", 3);
        p.advance();
        p.note("a status line");
        p.end();
    }
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "a status line\n");
}

}  // namespace
}  // namespace onecard::client
