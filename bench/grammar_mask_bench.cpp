// Grammar-constrained decoding cost at the real vocabulary size (129,280 ids: the DeepSeek-V4
// vocabulary when scripts/setup.sh installed the tokenizer, else a synthetic byte-level one).
//   build-grammar/bench/grammar_mask_bench --benchmark_min_time=1
// MaskPerToken replays a typical document token by token (the real tokenizer's split): each step
// computes the next-token mask over the whole vocabulary, then accepts the token. Counters:
// median_us / p90_us / max_us per mask; "warm" runs with the grammar's token-set cache already
// filled by an earlier request with the same schema (the server's steady state), "cold" builds it
// during the document (the first request with a new schema). SchemaCompile is schema -> grammar.
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_masks.h"
#include "grammar/token_trie.h"
#include "tokenizer/deepseek_v4_vocab.h"
#include "tokenizer/tokenizer.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace onecard;
using namespace onecard::grammar;

struct Vocab {
    std::unique_ptr<Tokenizer> tok;  // null: synthetic
    std::shared_ptr<const TokenTrie> trie;
};

const Vocab& vocab() {
    static const Vocab v = [] {
        Vocab out;
        try {
            std::ifstream in(find_v3_tokenizer_json());
            out.tok =
                std::make_unique<Tokenizer>(Tokenizer::from_json(make_v4_tokenizer_json(nlohmann::json::parse(in))));
            out.trie = TokenTrie::from_tokenizer(*out.tok);
            return out;
        } catch (const std::exception&) {
        }
        // Synthetic: 256 bytes, then joins of JSON-ish fragments and words up to 129,280 ids.
        const std::vector<std::string> frag = {
            "{",    "}",   "[",  "]", ",",  ":",   "\"", "\":",  "\",\"", "name", "id",
            " the", "ing", "er", "é", "中", "0",   "12", "345",  ".",     "-",    "true",
            "null", "a",   "b",  "c", "_",  "\\n", " ",  "tion", "val",   "ue"};
        std::vector<std::string> bytes;
        for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
        std::mt19937_64 rng(1);
        while (bytes.size() < 129280) {
            std::string s;
            for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) s += frag[rng() % frag.size()];
            bytes.push_back(s);
        }
        out.trie = std::make_shared<const TokenTrie>(std::move(bytes));
        return out;
    }();
    return v;
}

// Greedy longest-match split over the trie (synthetic vocabulary only).
std::vector<int32_t> greedy_split(const TokenTrie& trie, std::string_view doc) {
    std::vector<int32_t> ids;
    size_t pos = 0;
    while (pos < doc.size()) {
        uint32_t node = 0;
        int32_t best = -1;
        size_t best_len = 0;
        for (size_t d = pos; d < doc.size(); ++d) {
            uint32_t c = node + 1, found = 0;
            for (; c < trie.subtree_end(node); c = trie.subtree_end(c))
                if (trie.byte(c) == static_cast<uint8_t>(doc[d])) {
                    found = c;
                    break;
                }
            if (!found) break;
            node = found;
            if (!trie.tokens(node).empty()) {
                best = trie.tokens(node)[0];
                best_len = d - pos + 1;
            }
        }
        ids.push_back(best);
        pos += best_len;
    }
    return ids;
}

struct Workload {
    const char* name;
    const char* schema;  // nullptr: json_object
    const char* doc;
};

const std::vector<Workload>& workloads() {
    static const std::vector<Workload> w = {
        {"person",
         R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
            "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"maxItems":8},
            "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
            "zip":{"type":"string"}},"required":["city"],"additionalProperties":false}},"required":["name","age"],
            "additionalProperties":false})",
         R"({"name":"Alice Johnson","age":34,"email":"alice.johnson@example.com","tags":["engineer","runner","coffee lover"],"address":{"street":"221B Baker Street","city":"London","zip":"NW1 6XE"}})"},
        {"tool_args",
         R"({"type":"object","properties":{"location":{"type":"string","description":"City and country"},
            "unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14},
            "include_hourly":{"type":"boolean"}},"required":["location","unit","days","include_hourly"],
            "additionalProperties":false})",
         R"({"location":"São Paulo, Brazil","unit":"celsius","days":7,"include_hourly":false})"},
        {"enum_anyof_ref",
         R"({"$defs":{"item":{"type":"object","properties":{"sku":{"type":"string","format":"uuid"},
            "qty":{"type":"integer","minimum":1},"price":{"type":"number","minimum":0}},"required":["sku","qty","price"],
            "additionalProperties":false}},"type":"object","properties":{"status":{"enum":["pending","shipped","delivered"]},
            "items":{"type":"array","items":{"$ref":"#/$defs/item"},"minItems":1},"note":{"anyOf":[{"type":"string"},{"type":"null"}]}},
            "required":["status","items","note"],"additionalProperties":false})",
         R"({"status":"shipped","items":[{"sku":"123e4567-e89b-12d3-a456-426614174000","qty":2,"price":19.99},{"sku":"9b2f0c1e-4d3a-4b7e-8c9d-0a1b2c3d4e5f","qty":1,"price":249.5}],"note":"Leave at the door, ring twice."})"},
        {"json_object", nullptr,
         R"({"summary":"The meeting covered Q3 results and hiring.","action_items":[{"owner":"Bob","task":"send the slides","due":"2026-07-01"},{"owner":"Eve","task":"review \"budget\" draft"}],"score":0.87,"final":true})"},
    };
    return w;
}

