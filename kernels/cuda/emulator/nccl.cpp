// The CUDA emulator's NCCL for one rank (include/nccl.h says what it is
// for). Every collective checks its arguments as NCCL would find them
// wrong: buffers must be device memory, counts must fit, the root must be
// rank 0; then, with one rank, it copies the send buffer to the receive
// buffer (nothing to do when they are the same). Groups only nest.
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_runtime.h"
#include "emulator.h"
#include "nccl.h"

struct ncclComm {
  bool blocking = true;
  std::string last_error;
};

namespace {

int g_group_depth = 0;
std::string g_last_error;  // for ncclGetLastError(nullptr)

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt32:
    case ncclFloat32: return 4;
    case ncclFloat64: return 8;
  }
  return 0;
}

ncclResult_t invalid(ncclComm_t comm, ncclResult_t r, const std::string& why) {
  g_last_error = "cuda emulator's NCCL: " + why;
  if (comm) comm->last_error = g_last_error;
  return r;
}

// A one-rank collective: recv = send, both count elements of type t.
ncclResult_t copy(const char* call, const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm) {
  if (!comm) return invalid(comm, ncclInvalidArgument, std::string(call) + ": null communicator");
  const size_t es = type_bytes(type);
  if (es == 0) return invalid(comm, ncclInvalidArgument, std::string(call) + ": unknown data type");
  if (cuemu::sticky_error()) return invalid(comm, ncclUnhandledCudaError, std::string(call) + ": a kernel failed");
  const size_t bytes = count * es;
  if (count == 0) return ncclSuccess;
  if (!cuemu::is_device(send, bytes) || !cuemu::is_device(recv, bytes))
    return invalid(comm, ncclInvalidArgument,
                   std::string(call) + ": a buffer of " + std::to_string(bytes) + " bytes is not inside device memory");
  if (send != recv && cudaMemcpy(recv, send, bytes, cudaMemcpyDeviceToDevice) != cudaSuccess)
    return invalid(comm, ncclUnhandledCudaError, std::string(call) + ": the copy failed");
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "cuda emulator, one rank");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (!comm) return invalid(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: null communicator pointer");
  *comm = nullptr;
  if (nranks != 1 || rank != 0)
    return invalid(nullptr, ncclInvalidUsage,
                   "ncclCommInitRankConfig: the CUDA emulator's NCCL serves one rank, asked for rank " +
                       std::to_string(rank) + " of " + std::to_string(nranks));
  if (std::strcmp(id.internal, "cuda emulator, one rank") != 0)
    return invalid(nullptr, ncclInvalidArgument, "ncclCommInitRankConfig: the unique id is not ncclGetUniqueId's");
  *comm = new ncclComm{};
  (*comm)->blocking = !config || config->blocking != 0;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) { return comm ? ncclSuccess : ncclInvalidArgument; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !state) return ncclInvalidArgument;
  *state = cuemu::sticky_error() ? ncclUnhandledCudaError : ncclSuccess;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error.c_str() : g_last_error.c_str(); }

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) return invalid(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  if (op != ncclSum) return invalid(comm, ncclInvalidArgument, "ncclAllReduce: only ncclSum is emulated");
  return copy("ncclAllReduce", send, recv, count, type, comm);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  if (root != 0) return invalid(comm, ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " of 1 rank");
  return copy("ncclBroadcast", send, recv, count, type, comm);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  return copy("ncclAllGather", send, recv, count, type, comm);
}
