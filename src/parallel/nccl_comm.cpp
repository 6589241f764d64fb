#include "parallel/nccl_comm.h"

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "parallel/bootstrap_file.h"

#include <cstdlib>
#include <cstring>
#include <system_error>
#include <utility>

#define NCCL_CHECK(call)                                                                       \
    do {                                                                                       \
        const ncclResult_t onecard_nccl_res_ = (call);                                         \
        if (onecard_nccl_res_ != ncclSuccess)                                                  \
            ::onecard::fail("NCCL: {} failed at {}:{}: {} ({})", #call, __FILE__, __LINE__,    \
                            ncclGetErrorString(onecard_nccl_res_), ncclGetLastError(nullptr)); \
    } while (0)

namespace onecard::parallel {

std::string disable_nvls_unless_set() {
    // Shared machines: see the header. overwrite = 0 keeps an explicit choice of the operator.
    ::setenv("NCCL_NVLS_ENABLE", "0", 0);
    const char* v = std::getenv("NCCL_NVLS_ENABLE");
    return v ? v : "";
}

std::string nccl_version_string() {
    int v = 0;
    NCCL_CHECK(ncclGetVersion(&v));
    // NCCL >= 2.9 encodes major·10000 + minor·100 + patch.
    return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

size_t nccl_type_bytes(ncclDataType_t dtype) {
    switch (dtype) {
        case ncclInt8:
        case ncclUint8:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
        case ncclFloat8e4m3:
        case ncclFloat8e5m2:
#endif
            return 1;
        case ncclFloat16:
        case ncclBfloat16:
            return 2;
        case ncclInt32:
        case ncclUint32:
        case ncclFloat32:
            return 4;
        case ncclInt64:
        case ncclUint64:
        case ncclFloat64:
            return 8;
        default:
            fail("NCCL: unknown datatype {}", static_cast<int>(dtype));
    }
}

NcclComm NcclComm::init_from_file(const std::filesystem::path& id_path, int rank, int n_ranks, int device,
                                  std::chrono::milliseconds timeout) {
    ONECARD_CHECK(n_ranks > 0 && rank >= 0 && rank < n_ranks, "NCCL init: rank {} of {}", rank, n_ranks);
    disable_nvls_unless_set();
    CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id;
    static_assert(sizeof(id) == NCCL_UNIQUE_ID_BYTES);
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        publish_bootstrap_id(id_path, &id, sizeof(id));
    } else {
        const std::vector<uint8_t> bytes = wait_bootstrap_id(id_path, sizeof(id), timeout);
        std::memcpy(&id, bytes.data(), sizeof(id));
    }
    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommInitRank(&comm, n_ranks, id, rank));
    if (rank == 0) {
        std::error_code ec;
        std::filesystem::remove(id_path, ec);  // every rank has joined: the id is spent
    }
    return NcclComm(comm, rank, n_ranks, device);
}

std::vector<NcclComm> NcclComm::init_all(const std::vector<int>& devices) {
    ONECARD_CHECK(!devices.empty(), "NCCL init: no devices");
    disable_nvls_unless_set();
    const int n = static_cast<int>(devices.size());
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
    std::vector<NcclComm> out;
    out.reserve(devices.size());
    for (int i = 0; i < n; ++i)
        out.push_back(NcclComm(comms[static_cast<size_t>(i)], i, n, devices[static_cast<size_t>(i)]));
    return out;
}

NcclComm::NcclComm(NcclComm&& o) noexcept
    : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), n_ranks_(o.n_ranks_), device_(o.device_) {}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
    if (this != &o) {
        if (comm_) ncclCommDestroy(comm_);
        comm_ = std::exchange(o.comm_, nullptr);
        rank_ = o.rank_;
        n_ranks_ = o.n_ranks_;
        device_ = o.device_;
    }
    return *this;
}

NcclComm::~NcclComm() {
    // Destructors do not throw: a failed destroy at shutdown has nothing left to report to.
    if (comm_) ncclCommDestroy(comm_);
}

void NcclComm::all_to_all_v(const void* send, const int64_t* send_counts, const int64_t* send_offsets, void* recv,
                            const int64_t* recv_counts, const int64_t* recv_offsets, ncclDataType_t dtype,
                            cudaStream_t stream) const {
    const size_t esz = nccl_type_bytes(dtype);
    const auto* s = static_cast<const char*>(send);
    auto* r = static_cast<char*>(recv);
    for (int p = 0; p < n_ranks_; ++p)
        ONECARD_CHECK(send_counts[p] >= 0 && send_offsets[p] >= 0 && recv_counts[p] >= 0 && recv_offsets[p] >= 0,
                      "all_to_all_v: negative count or offset for peer {}", p);
    NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < n_ranks_; ++p) {
        // Byte offsets in 64 bits: a step's dispatched rows can exceed 2 GiB.
        const ncclResult_t rs = ncclSend(s + static_cast<size_t>(send_offsets[p]) * esz,
                                         static_cast<size_t>(send_counts[p]), dtype, p, comm_, stream);
        const ncclResult_t rr = ncclRecv(r + static_cast<size_t>(recv_offsets[p]) * esz,
                                         static_cast<size_t>(recv_counts[p]), dtype, p, comm_, stream);
        if (rs != ncclSuccess || rr != ncclSuccess) {
            ncclGroupEnd();  // close the group before reporting, or later NCCL calls would join it
            fail("all_to_all_v: enqueueing send/recv with peer {} failed: {}", p,
                 ncclGetErrorString(rs != ncclSuccess ? rs : rr));
        }
    }
    NCCL_CHECK(ncclGroupEnd());
}

void NcclComm::all_gather(const void* send, void* recv, size_t count, ncclDataType_t dtype, cudaStream_t stream) const {
    NCCL_CHECK(ncclAllGather(send, recv, count, dtype, comm_, stream));
}

void NcclComm::all_gather_v(const void* send, void* recv, const int64_t* counts, const int64_t* offsets,
                            ncclDataType_t dtype, cudaStream_t stream) const {
    const std::vector<int64_t> send_counts(static_cast<size_t>(n_ranks_), counts[rank_]);
    const std::vector<int64_t> send_offsets(static_cast<size_t>(n_ranks_), 0);  // the same block to everyone
    all_to_all_v(send, send_counts.data(), send_offsets.data(), recv, counts, offsets, dtype, stream);
}

NcclGroup::NcclGroup() {
    NCCL_CHECK(ncclGroupStart());
    open_ = true;
}

void NcclGroup::end() {
    if (!open_) return;
    open_ = false;
    NCCL_CHECK(ncclGroupEnd());
}

NcclGroup::~NcclGroup() {
    if (open_) ncclGroupEnd();
}

}  // namespace onecard::parallel
