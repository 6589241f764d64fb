// `onecard serve --device`: the choice between the CPU and the CUDA runner, through the real binary.
// The small demo model (head_dim 128, hidden 128) is one the CUDA kernels cannot run, so on every
// machine `--device cuda` must refuse before serving, naming why (no GPU here; on a GPU machine the
// shape). `--device auto` (the default) serving on the CPU is what every other server test does.
#include "support/test_support.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace onecard
