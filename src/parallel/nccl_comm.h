// NCCL communicator for expert parallelism (docs/PARALLEL.md). Only built when CUDA and NCCL are
// found (target onecard_parallel_nccl; ONECARD_HAVE_NCCL is defined for whatever links it).
//
// Every init path first sets NCCL_NVLS_ENABLE=0 when it is unset: NVLink SHARP (multicast) objects
// live in the NVSwitch fabric that every GPU of the host shares; a program that leaves them in a bad
// state can put the host's GPUs, including other users' jobs, out of service. Expert parallelism
// needs plain send/recv and all-gather, which run at full speed without multicast.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace onecard::parallel {

// setenv("NCCL_NVLS_ENABLE", "0") unless the variable is set (see above). Returns its value after.
std::string disable_nvls_unless_set();

// "2.28.9" (the library actually loaded, not the header).
std::string nccl_version_string();

// Bytes per element of an NCCL datatype (counts below are in elements).
size_t nccl_type_bytes(ncclDataType_t dtype);

class NcclComm {
public:
    // One process per GPU (`onecard serve --gpus N`): selects `device`, rank 0 creates the unique id
    // and publishes it at id_path (bootstrap_file.h), the others wait for it (timeout), then all call
    // ncclCommInitRank. Rank 0 removes the file once the communicator is up (init is collective: by
    // then every rank has read it). Throws onecard::Error on any failure.
    static NcclComm init_from_file(const std::filesystem::path& id_path, int rank, int n_ranks, int device,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(120));
    // One process driving several devices (ncclCommInitAll): element i is rank i on devices[i].
    // Collectives on several of them from one thread must be issued inside one NcclGroup.
    static std::vector<NcclComm> init_all(const std::vector<int>& devices);

    NcclComm(NcclComm&& o) noexcept;
    NcclComm& operator=(NcclComm&& o) noexcept;
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;
    ~NcclComm();  // ncclCommDestroy

    int rank() const { return rank_; }
    int n_ranks() const { return n_ranks_; }
    int device() const { return device_; }
    ncclComm_t handle() const { return comm_; }

    // All-to-all with per-peer counts (the expert dispatch and its return), on `stream`:
    // to every peer p this rank sends send_counts[p] elements from send + send_offsets[p] and
    // receives recv_counts[p] elements into recv + recv_offsets[p] (host arrays of n_ranks; counts and
    // offsets in elements of dtype; the peers' counts must mirror: my send_counts[p] == p's
    // recv_counts[me]). One ncclGroupStart/End around all the sends and receives, so NCCL runs them
    // together and no ordering can deadlock. Asynchronous like every NCCL call.
    void all_to_all_v(const void* send, const int64_t* send_counts, const int64_t* send_offsets, void* recv,
                      const int64_t* recv_counts, const int64_t* recv_offsets, ncclDataType_t dtype,
                      cudaStream_t stream) const;
    // recv [n_ranks · count] = every rank's send [count], in rank order (ncclAllGather).
    void all_gather(const void* send, void* recv, size_t count, ncclDataType_t dtype, cudaStream_t stream) const;
    // Every rank's block to every rank when the blocks differ in size (the replicated-attention
    // combine: rank r's pair outputs land at pair_offsets[r]): recv + offsets[p] gets peer p's
    // counts[p] elements; this rank contributes send [counts[rank()]]. Built on all_to_all_v.
    void all_gather_v(const void* send, void* recv, const int64_t* counts, const int64_t* offsets, ncclDataType_t dtype,
                      cudaStream_t stream) const;

private:
    NcclComm(ncclComm_t comm, int rank, int n_ranks, int device)
        : comm_(comm), rank_(rank), n_ranks_(n_ranks), device_(device) {}
    ncclComm_t comm_ = nullptr;
    int rank_ = 0;
    int n_ranks_ = 0;
    int device_ = 0;
};

// ncclGroupStart in the constructor, ncclGroupEnd (checked) in end() or the destructor: for one
// thread issuing collectives on several communicators (NcclComm::init_all). Groups nest.
class NcclGroup {
public:
    NcclGroup();
    ~NcclGroup();
    void end();  // throws onecard::Error if the group's operations failed to launch
    NcclGroup(const NcclGroup&) = delete;
    NcclGroup& operator=(const NcclGroup&) = delete;

private:
    bool open_ = false;
};

}  // namespace onecard::parallel