std::shared_ptr<const Grammar> grammar_of(const Workload& w) {
    return w.schema ? compile_json_schema_text(w.schema) : json_object_grammar();
}

std::vector<int32_t> tokens_of(const Workload& w) {
    const Vocab& v = vocab();
    return v.tok ? v.tok->encode(w.doc, false) : greedy_split(*v.trie, w.doc);
}

void run_mask(benchmark::State& state, const Workload& w, bool warm) {
    const Vocab& v = vocab();
    const auto grammar = grammar_of(w);
    const auto ids = tokens_of(w);
    auto masks = std::make_shared<const TokenMasks>(grammar, v.trie);
    std::vector<uint32_t> mask(v.trie->n_mask_words());  // [n_mask_words]
    auto replay = [&](const std::shared_ptr<const TokenMasks>& m, std::vector<double>* us) {
        GrammarMatcher matcher(m);
        for (const int32_t id : ids) {
            const auto t0 = std::chrono::steady_clock::now();
            matcher.fill_next_token_mask(mask);
            const auto t1 = std::chrono::steady_clock::now();
            if (us) us->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
            if (!test_bit(mask, id) || !matcher.accept_token(id)) {
                state.SkipWithError("document token not in the mask");
                return;
            }
        }
        if (!matcher.can_terminate()) state.SkipWithError("document not complete");
    };
    if (warm) replay(masks, nullptr);
    std::vector<double> us;
    for (auto _ : state) {
        if (!warm) {
            state.PauseTiming();
            masks = std::make_shared<const TokenMasks>(grammar, v.trie);
            state.ResumeTiming();
        }
        replay(masks, &us);
    }
    std::sort(us.begin(), us.end());
    if (us.empty()) return;
    state.counters["median_us"] = us[us.size() / 2];
    state.counters["p90_us"] = us[us.size() * 9 / 10];
    state.counters["max_us"] = us.back();
    state.counters["tokens"] = static_cast<double>(ids.size());
    state.counters["vocab"] = static_cast<double>(v.trie->vocab_size());
    state.counters["real_vocab"] = v.tok ? 1 : 0;
    state.counters["cached_nodes"] = static_cast<double>(masks->n_cached_nodes());
    state.counters["cache_KiB"] = static_cast<double>(masks->cache_bytes()) / 1024.0;
    state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}

void BM_SchemaCompile(benchmark::State& state, const Workload& w) {
    size_t n_nodes = 0;
    for (auto _ : state) {
        auto g = grammar_of(w);
        n_nodes = g->n_nodes();
        benchmark::DoNotOptimize(g);
    }
    state.counters["grammar_nodes"] = static_cast<double>(n_nodes);
}

void BM_TrieBuild(benchmark::State& state) {
    const Vocab& v = vocab();
    std::vector<std::string> bytes;
    for (size_t i = 0; i < v.trie->vocab_size(); ++i) bytes.push_back(v.trie->token_bytes(static_cast<int32_t>(i)));
    for (auto _ : state) benchmark::DoNotOptimize(std::make_shared<const TokenTrie>(bytes));
    state.counters["trie_nodes"] = static_cast<double>(v.trie->n_nodes());
}

const bool registered = [] {
    for (const auto& w : workloads()) {
        benchmark::RegisterBenchmark((std::string("BM_SchemaCompile/") + w.name).c_str(), BM_SchemaCompile, w)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((std::string("BM_MaskPerToken/") + w.name + "/warm").c_str(),
                                     [&w](benchmark::State& s) { run_mask(s, w, true); })
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark((std::string("BM_MaskPerToken/") + w.name + "/cold").c_str(),
                                     [&w](benchmark::State& s) { run_mask(s, w, false); })
            ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("BM_TrieBuild", BM_TrieBuild)->Unit(benchmark::kMillisecond);
    return true;
}();

}  // namespace

BENCHMARK_MAIN();
