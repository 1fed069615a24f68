#include "hspmd/comm/nccl/nccl_communicator.h"

#if defined(HSPMD_CUDA)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "hspmd/comm/group_id.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  HSPMD_ASSERT(false) << "unhandled dtype";
  return ncclFloat32;
}

#define HSPMD_CUDA_CALL(what, call)                                                                \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    HSPMD_CHECK(err_ == cudaSuccess) << what << ": " << #call << ": " << cudaGetErrorString(err_); \
  } while (0)

// Enqueue calls on a non-blocking communicator return ncclInProgress or an immediate error.
void enqueued(const char* call, ncclResult_t r) {
  HSPMD_CHECK(r == ncclSuccess || r == ncclInProgress) << call << ": " << ncclGetErrorString(r);
}

}  // namespace

struct NcclCommunicator::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  void* scratch = nullptr;  // one int for barrier
  std::string broken;       // worker thread only: the first error
  std::atomic<bool> abort_requested{false};  // set by abort() from any thread
  // Guards `running` and, while no operation runs, `comm` against abort() from another thread.
  std::mutex mutex;
  bool running = false;  // the worker is inside an operation: its polling loop does the abort

  // Polls until the non-blocking communicator has finished the calls just made; throws on
  // error or at the deadline (after aborting the communicator).
  void settle(const std::string& what, Clock::time_point deadline) {
    ncclResult_t state = ncclInProgress;
    while (true) {
      HSPMD_CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess) << what << ": ncclCommGetAsyncError failed";
      if (state != ncclInProgress) break;
      check_deadline(what, deadline);
      std::this_thread::yield();
    }
    HSPMD_CHECK(state == ncclSuccess) << what << ": " << ncclGetErrorString(state) << " (" << ncclGetLastError(comm)
                                      << ")";
  }

  // Waits for the stream, watching for asynchronous NCCL errors (a dead peer) and the deadline.
  void sync(const std::string& what, Clock::time_point deadline) {
    while (true) {
      cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      HSPMD_CHECK(q == cudaErrorNotReady) << what << ": " << cudaGetErrorString(q);
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm, &state);
      HSPMD_CHECK(state == ncclSuccess || state == ncclInProgress)
          << what << ": " << ncclGetErrorString(state) << " (" << ncclGetLastError(comm) << ")";
      check_deadline(what, deadline);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void check_deadline(const std::string& what, Clock::time_point deadline) {
    const bool aborting = abort_requested.load();
    if (!aborting && Clock::now() < deadline) return;
    ncclCommAbort(comm);  // unblocks the GPU; the communicator is unusable afterwards
    comm = nullptr;
    HSPMD_THROW() << what << (aborting ? ": aborted" : ": timed out (a peer may be dead)")
                  << "; the communicator was aborted";
  }
};

// Device memory for each buffer of one operation: a device (or managed) buffer as it is, a host
// buffer through a device copy, filled before the operation when it is read and copied back after
// the stream has finished when it is written. Host buffers are the control traffic (loss totals,
// statistics, flags): small, so a plain cudaMalloc each is fine.
class NcclCommunicator::DeviceViews {
 public:
  DeviceViews(cudaStream_t stream, std::string what) : stream_(stream), what_(std::move(what)) {}
  ~DeviceViews() {
    for (const Staged& s : staged_) cudaFree(s.device);
  }
  DeviceViews(const DeviceViews&) = delete;
  DeviceViews& operator=(const DeviceViews&) = delete;

  void* read(const CommBuffer& b) { return view(b, true, false); }
  void* written(const CommBuffer& b) { return view(b, false, true); }
  void* read_written(const CommBuffer& b) { return view(b, true, true); }

  // After the stream has finished: the written host buffers receive their results.
  void copy_back() {
    for (const Staged& s : staged_) {
      if (s.write_back) HSPMD_CUDA_CALL(what_, cudaMemcpy(s.host, s.device, s.bytes, cudaMemcpyDeviceToHost));
    }
  }

 private:
  struct Staged {
    void* host;
    void* device;
    size_t bytes;
    bool write_back;
  };

  void* view(const CommBuffer& b, bool read, bool write) {
    if (b.data == nullptr || b.nbytes() == 0) return b.data;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, b.data) == cudaSuccess &&
        (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged)) {
      return b.data;
    }
    cudaGetLastError();  // a pageable host pointer may leave an error behind on older drivers
    Staged s{b.data, nullptr, b.nbytes(), write};
    HSPMD_CUDA_CALL(what_, cudaMalloc(&s.device, s.bytes));
    staged_.push_back(s);
    if (read) HSPMD_CUDA_CALL(what_, cudaMemcpyAsync(s.device, s.host, s.bytes, cudaMemcpyHostToDevice, stream_));
    return s.device;
  }

  cudaStream_t stream_;
  std::string what_;
  std::vector<Staged> staged_;
};

int NcclCommunicator::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

