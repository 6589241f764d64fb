// `onecard manifest DIR` (SHA-256 of every file, sha256sum format, on stdout) and
// `onecard verify DIR [--manifest FILE] [--weights]` (re-hash and compare; with --weights also open the
// checkpoint and scan every floating tensor for NaN/Inf and every UE8M0 scale for 0xFF; non-zero exit
// on any problem).
#include "commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "loader/manifest.h"
#include "loader/weight_scan.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

namespace onecard::cli {

namespace {

namespace fs = std::filesystem;

// `onecard manifest DIR > DIR/sums.txt`: the shell creates the output file inside DIR before we
// run, so find it by inode and leave it out (hashing our own half-written output is never right).
void exclude_stdout_file(const fs::path& dir, ManifestOptions& options) {
    struct stat out {};
    if (::fstat(STDOUT_FILENO, &out) != 0 || !S_ISREG(out.st_mode)) return;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        struct stat st {};
        if (::stat(it->path().c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
            options.exclude.push_back(it->path().lexically_relative(dir).generic_string());
        }
    }
}

struct ManifestArgs {
    std::string dir;
    unsigned n_threads = 0;
};

struct VerifyArgs {
    std::string dir;
    std::string manifest;
    unsigned n_threads = 0;
    bool weights = false;
};

void run_manifest(const ManifestArgs& args) {
    ManifestOptions options;
    options.n_threads = args.n_threads;
    options.progress = ::isatty(STDERR_FILENO) != 0;
    exclude_stdout_file(args.dir, options);
    const auto entries = compute_manifest(args.dir, options);
    const std::string text = format_manifest(entries);
    ONECARD_CHECK(std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0,
                  "writing the manifest to stdout failed");
}

// Prints one line per tensor holding NaN/Inf codes and a summary; returns the number of such tensors.
size_t scan_weights_report(const std::string& dir, unsigned n_threads) {
    const Checkpoint ck = Checkpoint::open(dir);  // also refuses malformed or shifted shards
    const WeightScanReport r = scan_weights(ck, n_threads);
    for (const auto& b : r.bad)
        std::printf("%s: FAILED weights: %s holds %llu NaN and %llu Inf (first at element %lld)\n", b.name.c_str(),
                    std::string(dtype_name(b.dtype)).c_str(), static_cast<unsigned long long>(b.count.n_nan),
                    static_cast<unsigned long long>(b.count.n_inf), static_cast<long long>(b.count.first));
    std::printf("weights: %llu tensors (%llu elements) scanned, %zu with NaN/Inf, %llu integer tensors not scanned\n",
                static_cast<unsigned long long>(r.n_tensors), static_cast<unsigned long long>(r.n_elements),
                r.bad.size(), static_cast<unsigned long long>(r.n_skipped));
    std::fflush(stdout);
    return r.bad.size();
}

void run_verify(const VerifyArgs& args) {
    ManifestOptions options;
    options.n_threads = args.n_threads;
    options.progress = ::isatty(STDERR_FILENO) != 0;
    const fs::path manifest =
        args.manifest.empty() ? fs::path(args.dir) / kManifestDefaultName : fs::path(args.manifest);
    const VerifyReport report = verify_manifest(args.dir, manifest, options);
    // sha256sum -c wording, so scripts that grep its output keep working.
    for (const auto& f : report.mismatched) std::printf("%s: FAILED\n", f.c_str());
    for (const auto& f : report.missing) std::printf("%s: FAILED open or read\n", f.c_str());
    for (const auto& f : report.unlisted) std::printf("note: %s is not in the manifest\n", f.c_str());
    std::printf("%zu of %zu files OK, %zu mismatched, %zu missing, %zu not in the manifest\n", report.n_ok,
                report.n_checked, report.mismatched.size(), report.missing.size(), report.unlisted.size());
    std::fflush(stdout);
    // The hashes say the files are the ones listed; --weights also asks whether what they hold can be
    // served (a manifest taken of a corrupt checkpoint verifies fine).
    size_t n_bad_tensors = 0;
    if (args.weights) n_bad_tensors = scan_weights_report(args.dir, args.n_threads);
    ONECARD_CHECK(report.ok() && n_bad_tensors == 0, "verify {}: {} mismatched, {} missing (against {}){}", args.dir,
                  report.mismatched.size(), report.missing.size(), manifest.string(),
                  args.weights ? fmt::format(", {} tensor(s) with NaN/Inf", n_bad_tensors) : std::string());
}

}  // namespace

void add_cmd_manifest(CLI::App& app) {
    auto margs = std::make_shared<ManifestArgs>();
    CLI::App* manifest =
        app.add_subcommand("manifest", "Print SHA-256 of every file of a checkpoint dir (sha256sum format)");
    manifest->add_option("dir", margs->dir, "checkpoint directory")->required()->check(CLI::ExistingDirectory);
    manifest->add_option("-j,--threads", margs->n_threads, "hashing threads (default: one per core, at most 16)");
    manifest->callback([margs] { run_manifest(*margs); });

    auto vargs = std::make_shared<VerifyArgs>();
    CLI::App* verify = app.add_subcommand("verify", "Check a checkpoint dir against its SHA-256 manifest");
    verify->add_option("dir", vargs->dir, "checkpoint directory")->required()->check(CLI::ExistingDirectory);
    verify->add_option("--manifest", vargs->manifest, "manifest file (default: DIR/SHA256SUMS)");
    verify->add_option("-j,--threads", vargs->n_threads, "hashing threads (default: one per core, at most 16)");
    verify->add_flag("--weights", vargs->weights,
                     "also scan every floating tensor for NaN/Inf and every UE8M0 scale for 0xFF");
    verify->callback([vargs] { run_verify(*vargs); });
}

}  // namespace onecard::cli
