#include "loader/manifest.h"

#include "core/error.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

namespace onecard {

namespace {

namespace fs = std::filesystem;

constexpr size_t kReadChunk = size_t{4} << 20;  // large reads: shards are multi-GB and sequential

struct EvpCtxDeleter {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

// Hashes one file; adds the bytes read to *bytes_done as it goes (for the progress bar).
std::string hash_file(const fs::path& path, std::vector<unsigned char>& buffer, std::atomic<uint64_t>* bytes_done) {
    const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ONECARD_CHECK(fd.get() >= 0, "{}: cannot open: {}", path.string(), std::strerror(errno));
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    std::unique_ptr<EVP_MD_CTX, EvpCtxDeleter> ctx(EVP_MD_CTX_new());
    ONECARD_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "{}: SHA-256 init failed",
                  path.string());
    buffer.resize(kReadChunk);
    for (;;) {
        const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
        if (n < 0 && errno == EINTR) continue;
        ONECARD_CHECK(n >= 0, "{}: read failed: {}", path.string(), std::strerror(errno));
        if (n == 0) break;
        ONECARD_CHECK(EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(n)) == 1,
                      "{}: SHA-256 update failed", path.string());
        if (bytes_done != nullptr) bytes_done->fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n_digest = 0;
    ONECARD_CHECK(EVP_DigestFinal_ex(ctx.get(), digest, &n_digest) == 1 && n_digest == 32, "{}: SHA-256 final failed",
                  path.string());
    std::string hex;
    hex.reserve(64);
    for (unsigned i = 0; i < n_digest; ++i) fmt::format_to(std::back_inserter(hex), "{:02x}", digest[i]);
    return hex;
}

// One file's outcome: a hash or the error that prevented it.
struct HashResult {
    std::string sha256;
    std::string error;
};

// "[########......]  42%  12.3/29.0 GB  1.2 GB/s  3/48 files" on stderr, redrawn in place.
void draw_progress(uint64_t done, uint64_t total, size_t files_done, size_t n_files, double seconds) {
    constexpr int kWidth = 30;
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int filled = static_cast<int>(frac * kWidth);
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    std::fprintf(stderr, "\r[%s%s] %3d%%  %.1f/%.1f GB  %.2f GB/s  %zu/%zu files ", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), static_cast<int>(frac * 100), done / 1e9, total / 1e9,
                 rate / 1e9, files_done, n_files);
    std::fflush(stderr);
}

// Hashes dir/rel for every rel in `files`, in parallel: workers take the next file (largest first,
// so one huge shard does not start last and leave the other workers idle at the end).
std::vector<HashResult> hash_files(const fs::path& dir, const std::vector<std::string>& files,
                                   const ManifestOptions& options) {
    std::vector<HashResult> results(files.size());
    if (files.empty()) return results;
    std::vector<uint64_t> sizes(files.size(), 0);
    uint64_t total = 0;
    for (size_t i = 0; i < files.size(); ++i) {
        std::error_code ec;
        const auto sz = fs::file_size(dir / files[i], ec);
        sizes[i] = ec ? 0 : sz;
        total += sizes[i];
    }
    std::vector<size_t> order(files.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });

    unsigned n_threads =
        options.n_threads != 0 ? options.n_threads : std::min(16u, std::thread::hardware_concurrency());
    n_threads = std::max(1u, std::min<unsigned>(n_threads, static_cast<unsigned>(files.size())));

    std::atomic<size_t> next{0};
    std::atomic<size_t> files_done{0};
    std::atomic<uint64_t> bytes_done{0};
    const auto t0 = std::chrono::steady_clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    {
        std::jthread progress;
        if (options.progress) {
            progress = std::jthread([&](std::stop_token stop) {
                while (!stop.stop_requested()) {
                    draw_progress(bytes_done.load(), total, files_done.load(), files.size(), seconds());
                    for (int i = 0; i < 5 && !stop.stop_requested(); ++i) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    }
                }
            });
        }
        std::vector<std::jthread> workers;
        for (unsigned t = 0; t < n_threads; ++t) {
            workers.emplace_back([&] {
                std::vector<unsigned char> buffer;
                for (size_t k = next.fetch_add(1); k < order.size(); k = next.fetch_add(1)) {
                    const size_t i = order[k];
                    try {
                        results[i].sha256 = hash_file(dir / files[i], buffer, &bytes_done);
                    } catch (const std::exception& e) {
                        results[i].error = e.what();
                    }
                    files_done.fetch_add(1);
                }
            });
        }
    }  // joins the workers, then stops and joins the progress thread
    if (options.progress) {
        draw_progress(bytes_done.load(), total, files_done.load(), files.size(), seconds());
        std::fputc('\n', stderr);
    }
    return results;
}

std::string escape_name(const std::string& name, bool& escaped) {
    std::string out;
    escaped = false;
    for (char c : name) {
        switch (c) {
            case '\\':
                out += "\\\\";
                escaped = true;
                break;
            case '\n':
                out += "\\n";
                escaped = true;
                break;
            case '\r':
                out += "\\r";
                escaped = true;
                break;
            default:
                out += c;
        }
    }
    return out;
}

