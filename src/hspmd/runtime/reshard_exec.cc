// Execution of a resolved Reshard on one device (see reshard_exec.h for the contract).
//
// A step runs in three phases so that no device ever waits on a peer before it has posted all of
// its own traffic: (1) local copies; (2) post one send_recv per peer, then every collective in op
// order, each on its own packed buffer; (3) wait the receives and collectives in posting order and
// unpack them into the destination shard. Every device posts point-to-point before collectives,
// so two devices whose pair communicator also serves a two-member collective submit to it in the
// same order. Pure sends are not waited: the session keeps their buffers until they complete.
#include "hspmd/runtime/reshard_exec.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "hspmd/comm/communicator.h"
#include "hspmd/core/error.h"
#include "hspmd/kernels/slice.h"

namespace hspmd::runtime {

using resolve::CommKind;
using resolve::CommOp;
using resolve::Piece;
using sharding::Region;

CommSession::CommSession(comm::GroupCache& groups, int rank, Allocator* allocator, graph::RegionCopy copy_region)
    : groups_(groups),
      rank_(rank),
      allocator_(allocator),
      copy_region_(copy_region ? std::move(copy_region) : graph::RegionCopy(kernels::copy_region)) {}

Device CommSession::buffer_device() const { return allocator_ != nullptr ? allocator_->device() : Device::cpu(); }

std::shared_ptr<comm::Communicator> CommSession::group(const std::vector<int>& ranks, const std::string& channel) {
  HSPMD_CHECK(groups_.global_rank() == rank_)
      << "comm session of rank " << rank_ << " holds the group cache of rank " << groups_.global_rank();
  return groups_.get(ranks, channel);
}

void CommSession::defer(comm::Work work, Tensor buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Drop sends that completed successfully, so a long step does not hold every buffer it sent;
  // failed ones stay for wait_deferred() to report.
  std::erase_if(deferred_, [](std::pair<comm::Work, Tensor>& d) {
    if (!d.first.done()) return false;
    try {
      d.first.wait();
      return true;
    } catch (const std::exception&) {
      return false;
    }
  });
  deferred_.emplace_back(std::move(work), std::move(buffer));
}

void CommSession::wait_deferred() {
  std::vector<std::pair<comm::Work, Tensor>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(deferred_);
  }
  // Wait for all before throwing: a buffer must outlive its transfer.
  std::string first_error;
  for (auto& [work, buffer] : pending) {
    try {
      work.wait();
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  HSPMD_CHECK(first_error.empty()) << "rank " << rank_ << ": deferred send failed: " << first_error;
}

CommSession::~CommSession() {
  for (auto& [work, buffer] : deferred_) {
    try {
      work.wait();
    } catch (const std::exception&) {  // a destructor cannot report; wait_deferred() would have
    }
  }
}

namespace {

using Shard = LocalShard;

// "[0:4, 0:6] [4:8, 0:6]"; a long list (a fused BSR's) shows its first pieces and the count.
std::string pieces_text(const std::vector<Piece>& pieces) {
  constexpr size_t kShown = 4;
  std::ostringstream s;
  for (size_t i = 0; i < pieces.size() && i < kShown; ++i) {
    s << (i ? " " : "") << (pieces[i].tensor ? "t" + std::to_string(pieces[i].tensor) : "") << pieces[i].region.to_string();
  }
  if (pieces.size() > kShown) s << " ... (" << pieces.size() << " pieces)";
  return s.str();
}

std::string group_text(const std::vector<int>& group) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < group.size(); ++i) s << (i ? "," : "") << group[i];
  s << "]";
  return s.str();
}

// Start of region r inside the shard (regions are global coordinates).
std::vector<int64_t> local_starts(const Shard& shard, const Region& r, const char* role, const std::string& what) {
  HSPMD_CHECK(shard.tensor.defined()) << what << ": the device holds no " << role << " shard, but the op needs "
                                      << r.to_string() << " of it";
  HSPMD_CHECK(shard.region.contains(r)) << what << ": " << r.to_string() << " lies outside the " << role
                                        << " shard " << shard.region.to_string();
  std::vector<int64_t> starts(static_cast<size_t>(r.rank()));
  for (int d = 0; d < r.rank(); ++d) starts[d] = r.begin[d] - shard.region.begin[d];
  return starts;
}

// Copies region r (global coordinates) from one shard into another with `copy` (the memory's).
void copy_box(const graph::RegionCopy& copy, const Shard& from, const Shard& to, const Region& r,
              const std::string& what) {
  // A destination that is the source itself (a switch keeps a shard where it is) already holds r.
  if (from.tensor.defined() && to.tensor.defined() && from.tensor.device_raw_data() == to.tensor.device_raw_data() &&
      from.region == to.region) {
    return;
  }
  copy(from.tensor, local_starts(from, r, "source", what), to.tensor, local_starts(to, r, "destination", what),
       r.shape().dims());
}

// The elements [offset, offset + r.numel()) of a flat buffer, as a shard holding r.
Shard flat_part(const Tensor& flat, int64_t offset, const Region& r) {
  return {flat.narrow(0, offset, r.numel()).reshape(r.shape().dims()), r};
}

// Packs `pieces` (each a region of shard pieces[i].tensor of `from`), one after the other in
// order, into a fresh flat buffer.
Tensor pack(const CommSession& session, const std::vector<Shard>& from, const std::vector<Piece>& pieces, DType dtype,
            const std::string& what) {
  int64_t numel = 0;
  for (const Piece& p : pieces) numel += p.region.numel();
  Tensor flat = Tensor::empty(Shape{numel}, dtype, session.allocator());
  int64_t offset = 0;
  for (const Piece& p : pieces) {
    copy_box(session.copy_region(), from.at(p.tensor), flat_part(flat, offset, p.region), p.region, what);
    offset += p.region.numel();
  }
  return flat;
}

// The inverse of pack: the flat buffer's consecutive parts land in their pieces of `to`.
void unpack(const CommSession& session, const Tensor& flat, const std::vector<Piece>& pieces,
            const std::vector<Shard>& to, const std::string& what) {
  int64_t offset = 0;
  for (const Piece& p : pieces) {
    copy_box(session.copy_region(), flat_part(flat, offset, p.region), to.at(p.tensor), p.region, what);
    offset += p.region.numel();
  }
}

// One tensor's regions as pieces of tensor 0.
std::vector<Piece> pieces_of(const std::vector<Region>& regions) {
  std::vector<Piece> out;
  for (const Region& r : regions) out.push_back({0, r});
  return out;
}

Tensor pack(const CommSession& session, const Shard& from, const std::vector<Region>& regions, DType dtype,
            const std::string& what) {
  return pack(session, std::vector<Shard>{from}, pieces_of(regions), dtype, what);
}

void unpack(const CommSession& session, const Tensor& flat, const std::vector<Region>& regions, const Shard& to,
            const std::string& what) {
  unpack(session, flat, pieces_of(regions), std::vector<Shard>{to}, what);
}

// Calls f(); an exception from it is rethrown as an Error prefixed with `what`.
template <typename F>
auto with_context(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    HSPMD_THROW() << what << ": " << e.what();
  }
}

