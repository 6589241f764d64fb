// `onecard serve --device`: the choice between the CPU and the CUDA runner, through the real binary.
// The small demo model (head_dim 128, hidden 128) is one the CUDA kernels cannot run, so on every
// machine `--device cuda` must refuse before serving, naming why (no GPU here; on a GPU machine the
// shape). `--device auto` (the default) serving on the CPU is what every other server test does.
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace onecard {
namespace {

class ServeDevice : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = new test::TempDir("serve_device");
        const auto r = test::run_command(test::onecard_binary().string() + " synth --preset small --seed 9 --out " +
                                         dir_->path().string() + " --quiet 2>&1");
        ASSERT_EQ(r.rc, 0) << r.out;
    }
    static void TearDownTestSuite() {
        delete dir_;
        dir_ = nullptr;
    }
    static test::TempDir* dir_;
};
test::TempDir* ServeDevice::dir_ = nullptr;

TEST_F(ServeDevice, CudaIsRefusedWithTheReasonBeforeServing) {
    const auto r = test::run_command("timeout 120 " + test::onecard_binary().string() + " serve --model " +
                                     dir_->path().string() + " --device cuda --port 0 2>&1");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("--device cuda:"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("ready"), std::string::npos) << "must refuse before serving:\n" << r.out;
}

TEST_F(ServeDevice, UnknownDeviceIsAUsageError) {
    const auto r = test::run_command(test::onecard_binary().string() + " serve --model " + dir_->path().string() +
                                     " --device tpu --port 0 2>&1");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.out.find("--device"), std::string::npos) << r.out;
}

// --load-format dummy makes random weights on the GPU: the CPU backend (every machine without a GPU,
// and the small model anywhere) refuses it before serving, naming the flag; a directory with only
// config.json (`synth --config-only`) is what it reads the shape from.
TEST_F(ServeDevice, DummyWeightsAreRefusedOnTheCpuBeforeServing) {
    test::TempDir cfg_dir("serve_device_dummy");
    const auto w = test::run_command(test::onecard_binary().string() + " synth --preset small --config-only --out " +
                                     cfg_dir.path().string() + " 2>&1");
    ASSERT_EQ(w.rc, 0) << w.out;
    EXPECT_TRUE(std::filesystem::exists(cfg_dir.path() / "config.json"));
    EXPECT_TRUE(std::filesystem::exists(cfg_dir.path() / "generation_config.json"));
    EXPECT_FALSE(std::filesystem::exists(cfg_dir.path() / "model.safetensors.index.json")) << "no weights expected";
    const auto r = test::run_command(
        "timeout 120 " + test::onecard_binary().string() + " serve " + cfg_dir.path().string() + " --tokenizer " +
        (dir_->path() / "tokenizer.json").string() + " --device cpu --load-format dummy --port 0 2>&1");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("--load-format dummy"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("ready"), std::string::npos) << "must refuse before serving:\n" << r.out;
    const auto bad = test::run_command(test::onecard_binary().string() + " serve " + dir_->path().string() +
                                       " --load-format pt --port 0 2>&1");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.out.find("--load-format"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace onecard
