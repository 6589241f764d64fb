#include "server/startup_checks.h"

#include "core/error.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace onecard::server {
namespace {

namespace fs = std::filesystem;

// OpenSSL's reason for the last failure ("no start line", "bad decrypt"), clearing its error queue.
std::string openssl_reason() {
    const unsigned long e = ERR_peek_last_error();
    std::string out = "unknown OpenSSL error";
    if (e != 0) {
        const char* r = ERR_reason_error_string(e);
        if (r != nullptr) out = r;
    }
    ERR_clear_error();
    return out;
}

struct BioFree {
    void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

// The file opened for reading, or an Error naming `flag`: missing, not a regular file, unreadable.
BioPtr open_pem(const std::string& flag, const std::string& path) {
    std::error_code ec;
    const auto st = fs::status(path, ec);
    ONECARD_CHECK(fs::exists(st), "{} '{}': no such file", flag, path);
    ONECARD_CHECK(fs::is_regular_file(st), "{} '{}': not a regular file", flag, path);
    BIO* b = BIO_new_file(path.c_str(), "r");
    if (b == nullptr) {
        const int err = errno;
        ERR_clear_error();
        fail("{} '{}': cannot be read ({})", flag, path, std::strerror(err));
    }
    return BioPtr(b);
}

}  // namespace

void check_tls_files(const std::string& cert_file, const std::string& key_file) {
    if (cert_file.empty() && key_file.empty()) return;
    ONECARD_CHECK(!cert_file.empty(), "--ssl-keyfile '{}' needs --ssl-certfile (the certificate it belongs to)",
                  key_file);
    ONECARD_CHECK(!key_file.empty(), "--ssl-certfile '{}' needs --ssl-keyfile (its private key)", cert_file);
    std::unique_ptr<X509, decltype(&X509_free)> cert(nullptr, X509_free);
    {
        BioPtr b = open_pem("--ssl-certfile", cert_file);
        cert.reset(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
        ONECARD_CHECK(cert != nullptr, "--ssl-certfile '{}': not a PEM certificate ({})", cert_file, openssl_reason());
    }
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(nullptr, EVP_PKEY_free);
    {
        BioPtr b = open_pem("--ssl-keyfile", key_file);
        // A passphrase-protected key would make OpenSSL prompt on the terminal: an empty passphrase
        // makes it fail here instead, which the message says.
        char empty[] = "";
        key.reset(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, empty));
        ONECARD_CHECK(key != nullptr, "--ssl-keyfile '{}': not an unencrypted PEM private key ({})", key_file,
                      openssl_reason());
    }
    // httplib loads a mismatched pair without complaint (OpenSSL drops the certificate), and every
    // handshake then fails: refuse it here.
    const bool match = X509_check_private_key(cert.get(), key.get()) == 1;
    ERR_clear_error();
    ONECARD_CHECK(match, "--ssl-keyfile '{}' is not the private key of --ssl-certfile '{}'", key_file, cert_file);
}

void check_vocabulary(const ModelConfig& cfg, const fs::path& config_json, const Tokenizer& tokenizer,
                      const fs::path& tokenizer_json) {
    const int64_t rows = cfg.vocab_size;
    const auto n_tok = static_cast<int64_t>(tokenizer.vocab_size());
    ONECARD_CHECK(n_tok <= rows,
                  "tokenizer '{}' defines ids up to {} but '{}' has vocab_size {}: ids at or beyond {} have no "
                  "embedding row (wrong --tokenizer for this model?)",
                  tokenizer_json.string(), n_tok - 1, config_json.string(), rows, rows);
    auto defined = [&](int64_t id) {
        if (id < 0 || id >= n_tok) return false;
        std::string bytes;
        // Special tokens decode to their text too; skip_special=false so they count as defined.
        return tokenizer.append_token_bytes(static_cast<int32_t>(id), false, bytes);
    };
    const std::pair<const char*, int64_t> specials[] = {{"bos_token_id", cfg.bos_token_id},
                                                        {"eos_token_id", cfg.eos_token_id}};
    for (const auto& [name, id] : specials) {
        ONECARD_CHECK(id >= 0 && id < rows, "'{}': {} = {} is outside the vocabulary [0, {})", config_json.string(),
                      name, id, rows);
        ONECARD_CHECK(defined(id), "'{}': {} = {} is not a token of tokenizer '{}' (it defines ids below {})",
                      config_json.string(), name, id, tokenizer_json.string(), n_tok);
    }
    if (cfg.dspark) {
        const int64_t id = cfg.dspark->noise_token_id;
        ONECARD_CHECK(id >= 0 && id < rows, "'{}': dspark_noise_token_id = {} is outside the vocabulary [0, {})",
                      config_json.string(), id, rows);
    }
}

}  // namespace onecard::server
