// The engine's per-request text decoder over the tokenizer's streaming detokenizer. Special tokens
// (BOS/EOS, reserved placeholders) are skipped; the chat markers the parsers need (<think>, ｜DSML｜)
// are not special in the V4 vocabulary, so they stay in the text.
#pragma once

#include "onecard/engine.h"
#include "tokenizer/tokenizer.h"

#include <functional>
#include <memory>

namespace onecard::server {

// `tokenizer` must outlive every decoder the factory makes.
std::function<std::unique_ptr<TextDecoder>()> make_text_decoder_factory(const Tokenizer& tokenizer);

}  // namespace onecard::server
