// Several host threads, one CUDA stream each, calling the library at once
// (issue 7): every thread's outputs equal, bit for bit, the same calls made
// afterwards from one thread on one stream. The threads share the library's
// process-wide state -- the device-limits cache, the per-kernel attribute
// caches, the tuning -- and run first, so that state is raised under
// contention; each thread's problem has its own shapes (different kernels and
// configurations) and its own random inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/cuda_test.hpp"

namespace quack {
namespace {

using test::DeviceBuffer;

constexpr DType kBF16 = DType::kBFloat16;

// One thread's work: an RMSNorm forward (bf16, weight), a softmax forward
// (fp32) and a cross-entropy forward + gradient (bf16, mean: the workspace's
// denominators; >= 32000 classes: the two-pass gradient).
struct Work {
  int64_t m = 0, n = 0, sn = 0, v = 0;
  DeviceBuffer x, w, y, rstd, sx, sy, logits, target, loss, dlogits, ws;
  size_t ws_bytes = 0;

  CrossEntropyArgs ce_args() const {
    CrossEntropyArgs a;
    a.rows = m;
    a.cols = v;
    a.logits = {logits.data(), kBF16, v};
    a.target = target.data();
    a.target_dtype = IndexDType::kInt64;
    a.label_smoothing = 0.1f;
    a.loss = reinterpret_cast<float*>(loss.data());
    a.dlogits = {dlogits.data(), kBF16, v};
    a.workspace = ws.data();
    a.workspace_bytes = ws_bytes;
    return a;
  }

  Status launch(cudaStream_t s) const {
    RMSNormFwdArgs r;
    r.rows = m;
    r.cols = n;
    r.x = {x.data(), kBF16, n};
    r.weight = {w.data(), DType::kFloat32};
    r.out = {y.data(), kBF16, n};
    r.rstd = reinterpret_cast<float*>(rstd.data());
    Status st = rmsnorm_fwd(r, s);
    if (!st.ok()) return st;
    SoftmaxFwdArgs sm;
    sm.rows = m;
    sm.cols = sn;
    sm.x = {sx.data(), DType::kFloat32, sn};
    sm.out = {sy.data(), DType::kFloat32, sn};
    if (!(st = softmax_fwd(sm, s)).ok()) return st;
    return cross_entropy(ce_args(), s);
  }

