// config.json parsing (src/model/config.h): any bytes -> JSON -> parse_config. A config it accepts
// must survive its own official form: parse_config(to_official_json(c)) accepts it and writes the same
// JSON again. Refusals are onecard::Error only (the contract: naming the key), never a nlohmann
// exception escaping as an "internal error".
#include "core/error.h"
#include "fuzz_util.h"
#include "model/config.h"

#include <cstddef>
#include <cstdint>

using namespace onecard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
    } catch (const nlohmann::json::exception&) {
        return 0;
    }
    ModelConfig cfg;
    try {
        cfg = parse_config(j);
    } catch (const Error&) {
        return 0;
    } catch (const std::exception& e) {
        fuzz::fail(std::string("parse_config threw a non-onecard exception: ") + e.what());
    }
    const nlohmann::json official = to_official_json(cfg);
    ModelConfig again;
    try {
        again = parse_config(official);
    } catch (const std::exception& e) {
        fuzz::fail(std::string("parse_config refused its own to_official_json: ") + e.what() + "\n" + official.dump());
    }
    FUZZ_CHECK(to_official_json(again) == official, "to_official_json is not a fixed point");
    return 0;
}
