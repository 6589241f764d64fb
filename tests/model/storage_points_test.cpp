// The GPU's bf16 storage points (model/storage_points.h) as the CPU oracle marks them: the set's
// algebra, one name per point, and every declared point marked in the oracle's forward pass (a point
// nobody marks, or a mark at the wrong place that no input reaches, would make a set that does not
// round where it says).
#include "model/storage_points.h"
#include "core/error.h"
#include "loader/checkpoint.h"
#include "model/config.h"
#include "model/deepseek_v4.h"
#include "model/synth.h"
#include "model/weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>

using namespace onecard;

namespace {

StoragePoint point(int i) {
    return static_cast<StoragePoint>(i);
}

TEST(StoragePoints, SetAlgebraAndNames) {
    EXPECT_TRUE(StoragePoints::none().empty());
    const StoragePoints all = StoragePoints::all();
    std::set<std::string> names;
    for (int i = 0; i < kStoragePointCount; ++i) {
        EXPECT_TRUE(all.has(point(i)));
        const StoragePoints one = StoragePoints::only(point(i));
        for (int j = 0; j < kStoragePointCount; ++j) EXPECT_EQ(one.has(point(j)), i == j);
        EXPECT_FALSE(StoragePoints::all().with(point(i), false).has(point(i)));
        const std::string name(storage_point_name(point(i)));
        EXPECT_FALSE(name.empty());
        EXPECT_TRUE(names.insert(name).second) << "two points named " << name;
    }
    EXPECT_THROW(storage_point_name(StoragePoint::kCount), Error);
    EXPECT_THROW(StoragePoints::none().with(StoragePoint::kCount), Error);

    float x[3] = {1.0f + 1.0f / 1024.0f, -3.14159f, 0.0f};  // 1 + 2^-10 is not a bf16 value
    const float before[3] = {x[0], x[1], x[2]};
    StoragePoints::only(StoragePoint::QRope).at(StoragePoint::KvRope, x, 3);  // not in the set: untouched
    EXPECT_EQ(x[0], before[0]);
    EXPECT_EQ(x[1], before[1]);
    StoragePoints::only(StoragePoint::QRope).at(StoragePoint::QRope, x, 3);
    EXPECT_EQ(x[0], 1.0f);
    EXPECT_NE(x[1], before[1]);
    EXPECT_EQ(x[2], 0.0f);
}

// Each point alone moves the oracle's logits (every layer kind of the tiny model, hash layers, CSA
// with the indexer, HCA), except the embedding: its point is the identity for a bf16 table, which a
// checkpoint in the official format has. The whole set is what set_bf16_storage(true) selects.
TEST(StoragePoints, EveryPointIsMarkedInTheOraclesForwardPass) {
    const auto dir = std::filesystem::temp_directory_path() / ("onecard_storage_points_" + std::to_string(::getpid()));
    SynthOptions opt;
    opt.preset = SynthPreset::Tiny;
    opt.seed = 20261203;
    synth_write(synth_config(opt), opt.seed, dir, synth_default_shard_bytes(SynthPreset::Tiny), false);
    const ModelConfig cfg = load_config(dir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(dir);
    const ModelWeights weights = bind_weights(cfg, ckpt);
    // 160 tokens: past the tiny model's HCA ratio and index_topk, so compressed entries, index keys
    // and the indexer's selection are all reached.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(cfg.vocab_size - 1));
    std::vector<int32_t> tokens(160);
    for (int32_t& t : tokens) t = dist(rng);

    DeepSeekV4 m(cfg, weights, Numerics::Reference);
    // The main model's logits, then the MTP block's over the same positions (its glue has points too).
    const int64_t per = cfg.hc_mult * cfg.hidden_size, n = static_cast<int64_t>(tokens.size());
    auto logits = [&](StoragePoints points) {
        m.set_storage_points(points);
        SequenceState st = m.new_sequence();
        ForwardOutput out = m.forward_with_streams(st, tokens);
        const std::vector<float> mtp =
            m.forward_mtp(st, std::span<const float>(out.streams.data(), static_cast<size_t>((n - 1) * per)),
                          std::span<const int32_t>(tokens).subspan(1));
        out.logits.insert(out.logits.end(), mtp.begin(), mtp.end());
        return out.logits;
    };
    const std::vector<float> plain = logits(StoragePoints::none());
    for (int i = 0; i < kStoragePointCount; ++i) {
        const bool moved = logits(StoragePoints::only(point(i))) != plain;
        EXPECT_TRUE(moved) << storage_point_name(point(i));
    }
    m.set_bf16_storage(true);
    EXPECT_EQ(m.storage_points(), StoragePoints::all());
    m.set_bf16_storage(false);
    EXPECT_TRUE(m.storage_points().empty());
    std::filesystem::remove_all(dir);
}

}  // namespace
