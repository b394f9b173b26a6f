// Internal to src/dist: the implementations behind world().
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace gpt::dist {

// The single-process communicator (one instance per process).
Communicator& single_process();

// The collective time limit in seconds from GPT_DIST_TIMEOUT (default
// kDefaultTimeoutSeconds; 0 disables it); gpt::Error for a malformed value.
double collective_timeout_seconds();

#if GPT_HAVE_MPI
// Initialises MPI (MPI_Init_thread, funneled) and returns the MPI_COMM_WORLD
// communicator; destroying it finalises MPI. Once per process.
std::unique_ptr<Communicator> make_mpi_communicator();
#endif

#if GPT_HAVE_NCCL
// The NCCL communicator (src/dist/nccl.cpp) for the ranks of `host`, which
// gives the rank and the number of ranks, carries the *_host collectives and
// barrier() and must outlive it. With MPI initialised the NCCL unique id is
// broadcast from rank 0 through MPI_COMM_WORLD and the GPU is the node-local
// rank modulo the visible devices; without MPI `host` must have one rank (the
// tests: a one-rank NCCL communicator in a plain process). Sets the calling
// thread's current CUDA device. gpt::Error when there is no CUDA device or
// NCCL fails to set up.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);
#endif

}  // namespace gpt::dist