NcclCommunicator::NcclCommunicator(Store& store, std::vector<int> ranks, int global_rank, int generation,
                                   NcclOptions options)
    : Communicator(std::move(ranks), global_rank, generation), state_(std::make_unique<State>()), options_(options) {
  std::string what = "connecting NCCL " + describe() + " on cuda:" + std::to_string(options_.device);
  state_->device = options_.device;
  HSPMD_CUDA_CALL(what, cudaSetDevice(options_.device));
  ncclUniqueId id;
  const std::string bytes = share_group_id(
      store, group_rank(), sizeof(id.internal),
      [&] {
        HSPMD_CHECK(ncclGetUniqueId(&id) == ncclSuccess) << what << ": ncclGetUniqueId failed";
        return std::string(id.internal, sizeof(id.internal));
      },
      options_.timeout, what);
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&state_->comm, size(), id, group_rank(), &config);
  HSPMD_CHECK(r == ncclSuccess || r == ncclInProgress) << what << ": " << ncclGetErrorString(r);
  state_->settle(what, Clock::now() + options_.timeout);
  HSPMD_CUDA_CALL(what, cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
  HSPMD_CUDA_CALL(what, cudaMalloc(&state_->scratch, sizeof(int)));
}

NcclCommunicator::~NcclCommunicator() {
  // Members are destroyed after this body, so let the worker finish queued operations first.
  try {
    queue_.submit("drain", [] {}).wait();
  } catch (const Error&) {
    // Aborted (abort()): the worker stops by itself once its running operation notices.
  }
  cudaSetDevice(state_->device);
  if (state_->comm != nullptr) {
    if (state_->broken.empty() && !state_->abort_requested) {
      ncclCommFinalize(state_->comm);
      ncclResult_t s = ncclInProgress;
      auto deadline = Clock::now() + Millis(5'000);
      while (ncclCommGetAsyncError(state_->comm, &s) == ncclSuccess && s == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::yield();
      }
      ncclCommDestroy(state_->comm);
    } else {
      ncclCommAbort(state_->comm);
    }
  }
  if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
  if (state_->scratch != nullptr) cudaFree(state_->scratch);
}

void NcclCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->abort_requested = true;
    // Idle: abort now, so peers inside an operation with this member fail fast (as Gloo's closed
    // sockets make them) instead of at their timeout. Running: the worker's polling loop aborts.
    if (!state_->running && state_->comm != nullptr) {
      cudaSetDevice(state_->device);
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
    }
  }
  queue_.abort(reason + " (" + describe() + ")");
}

