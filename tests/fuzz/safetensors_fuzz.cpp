// The safetensors header parser and the checkpoint loader (src/loader/safetensors.h, checkpoint.h).
// Input: [flags: 1 byte][payload]. The payload is parsed in memory by parse_safetensors; an accepted
// header must keep the documented invariants (entries in file order, each range inside the data
// buffer and sized shape x dtype, the non-empty ranges tiling the buffer to the end of the file).
// With flags & 1 the payload is also written to a temp checkpoint directory and opened from disk,
// as model.safetensors (SafetensorsFile + Checkpoint::open must agree with the in-memory parse),
// or, with flags & 2, as a shard behind a model.safetensors.index.json that the payload's own first
// line provides ([index JSON]\n[shard bytes]). Refusals must be onecard::Error.
#include "fuzz_util.h"

#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

using namespace onecard;
namespace fs = std::filesystem;

namespace {

const fs::path& temp_dir() {
    static const fs::path d = [] {
        fs::path p = fs::temp_directory_path() / ("onecard-safetensors-fuzz-" + std::to_string(::getpid()));
        fs::create_directories(p);
        return p;
    }();
    return d;
}

void write(const fs::path& p, std::string_view bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void check_header(const SafetensorsHeader& h, size_t file_size) {
    FUZZ_CHECK(h.data_start >= 10 && h.data_start <= file_size, "data_start outside the file");
    const uint64_t buffer = file_size - h.data_start;
    uint64_t next = 0;
    uint64_t prev_begin = 0;
    for (const auto& t : h.tensors) {
        FUZZ_CHECK(t.begin <= t.end && t.end <= buffer, "range outside the data buffer: " + t.name);
        FUZZ_CHECK(t.begin >= prev_begin, "entries not in file order");
        prev_begin = t.begin;
        unsigned __int128 n = dtype_size(t.dtype);
        for (int64_t d : t.shape) {
            FUZZ_CHECK(d >= 0, "negative dim");
            n *= static_cast<uint64_t>(d);
        }
        FUZZ_CHECK(n == t.end - t.begin, "range size != shape x dtype size: " + t.name);
        if (t.end > t.begin) {
            FUZZ_CHECK(t.begin == next, "non-empty ranges do not tile the buffer");
            next = t.end;
        }
    }
    FUZZ_CHECK(next == buffer, "data buffer not covered to the end of the file");
}

void check_views(const std::vector<TensorView>& views, const SafetensorsHeader& h) {
    FUZZ_CHECK(views.size() == h.tensors.size(), "tensor count differs from the in-memory parse");
    for (size_t i = 0; i < views.size(); ++i) {
        FUZZ_CHECK(views[i].name == h.tensors[i].name, "tensor order differs from the in-memory parse");
        FUZZ_CHECK(views[i].nbytes == h.tensors[i].end - h.tensors[i].begin, "tensor size differs");
        // Touch the bytes: ASan/the mapping would catch a view past the end of the file.
        volatile std::byte sink{};
        if (views[i].nbytes) sink = views[i].data[views[i].nbytes - 1];
        (void)sink;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
    std::string_view index_json;
    if (flags & 2) {
        const size_t nl = payload.find('\n');
        if (nl == std::string_view::npos) return 0;
        index_json = payload.substr(0, nl);
        payload = payload.substr(nl + 1);
    }

    SafetensorsHeader h;
    bool parsed = false;
    try {
        h = parse_safetensors(std::as_bytes(std::span(payload.data(), payload.size())), "fuzz");
        parsed = true;
    } catch (const Error&) {
    } catch (const std::exception& e) {
        fuzz::fail(std::string("parse_safetensors threw a non-onecard exception: ") + e.what());
    }
    if (parsed) check_header(h, payload.size());
    if (!(flags & 3)) return 0;

    const fs::path dir = temp_dir();
    for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
    const fs::path shard = dir / ((flags & 2) ? "model-00001-of-00001.safetensors" : "model.safetensors");
    write(shard, payload);
    if (flags & 2) write(dir / "model.safetensors.index.json", index_json);

    if (!(flags & 2)) {
        try {
            SafetensorsFile f(shard);
            FUZZ_CHECK(parsed, "SafetensorsFile accepted what parse_safetensors refused");
            f.check_integrity();
            check_views(f.tensors(), h);
        } catch (const Error&) {
            FUZZ_CHECK(!parsed, "SafetensorsFile refused what parse_safetensors accepted");
        }
    }
    try {
        Checkpoint ck = Checkpoint::open(dir);
        FUZZ_CHECK(parsed, "Checkpoint::open accepted a shard parse_safetensors refused");
        ck.check_integrity();
        check_views(ck.tensors(), h);
        for (const auto& t : h.tensors) FUZZ_CHECK(ck.find(t.name) != nullptr, "find() misses " + t.name);
    } catch (const Error&) {
        FUZZ_CHECK(!parsed || (flags & 2), "Checkpoint::open refused a valid single-file checkpoint");
    } catch (const std::exception& e) {
        fuzz::fail(std::string("Checkpoint::open threw a non-onecard exception: ") + e.what());
    }
    return 0;
}
