// Which checkpoint `onecard serve --demo` (and `serve` without --model) serves: the trained demo model
// committed under models/demo (scripts/demo_model, issue 24), verified against its SHA256SUMS; where
// that directory cannot be found, the random-weight small checkpoint synthesised once into
// ~/.cache/onecard (the previous default, which still needs only the pinned npm tokenizer).
#pragma once

#include <filesystem>

namespace onecard::cli {

// The trained demo checkpoint: $ONECARD_DEMO_MODEL if set (must be a checkpoint directory), else
// <source tree>/models/demo (baked in at compile time), else ./models/demo. Empty when none exists.
std::filesystem::path find_trained_demo();

// The directory to serve for --demo: the trained checkpoint (its manifest verified first) unless
// `scripted` (test mode: only a tokenizer is needed, and the scripted tests rely on the V4 vocabulary)
// or none exists; otherwise the synthesised cache directory (weights written when need_weights).
std::filesystem::path ensure_demo(bool need_weights, bool scripted);

}  // namespace onecard::cli
