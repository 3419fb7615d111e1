// Persistent worker pool behind parallel_for (see threadpool.h).
//
// One job slot. The caller publishes a job (fn, n, chunking) and runs chunks itself; idle workers
// spin briefly and then sleep on a condition variable. Chunks are claimed with an atomic counter, so
// chunk-to-thread assignment is dynamic: kernels must (and do) make results independent of it.
// A second caller arriving while the slot is busy simply runs its loop inline (no waiting, no
// deadlock between Python threads). Nested calls from inside a chunk run inline too.
#include "cpu/threadpool.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ORION_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define ORION_PAUSE() __asm__ __volatile__("yield")
#else
#define ORION_PAUSE() ((void)0)
#endif

namespace orion::cpu {
namespace {

thread_local bool t_in_pool_task = false;  // nested parallel_for runs inline
constexpr int kPauseSpins = 1024;          // a worker's pause-spins (a few us) before it yields at each turn

int default_threads() {
  if (const char* s = std::getenv("ORION_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n > 0) return std::min(n, 256);
  }
  unsigned h = std::thread::hardware_concurrency();
  return h ? (int)std::min(h, 256u) : 1;
}

class Pool {
 public:
  explicit Pool(int n) { start(n); }

  int size() const { return nthreads_.load(std::memory_order_relaxed); }

  void resize(int n) {
    std::lock_guard<std::mutex> job(job_mu_);  // no job in flight while we swap workers
    stop();
    start(n);
  }

  // Process exit: join the workers if no job is in flight (a daemon Python thread may still be inside
  // a kernel), then keep the slot locked so any later call runs inline. Never frees the Pool, so a
  // straggling caller cannot touch freed memory; if the slot stays busy the workers are left to the
  // process exit.
  void shutdown() {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (!job_mu_.try_lock()) {
      if (std::chrono::steady_clock::now() > until) return;
      std::this_thread::yield();
    }
    stop();
  }

  // Returns false if the slot is busy (caller should run inline).
  bool run(int64_t n, int64_t chunk, int64_t nchunks, const std::function<void(int64_t, int64_t)>& fn) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock() || workers_.empty()) return false;
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    nchunks_ = nchunks;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(nchunks, std::memory_order_relaxed);
    error_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    gen_ += 1;
    state_.store(gen_ << 1 | 1);  // open; seq_cst pairs with the sleepers_ check below
    if (sleepers_.load() > 0) {
      { std::lock_guard<std::mutex> lk(mu_); }
      cv_.notify_all();
    }
    work();
    // Wait for chunks still running on workers: spin a little, then sleep.
    for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
      if (i < 4000) { ORION_PAUSE(); continue; }
      std::unique_lock<std::mutex> lk(mu_);
      caller_waiting_.store(true);
      done_cv_.wait(lk, [&] { return pending_.load() == 0; });
      caller_waiting_.store(false);
      break;
    }
    state_.store(gen_ << 1);  // closed: late workers back off
    while (active_.load() != 0) ORION_PAUSE();
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void start(int n) {
    nthreads_.store(std::max(1, n));
    quit_ = false;
    for (int i = 1; i < nthreads_.load(); ++i) workers_.emplace_back([this] { loop(); });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Claims and runs chunks of the current job until none are left.
  void work() {
    bool was = t_in_pool_task;
    t_in_pool_task = true;
    for (;;) {
      int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
      if (c >= nchunks_) break;
      if (!failed_.load(std::memory_order_relaxed)) {
        int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
        try {
          (*fn_)(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu_);
          if (!error_) error_ = std::current_exception();
          failed_.store(true);
        }
      }
      if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
        std::lock_guard<std::mutex> lk(mu_);
        done_cv_.notify_all();
      }
    }
    t_in_pool_task = was;
  }

