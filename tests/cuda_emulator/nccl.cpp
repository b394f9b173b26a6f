// The CUDA emulator's NCCL for one rank (include/nccl.h says what it is
// for). Every collective checks its arguments, more strictly than NCCL
// (which does not check pointers unless NCCL_CHECK_POINTERS=1): buffers
// must lie in device memory, counts must fit, the root must be rank 0;
// then, with one rank, it queues a copy of the send buffer to the receive
// buffer on the collective's stream (runtime.cpp's stream order: nothing
// to copy when they are the same, but the collective still reads and
// writes them there). A communicator made with
// config.blocking = 0 answers as a non-blocking one does: set-up, a
// collective outside a group and ncclGroupEnd return ncclInProgress, and
// the next ncclCommGetAsyncError reports ncclInProgress once before
// ncclSuccess, so the caller's polling runs. A communicator that was
// aborted or destroyed is refused (ncclInvalidUsage), not reused.
#include "nccl.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <string>

#include "cuda_runtime.h"
#include "emulator.h"

struct ncclComm {
  bool blocking = true;
  bool dead = false;    // aborted or destroyed (kept, so that a stale handle is caught)
  int in_progress = 0;  // ncclCommGetAsyncError answers ncclInProgress this many more times
  std::string last_error;
};

namespace {

thread_local int g_group_depth = 0;              // NCCL's groups are per thread
thread_local ncclComm_t g_group_comm = nullptr;  // the (one) communicator used in the open group
std::string g_last_error;                        // for ncclGetLastError(nullptr)

// Usable: not null, not aborted or destroyed.
ncclResult_t usable(ncclComm_t comm, const char* call);

// What a non-blocking communicator returns for work it has taken.
ncclResult_t started(ncclComm_t comm) {
  if (comm->blocking) return ncclSuccess;
  comm->in_progress = 1;
  return ncclInProgress;
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt32:
    case ncclFloat32:
      return 4;
    case ncclFloat64:
      return 8;
  }
  return 0;
}

ncclResult_t invalid(ncclComm_t comm, ncclResult_t r, const std::string& why) {
  g_last_error = "cuda emulator's NCCL: " + why;
  if (comm) comm->last_error = g_last_error;
  return r;
}

// A one-rank collective: recv = send, both count elements of type t,
// queued on `stream` (it reads send and writes recv when the stream gets
// there; in place, it still counts as both for the stream-order checks).
ncclResult_t copy(const char* call, const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                  cudaStream_t stream) {
  if (const ncclResult_t u = usable(comm, call); u != ncclSuccess) return u;
  const size_t es = type_bytes(type);
  if (es == 0) return invalid(comm, ncclInvalidArgument, std::string(call) + ": unknown data type");
  if (cuemu::sticky_error()) return invalid(comm, ncclUnhandledCudaError, std::string(call) + ": a kernel failed");
  if (count > SIZE_MAX / es) return invalid(comm, ncclInvalidArgument, std::string(call) + ": count too large");
  const size_t bytes = count * es;
  if (g_group_depth > 0) {
    if (g_group_comm && g_group_comm != comm)
      return invalid(comm, ncclInvalidUsage, std::string(call) + ": the emulator groups one communicator at a time");
    g_group_comm = comm;
  }
  if (count == 0) return g_group_depth > 0 ? ncclSuccess : started(comm);
  if (!cuemu::is_device(send, bytes) || !cuemu::is_device(recv, bytes))
    return invalid(comm, ncclInvalidArgument,
                   std::string(call) + ": a buffer of " + std::to_string(bytes) + " bytes is not inside device memory");
  std::function<void()> run = [] {};
  if (send != recv)
    run = [=] {
      cuemu::DeviceAccess open;
      std::memmove(recv, send, bytes);
    };
  if (!cuemu::enqueue(stream, call, {{send, bytes, false}, {recv, bytes, true}}, std::move(run)))
    return invalid(comm, ncclUnhandledCudaError, std::string(call) + ": the CUDA emulator refused to queue it");
  return g_group_depth > 0 ? ncclSuccess : started(comm);
}

ncclResult_t usable(ncclComm_t comm, const char* call) {
  if (!comm) return invalid(comm, ncclInvalidArgument, std::string(call) + ": null communicator");
  if (comm->dead)
    return invalid(comm, ncclInvalidUsage, std::string(call) + ": the communicator was aborted or destroyed");
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
  // Kept in a registry that lives as long as the process: handles are never
  // freed (see ncclCommDestroy), yet stay reachable, so LeakSanitizer does
  // not report them as leaks.
  static auto* registry = new std::deque<ncclComm>();
  *comm = &registry->emplace_back();
  (*comm)->blocking = !config || config->blocking != 0;
  return started(*comm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t u = usable(comm, "ncclCommFinalize"); u != ncclSuccess) return u;
  if (g_group_depth > 0) return invalid(comm, ncclInvalidUsage, "ncclCommFinalize inside a group");
  return started(comm);
}
// Handles are never freed: a later call with one is refused, not undefined.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (const ncclResult_t u = usable(comm, "ncclCommDestroy"); u != ncclSuccess) return u;
  if (g_group_depth > 0) return invalid(comm, ncclInvalidUsage, "ncclCommDestroy inside a group");
  comm->dead = true;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // as NCCL: nothing to abort
  if (const ncclResult_t u = usable(comm, "ncclCommAbort"); u != ncclSuccess) return u;
  comm->dead = true;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!state) return ncclInvalidArgument;
  if (const ncclResult_t u = usable(comm, "ncclCommGetAsyncError"); u != ncclSuccess) return u;
  if (cuemu::sticky_error()) {
    *state = ncclUnhandledCudaError;
  } else if (comm->in_progress > 0) {
    --comm->in_progress;
    *state = ncclInProgress;
  } else {
    *state = ncclSuccess;
  }
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
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
  if (--g_group_depth > 0) return ncclSuccess;
  ncclComm_t comm = g_group_comm;
  g_group_comm = nullptr;
  return comm && !comm->dead ? started(comm) : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (op != ncclSum) return invalid(comm, ncclInvalidArgument, "ncclAllReduce: only ncclSum is emulated");
  return copy("ncclAllReduce", send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (root != 0)
    return invalid(comm, ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " of 1 rank");
  return copy("ncclBroadcast", send, recv, count, type, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  return copy("ncclAllGather", send, recv, count, type, comm, stream);
}
