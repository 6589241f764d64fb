// An HTTP request body through the OpenAI server's validation, for every JSON route
// (/v1/chat/completions for both chat variants, /v1/completions, /tokenize, /detokenize). The route
// handlers are called directly, with the same exception mapping the server's route wrapper applies
// (openai_server.cpp), on a server State that is not ready: a body that passes every check reaches
// admission and gets 503 there, so nothing is generated and every input is checked in full (parse,
// field validation, tool checks, chat rendering, tokenisation, context-length checks).
//
// Checks: nothing escapes but ApiError / nlohmann::json::exception / onecard::Error (anything else
// would be a 500 "internal error"); refusals are 400/404 (503 only after validation, never 5xx else);
// every response body, errors included, is valid JSON (messages may quote request text, so invalid
// UTF-8 must have been replaced).
#include "fuzz_util.h"

#include "core/error.h"
#include "onecard/engine.h"
#include "server/api_error.h"
#include "server/server_state.h"
#include "testing/fake_runner.h"

#include <cstddef>
#include <cstdint>
#include <memory>

using namespace onecard;
using namespace onecard::server;

namespace {

struct Harness {
    Engine engine;
    std::unique_ptr<OpenAIServer::State> v4, v0731;

    static EngineConfig engine_config() {
        EngineConfig c;
        c.kv_cache_bytes = 8 << 20;
        c.max_num_seqs = 2;
        return c;
    }
    static ServerOptions options() {
        ServerOptions o;
        o.access_log = false;
        return o;
    }
    static ModelInfo info(ChatVariant v) {
        ModelInfo i;
        i.served_model_name = "deepseek-v4-flash";
        i.root = "/fuzz";
        i.max_model_len = 4096;
        i.chat_variant = v;
        return i;
    }
    Harness() : engine(engine_config(), std::make_unique<FakeModelRunner>()) {
        const Tokenizer& tok = fuzz::v4_tokenizer();
        v4 = std::make_unique<OpenAIServer::State>(options(), tok, info(ChatVariant::V4));
        v0731 = std::make_unique<OpenAIServer::State>(options(), tok, info(ChatVariant::V40731));
        // The engine is attached after construction, as OpenAIServer::attach_engine does once loaded.
        v4->engine.store(&engine);
        v0731->engine.store(&engine);
        // ready stays false: validated requests stop at admission with 503.
    }
};

Harness& harness() {
    static Harness h;
    return h;
}

using Handler = void (*)(OpenAIServer::State&, const httplib::Request&, httplib::Response&);

void run_route(OpenAIServer::State& s, Handler fn, const char* route, const std::string& body, bool generates) {
    httplib::Request req;
    req.method = "POST";
    req.path = route;
    req.body = body;
    httplib::Response res;
    int status = 200;
    try {
        fn(s, req, res);
    } catch (const ApiError& e) {
        status = e.status();
        send_error(res, e.status(), e.what(), e.param(), e.code(), e.retry_after_s());
        const bool ok = status == 400 || status == 404 || (generates && status == 503);
        if (!ok) fuzz::fail(std::string(route) + ": ApiError status " + std::to_string(status) + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
        status = 400;
        send_error(res, 400, std::string("invalid request: ") + e.what());
    } catch (const Error& e) {
        status = 400;
        send_error(res, 400, e.what());
    } catch (const std::exception& e) {
        fuzz::fail(std::string(route) + ": exception the server answers with 500: " + e.what());
    }
    FUZZ_CHECK(!generates || status != 200, std::string(route) + " answered 200 from a server that is not ready");
    try {
        (void)nlohmann::json::parse(res.body);
    } catch (const nlohmann::json::exception& e) {
        fuzz::fail(std::string(route) + ": response body is not valid JSON (" + e.what() + ")");
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)harness();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Harness& h = harness();
    const std::string body(reinterpret_cast<const char*>(data), size);
    run_route(*h.v4, handle_chat_completions, "/v1/chat/completions", body, true);
    run_route(*h.v0731, handle_chat_completions, "/v1/chat/completions (0731)", body, true);
    run_route(*h.v4, handle_completions, "/v1/completions", body, true);
    run_route(*h.v4, handle_tokenize, "/tokenize", body, false);
    run_route(*h.v4, handle_detokenize, "/detokenize", body, false);
    return 0;
}