bool is_lower_hex(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::string sha256_file(const fs::path& path) {
    std::vector<unsigned char> buffer;
    return hash_file(path, buffer, nullptr);
}

std::vector<std::string> list_manifest_files(const fs::path& dir, const ManifestOptions& options) {
    ONECARD_CHECK(fs::is_directory(dir), "{}: not a directory", dir.string());
    const std::set<std::string> exclude(options.exclude.begin(), options.exclude.end());
    std::vector<std::string> out;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, ec), end;
    ONECARD_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
    for (; it != end; it.increment(ec)) {
        ONECARD_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
        std::error_code type_ec;
        if (!it->is_regular_file(type_ec)) continue;  // follows symlinks; directories, sockets, dangling links skipped
        std::string rel = it->path().lexically_relative(dir).generic_string();
        if (exclude.count(rel) == 0) out.push_back(std::move(rel));
    }
    ONECARD_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<ManifestEntry> compute_manifest(const fs::path& dir, const ManifestOptions& options) {
    const auto files = list_manifest_files(dir, options);
    const auto results = hash_files(dir, files, options);
    std::vector<ManifestEntry> out;
    out.reserve(files.size());
    for (size_t i = 0; i < files.size(); ++i) {
        ONECARD_CHECK(results[i].error.empty(), "{}", results[i].error);
        out.push_back({files[i], results[i].sha256});
    }
    return out;
}

std::string format_manifest(const std::vector<ManifestEntry>& entries) {
    std::string out;
    for (const auto& e : entries) {
        bool escaped = false;
        const std::string name = escape_name(e.path, escaped);
        fmt::format_to(std::back_inserter(out), "{}{}  {}\n", escaped ? "\\" : "", e.sha256, name);
    }
    return out;
}

std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& label) {
    std::vector<ManifestEntry> out;
    std::set<std::string> seen;
    size_t line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // manifests edited on Windows
        if (line.empty()) continue;
        const bool escaped = line.front() == '\\';
        if (escaped) line.remove_prefix(1);
        ONECARD_CHECK(line.size() > 66 && (line[64] == ' ') && (line[65] == ' ' || line[65] == '*'),
                      "{}:{}: not a sha256sum line (\"<64 hex digits>  <path>\")", label, line_no);
        std::string hex(line.substr(0, 64));
        std::transform(hex.begin(), hex.end(), hex.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
        ONECARD_CHECK(is_lower_hex(hex), "{}:{}: hash is not 64 hex digits", label, line_no);
        const std::string_view raw = line.substr(66);
        std::string path;
        for (size_t i = 0; i < raw.size(); ++i) {
            if (escaped && raw[i] == '\\' && i + 1 < raw.size()) {
                const char c = raw[++i];
                ONECARD_CHECK(c == '\\' || c == 'n' || c == 'r', "{}:{}: unknown escape \\{} in path", label, line_no,
                              c);
                path += c == 'n' ? '\n' : c == 'r' ? '\r' : '\\';
            } else {
                path += raw[i];
            }
        }
        ONECARD_CHECK(seen.insert(path).second, "{}:{}: {} is listed twice", label, line_no, path);
        out.push_back({std::move(path), std::move(hex)});
    }
    return out;
}

VerifyReport verify_manifest(const fs::path& dir, const fs::path& manifest_file, const ManifestOptions& options) {
    std::ifstream in(manifest_file, std::ios::binary);
    ONECARD_CHECK(in.is_open(), "{}: cannot open manifest", manifest_file.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    const auto entries = parse_manifest(ss.str(), manifest_file.string());

    VerifyReport report;
    report.n_checked = entries.size();
    std::vector<std::string> present;
    std::vector<std::string> to_hash;
    std::vector<size_t> entry_of;
    for (size_t i = 0; i < entries.size(); ++i) {
        std::error_code ec;
        if (fs::is_regular_file(dir / entries[i].path, ec)) {
            to_hash.push_back(entries[i].path);
            entry_of.push_back(i);
        } else {
            report.missing.push_back(entries[i].path);
        }
    }
    const auto results = hash_files(dir, to_hash, options);
    for (size_t k = 0; k < to_hash.size(); ++k) {
        if (!results[k].error.empty()) {
            report.missing.push_back(to_hash[k]);  // present but unreadable: as good as missing
        } else if (results[k].sha256 != entries[entry_of[k]].sha256) {
            report.mismatched.push_back(to_hash[k]);
        } else {
            ++report.n_ok;
        }
    }

    // Files on disk the manifest does not mention; the manifest itself is expected to be there.
    ManifestOptions list_options = options;
    std::error_code ec;
    const fs::path rel_manifest = fs::weakly_canonical(manifest_file, ec).lexically_relative(fs::weakly_canonical(dir));
    if (!ec && !rel_manifest.empty() && *rel_manifest.begin() != "..") {
        list_options.exclude.push_back(rel_manifest.generic_string());
    }
    std::set<std::string> listed;
    for (const auto& e : entries) listed.insert(e.path);
    for (auto& f : list_manifest_files(dir, list_options)) {
        if (listed.count(f) == 0) report.unlisted.push_back(std::move(f));
    }
    std::sort(report.missing.begin(), report.missing.end());
    return report;
}

}  // namespace onecard
