// See cudnn_attention.h. cuDNN's fused attention through the graph API of
// NVIDIA's cudnn-frontend (cudnn_frontend::graph: one graph for the sdpa
// forward node, one for sdpa_backward), with every CUDA, cuDNN and frontend
// status checked and turned into a message. Compiled apart from the rest of
// the project (CMakeLists.txt): no precompiled headers, the frontend's JSON
// support off (CUDNN_FRONTEND_SKIP_JSON_LIB), so it never meets our
// nlohmann/json, and the frontend included as system headers.
#include "bench/cudnn_attention.h"

#ifndef GPT_HAVE_CUDNN

#ifndef GPT_CUDNN_MISSING
#define GPT_CUDNN_MISSING "configured without cuDNN"
#endif

namespace gpt {

bool cudnn_sdpa_in_build() { return false; }

std::string cudnn_sdpa_description() { return "not in this build (" GPT_CUDNN_MISSING ")"; }

CudnnSdpaTimes time_cudnn_sdpa(int, int, int, int, double) {
  CudnnSdpaTimes t;
  t.error = cudnn_sdpa_description();
  return t;
}

CudnnSdpaCheck check_cudnn_sdpa_forward(int, int, int, int) {
  CudnnSdpaCheck c;
  c.error = cudnn_sdpa_description();
  return c;
}

}  // namespace gpt

#else  // GPT_HAVE_CUDNN

#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "kernels/bf16_round.h"

