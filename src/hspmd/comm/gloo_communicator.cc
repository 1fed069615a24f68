#include "hspmd/comm/gloo_communicator.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <signal.h>

#include <cstring>
#include <map>
#include <mutex>

#include "hspmd/core/bfloat16.h"
#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

// Lets Gloo's rendezvous (connectFullMesh) run on any hspmd Store.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(comm::Store& store, Millis timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_.wait(keys, timeout);
  }

 private:
  comm::Store& store_;
  Millis timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
void gloo_sum(const std::shared_ptr<gloo::Context>& context, T* data, size_t n, uint32_t tag, Millis timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(data, n);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// Slot of the k-th message between one ordered pair in send_recv number `tag`. Gloo's own
// collectives use prefixes 0x01..0x08 in the top byte; 0x40 keeps ours apart.
uint64_t p2p_slot(uint32_t tag, size_t k) {
  HSPMD_ASSERT(k < (1u << 24)) << "more than 2^24 messages to one peer in one send_recv";
  return (uint64_t{0x40} << 56) | (uint64_t{tag} << 24) | k;
}

// Time left until deadline, at least 1 ms (Gloo reads -1 ms as "use the context default").
Millis remaining(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
  return std::max(left, Millis(1));
}

}  // namespace

// Gloo's TCP transport writes to sockets without MSG_NOSIGNAL: a write to a peer that just died
// would kill this whole process with SIGPIPE instead of failing the operation. Ignore SIGPIPE
// (once per process, and only if nobody installed a handler) so it becomes a Gloo IoException.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& host) {
  ignore_sigpipe();
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    HSPMD_THROW() << "cannot create a Gloo TCP device on host '" << host << "': " << e.what();
  }
}

GlooCommunicator::GlooCommunicator(Store& store, std::vector<int> ranks, int global_rank, int generation,
                                   std::shared_ptr<gloo::transport::Device> device, Millis timeout)
    : Communicator(std::move(ranks), global_rank, generation), timeout_(timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(group_rank(), size());
  context->setTimeout(timeout);
  GlooStoreAdapter adapter(store, timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    HSPMD_THROW() << "connecting " << describe() << " through " << store.describe() << " failed: " << e.what();
  }
  context_ = std::move(context);
}

GlooCommunicator::~GlooCommunicator() = default;

Work GlooCommunicator::run(const char* op, std::function<void()> body) {
  std::string what = std::string(op) + " on " + describe();
  return queue_.submit(what, [this, what, body = std::move(body)] {
    HSPMD_CHECK(broken_.empty()) << what << ": the group is broken by an earlier error (" << broken_
                                 << "); rebuild it under a new generation";
    try {
      body();
    } catch (const std::exception& e) {
      broken_ = e.what();
      // Closing our connections makes peers blocked on this rank fail now instead of at timeout.
      context_->closeConnections();
      if (dynamic_cast<const Error*>(&e) != nullptr) throw;
      HSPMD_THROW() << what << " failed: " << e.what();
    }
  });
}

void GlooCommunicator::abort(const std::string& reason) {
  // Closing first: the running operation's sockets go away before its waiter is released, so no
  // byte can land in a buffer its owner is about to free.
  context_->closeConnections();
  queue_.abort(reason + " (" + describe() + ")");
}

void GlooCommunicator::sum_in_place(void* data, int64_t n, DType dtype) {
  if (n == 0) return;
  auto count = static_cast<size_t>(n);
  uint32_t tag = next_tag();
  switch (dtype) {
    case DType::kFloat32: return gloo_sum(context_, static_cast<float*>(data), count, tag, timeout_);
    case DType::kFloat64: return gloo_sum(context_, static_cast<double*>(data), count, tag, timeout_);
    case DType::kInt32: return gloo_sum(context_, static_cast<int32_t*>(data), count, tag, timeout_);
    case DType::kInt64: return gloo_sum(context_, static_cast<int64_t*>(data), count, tag, timeout_);
    case DType::kBFloat16: {
      // Sum in float32 and round once, so the result does not depend on the ring order.
      auto* bf = static_cast<BFloat16*>(data);
      std::vector<float> wide(count);
      for (size_t i = 0; i < count; ++i) wide[i] = static_cast<float>(bf[i]);
      gloo_sum(context_, wide.data(), count, tag, timeout_);
      for (size_t i = 0; i < count; ++i) bf[i] = BFloat16(wide[i]);
      return;
    }
  }
  HSPMD_ASSERT(false) << "unhandled dtype " << dtype_name(dtype);
}

Work GlooCommunicator::allreduce(const AllreduceOptions& options) {
  return run("allreduce", [this, options] { sum_in_place(options.data.data, options.data.count, options.data.dtype); });
}