  void loop() {
    uint64_t seen = state_.load() >> 1;
    for (;;) {
      uint64_t s = 0;
      bool ready = false;
      // Spin ~250 us for back-to-back jobs, then sleep: a plan's ops, and the host code between a model's
      // programs, leave gaps of tens of us; a futex wake (10-50 us here) at each one cost ~5% of a decode step.
      // Past the first few us the spin yields its core at each turn: on a busy machine a spinning worker
      // otherwise takes the time slices the caller needs to produce the next job (2-thread decode ran at
      // 0.6x its 1-thread speed at load 2.5); on an idle one yield returns at once.
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 1; !ready; ++i) {
        s = state_.load(std::memory_order_acquire);
        ready = (s & 1) && (s >> 1) != seen;
        if (ready) break;
        if (i < kPauseSpins) ORION_PAUSE();
        else std::this_thread::yield();
        if (i % 256 == 0) {
          if (quit_flag()) return;
          if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(250)) break;
        }
      }
      if (!ready) {
        std::unique_lock<std::mutex> lk(mu_);
        sleepers_.fetch_add(1);
        cv_.wait(lk, [&] {
          s = state_.load();
          return quit_ || ((s & 1) && (s >> 1) != seen);
        });
        sleepers_.fetch_sub(1);
        if (quit_) return;
      }
      seen = s >> 1;
      active_.fetch_add(1);
      if (state_.load() == s) work();  // still the job we saw (Dekker pair with run())
      active_.fetch_sub(1);
    }
  }
  bool quit_flag() {
    std::lock_guard<std::mutex> lk(mu_);
    return quit_;
  }

  std::atomic<int> nthreads_{1};
  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // owns the job slot
  std::mutex mu_;      // guards sleeping / quit_
  std::condition_variable cv_, done_cv_;
  bool quit_ = false;
  std::atomic<uint64_t> state_{0};  // gen << 1 | open
  uint64_t gen_ = 0;
  std::atomic<int> sleepers_{0}, active_{0};
  std::atomic<bool> caller_waiting_{false};
  // current job
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1, nchunks_ = 0;
  std::atomic<int64_t> next_{0}, pending_{0};
  std::atomic<bool> failed_{false};
  std::mutex err_mu_;
  std::exception_ptr error_;
};

std::mutex g_pool_mu;          // guards creation / replacement of the pool
std::atomic<Pool*> g_pool{nullptr};
int g_requested = 0;           // set_num_threads value (0 = default)

std::atomic<bool> g_exiting{false};

// Workers are joined at exit (see Pool::shutdown); calls made after that run inline.
struct PoolOwner {
  ~PoolOwner() {
    g_exiting.store(true);
    if (Pool* p = g_pool.load()) p->shutdown();
  }
} g_owner;

// A forked child has no workers: forget the parent's pool (leaked on purpose, its threads are gone).
void after_fork_child() { g_pool.store(nullptr); }

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lk(g_pool_mu);
  p = g_pool.load();
  if (!p) {
    static std::once_flag once;
    std::call_once(once, [] { pthread_atfork(nullptr, nullptr, after_fork_child); });
    p = new Pool(g_requested > 0 ? g_requested : default_threads());
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || t_in_pool_task || g_exiting.load(std::memory_order_relaxed)) {
    fn(0, n);
    return;
  }
  Pool& p = pool();
  int nt = p.size();
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  // Up to 32 chunks per thread, each at least `grain` items: claiming is one atomic add, and small
  // chunks keep threads balanced when the OS deschedules one of them (shared machines).
  int64_t nchunks = std::min<int64_t>((n + grain - 1) / grain, (int64_t)nt * 32);
  int64_t chunk = (n + nchunks - 1) / nchunks;
  nchunks = (n + chunk - 1) / chunk;
  if (nchunks <= 1 || !p.run(n, chunk, nchunks, fn)) {
    bool was = t_in_pool_task;
    t_in_pool_task = true;  // a busy pool: run serially, and keep nested calls inline too
    try {
      fn(0, n);
    } catch (...) {
      t_in_pool_task = was;
      throw;
    }
    t_in_pool_task = was;
  }
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  g_requested = n > 0 ? std::min(n, 256) : 0;
  int want = g_requested > 0 ? g_requested : default_threads();
  Pool* p = g_pool.load();
  if (!p) {
    g_pool.store(new Pool(want));
  } else if (p->size() != want) {
    p->resize(want);
  }
}

}  // namespace orion::cpu