namespace gpt {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using VariantPack = std::unordered_map<TensorPtr, void*>;

// A failure inside this file; the public functions catch it and return its message.
class CudnnFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void cuda_ok(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw CudnnFailure(what + ": " + cudaGetErrorString(e));
}

void cudnn_ok(cudnnStatus_t s, const std::string& what) {
  if (s != CUDNN_STATUS_SUCCESS) throw CudnnFailure(what + ": " + cudnnGetErrorString(s));
}

void fe_ok(fe::error_t e, const std::string& what) {
  if (e.is_bad()) throw CudnnFailure(what + ": " + e.get_message());
}

// Device memory of a given size in bytes, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0) cuda_ok(cudaMalloc(&p_, bytes), "cudaMalloc(" + std::to_string(bytes >> 20) + " MiB)");
  }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class CudnnHandle {
 public:
  CudnnHandle() { cudnn_ok(cudnnCreate(&h_), "cudnnCreate"); }
  ~CudnnHandle() {
    if (h_) cudnnDestroy(h_);
  }
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return h_; }

 private:
  cudnnHandle_t h_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() { cuda_ok(cudaEventCreate(&e_), "cudaEventCreate"); }
  ~CudaEvent() {
    if (e_) cudaEventDestroy(e_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// n bf16 values uniform in [-scale, scale].
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> h(n);
  for (uint16_t& x : h) x = round_to_bf16_bits(u(rng));
  return h;
}

void upload(const DeviceBuffer& d, const std::vector<uint16_t>& h) {
  cuda_ok(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(uint16_t), cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

struct Shape {
  int64_t B, T, NH, D;
  int64_t C() const { return NH * D; }
  // Q, K, V, O, dO and their gradients as cuDNN sees them: (B, NH, T, D).
  std::vector<int64_t> dims() const { return {B, NH, T, D}; }
  // Q, K and V of token t, head h inside one interleaved (B,T,3C) buffer
  // (K at +C, V at +2C elements), as our kernels read them.
  std::vector<int64_t> qkv_strides() const { return {T * 3 * C(), D, 3 * C(), 1}; }
  // O and dO in (B,T,C).
  std::vector<int64_t> out_strides() const { return {T * C(), D, C(), 1}; }
  // The float32 softmax statistics (log-sum-exp per row), packed (B,NH,T,1).
  std::vector<int64_t> stats_dims() const { return {B, NH, T, 1}; }
  std::vector<int64_t> stats_strides() const { return {NH * T, T, 1, 1}; }
  size_t qkv_elems() const { return static_cast<size_t>(B * T * 3 * C()); }
  size_t out_elems() const { return static_cast<size_t>(B * T * C()); }
  size_t stats_elems() const { return static_cast<size_t>(B * NH * T); }
};

Shape checked_shape(int B, int T, int NH, int D) {
  if (B < 1 || T < 1 || NH < 1 || D < 1)
    throw CudnnFailure("bad shape B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                       " D=" + std::to_string(D) + " (all must be positive)");
  const Shape s{B, T, NH, D};
  if (static_cast<double>(s.qkv_elems()) * sizeof(uint16_t) > 64.0 * (1ull << 30))
    throw CudnnFailure("shape too large: Q, K, V alone would take over 64 GiB");
  return s;
}

void set_precision(fe::graph::Graph& g) {
  g.set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

TensorPtr graph_input(fe::graph::Graph& g, const char* name, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim(dims).set_stride(strides));
}

// Validates the graph, lowers it to cuDNN and builds the heuristics' first
// supported plan; each stage's failure names the stage.
void build_graph(fe::graph::Graph& g, cudnnHandle_t handle, const std::string& which) {
  fe_ok(g.validate(), which + " graph: validate");
  fe_ok(g.build_operation_graph(handle), which + " graph: build_operation_graph");
  fe_ok(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
        which + " graph: create_execution_plans");
  fe_ok(g.check_support(), which + " graph: check_support (no cuDNN engine supports it on this GPU)");
  fe_ok(g.build_plans(), which + " graph: build_plans");
}

int64_t workspace_bytes(const fe::graph::Graph& g, const std::string& which) {
  int64_t bytes = 0;
  fe_ok(g.get_workspace_size(bytes), which + " graph: get_workspace_size");
  if (bytes < 0) throw CudnnFailure(which + " graph: negative workspace size");
  return bytes;
}

// The device buffers, both graphs and their variant packs for one shape.
// Members are declared so that the handle outlives the graphs and the
// buffers outlive every call that uses them.
class CudnnSdpa {
 public:
  CudnnSdpa(const Shape& s, bool with_backward)
      : s_(s),
        qkv_(s.qkv_elems() * sizeof(uint16_t)),
        out_(s.out_elems() * sizeof(uint16_t)),
        stats_(s.stats_elems() * sizeof(float)) {
    qkv_host_ = random_bf16(s.qkv_elems(), 11, 1.0f);
    upload(qkv_, qkv_host_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    const int64_t C = s.C();
    auto* qkv = static_cast<uint16_t*>(qkv_.get());

    set_precision(fwd_);
    fwd_.set_name("gpt_sdpa_forward");
    const TensorPtr q = graph_input(fwd_, "Q", s.dims(), s.qkv_strides());
    const TensorPtr k = graph_input(fwd_, "K", s.dims(), s.qkv_strides());
    const TensorPtr v = graph_input(fwd_, "V", s.dims(), s.qkv_strides());
    fe::graph::SDPA_attributes fa;
    fa.set_name("sdpa");
    fa.set_generate_stats(true);  // the statistics a training forward keeps for the backward, as our kernel does
    fa.set_attn_scale(scale);
    fa.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);  // causal: key j <= query i
    fa.set_diagonal_band_right_bound(0);
    auto [o, stats] = fwd_.sdpa(q, k, v, fa);
    if (!o || !stats) throw CudnnFailure("sdpa forward graph: sdpa() returned no O or no statistics");
    o->set_output(true).set_dim(s.dims()).set_stride(s.out_strides());
    stats->set_output(true).set_data_type(fe::DataType_t::FLOAT).set_dim(s.stats_dims()).set_stride(s.stats_strides());
    build_graph(fwd_, handle_.get(), "sdpa forward");
    fwd_pack_ = {{q, qkv}, {k, qkv + C}, {v, qkv + 2 * C}, {o, out_.get()}, {stats, stats_.get()}};
    int64_t ws = workspace_bytes(fwd_, "sdpa forward");

    if (with_backward) {
      dqkv_ = std::make_unique<DeviceBuffer>(s.qkv_elems() * sizeof(uint16_t));
      dout_ = std::make_unique<DeviceBuffer>(s.out_elems() * sizeof(uint16_t));
      upload(*dout_, random_bf16(s.out_elems(), 12, 0.01f));
      auto* dqkv = static_cast<uint16_t*>(dqkv_->get());

      set_precision(bwd_);
      bwd_.set_name("gpt_sdpa_backward");
      const TensorPtr bq = graph_input(bwd_, "Q", s.dims(), s.qkv_strides());
      const TensorPtr bk = graph_input(bwd_, "K", s.dims(), s.qkv_strides());
      const TensorPtr bv = graph_input(bwd_, "V", s.dims(), s.qkv_strides());
      const TensorPtr bo = graph_input(bwd_, "O", s.dims(), s.out_strides());
      const TensorPtr bdo = graph_input(bwd_, "dO", s.dims(), s.out_strides());
      const TensorPtr bstats = bwd_.tensor(fe::graph::Tensor_attributes()
                                               .set_name("Stats")
                                               .set_dim(s.stats_dims())
                                               .set_stride(s.stats_strides())
                                               .set_data_type(fe::DataType_t::FLOAT));
      fe::graph::SDPA_backward_attributes ba;
      ba.set_name("sdpa_backward");
      ba.set_attn_scale(scale);
      ba.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
      ba.set_diagonal_band_right_bound(0);
      auto [dq, dk, dv] = bwd_.sdpa_backward(bq, bk, bv, bo, bdo, bstats, ba);
      if (!dq || !dk || !dv) throw CudnnFailure("sdpa backward graph: sdpa_backward() returned no dQ, dK or dV");
      dq->set_output(true).set_dim(s.dims()).set_stride(s.qkv_strides());
      dk->set_output(true).set_dim(s.dims()).set_stride(s.qkv_strides());
      dv->set_output(true).set_dim(s.dims()).set_stride(s.qkv_strides());
      build_graph(bwd_, handle_.get(), "sdpa backward");
      bwd_pack_ = {{bq, qkv},        {bk, qkv + C},       {bv, qkv + 2 * C},
                   {bo, out_.get()}, {bdo, dout_->get()}, {bstats, stats_.get()},
                   {dq, dqkv},       {dk, dqkv + C},      {dv, dqkv + 2 * C}};
      ws = std::max(ws, workspace_bytes(bwd_, "sdpa backward"));
    }
    workspace_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(ws));
  }

  // Enqueue one call on the handle's stream (the default stream).
  void forward() { fe_ok(fwd_.execute(handle_.get(), fwd_pack_, workspace_->get()), "sdpa forward: execute"); }
  void backward() {
    if (!dqkv_) throw CudnnFailure("sdpa backward: not built");
    fe_ok(bwd_.execute(handle_.get(), bwd_pack_, workspace_->get()), "sdpa backward: execute");
  }

  const std::vector<uint16_t>& qkv_host() const { return qkv_host_; }
  std::vector<uint16_t> download_out() const {
    std::vector<uint16_t> h(s_.out_elems());
    cuda_ok(cudaMemcpy(h.data(), out_.get(), h.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            "cudaMemcpy of O to the host");
    return h;
  }

 private:
  Shape s_;
  CudnnHandle handle_;
  DeviceBuffer qkv_, out_, stats_;
  std::unique_ptr<DeviceBuffer> dqkv_, dout_, workspace_;
  std::vector<uint16_t> qkv_host_;
  fe::graph::Graph fwd_, bwd_;
  VariantPack fwd_pack_, bwd_pack_;
};

// Best seconds of f (which enqueues work on the default stream): one warm-up
// call, then at least 3 timed calls and more until min_seconds have passed.
template <class F>
double best_gpu_seconds(F&& f, double min_seconds) {
  CudaEvent start, stop;
  f();
  cuda_ok(cudaDeviceSynchronize(), "warm-up call");
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (int reps = 0; reps < 3 || (total < min_seconds && reps < 100000); ++reps) {
    cuda_ok(cudaEventRecord(start.get(), 0), "cudaEventRecord");
    f();
    cuda_ok(cudaEventRecord(stop.get(), 0), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop.get()), "timed call");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
    best = std::min(best, ms * 1e-3);
    total += ms * 1e-3;
  }
  return best;
}

void require_device() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) throw CudnnFailure(std::string("no CUDA device (") + cudaGetErrorString(e) + ")");
  if (devices < 1) throw CudnnFailure("no CUDA device (none visible)");
}

// Resets the last CUDA error after a failure so that the next measurement
// starts clean (an error that spoilt the context stays, and the next CUDA
// call reports it again).
void clear_cuda_error() { (void)cudaGetLastError(); }

}  // namespace