Work NcclCommunicator::run(const char* op, std::function<void(DeviceViews&)> enqueue) {
  std::string what = std::string(op) + " on NCCL " + describe();
  // Recorded now, on the caller's thread: the compute work that wrote the buffers is queued before
  // this call, later compute work after it.
  std::shared_ptr<CUevent_st> ready;
  if (options_.compute_stream != nullptr) {
    HSPMD_CUDA_CALL(what, cudaSetDevice(state_->device));
    cudaEvent_t event = nullptr;
    HSPMD_CUDA_CALL(what, cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    ready.reset(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
    HSPMD_CUDA_CALL(what, cudaEventRecord(event, options_.compute_stream));
  }
  return queue_.submit(what, [this, what, ready, enqueue = std::move(enqueue)] {
    HSPMD_CHECK(state_->broken.empty()) << what << ": the group is broken by an earlier error (" << state_->broken
                                        << "); rebuild it under a new generation";
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      HSPMD_CHECK(!state_->abort_requested) << what << ": the communicator was aborted";
      state_->running = true;
    }
    struct Idle {
      State& state;
      ~Idle() {
        std::lock_guard<std::mutex> lock(state.mutex);
        state.running = false;
      }
    } idle{*state_};
    try {
      HSPMD_CUDA_CALL(what, cudaSetDevice(state_->device));
      auto deadline = Clock::now() + options_.timeout;
      if (ready) HSPMD_CUDA_CALL(what, cudaStreamWaitEvent(state_->stream, ready.get(), 0));
      DeviceViews views(state_->stream, what);
      enqueue(views);
      state_->settle(what, deadline);
      state_->sync(what, deadline);
      views.copy_back();
    } catch (const std::exception& e) {
      state_->broken = e.what();
      throw;
    }
  });
}

Work NcclCommunicator::allreduce(const AllreduceOptions& o) {
  return run("allreduce", [this, o](DeviceViews& views) {
    void* data = views.read_written(o.data);
    enqueued("ncclAllReduce",
             ncclAllReduce(data, data, o.data.count, nccl_type(o.data.dtype), ncclSum, state_->comm, state_->stream));
  });
}

Work NcclCommunicator::reduce_scatter(const ReduceScatterOptions& o) {
  std::vector<int64_t> counts = check_reduce_scatter(*this, o);
  bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  return run("reduce_scatter", [this, o, counts, even](DeviceViews& views) {
    auto type = nccl_type(o.input.dtype);
    void* input = views.read(o.input);
    void* output = views.written(o.output);
    if (even) {
      enqueued("ncclReduceScatter",
               ncclReduceScatter(input, output, counts[0], type, ncclSum, state_->comm, state_->stream));
      return;
    }
    size_t esize = dtype_size(o.input.dtype);
    enqueued("ncclGroupStart", ncclGroupStart());
    int64_t offset = 0;
    for (int i = 0; i < size(); ++i) {
      // recvbuff only matters on the root.
      enqueued("ncclReduce", ncclReduce(static_cast<char*>(input) + offset * esize, output, counts[i], type, ncclSum,
                                        i, state_->comm, state_->stream));
      offset += counts[i];
    }
    enqueued("ncclGroupEnd", ncclGroupEnd());
  });
}

Work NcclCommunicator::allgather(const AllgatherOptions& o) {
  std::vector<int64_t> counts = check_allgather(*this, o);
  bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  return run("allgather", [this, o, counts, even](DeviceViews& views) {
    size_t esize = dtype_size(o.input.dtype);
    void* input = views.read(o.input);
    void* output = views.written(o.output);
    if (even) {
      enqueued("ncclAllGather",
               ncclAllGather(input, output, counts[0] * esize, ncclUint8, state_->comm, state_->stream));
      return;
    }
    enqueued("ncclGroupStart", ncclGroupStart());
    int64_t offset = 0;
    for (int i = 0; i < size(); ++i) {
      enqueued("ncclBroadcast", ncclBroadcast(input, static_cast<char*>(output) + offset * esize, counts[i] * esize,
                                              ncclUint8, i, state_->comm, state_->stream));
      offset += counts[i];
    }
    enqueued("ncclGroupEnd", ncclGroupEnd());
  });
}

Work NcclCommunicator::broadcast(const BroadcastOptions& o) {
  int root = index_of(o.root);
  return run("broadcast", [this, o, root](DeviceViews& views) {
    void* data = views.read_written(o.data);
    enqueued("ncclBroadcast",
             ncclBroadcast(data, data, o.data.nbytes(), ncclUint8, root, state_->comm, state_->stream));
  });
}

Work NcclCommunicator::send_recv(const SendRecvOptions& o) {
  for (const auto* list : {&o.sends, &o.recvs}) {
    for (const auto& m : *list) index_of(m.peer);
  }
  return run("send_recv", [this, o](DeviceViews& views) {
    // Views first: a host buffer's copy onto the stream must not land inside the NCCL group.
    std::vector<void*> recv_data, send_data;
    for (const auto& m : o.recvs) recv_data.push_back(views.written(m.buffer));
    for (const auto& m : o.sends) send_data.push_back(views.read(m.buffer));
    std::vector<std::pair<void*, size_t>> self_sends, self_recvs;  // device pointer, bytes
    enqueued("ncclGroupStart", ncclGroupStart());
    for (size_t k = 0; k < o.recvs.size(); ++k) {
      const P2PMessage& m = o.recvs[k];
      if (m.peer == global_rank()) {
        self_recvs.emplace_back(recv_data[k], m.buffer.nbytes());
      } else if (m.buffer.nbytes() > 0) {
        enqueued("ncclRecv",
                 ncclRecv(recv_data[k], m.buffer.nbytes(), ncclUint8, index_of(m.peer), state_->comm, state_->stream));
      }
    }
    for (size_t k = 0; k < o.sends.size(); ++k) {
      const P2PMessage& m = o.sends[k];
      if (m.peer == global_rank()) {
        self_sends.emplace_back(send_data[k], m.buffer.nbytes());
      } else if (m.buffer.nbytes() > 0) {
        enqueued("ncclSend",
                 ncclSend(send_data[k], m.buffer.nbytes(), ncclUint8, index_of(m.peer), state_->comm, state_->stream));
      }
    }
    enqueued("ncclGroupEnd", ncclGroupEnd());
    HSPMD_CHECK(self_sends.size() == self_recvs.size())
        << "send_recv on NCCL " << describe() << ": " << self_sends.size() << " sends to self but " << self_recvs.size()
        << " receives from self";
    for (size_t k = 0; k < self_sends.size(); ++k) {
      HSPMD_CHECK(self_sends[k].second == self_recvs[k].second)
          << "send_recv on NCCL " << describe() << ": message " << k << " to self changes size";
      if (self_sends[k].second == 0) continue;
      HSPMD_CUDA_CALL("send_recv to self",
                      cudaMemcpyAsync(self_recvs[k].first, self_sends[k].first, self_sends[k].second,
                                      cudaMemcpyDeviceToDevice, state_->stream));
    }
  });
}

Work NcclCommunicator::barrier(const BarrierOptions&) {
  return run("barrier", [this](DeviceViews&) {
    enqueued("ncclAllReduce",
             ncclAllReduce(state_->scratch, state_->scratch, 1, ncclInt32, ncclSum, state_->comm, state_->stream));
  });
}

Backend nccl_backend(NcclOptions options) {
  return [options](Store& store, const std::vector<int>& ranks, int global_rank, int generation) {
    return std::make_shared<NcclCommunicator>(store, ranks, global_rank, generation, options);
  };
}

}  // namespace hspmd::comm

#endif  // HSPMD_CUDA