// Posted receives and collectives of one step, with the buffers they write into and what to do
// once they are done. Whatever is still in flight when it is destroyed (after an error) is waited
// for first, so no buffer is freed under a transfer.
class InFlight {
 public:
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (Entry& e : entries_) {
      try {
        e.work.wait();
      } catch (const std::exception&) {  // the error that got us here is already propagating
      }
    }
  }

  void add(comm::Work work, std::string what, std::vector<Tensor> buffers, std::function<void()> finish) {
    entries_.push_back({std::move(work), std::move(what), std::move(buffers), std::move(finish)});
  }

  // Waits in posting order and runs each finish; throws the first failure once all are done.
  void wait_all() {
    std::string first_error;
    for (Entry& e : entries_) {
      try {
        e.work.wait();
        if (first_error.empty()) e.finish();
      } catch (const std::exception& ex) {
        if (first_error.empty()) first_error = e.what + ": " + ex.what();
      }
    }
    entries_.clear();
    HSPMD_CHECK(first_error.empty()) << first_error;
  }

 private:
  struct Entry {
    comm::Work work;
    std::string what;
    std::vector<Tensor> buffers;  // kept alive until the work is done
    std::function<void()> finish;
  };
  std::vector<Entry> entries_;
};

struct StepContext {
  std::string where;  // "reshard bottom[SR] of [8, 4] step 1/1 on device 3 (channel 'F')": error prefix
  int device;
  DType dtype;
  CommSession& session;
  const std::string& channel;
};

// The pieces moved between this device and one peer, in op order.
struct PeerTraffic {
  std::vector<Piece> sends;
  std::vector<Piece> recvs;
};