bool cudnn_sdpa_in_build() { return true; }

std::string cudnn_sdpa_description() {
  const size_t v = cudnnGetVersion();  // cuDNN 9: major*10000 + minor*100 + patch
  char buf[160];
  std::snprintf(buf, sizeof buf, "cuDNN %zu.%zu.%zu (built with %d.%d.%d), cudnn-frontend %d.%d.%d", v / 10000,
                v / 100 % 100, v % 100, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL, CUDNN_FRONTEND_MAJOR_VERSION,
                CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
  return buf;
}

CudnnSdpaTimes time_cudnn_sdpa(int B, int T, int NH, int D, double min_seconds) {
  CudnnSdpaTimes t;
  try {
    const Shape s = checked_shape(B, T, NH, D);
    require_device();
    CudnnSdpa sdpa(s, /*with_backward=*/true);
    t.fwd_s = best_gpu_seconds([&] { sdpa.forward(); }, min_seconds);
    t.fwd_bwd_s = best_gpu_seconds(
        [&] {
          sdpa.forward();
          sdpa.backward();
        },
        min_seconds);
    cuda_ok(cudaDeviceSynchronize(), "final synchronisation");
  } catch (const std::exception& e) {
    clear_cuda_error();
    t = CudnnSdpaTimes{};
    t.error = e.what();
  }
  return t;
}

CudnnSdpaCheck check_cudnn_sdpa_forward(int B, int T, int NH, int D) {
  CudnnSdpaCheck c;
  try {
    const Shape s = checked_shape(B, T, NH, D);
    if (static_cast<double>(B) * NH * T * T * D > 1e9)
      throw CudnnFailure("check_cudnn_sdpa_forward: shape too large for the host reference");
    require_device();
    CudnnSdpa sdpa(s, /*with_backward=*/false);
    sdpa.forward();
    cuda_ok(cudaDeviceSynchronize(), "sdpa forward");
    const std::vector<uint16_t> out = sdpa.download_out();
    const std::vector<uint16_t>& qkv = sdpa.qkv_host();
    const int64_t C = s.C();
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> p(static_cast<size_t>(T)), acc(static_cast<size_t>(D));
    double worst = 0;
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.NH; ++h)
        for (int64_t i = 0; i < s.T; ++i) {
          const size_t qi = static_cast<size_t>((b * s.T + i) * 3 * C + h * D);
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j <= i; ++j) {
            const size_t kj = static_cast<size_t>((b * s.T + j) * 3 * C + C + h * D);
            double dot = 0;
            for (int d = 0; d < D; ++d)
              dot += static_cast<double>(bf16_bits_to_float(qkv[qi + d])) * bf16_bits_to_float(qkv[kj + d]);
            p[j] = dot * scale;
            m = std::max(m, p[j]);
          }
          double z = 0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j <= i; ++j) {
            const size_t vj = static_cast<size_t>((b * s.T + j) * 3 * C + 2 * C + h * D);
            const double w = std::exp(p[j] - m);
            z += w;
            for (int d = 0; d < D; ++d) acc[d] += w * bf16_bits_to_float(qkv[vj + d]);
          }
          const size_t oi = static_cast<size_t>((b * s.T + i) * C + h * D);
          for (int d = 0; d < D; ++d) {
            const double got = bf16_bits_to_float(out[oi + d]);
            const double err =
                std::isfinite(got) ? std::abs(got - acc[d] / z) : std::numeric_limits<double>::infinity();
            worst = std::max(worst, err);
          }
        }
    c.max_abs_error = worst;
  } catch (const std::exception& e) {
    clear_cuda_error();
    c = CudnnSdpaCheck{};
    c.error = e.what();
  }
  return c;
}

}  // namespace gpt

#endif  // GPT_HAVE_CUDNN
