#include "parallel/bootstrap_file.h"

#include "core/error.h"

#include <unistd.h>

#include <fstream>
#include <system_error>
#include <thread>

namespace onecard::parallel {

void publish_bootstrap_id(const std::filesystem::path& path, const void* bytes, size_t n_bytes) {
    namespace fs = std::filesystem;
    std::error_code ec;
    ONECARD_CHECK(!fs::exists(path, ec),
                  "bootstrap: {} already exists (left by an earlier launch?); remove it or give a fresh path",
                  path.string());
    fs::path tmp = path;
    tmp += ".tmp." + std::to_string(::getpid());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        ONECARD_CHECK(f.good(), "bootstrap: cannot write {}", tmp.string());
        f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n_bytes));
        f.flush();
        ONECARD_CHECK(f.good(), "bootstrap: writing {} failed", tmp.string());
    }
    fs::rename(tmp, path, ec);  // atomic on one filesystem: readers see nothing or the whole id
    if (ec) {
        fs::remove(tmp, ec);
        fail("bootstrap: cannot rename the id file to {}", path.string());
    }
}

std::vector<uint8_t> wait_bootstrap_id(const std::filesystem::path& path, size_t n_bytes,
                                       std::chrono::milliseconds timeout) {
    namespace fs = std::filesystem;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        std::error_code ec;
        if (fs::exists(path, ec)) {
            const auto size = fs::file_size(path, ec);
            ONECARD_CHECK(!ec && size == n_bytes, "bootstrap: {} holds {} bytes, expected an id of {}", path.string(),
                          ec ? 0 : size, n_bytes);
            std::vector<uint8_t> out(n_bytes);
            std::ifstream f(path, std::ios::binary);
            f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n_bytes));
            ONECARD_CHECK(f.gcount() == static_cast<std::streamsize>(n_bytes), "bootstrap: short read of {}",
                          path.string());
            return out;
        }
        ONECARD_CHECK(std::chrono::steady_clock::now() < deadline,
                      "bootstrap: no id at {} after {} ms (did rank 0 start, with the same path?)", path.string(),
                      timeout.count());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

}  // namespace onecard::parallel
