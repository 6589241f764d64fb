// Checks of an operator's settings that `onecard serve` runs before it binds the port or reads a
// weight, so that a typo fails in a second with one line naming the flag or file instead of after
// minutes of loading (or, for a certificate whose key does not match, at every client's handshake).
#pragma once

#include <filesystem>
#include <string>

namespace onecard {
class Tokenizer;
struct ModelConfig;
}  // namespace onecard

namespace onecard::server {

// --ssl-certfile / --ssl-keyfile (alias --tls-cert / --tls-key): both given or neither; each a
// readable file that parses as PEM (a certificate, a private key), and the key is the certificate's.
// Throws onecard::Error naming the flag, the file and what is wrong.
void check_tls_files(const std::string& cert_file, const std::string& key_file);

// The tokenizer against config.json. The rule: every id the tokenizer defines must have an embedding
// row, so the tokenizer's id range [0, tokenizer.vocab_size()) must fit in [0, vocab_size); fewer
// ids than rows is fine (DeepSeek pads the embedding past the last token). bos_token_id and
// eos_token_id must lie in [0, vocab_size) and be ids the tokenizer defines (generation stops on
// eos and the warm-up starts from bos: an id without a token would never be produced or decodes to
// nothing); the 0731 DSpark noise token must lie in [0, vocab_size) (it is a reserved id the
// drafter feeds itself, so the tokenizer need not name it). Throws onecard::Error naming the file.
void check_vocabulary(const ModelConfig& cfg, const std::filesystem::path& config_json, const Tokenizer& tokenizer,
                      const std::filesystem::path& tokenizer_json);

}  // namespace onecard::server
