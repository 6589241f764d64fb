#include "server/text_decoder.h"

#include "tokenizer/detokenizer.h"

namespace onecard::server {

namespace {
class DetokenizerDecoder : public TextDecoder {
public:
    explicit DetokenizerDecoder(const Tokenizer& t) : d_(t, /*skip_special=*/true) {}
    std::string push(int32_t token) override { return d_.push(token); }
    std::string flush() override { return d_.flush(); }

private:
    IncrementalDetokenizer d_;
};
}  // namespace

std::function<std::unique_ptr<TextDecoder>()> make_text_decoder_factory(const Tokenizer& tokenizer) {
    return [&tokenizer]() -> std::unique_ptr<TextDecoder> { return std::make_unique<DetokenizerDecoder>(tokenizer); };
}

}  // namespace onecard::server
