// The CUDA emulator's stand-in for <nccl.h>: the NCCL calls of
// src/dist/nccl.cpp for a communicator of ONE rank, on the emulated device
// (tests/cuda_emulator/nccl.cpp). One rank makes every collective a copy
// (or nothing), so this runs the communicator's own code (set-up, groups,
// the broadcast, the overlapped reduction, the polling of a non-blocking
// communicator) without a GPU; it says nothing about NCCL across ranks, and
// NCCL's failures are not simulated. Names, meanings and result codes
// follow NVIDIA's NCCL documentation; the version is that of the oldest
// NCCL with every call used here (ncclCommInitRankConfig, 2.14).
#pragma once
#include <cstddef>

#include "cuda_runtime.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 14
#define NCCL_PATCH 0

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t { ncclInt32 = 2, ncclFloat32 = 7, ncclFloat64 = 8 };
constexpr ncclDataType_t ncclInt = ncclInt32, ncclFloat = ncclFloat32, ncclDouble = ncclFloat64;

enum ncclRedOp_t { ncclSum = 0 };

struct ncclUniqueId {
  char internal[128];
};

struct ncclComm;
using ncclComm_t = ncclComm*;

struct ncclConfig_t {
  int blocking;
};
#define NCCL_CONFIG_INITIALIZER \
  { 1 }

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream);