std::vector<Region> piece_regions(const CommOp& op, const StepContext& ctx) {
  std::vector<Region> regions;
  for (const Piece& p : op.pieces) {
    HSPMD_CHECK(p.tensor == 0) << ctx.where << ": " << op.to_string() << " moves a piece of tensor " << p.tensor
                               << " of a fused BSR; execute_reshard runs one tensor";
    regions.push_back(p.region);
  }
  return regions;
}

// One send_recv with `peer` carrying every piece of both directions; `src` and `dst` are indexed by
// Piece::tensor (one shard each for a single Reshard, one per tensor for a fused BSR). Returns the
// bytes sent.
int64_t post_peer(const StepContext& ctx, int peer, const PeerTraffic& traffic, const std::vector<Shard>& src,
               const std::vector<Shard>& dst, InFlight& in_flight) {
  const std::string what = ctx.where + ": Send/Recv with peer " + std::to_string(peer) + " (send " +
                           pieces_text(traffic.sends) + "; receive " + pieces_text(traffic.recvs) + ")";
  HSPMD_CHECK(peer != ctx.device) << what << ": a device does not send to itself (that is a LocalCopy)";
  Tensor out = pack(ctx.session, src, traffic.sends, ctx.dtype, what);
  int64_t in_numel = 0;
  for (const Piece& p : traffic.recvs) in_numel += p.region.numel();
  Tensor in = Tensor::empty(Shape{in_numel}, ctx.dtype, ctx.session.allocator());
  comm::SendRecvOptions options;
  if (!traffic.sends.empty()) options.sends.push_back({peer, comm::CommBuffer::of(out)});
  if (!traffic.recvs.empty()) options.recvs.push_back({peer, comm::CommBuffer::of(in)});
  comm::Work work = with_context(what, [&] { return ctx.session.group({ctx.device, peer}, ctx.channel)->send_recv(options); });
  const int64_t sent = traffic.sends.empty() ? 0 : static_cast<int64_t>(out.nbytes());
  if (traffic.recvs.empty()) {
    ctx.session.defer(std::move(work), std::move(out));
    return sent;
  }
  in_flight.add(std::move(work), what, {out, in}, [&session = ctx.session, in, pieces = traffic.recvs, &dst, what] {
    unpack(session, in, pieces, dst, what);
  });
  return sent;
}

void post_collective(const StepContext& ctx, const CommOp& op, const Shard& src, const Shard& dst,
                     InFlight& in_flight) {
  const std::string what = ctx.where + ": " + op.to_string();
  HSPMD_CHECK(op.pieces.size() == 1) << what << ": a collective covers one region, got " << op.pieces.size();
  const Region full = piece_regions(op, ctx).front();
  const int n = static_cast<int>(op.group.size());
  const auto me_it = std::find(op.group.begin(), op.group.end(), ctx.device);
  HSPMD_CHECK(me_it != op.group.end()) << what << ": device " << ctx.device << " is not in group "
                                       << group_text(op.group);
  const int me = static_cast<int>(me_it - op.group.begin());
  auto comm = with_context(what, [&] { return ctx.session.group(op.group, ctx.channel); });

  if (op.kind == CommKind::kAllReduce) {
    // A zero_input member holds a duplicate of a summand another member adds: it adds zeros. Each
    // member keeps the part of the sum its destination shard covers (all of it for Partial ->
    // Duplicate; one part when the top tier lowers a split result to an all-reduce).
    Tensor buffer = op.zero_input ? Tensor::zeros(Shape{full.numel()}, ctx.dtype, ctx.session.allocator())
                                 : pack(ctx.session, src, {full}, ctx.dtype, what);
    comm::Work work = with_context(what, [&] { return comm->allreduce({.data = comm::CommBuffer::of(buffer)}); });
    in_flight.add(std::move(work), what, {buffer}, [&session = ctx.session, buffer, full, &dst, what] {
      const std::optional<Region> keep = dst.tensor.defined() ? full.intersect(dst.region) : std::nullopt;
      if (keep) copy_box(session.copy_region(), flat_part(buffer, 0, full), dst, *keep, what);
    });
    return;
  }

  // Member j of op.group owns part j of `full` along op.dim; the communicator orders its members
  // by rank, so the buffer holds the parts in that order.
  HSPMD_CHECK(op.dim >= 0 && op.dim < full.rank()) << what << ": dim " << op.dim << " of a rank-" << full.rank()
                                                   << " region";
  const Region mine = with_context(what, [&] { return full.piece(op.dim, n, me); });
  std::vector<Region> parts;
  std::vector<int64_t> counts;
  for (int rank : comm->ranks()) {
    const int j = static_cast<int>(std::find(op.group.begin(), op.group.end(), rank) - op.group.begin());
    parts.push_back(full.piece(op.dim, n, j));
    counts.push_back(parts.back().numel());
  }
  if (op.kind == CommKind::kReduceScatter) {
    Tensor input = pack(ctx.session, src, parts, ctx.dtype, what);
    Tensor output = Tensor::empty(Shape{mine.numel()}, ctx.dtype, ctx.session.allocator());
    comm::Work work = with_context(what, [&] {
      return comm->reduce_scatter(
          {.input = comm::CommBuffer::of(input), .output = comm::CommBuffer::of(output), .counts = counts});
    });
    in_flight.add(std::move(work), what, {input, output}, [&session = ctx.session, output, mine, &dst, what] {
      unpack(session, output, {mine}, dst, what);
    });
    return;
  }
  HSPMD_CHECK(op.kind == CommKind::kAllGather) << what << ": not a collective";
  Tensor input = pack(ctx.session, src, {mine}, ctx.dtype, what);
  Tensor output = Tensor::empty(Shape{full.numel()}, ctx.dtype, ctx.session.allocator());
  comm::Work work = with_context(what, [&] {
    return comm->allgather(
        {.input = comm::CommBuffer::of(input), .output = comm::CommBuffer::of(output), .counts = counts});
  });
  in_flight.add(std::move(work), what, {input, output}, [&session = ctx.session, output, parts, &dst, what] {
    unpack(session, output, parts, dst, what);
  });
}

