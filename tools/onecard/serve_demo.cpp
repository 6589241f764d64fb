#include "serve_demo.h"

#include "core/error.h"
#include "loader/manifest.h"
#include "model/synth.h"
#include "tokenizer/deepseek_v4_vocab.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace onecard::cli {
namespace {

namespace fs = std::filesystem;

bool is_checkpoint(const fs::path& dir) {
    return fs::is_regular_file(dir / "config.json") && fs::is_regular_file(dir / "tokenizer.json");
}

fs::path cache_dir() {
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "onecard" / "demo-small";
    const char* home = std::getenv("HOME");
    ONECARD_CHECK(home && *home, "serve --demo: neither XDG_CACHE_HOME nor HOME is set; pass --model DIR");
    return fs::path(home) / ".cache" / "onecard" / "demo-small";
}

}  // namespace

fs::path find_trained_demo() {
    if (const char* env = std::getenv("ONECARD_DEMO_MODEL"); env != nullptr && *env != '\0') {
        ONECARD_CHECK(is_checkpoint(env),
                      "ONECARD_DEMO_MODEL='{}' is not a checkpoint directory (config.json and "
                      "tokenizer.json)",
                      env);
        return env;
    }
    std::vector<fs::path> tried;
    // This file lives at <source>/tools/onecard/; __FILE__ is absolute in CMake builds.
    const fs::path here = fs::path(__FILE__);
    if (here.is_absolute()) tried.push_back(here.parent_path().parent_path().parent_path() / "models" / "demo");
    tried.push_back(fs::current_path() / "models" / "demo");
    for (const auto& p : tried)
        if (is_checkpoint(p)) return p;
    return {};
}

fs::path ensure_demo(bool need_weights, bool scripted) {
    if (!scripted) {
        if (fs::path trained = find_trained_demo(); !trained.empty()) {
            // The committed bytes are what was measured (models/demo/README.md): refuse anything else.
            const fs::path sums = trained / kManifestDefaultName;
            if (fs::exists(sums)) {
                const VerifyReport r = verify_manifest(trained, sums, {});
                ONECARD_CHECK(r.mismatched.empty() && r.missing.empty(),
                              "serve --demo: '{}' does not match its {} ({} mismatched, {} missing)", trained.string(),
                              sums.string(), r.mismatched.size(), r.missing.size());
            }
            std::fprintf(stderr, "serve: the trained demo model %s\n", trained.c_str());
            return trained;
        }
        std::fprintf(stderr,
                     "serve: models/demo not found (set ONECARD_DEMO_MODEL); serving the random-weight "
                     "small checkpoint instead\n");
    }
    const fs::path dir = cache_dir();
    if (!fs::exists(dir / "tokenizer.json")) {
        std::fprintf(stderr, "serve: writing the demo tokenizer into %s\n", dir.c_str());
        write_demo_tokenizer(dir);
    }
    if (need_weights && !fs::exists(dir / "model.safetensors.index.json")) {
        std::fprintf(stderr, "serve: synthesising the small demo checkpoint into %s (once)\n", dir.c_str());
        SynthOptions o;
        o.preset = SynthPreset::Small;
        o.seed = 1;
        const ModelConfig cfg = synth_config(o);
        synth_write(cfg, 1, dir, synth_default_shard_bytes(SynthPreset::Small), false);
    }
    return dir;
}

}  // namespace onecard::cli
