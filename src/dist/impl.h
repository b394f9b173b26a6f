// Internal to src/dist: the implementations behind world().
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace gpt::dist {

// The single-process communicator (one instance per process).
Communicator& single_process();

#if GPT_HAVE_MPI
// Initialises MPI (MPI_Init_thread, funneled) and returns the MPI_COMM_WORLD
// communicator; destroying it finalises MPI. Once per process.
std::unique_ptr<Communicator> make_mpi_communicator();
#endif

}  // namespace gpt::dist
