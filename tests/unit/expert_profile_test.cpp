// ExpertUseProfile: counting, merging, coverage of a placement by hand, the JSON file round trip
// (atomic write, nothing left behind), and clear refusals of files of another shape or malformed.
#include "model/expert_profile.h"
#include "core/error.h"
#include "model/expert_placement.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace onecard {
namespace {

namespace fs = std::filesystem;

class ProfileFiles : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("onecard_expert_profile_test_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path write(const std::string& name, const std::string& text) {
        const fs::path p = dir_ / name;
        std::ofstream(p) << text;
        return p;
    }
    // The message of the Error that loading `text` throws ("" when it does not throw).
    std::string load_error(const std::string& text) {
        const fs::path p = write("bad.json", text);
        try {
            ExpertUseProfile::load(p);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    fs::path dir_;
};

TEST(ExpertProfile, CountsMergeAndCoverageByHand) {
    ExpertUseProfile p(2, 4);
    const int32_t picks0[] = {0, 1, 1, 3};
    p.add_picks(0, picks0, 4);
    p.add(1, 2, 10);
    EXPECT_EQ(p.count(0, 1), 2u);
    EXPECT_EQ(p.count(0, 2), 0u);
    EXPECT_EQ(p.total(), 14u);
    EXPECT_THROW(p.add(2, 0), Error);
    EXPECT_THROW(p.add(0, 4), Error);

    ExpertUseProfile q(2, 4);
    q.add(0, 0, 6);
    p.merge(q);
    EXPECT_EQ(p.count(0, 0), 7u);
    EXPECT_EQ(p.total(), 20u);
    try {
        p.merge(ExpertUseProfile(3, 4));
        FAIL() << "merge of another shape must throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("3 layers x 4 experts"), std::string::npos) << e.what();
    }

    // GPU keeps (0,0) [7 picks] and (1,2) [10 picks] of 20.
    ExpertPlacement pl;
    pl.n_experts = 4;
    pl.on_gpu = {{1, 0, 0, 0}, {0, 0, 1, 0}};
    EXPECT_DOUBLE_EQ(p.coverage(pl), 17.0 / 20.0);
    EXPECT_DOUBLE_EQ(p.coverage(ExpertPlacement::all_on_gpu(2, 4)), 1.0);
    EXPECT_DOUBLE_EQ(ExpertUseProfile(2, 4).coverage(pl), 1.0);  // no picks: none lands on the host
    EXPECT_THROW(p.coverage(ExpertPlacement::all_on_gpu(2, 5)), Error);

    const ExpertUseProfile first = p.first_experts(2);
    EXPECT_EQ(first.n_experts(), 2);
    EXPECT_EQ(first.count(0, 1), 2u);
    EXPECT_EQ(first.total(), 9u);
    EXPECT_THROW(ExpertUseProfile::from_counts(2, 4, std::vector<uint64_t>(7)), Error);
    EXPECT_EQ(ExpertUseProfile::from_counts(1, 2, {3, 4}).count(0, 1), 4u);
}

TEST_F(ProfileFiles, RoundTripIsExactAndAtomic) {
    ExpertUseProfile p(3, 5);
    for (int64_t l = 0; l < 3; ++l)
        for (int64_t e = 0; e < 5; ++e) p.add(l, e, static_cast<uint64_t>(l * 100 + e));
    p.add(2, 4, 1ull << 60);  // beyond double precision: must survive as an integer
    const fs::path path = dir_ / "profile.json";
    p.save(path);
    p.save(path);  // replacing an existing file
    const ExpertUseProfile back = ExpertUseProfile::load_for(path, 3, 5);
    for (int64_t l = 0; l < 3; ++l)
        for (int64_t e = 0; e < 5; ++e) EXPECT_EQ(back.count(l, e), p.count(l, e)) << l << "," << e;
    // Only the profile itself is left (the temp file was renamed over it).
    int n_files = 0;
    for (const auto& f : fs::directory_iterator(dir_)) {
        ++n_files;
        EXPECT_EQ(f.path().filename(), "profile.json");
    }
    EXPECT_EQ(n_files, 1);
    std::ifstream in(path);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j.at("format"), "onecard-expert-profile");
    EXPECT_EQ(j.at("version"), 1);
    EXPECT_EQ(j.at("n_layers"), 3);
    EXPECT_EQ(j.at("n_experts"), 5);
    EXPECT_EQ(j.at("counts").at(1).at(2).get<uint64_t>(), 102u);
    // A directory that does not exist: a clear error, no file.
    EXPECT_THROW(p.save(dir_ / "missing" / "p.json"), Error);
}

TEST_F(ProfileFiles, ShapeMismatchNamesBothShapes) {
    const fs::path path = dir_ / "p.json";
    ExpertUseProfile(4, 8).save(path);
    try {
        ExpertUseProfile::load_for(path, 43, 256);
        FAIL() << "a profile of another shape must be refused";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("4 layers x 8 experts"), std::string::npos) << m;
        EXPECT_NE(m.find("43 layers x 256 experts"), std::string::npos) << m;
        EXPECT_NE(m.find(path.string()), std::string::npos) << m;
    }
}

TEST_F(ProfileFiles, MalformedFilesAreRefusedClearly) {
    const std::string head = R"({"format": "onecard-expert-profile", "version": 1, "n_layers": 2, "n_experts": 2, )";
    EXPECT_NE(load_error("{not json").find("invalid JSON"), std::string::npos) << load_error("{not json");
    EXPECT_NE(load_error("[1, 2]").find("must be an object"), std::string::npos);
    EXPECT_NE(load_error(R"({"format": "x", "version": 1})").find("\"format\""), std::string::npos);
    const std::string v2 = R"({"format": "onecard-expert-profile", "version": 2, "n_layers": 1, "n_experts": 1,
                               "counts": [[1]]})";
    EXPECT_NE(load_error(v2).find("version"), std::string::npos) << load_error(v2);
    EXPECT_NE(load_error(head + R"("counts": [[1, 2]]})").find("2 layer rows"), std::string::npos);
    EXPECT_NE(load_error(head + R"("counts": [[1, 2], [3]]})").find("row 1"), std::string::npos);
    const std::string neg = load_error(head + R"("counts": [[1, 2], [3, -4]]})");
    EXPECT_NE(neg.find("(layer 1, expert 1)"), std::string::npos) << neg;
    EXPECT_NE(load_error(head + R"("counts": [[1, 2], [3, 4.5]]})").find("not a non-negative integer"),
              std::string::npos);
    const std::string no_counts =
        load_error(R"({"format": "onecard-expert-profile", "version": 1, "n_layers": 2, "n_experts": 2})");
    EXPECT_NE(no_counts.find("missing \"counts\""), std::string::npos) << no_counts;
    const std::string dup = load_error(head + R"("counts": [[1, 2], [3, 4]], "counts": [[0, 0], [0, 0]]})");
    EXPECT_NE(dup.find("duplicate"), std::string::npos) << dup;
    EXPECT_EQ(load_error(head + R"("counts": [[1, 2], [3, 4]]})"), "");  // the well-formed one loads
    try {
        ExpertUseProfile::load(dir_ / "absent.json");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
    }
}

}  // namespace
}  // namespace onecard
