// Load against the real CPU DeepSeek-V4 model (the small demo preset: real V4 vocabulary, random
// weights) behind the in-process server: 64 concurrent streaming requests, about a third of them
// hung up by the client mid-stream. No response may be 5xx, every request that was read to the end
// ends with [DONE], and afterwards nothing is running or waiting and every KV block is free again,
// as /metrics reports it.
#include "server_test_util.h"
#include "support/time_scale.h"

#include "engine/cpu_model_runner.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include <atomic>
#include <mutex>
#include <random>

using namespace onecard;
using namespace onecard::test;
using Json = nlohmann::json;

TEST(ServerLoad, SixtyFourConcurrentStreamsWithRandomAborts) {
    ONECARD_NEED_TOKENIZER();
    const auto dir = test_tmp_dir("load_ckpt");
    SynthOptions so;
    so.preset = SynthPreset::Small;
    so.layers = 2;  // keep CI fast: two layers (SWA + CSA), the real vocabulary
    const ModelConfig cfg = synth_config(so);
    synth_write(cfg, 3, dir, synth_default_shard_bytes(SynthPreset::Small), false, 2);
    const ModelConfig loaded = load_config(dir / "config.json");
    Checkpoint ckpt = Checkpoint::open(dir);
    const DeepSeekV4 model(loaded, bind_weights(loaded, ckpt), Numerics::Reference);
    ASSERT_EQ(static_cast<size_t>(loaded.vocab_size), tok.vocab_size());

    server::ServerOptions o;
    o.max_queued_requests = 128;
    TestServer s(o, std::make_unique<CpuModelRunner>(model, 512), tok, 512, /*max_num_seqs=*/16);
    auto c0 = s.client();
    const std::string base_metrics = c0.Get("/metrics")->body;
    const double free0 = metric_value(base_metrics, "onecard:kv_cache_free_blocks");
    ASSERT_GT(free0, 0);

    constexpr int kN = 64;
    std::atomic<int> n_5xx{0}, n_done{0}, n_aborted{0}, n_other{0};
    std::mutex mu;
    std::vector<std::string> problems;
    std::vector<std::thread> clients;
    const auto t_start = std::chrono::steady_clock::now();
    for (int i = 0; i < kN; ++i) {
        clients.emplace_back([&, i] {
            std::mt19937 rng(1000 + i);
            const bool chat = i % 2 == 0;
            const bool abort = rng() % 3 == 0;
            const int abort_after = 1 + static_cast<int>(rng() % 3);
            Json body = {{"stream", true},
                         {"max_tokens", 3 + static_cast<int>(rng() % 6)},
                         {"temperature", 1.0},
                         {"seed", i},
                         {"ignore_eos", true}};
            if (chat)
                body["messages"] = {{{"role", "user"}, {"content", "Tell me about request " + std::to_string(i)}}};
            else
                body["prompt"] = "Request number " + std::to_string(i) + " says";
            httplib::Request req;
            req.method = "POST";
            req.path = chat ? "/v1/chat/completions" : "/v1/completions";
            req.set_header("Content-Type", "application/json");
            req.body = body.dump();
            std::string got;
            int n_chunks = 0;
            req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
                got.append(d, n);
                return !(abort && ++n_chunks >= abort_after);
            };
            auto c = s.client();
            auto r = c.send(req);
            if (!r) {
                if (abort)
                    ++n_aborted;
                else {
                    ++n_other;
                    std::lock_guard lk(mu);
                    problems.push_back(
                        "request " + std::to_string(i) + ": " + httplib::to_string(r.error()) + " after receiving " +
                        std::to_string(got.size()) + " bytes at " +
                        std::to_string(
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count()) +
                        " s: " + got.substr(0, 400));
                }
                return;
            }
            if (r->status >= 500) ++n_5xx;
            if (r->status == 200 && got.find("data: [DONE]") != std::string::npos) {
                ++n_done;
            } else if (!abort) {
                ++n_other;
                std::lock_guard lk(mu);
                problems.push_back("request " + std::to_string(i) + ": status " + std::to_string(r->status) + " " +
                                   got.substr(0, 300));
            } else {
                ++n_aborted;  // finished before our abort point
            }
        });
    }
    for (auto& t : clients) t.join();
    for (const auto& p : problems) ADD_FAILURE() << p;
    EXPECT_EQ(n_5xx.load(), 0);
    EXPECT_EQ(n_other.load(), 0);
    EXPECT_EQ(n_done.load() + n_aborted.load(), kN);
    EXPECT_GT(n_aborted.load(), 5);

    // Everything drains back to the baseline.
    std::string m;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(20.0 * time_scale());
    for (;;) {
        m = c0.Get("/metrics")->body;
        const bool idle = metric_value(m, "vllm:num_requests_running") == 0 &&
                          metric_value(m, "vllm:num_requests_waiting") == 0 &&
                          metric_value(m, "onecard:kv_cache_free_blocks") == free0 &&
                          metric_value(m, "onecard:num_http_requests_inflight") == 0;
        if (idle || std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(metric_value(m, "vllm:num_requests_running"), 0) << m;
    EXPECT_EQ(metric_value(m, "vllm:num_requests_waiting"), 0);
    EXPECT_EQ(metric_value(m, "onecard:kv_cache_free_blocks"), free0);
    EXPECT_EQ(metric_value(m, "vllm:kv_cache_usage_perc"), 0);
    EXPECT_EQ(metric_value(m, "onecard:num_http_requests_inflight"), 0);
    EXPECT_NO_THROW(s.srv->check_integrity());
    EXPECT_EQ(m.find("status=\"5"), std::string::npos) << m;
    // Client hang-ups reached the engine as cancellations (not just closed sockets after the end).
    const std::string abort_key = "finished_reason=\"abort\"} ";
    const size_t ap = m.find(abort_key);
    ASSERT_NE(ap, std::string::npos);
    const int n_engine_aborts = std::stoi(m.substr(ap + abort_key.size()));
    EXPECT_GT(n_engine_aborts, 0);
    std::printf("64 streams: %d read to [DONE], %d hung up by the client, %d cancelled in the engine\n", n_done.load(),
                n_aborted.load(), n_engine_aborts);
    std::filesystem::remove_all(dir);
}