Work GlooCommunicator::reduce_scatter(const ReduceScatterOptions& options) {
  std::vector<int64_t> counts = check_reduce_scatter(*this, options);
  return run("reduce_scatter", [this, options, counts] {
    size_t esize = dtype_size(options.input.dtype);
    std::vector<char> scratch(options.input.nbytes());
    if (!scratch.empty()) std::memcpy(scratch.data(), options.input.data, scratch.size());
    sum_in_place(scratch.data(), options.input.count, options.input.dtype);
    int64_t offset = 0;
    for (int i = 0; i < group_rank(); ++i) offset += counts[i];
    if (options.output.count > 0) {
      std::memcpy(options.output.data, scratch.data() + offset * esize, options.output.nbytes());
    }
  });
}

Work GlooCommunicator::allgather(const AllgatherOptions& options) {
  std::vector<int64_t> counts = check_allgather(*this, options);
  return run("allgather", [this, options, counts] {
    size_t esize = dtype_size(options.input.dtype);
    std::vector<size_t> bytes(counts.size());
    size_t total = 0;
    for (size_t i = 0; i < counts.size(); ++i) total += bytes[i] = static_cast<size_t>(counts[i]) * esize;
    if (total == 0) return;
    gloo::AllgathervOptions opts(context_);
    opts.setInput(static_cast<char*>(options.input.data), options.input.nbytes());
    opts.setOutput(static_cast<char*>(options.output.data), bytes);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  });
}

Work GlooCommunicator::broadcast(const BroadcastOptions& options) {
  int root = index_of(options.root);
  return run("broadcast", [this, options, root] {
    if (options.data.count == 0) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<char*>(options.data.data), options.data.nbytes());
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  });
}

Work GlooCommunicator::barrier(const BarrierOptions&) {
  return run("barrier", [this] {
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

Work GlooCommunicator::send_recv(const SendRecvOptions& options) {
  for (const auto* list : {&options.sends, &options.recvs}) {
    for (const auto& m : *list) index_of(m.peer);  // throws naming a non-member peer
  }
  return run("send_recv", [this, options] {
    const std::string what = "send_recv on " + describe();
    uint32_t tag = next_tag();
    auto deadline = std::chrono::steady_clock::now() + timeout_;

    // Messages to self: the k-th send to self lands in the k-th receive from self.
    std::vector<const P2PMessage*> self_sends, self_recvs;
    for (const auto& m : options.sends) if (m.peer == global_rank()) self_sends.push_back(&m);
    for (const auto& m : options.recvs) if (m.peer == global_rank()) self_recvs.push_back(&m);
    HSPMD_CHECK(self_sends.size() == self_recvs.size())
        << what << ": " << self_sends.size() << " sends to self but " << self_recvs.size() << " receives from self";
    for (size_t k = 0; k < self_sends.size(); ++k) {
      HSPMD_CHECK(self_sends[k]->buffer.nbytes() == self_recvs[k]->buffer.nbytes())
          << what << ": message " << k << " to self has " << self_sends[k]->buffer.nbytes() << " bytes, receive "
          << self_recvs[k]->buffer.nbytes();
      if (self_sends[k]->buffer.nbytes() > 0) {
        std::memcpy(self_recvs[k]->buffer.data, self_sends[k]->buffer.data, self_sends[k]->buffer.nbytes());
      }
    }

    // Post every receive, then every send, so no ordering between peers can deadlock. Empty
    // messages are skipped on both sides (their sizes must agree anyway).
    struct Posted {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      int peer;
    };
    std::vector<Posted> recvs, sends;
    std::map<int, size_t> recv_ordinal, send_ordinal;
    for (const auto& m : options.recvs) {
      if (m.peer == global_rank()) continue;
      size_t k = recv_ordinal[m.peer]++;
      if (m.buffer.nbytes() == 0) continue;
      auto buffer = context_->createUnboundBuffer(m.buffer.data, m.buffer.nbytes());
      buffer->recv(index_of(m.peer), p2p_slot(tag, k));
      recvs.push_back({std::move(buffer), m.peer});
    }
    for (const auto& m : options.sends) {
      if (m.peer == global_rank()) continue;
      size_t k = send_ordinal[m.peer]++;
      if (m.buffer.nbytes() == 0) continue;
      auto buffer = context_->createUnboundBuffer(m.buffer.data, m.buffer.nbytes());
      buffer->send(index_of(m.peer), p2p_slot(tag, k));
      sends.push_back({std::move(buffer), m.peer});
    }
    for (auto& r : recvs) {
      try {
        r.buffer->waitRecv(remaining(deadline));
      } catch (const std::exception& e) {
        HSPMD_THROW() << what << ": receive from rank " << r.peer << " failed: " << e.what();
      }
    }
    for (auto& s : sends) {
      try {
        s.buffer->waitSend(remaining(deadline));
      } catch (const std::exception& e) {
        HSPMD_THROW() << what << ": send to rank " << s.peer << " failed: " << e.what();
      }
    }
  });
}

}  // namespace hspmd::comm
