#include "loader/checkpoint.h"

#include "core/error.h"
#include "loader/json_strict.h"
#include "loader/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace onecard {

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    ONECARD_CHECK(in.is_open(), "{}: cannot open", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    ONECARD_CHECK(!in.bad(), "{}: read failed", path.string());
    return ss.str();
}

// A shard name from the index must stay inside the checkpoint directory.
void check_shard_name(const std::string& shard, const std::string& tensor, const std::filesystem::path& index) {
    const std::filesystem::path p(shard);
    // No NUL (the name would be cut short) and no component past the usual 255-byte file-name limit.
    bool ok = !shard.empty() && p.is_relative() && shard.find('\0') == std::string::npos;
    for (const auto& part : p) ok = ok && part != ".." && part.native().size() <= 255;
    ONECARD_CHECK(ok, "{}: tensor {} maps to shard \"{}\", which is not a file name inside the checkpoint directory",
                  index.string(), tensor, shard);
}

// weight_map of the index: tensor name -> shard file name (relative to the checkpoint dir).
std::map<std::string, std::string> read_weight_map(const std::filesystem::path& index) {
    JsonStrictOptions options;
    const nlohmann::json j = parse_json_strict(read_text_file(index), index.string(), options);
    ONECARD_CHECK(j.is_object(), "{}: index is a JSON {}, not an object", index.string(), j.type_name());
    ONECARD_CHECK(j.contains("weight_map"), "{}: no \"weight_map\" field", index.string());
    const auto& wm = j.at("weight_map");
    ONECARD_CHECK(wm.is_object(), "{}: weight_map is a JSON {}, not an object", index.string(), wm.type_name());
    std::map<std::string, std::string> out;
    for (const auto& [tensor, shard] : wm.items()) {
        ONECARD_CHECK(shard.is_string(), "{}: weight_map entry of tensor {} is a JSON {}, not a shard file name",
                      index.string(), tensor, shard.type_name());
        check_shard_name(shard.get<std::string>(), tensor, index);
        out.emplace(tensor, shard.get<std::string>());
    }
    ONECARD_CHECK(!out.empty(), "{}: weight_map lists no tensors", index.string());
    return out;
}

}  // namespace

Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
    ONECARD_CHECK(std::filesystem::is_directory(dir), "{}: not a directory", dir.string());
    Checkpoint ck;
    ck.dir_ = dir;
    const auto index_path = dir / kIndexName;
    const auto single_path = dir / kSingleName;

    if (std::filesystem::exists(index_path)) {
        const auto weight_map = read_weight_map(index_path);
        std::set<std::string> shard_set;
        for (const auto& [tensor, shard] : weight_map) shard_set.insert(shard);
        const std::vector<std::string> shard_names(shard_set.begin(), shard_set.end());
        std::vector<std::string> missing;
        for (const auto& shard : shard_names) {
            // error_code form: a name the file system refuses (too long, ...) is "missing", not a
            // filesystem_error (found by safetensors_fuzz).
            std::error_code ec;
            if (!std::filesystem::is_regular_file(dir / shard, ec)) missing.push_back("missing shard " + shard);
        }
        ONECARD_CHECK(missing.empty(), "{}: {} (listed in {})", dir.string(), fmt::join(missing, "; "), kIndexName);
        for (const auto& shard : shard_names) {
            ck.shards_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
        }
        // Where each tensor actually is, to check the index against the shards in both directions.
        std::map<std::string, std::string> found_in;
        for (size_t i = 0; i < ck.shards_.size(); ++i) {
            const std::string& shard = shard_names[i];
            for (const auto& t : ck.shards_[i]->tensors()) {
                const auto [it, inserted] = found_in.emplace(t.name, shard);
                ONECARD_CHECK(inserted, "{}: tensor {} appears in two shards, {} and {}", dir.string(), t.name,
                              it->second, shard);
                ONECARD_CHECK(weight_map.count(t.name) == 1, "{}: tensor {} is in shard {} but not in {}", dir.string(),
                              t.name, shard, kIndexName);
            }
        }
        for (const auto& [tensor, shard] : weight_map) {
            const auto it = found_in.find(tensor);
            ONECARD_CHECK(it != found_in.end(), "{}: tensor {} is listed in {} for shard {} but no shard has it",
                          dir.string(), tensor, kIndexName, shard);
            ONECARD_CHECK(it->second == shard, "{}: tensor {} is listed in {} for shard {} but is in shard {}",
                          dir.string(), tensor, kIndexName, shard, it->second);
        }
    } else if (std::filesystem::exists(single_path)) {
        ck.shards_.push_back(std::make_unique<SafetensorsFile>(single_path));
    } else {
        fail("{}: no {} or {}: not a safetensors checkpoint directory", dir.string(), kIndexName, kSingleName);
    }

    for (const auto& shard : ck.shards_) {
        for (const auto& t : shard->tensors()) ck.tensors_.push_back(t);
    }
    ck.sorted_index_.resize(ck.tensors_.size());
    for (size_t i = 0; i < ck.sorted_index_.size(); ++i) ck.sorted_index_[i] = i;
    std::sort(ck.sorted_index_.begin(), ck.sorted_index_.end(),
              [&ck](size_t a, size_t b) { return ck.tensors_[a].name < ck.tensors_[b].name; });
    // Single-file checkpoints are unique by the header check; sharded ones by the loop above.
    return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
    const auto it = std::lower_bound(sorted_index_.begin(), sorted_index_.end(), name,
                                     [this](size_t i, const std::string& n) { return tensors_[i].name < n; });
    if (it == sorted_index_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
}

const TensorView& Checkpoint::get(const std::string& name) const {
    const TensorView* t = find(name);
    ONECARD_CHECK(t != nullptr, "tensor {} not found in {}", name, dir_.string());
    return *t;
}

void Checkpoint::check_integrity() const {
    for (const auto& shard : shards_) shard->check_integrity();
    size_t n = 0;
    for (const auto& shard : shards_) n += shard->tensors().size();
    ONECARD_CHECK(n == tensors_.size() && sorted_index_.size() == n,
                  "{}: integrity: {} tensors in shards, {} listed, {} indexed", dir_.string(), n, tensors_.size(),
                  sorted_index_.size());
    for (size_t i = 1; i < sorted_index_.size(); ++i) {
        ONECARD_CHECK(tensors_[sorted_index_[i - 1]].name < tensors_[sorted_index_[i]].name,
                      "{}: integrity: name index unsorted or duplicate at {}", dir_.string(),
                      tensors_[sorted_index_[i]].name);
    }
}

std::vector<std::filesystem::path> Checkpoint::shard_paths() const {
    std::vector<std::filesystem::path> out;
    out.reserve(shards_.size());
    for (const auto& s : shards_) out.push_back(s->path());
    return out;
}

}  // namespace onecard