// Runs one step on this device: `input` is its shard of step.from; returns its shard of step.to.
Tensor run_step(const StepContext& ctx, const resolve::ResolveStep& step, const Shape& shape, const Tensor& input) {
  const std::optional<Region> in_region = step.from.region(ctx.device, shape);
  const std::optional<Region> out_region = step.to.region(ctx.device, shape);
  if (in_region) {
    HSPMD_CHECK(input.defined()) << ctx.where << ": device holds " << in_region->to_string() << " of "
                                 << step.from.to_string() << " but its source shard is undefined";
    HSPMD_CHECK(input.shape() == in_region->shape())
        << ctx.where << ": source shard " << input.to_string() << " does not have the shape "
        << in_region->shape().to_string() << " of its region " << in_region->to_string() << " of "
        << step.from.to_string();
  } else {
    HSPMD_CHECK(!input.defined()) << ctx.where << ": device is not in " << step.from.to_string()
                                  << " but was given a source shard " << input.to_string();
  }
  static const std::vector<CommOp> kNoOps;
  auto it = step.ops.find(ctx.device);
  const std::vector<CommOp>& ops = it == step.ops.end() ? kNoOps : it->second;

  if (ops.size() == 1 && ops[0].kind == CommKind::kIdentity) {
    HSPMD_CHECK(in_region && out_region && *in_region == *out_region)
        << ctx.where << ": Identity, but the device's regions of " << step.from.to_string() << " and "
        << step.to.to_string() << " differ";
    return input;
  }
  HSPMD_CHECK(!out_region || !ops.empty() || out_region->numel() == 0)
      << ctx.where << ": device holds " << out_region->to_string() << " of " << step.to.to_string()
      << " but has no op that fills it";

  const Shard src{input, in_region.value_or(Region{})};
  const Shard dst{out_region ? Tensor::zeros(out_region->shape(), ctx.dtype, ctx.session.allocator()) : Tensor(), out_region.value_or(Region{})};
  std::map<int, PeerTraffic> peers;
  std::vector<const CommOp*> collectives;
  for (const CommOp& op : ops) {
    switch (op.kind) {
      case CommKind::kIdentity:  // next to other ops: a plain copy of its pieces
      case CommKind::kLocalCopy: {
        const std::string what = ctx.where + ": " + op.to_string();
        for (const Region& r : piece_regions(op, ctx)) copy_box(ctx.session.copy_region(), src, dst, r, what);
        break;
      }
      case CommKind::kSend:
      case CommKind::kRecv: {
        std::vector<Piece>& list = op.kind == CommKind::kSend ? peers[op.peer].sends : peers[op.peer].recvs;
        for (const Region& r : piece_regions(op, ctx)) list.push_back({0, r});
        break;
      }
      case CommKind::kAllReduce:
      case CommKind::kReduceScatter:
      case CommKind::kAllGather: collectives.push_back(&op); break;
      case CommKind::kZeroFill: break;  // the destination shard starts as zeros
    }
  }

  InFlight in_flight;
  const std::vector<Shard> srcs{src}, dsts{dst};
  for (const auto& [peer, traffic] : peers) post_peer(ctx, peer, traffic, srcs, dsts, in_flight);
  for (const CommOp* op : collectives) post_collective(ctx, *op, src, dst, in_flight);
  in_flight.wait_all();
  return dst.tensor;
}

}  // namespace

