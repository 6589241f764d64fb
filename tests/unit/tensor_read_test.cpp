// tensor_element reads checkpoint data at any byte offset: safetensors places an I64 tensor after an
// odd-sized one at an odd offset (UBSan's misaligned-load report in dense_weights.cpp, issue 22).
#include "core/error.h"
#include "core/tensor.h"
#include "model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace onecard;

TEST(TensorElement, ReadsElementsAtAnOddOffset) {
    const std::vector<int64_t> want = {7, -1, int64_t{1} << 40, 255};
    std::vector<std::byte> buf(1 + want.size() * sizeof(int64_t) + 7);
    std::memcpy(buf.data() + 1, want.data(), want.size() * sizeof(int64_t));  // data at offset 1
    TensorView t;
    t.name = "layers.0.ffn.gate.tid2eid";
    t.dtype = DType::I64;
    t.shape = {static_cast<int64_t>(want.size())};
    t.data = buf.data() + 1;
    t.nbytes = want.size() * sizeof(int64_t);
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(tensor_element<int64_t>(t, i), want[static_cast<size_t>(i)]) << i;

    const std::vector<int32_t> want32 = {3, -5, 1 << 30};
    std::memcpy(buf.data() + 3, want32.data(), want32.size() * sizeof(int32_t));  // offset 3
    t.dtype = DType::I32;
    t.shape = {3};
    t.data = buf.data() + 3;
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(tensor_element<int32_t>(t, i), want32[static_cast<size_t>(i)]) << i;
}

// The CPU model and the GPU upload read a hash layer's table through one checked function.
TEST(HashRoutingTable, ReadsUnalignedIdsAndRefusesBadOnes) {
    const std::vector<int64_t> ids = {0, 5, 7, 2};
    std::vector<std::byte> buf(1 + ids.size() * sizeof(int64_t));
    std::memcpy(buf.data() + 1, ids.data(), ids.size() * sizeof(int64_t));
    TensorView t;
    t.name = "layers.0.ffn.gate.tid2eid";
    t.dtype = DType::I64;
    t.shape = {2, 2};
    t.data = buf.data() + 1;
    t.nbytes = ids.size() * sizeof(int64_t);
    EXPECT_EQ(hash_routing_table(t, 8), (std::vector<int32_t>{0, 5, 7, 2}));
    EXPECT_THROW(hash_routing_table(t, 7), Error);  // id 7 with 7 experts
    t.dtype = DType::BF16;
    EXPECT_THROW(hash_routing_table(t, 8), Error);
}