  // Every output's bytes.
  cudaError_t download(std::vector<char>* out) const {
    out->clear();
    for (const DeviceBuffer* b : {&y, &rstd, &sy, &loss, &dlogits}) {
      const size_t at = out->size();
      out->resize(at + b->bytes());
      const cudaError_t e = cudaMemcpy(out->data() + at, b->data(), b->bytes(), cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
};

template <typename T>
cudaError_t upload(const DeviceBuffer& d, const std::vector<T>& h) {
  return cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
}

std::vector<uint16_t> bf16_normal(size_t count, std::mt19937& gen, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> h(count);
  for (uint16_t& e : h) test::store_elem(&e, kBF16, normal(gen));
  return h;
}

// Thread k's problem: its own shapes and inputs; outputs poisoned (0xFF: NaN).
void make_work(int k, Work* wk) {
  std::mt19937 gen(uint32_t(1234 + 77 * k));
  wk->m = 48 + 8 * k;
  wk->n = 4096 + 136 * k;   // rmsnorm: a register tile per thread's N
  wk->sn = 1000 + 2999 * k;  // softmax: 1000 .. 9997
  wk->v = 32000 + 1024 * k;  // cross-entropy: the two-pass gradient
  const size_t m = size_t(wk->m);
  wk->x = DeviceBuffer(m * size_t(wk->n) * 2);
  wk->w = DeviceBuffer(size_t(wk->n) * 4);
  wk->y = DeviceBuffer(m * size_t(wk->n) * 2);
  wk->rstd = DeviceBuffer(m * 4);
  wk->sx = DeviceBuffer(m * size_t(wk->sn) * 4);
  wk->sy = DeviceBuffer(m * size_t(wk->sn) * 4);
  wk->logits = DeviceBuffer(m * size_t(wk->v) * 2);
  wk->target = DeviceBuffer(m * 8);
  wk->loss = DeviceBuffer(4);
  wk->dlogits = DeviceBuffer(m * size_t(wk->v) * 2);
  ASSERT_TRUE(cross_entropy_workspace_bytes(wk->ce_args(), &wk->ws_bytes).ok());
  wk->ws = DeviceBuffer(std::max<size_t>(wk->ws_bytes, 16));
  for (const DeviceBuffer* b : {&wk->x, &wk->w, &wk->y, &wk->rstd, &wk->sx, &wk->sy, &wk->logits, &wk->target,
                                &wk->loss, &wk->dlogits, &wk->ws})
    ASSERT_TRUE(b->ok());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  QUACK_ASSERT_CUDA(upload(wk->x, bf16_normal(m * size_t(wk->n), gen, 1.0f)));
  std::vector<float> w(size_t(wk->n)), sx(m * size_t(wk->sn));
  for (float& e : w) e = 1.0f + 0.25f * normal(gen);
  for (float& e : sx) e = 3.0f * normal(gen);
  QUACK_ASSERT_CUDA(upload(wk->w, w));
  QUACK_ASSERT_CUDA(upload(wk->sx, sx));
  QUACK_ASSERT_CUDA(upload(wk->logits, bf16_normal(m * size_t(wk->v), gen, 2.0f)));
  std::uniform_int_distribution<int64_t> cls(0, wk->v - 1);
  std::vector<int64_t> t(m);
  for (size_t r = 0; r < m; ++r) t[r] = r % 5 == 2 ? -100 : cls(gen);
  QUACK_ASSERT_CUDA(upload(wk->target, t));
  for (const DeviceBuffer* b : {&wk->y, &wk->rstd, &wk->sy, &wk->loss, &wk->dlogits})
    QUACK_ASSERT_CUDA(cudaMemset(b->data(), 0xFF, b->bytes()));
}

TEST(Concurrency, HostThreadsWithAStreamEachMatchOneThread) {
  QUACK_REQUIRE_SM90();
  constexpr int kThreads = 6, kIters = 8;
  std::vector<Work> work(kThreads);
  for (int k = 0; k < kThreads; ++k) {
    make_work(k, &work[size_t(k)]);
    if (HasFatalFailure()) return;
  }
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  // 1. All threads at once, each on its own stream, a few times over.
  std::vector<std::string> errors(kThreads);
  std::vector<std::vector<char>> threaded(kThreads);
  {
    std::vector<std::thread> threads;
    for (int k = 0; k < kThreads; ++k) {
      threads.emplace_back([&, k] {
        cudaStream_t s = nullptr;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
          errors[size_t(k)] = "cudaStreamCreate failed";
          return;
        }
        for (int i = 0; i < kIters && errors[size_t(k)].empty(); ++i) {
          const Status st = work[size_t(k)].launch(s);
          if (!st.ok()) errors[size_t(k)] = st.message;
        }
        const cudaError_t e = cudaStreamSynchronize(s);
        if (e != cudaSuccess && errors[size_t(k)].empty()) errors[size_t(k)] = cudaGetErrorString(e);
        if (errors[size_t(k)].empty() && work[size_t(k)].download(&threaded[size_t(k)]) != cudaSuccess)
          errors[size_t(k)] = "download failed";
        cudaStreamDestroy(s);
      });
    }
    for (std::thread& t : threads) t.join();
  }
  for (int k = 0; k < kThreads; ++k) ASSERT_TRUE(errors[size_t(k)].empty()) << "thread " << k << ": " << errors[size_t(k)];
  // 2. The same calls from this thread, one after another, outputs poisoned again.
  for (int k = 0; k < kThreads; ++k) {
    SCOPED_TRACE("thread " + std::to_string(k));
    const Work& wk = work[size_t(k)];
    for (const DeviceBuffer* b : {&wk.y, &wk.rstd, &wk.sy, &wk.loss, &wk.dlogits})
      QUACK_ASSERT_CUDA(cudaMemset(b->data(), 0xFF, b->bytes()));
    const Status st = wk.launch(nullptr);
    ASSERT_TRUE(st.ok()) << st.message;
    QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
    std::vector<char> once;
    QUACK_ASSERT_CUDA(wk.download(&once));
    ASSERT_EQ(once.size(), threaded[size_t(k)].size());
    EXPECT_EQ(std::memcmp(once.data(), threaded[size_t(k)].data(), once.size()), 0)
        << "outputs of the threaded calls differ from one thread's";
    // The outputs were written (not left poisoned): the loss is a number.
    float loss = 0.0f;
    QUACK_ASSERT_CUDA(cudaMemcpy(&loss, wk.loss.data(), 4, cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::isfinite(loss)) << "loss " << loss;
  }
}

// An invalid call returns its status and leaves no CUDA error behind: the
// next valid call on the same stream succeeds and the context is healthy.
TEST(Concurrency, AnInvalidCallLeavesNoStickyError) {
  QUACK_REQUIRE_SM90();
  Work wk;
  make_work(0, &wk);
  if (HasFatalFailure()) return;
  CrossEntropyArgs bad = wk.ce_args();
  bad.workspace_bytes = 0;  // less than needed
  const Status st = cross_entropy(bad, nullptr);
  EXPECT_EQ(st.code, Code::kInvalidArgument);
  EXPECT_EQ(st.message.rfind("workspace_bytes:", 0), 0u) << st.message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const Status ok = wk.launch(nullptr);
  ASSERT_TRUE(ok.ok()) << ok.message;
  QUACK_ASSERT_CUDA(cudaDeviceSynchronize());
  QUACK_ASSERT_CUDA(cudaGetLastError());
}

}  // namespace
}  // namespace quack
