// SHA-256 manifests of checkpoint directories, in exactly the format `sha256sum` writes
// ("<64 hex>  <relative path>\n"), so `sha256sum -c SHA256SUMS` accepts ours and we accept
// theirs. Files are hashed in parallel (a checkpoint is tens of multi-GB shards: one core per
// file keeps the disk busy), with OpenSSL's SHA-256.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace onecard {

inline constexpr const char* kManifestDefaultName = "SHA256SUMS";

struct ManifestEntry {
    std::string path;    // relative to the directory, '/'-separated
    std::string sha256;  // 64 lowercase hex digits
};

struct ManifestOptions {
    unsigned n_threads = 0;  // 0: hardware concurrency, capped at 16 and at the number of files
    bool progress = false;   // progress bar on stderr (the CLI sets it when stderr is a terminal)
    // Relative paths left out of the listing: the manifest file itself, wherever it is written.
    std::vector<std::string> exclude = {kManifestDefaultName};
};

// Hex SHA-256 of one file. Throws onecard::Error naming the file if it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

// Every regular file under `dir` (recursively; symlinks to files are followed, as sha256sum would
// read them), as sorted relative '/'-separated paths, minus options.exclude.
std::vector<std::string> list_manifest_files(const std::filesystem::path& dir, const ManifestOptions& options);

// Hashes every listed file of `dir`. Throws onecard::Error naming the first unreadable file.
std::vector<ManifestEntry> compute_manifest(const std::filesystem::path& dir, const ManifestOptions& options);

// sha256sum text: one "<hex>  <path>\n" line per entry. Paths with '\\' or '\n' get sha256sum's
// escaping (a leading '\\' on the line, "\\\\" and "\\n" inside the name).
std::string format_manifest(const std::vector<ManifestEntry>& entries);

// Parses sha256sum text (text-mode "  " or binary-mode " *" separators, escaped lines, blank lines
// skipped). Throws onecard::Error naming `label` and the line number on a malformed line or a
// path listed twice.
std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& label);

struct VerifyReport {
    size_t n_checked = 0;  // files listed in the manifest
    size_t n_ok = 0;
    std::vector<std::string> mismatched;  // listed, present, different hash
    std::vector<std::string> missing;     // listed, absent or unreadable
    std::vector<std::string> unlisted;    // present but not in the manifest (a note, not a failure)
    bool ok() const { return mismatched.empty() && missing.empty(); }
};

// Re-hashes every file `manifest_file` lists (paths relative to `dir`) and compares. The manifest
// file itself is never reported as unlisted. Throws onecard::Error only if the manifest cannot be
// read or parsed; every per-file problem goes into the report.
VerifyReport verify_manifest(const std::filesystem::path& dir, const std::filesystem::path& manifest_file,
                             const ManifestOptions& options);

}  // namespace onecard