Tensor execute_reshard(const resolve::Resolution& resolution, const Shape& shape, int device, const Tensor& src,
                       CommSession& session, const std::string& channel, DType dtype) {
  HSPMD_CHECK(!resolution.steps.empty()) << "execute_reshard on device " << device << ": empty resolution";
  HSPMD_CHECK(device == session.rank()) << "execute_reshard for device " << device << " on the comm session of rank "
                                        << session.rank();
  const DType element_type = src.defined() ? src.dtype() : dtype;
  Tensor shard = src;
  const size_t n = resolution.steps.size();
  for (size_t k = 0; k < n; ++k) {
    std::ostringstream where;
    where << "reshard " << resolution.classification() << " of " << shape.to_string() << " step " << k + 1 << "/"
          << n << " on device " << device << " (channel '" << channel << "')";
    shard = run_step({where.str(), device, element_type, session, channel}, resolution.steps[k], shape, shard);
  }
  return shard;
}

Tensor execute_reshard_staged(const resolve::Resolution& resolution, const Shape& shape, int device, const Tensor& src,
                              CommSession& session, const std::string& channel, Allocator& memory, DType dtype) {
  if (session.buffer_device() == memory.device()) {
    return execute_reshard(resolution, shape, device, src, session, channel, dtype);
  }
  HSPMD_ASSERT(session.buffer_device().type == DeviceType::kCPU)
      << "execute_reshard_staged on device " << device << ": tensors on " << memory.device().to_string()
      << ", comm session buffers on " << session.buffer_device().to_string() << " (neither the host nor the same device)";
  const Tensor out =
      execute_reshard(resolution, shape, device, src.defined() ? src.to_host() : src, session, channel, dtype);
  return out.defined() ? out.clone(&memory) : out;
}

std::map<int, int64_t> execute_fused_bsr(const resolve::FusedBsr& bsr, int device,
                                         const std::vector<LocalShard>& sources,
                                         const std::vector<LocalShard>& destinations, CommSession& session,
                                         const std::string& channel) {
  HSPMD_CHECK(device == session.rank()) << "execute_fused_bsr for device " << device << " on the comm session of rank "
                                        << session.rank();
  const size_t n = bsr.table.tensor_names().size();
  HSPMD_CHECK(sources.size() == n && destinations.size() == n)
      << "execute_fused_bsr: the BSR moves " << n << " tensors, given " << sources.size() << " sources and "
      << destinations.size() << " destinations";
  auto it = bsr.ops.find(device);
  if (it == bsr.ops.end()) return {};
  const std::string where = "fused BSR of " + std::to_string(n) + " tensors on device " + std::to_string(device) +
                            " (channel '" + channel + "')";
  // The element type of the shards (a rank that only receives has no source to tell it).
  DType dtype = DType::kFloat32;
  for (const std::vector<LocalShard>* shards : {&sources, &destinations}) {
    for (const LocalShard& s : *shards) {
      if (s.tensor.defined()) dtype = s.tensor.dtype();
    }
  }
  const StepContext ctx{where, device, dtype, session, channel};
  std::map<int, PeerTraffic> peers;
  for (const CommOp& op : it->second) {
    switch (op.kind) {
      case CommKind::kLocalCopy:
        for (const Piece& p : op.pieces) {
          copy_box(session.copy_region(), sources.at(p.tensor), destinations.at(p.tensor), p.region, where);
        }
        break;
      case CommKind::kSend:
      case CommKind::kRecv: {
        std::vector<Piece>& list = op.kind == CommKind::kSend ? peers[op.peer].sends : peers[op.peer].recvs;
        list.insert(list.end(), op.pieces.begin(), op.pieces.end());
        break;
      }
      default: HSPMD_THROW() << where << ": a BSR has no " << op.to_string();
    }
  }
  InFlight in_flight;
  std::map<int, int64_t> sent;  // counted from the buffers handed to send_recv, not from the plan
  for (const auto& [peer, traffic] : peers) {
    const int64_t bytes = post_peer(ctx, peer, traffic, sources, destinations, in_flight);
    if (bytes > 0) sent[peer] += bytes;
  }
  in_flight.wait_all();
  session.wait_deferred();  // the switch is over when every piece has arrived and left
  return sent;
}

}  // namespace hspmd::runtime
