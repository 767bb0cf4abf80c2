// Hopper: mbarriers, TMA (cp.async.bulk.tensor), wgmma, clusters (distributed shared memory,
// barrier.cluster, multicast), stmatrix, and the asynchronous proxy's rules.
#include "emulator/cta.h"

namespace kiln::emu::detail {

// ---- Hopper: mbarriers, TMA (cp.async.bulk.tensor) and wgmma

// mbarrier.init / arrive[.expect_tx] / expect_tx / try_wait.parity / test_wait.parity on a 64-bit
// barrier in shared memory: an expected arrival count, the arrivals still pending in the current
// phase, a transaction count, and the phase's parity. A phase completes when its arrivals and
// transactions are both done; try_wait.parity P is true once the phase of parity P completed.
absl::Status Cta::Mbarrier(Thread& t, const Instr& in) {
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  const Operand* addr_op = nullptr;
  for (const Operand& o : in.ops)
    if (o.kind == Operand::Kind::kAddress) addr_op = &o;
  if (!addr_op) return Fail(t, in, "an mbarrier instruction without an address");
  uint64_t off = Address(t, *addr_op);
  if ((off >> 24) != static_cast<uint64_t>(rank_)) {  // a cluster peer's (mapa): arrivals only
    absl::StatusOr<Cta*> peer = Peer(t, in, off >> 24);
    if (!peer.ok()) return peer.status();
    if (kind != "arrive") return Fail(t, in, "only arrivals reach the mbarrier of another CTA");
    const int64_t tx = in.Has("expect_tx") ? static_cast<int64_t>(Read(t, in.ops.back(), 32)) : 0;
    ++t.pc;
    return (*peer)->ArriveOn(
        off & kOffsetMask, tx, [&](const std::string& what) { return Fail(t, in, what); },
        in.Has("relaxed") ? WarpClock{} : Released(t.linear / 32), &in);
  }
  if (absl::StatusOr<uint8_t*> p = Memory(t, in, Space::kShared, off, 8); !p.ok())
    return p.status();
  off &= kOffsetMask;
  if (kind == "init") {
    inits_run_.insert(&in);
    return MbarrierInit(t, in, off);
  }
  auto it = mbarriers_.find(off);
  if (it == mbarriers_.end()) {
    if (auto inval = invalidated_.find(off); inval != invalidated_.end())
      return Fail(t, in,
                  absl::StrFormat("the mbarrier at shared offset %d was invalidated at %s: "
                                  "initialise it again before using it",
                                  off, Where(*inval->second)));
    // An init elsewhere in the kernel that no thread has run yet: the use is not ordered after it.
    std::string hint;
    for (const Instr& other : e_.code)
      if (other.op == Op::kMbarrier && !other.mods.empty() && other.mods[0] == "init" &&
          !inits_run_.count(&other)) {
        hint = absl::StrCat(" (yet: if the mbarrier.init at ", Where(other),
                            " is for it, no "
                            "barrier orders that init before this use: a SyncThreads after the "
                            "init, or a cluster barrier for a peer's)");
        break;
      }
    return Fail(
        t, in,
        absl::StrFormat("the mbarrier at shared offset %d was never initialised%s", off, hint));
  }
  MbarrierState& b = it->second;
  if (kind == "inval") return MbarrierInval(t, in, off);
  if (kind == "arrive" || kind == "arrive_drop" || kind == "expect_tx") {
    if (in.Has("expect_tx") || kind == "expect_tx")
      b.tx += static_cast<int64_t>(Read(t, in.ops.back(), 32));
    if (kind != "expect_tx") {
      if (--b.pending < 0)
        return Fail(
            t, in,
            absl::StrFormat(
                "an arrival beyond the %d the mbarrier at shared offset %d expects in this phase",
                b.expected, off));
      if (kind == "arrive_drop") --b.expected;
      if (!in.Has("relaxed")) JoinClock(b.clocks.open, Released(t.linear / 32));
      if (in.ops[0].kind == Operand::Kind::kReg)
        Write(t, in.ops[0], static_cast<uint64_t>(b.phase));
      b.last_arrival = &in;
    }
    ++t.pc;
    return MbarrierComplete(off);
  }
  if (kind == "try_wait" || kind == "test_wait") {
    const int parity = static_cast<int>(Read(t, in.ops.back(), 32) & 1);
    // The phase meant: of this parity, the one before the thread's next unseen phase (phase -1,
    // of parity 1, counts as complete: the producer's first wait on an empty slot) or its next.
    // The ISA's parity names only the current or the immediately preceding phase; a thread two
    // phases behind would wait on the wrong one (on a GPU: hang, or run on with stale data).
    int64_t& next = t.next_phase[off];
    const int64_t meant = ((next - 1) & 1) == parity ? next - 1 : next;
    // A thread that ran on from a try_wait that gave up (below) lost count of that phase.
    const std::string gave_up =
        t.try_wait_timed_out >= 0 && t.try_wait_timed_out != t.pc
            ? absl::StrCat("; this thread's try_wait at ", Where(e_.code[t.try_wait_timed_out]),
                           " returned false before its phase completed (the ISA lets it give up "
                           "at a time limit) and the thread ran on: wait in a loop until it "
                           "returns true")
            : "";
    if (meant < 0 && b.completed >= 1)
      return Fail(
          t, in,
          absl::StrFormat(
              "this thread waits on parity %d of the mbarrier at shared offset %d before it has "
              "waited on any of its phases, and %d have completed: a wrong phase (a "
              "consumer's first wait is parity 0; parity 1 is a producer's wait on a free "
              "slot) or a thread two phases behind%s",
              parity, off, b.completed, gave_up));
    if (b.completed >= meant + 2)
      return Fail(
          t, in,
          absl::StrFormat(
              "this thread waits for phase %d (parity %d) of the mbarrier at shared offset %d, "
              "which has completed %d phases: it fell two phases behind (its arrivers ran two "
              "phases ahead: nothing holds them until this thread has waited, such as a "
              "barrier they wait on that this thread arrives on after its wait, or they "
              "arrive more often a round than the barrier's count%s)%s",
              meant, parity, off, b.completed,
              b.completed_by
                  ? "; the arrival that completed the latest phase: " + Where(*b.completed_by)
                  : "",
              gave_up));
    const bool done = b.completed > meant;
    if (done) {
      Synced(t, in);
      Acquire(t, b.clocks.done);  // the phase's arrivals happen before what follows
    }
    if (done) next = meant + 1, t.try_wait_timed_out = -1;  // (test_wait's true as try_wait's)
    if (done) {  // the arrival that completed it, where the phase is the latest one
      t.passed_wait = &in, t.passed_barrier = off;
      t.passed_on = b.completed == meant + 1 ? b.completed_by : nullptr;
    }
    if (!done && kind == "test_wait") {
      // A test_wait never blocks: a thread that polls it yields, and without a seed the copies
      // in flight may land now, as time passing would let them.
      yield_ = true, land_due_ = true;
      const uint64_t state[3] = {static_cast<uint64_t>(b.completed),
                                 static_cast<uint64_t>(b.pending), static_cast<uint64_t>(b.tx)};
      if (absl::Status s = NoteSpinRead(t, in, off, reinterpret_cast<const uint8_t*>(state),
                                        sizeof(state), /*shared=*/true);
          !s.ok())
        return s;
    }
    if (!done && kind == "try_wait") {
      // The ISA lets try_wait give up at a time limit of its own, returning false with the phase
      // unfinished, so a wait must loop. Under a seed about half the waits that would block give
      // up once first (the next try at the same wait blocks): a wait without its loop runs on.
      const uint64_t h = (static_cast<uint64_t>(t.linear) * 0x9E3779B97F4A7C15ull) ^
                         static_cast<uint64_t>(Now()) ^ static_cast<uint64_t>(t.pc);
      if (rng_ && t.try_wait_timed_out != t.pc && (h >> 17) % 2 == 0) {
        t.try_wait_timed_out = t.pc;
        Write(t, in.ops[0], 0);
        ++t.pc;
        return absl::OkStatus();
      }
      SetState(t, Thread::State::kMbarrier);  // blocks until the phase completes, then runs again
      t.mbarrier = off;
      return absl::OkStatus();
    }
    Write(t, in.ops[0], done ? 1 : 0);
    ++t.pc;
    return absl::OkStatus();
  }
  return Fail(t, in, "this mbarrier operation is not emulated yet");
}

// mbarrier.init: a new object, its phase 0 expecting `count` arrivals.
absl::Status Cta::MbarrierInit(Thread& t, const Instr& in, uint64_t off) {
  const int count = static_cast<int>(Read(t, in.ops.back(), 32));
  if (count < 1)
    return Fail(t, in, absl::StrCat("an mbarrier expects at least one arrival, not ", count));
  // A second init of a barrier in use (a phase under way, a waiter, a load to complete on it)
  // loses what it held.
  if (auto live = mbarriers_.find(off); live != mbarriers_.end()) {
    const MbarrierState& b = live->second;
    if (b.pending != b.expected || b.tx != 0 || WaiterOn(off) || LoadCompletingOn(off))
      return Fail(t, in,
                  absl::StrFormat("initialises again the mbarrier at shared offset %d while it "
                                  "is in use (%d of %d arrivals pending, transaction count %d, "
                                  "or a waiter or a TMA load on it): what it held is lost "
                                  "(mbarrier.inval it once it is done, then init)",
                                  off, b.pending, b.expected, b.tx));
  }
  mbarriers_[off] = MbarrierState{count, count, 0, 0};
  for (TmaAgentSlot& a : tma_agents_) a.live &= a.offset != off;  // a new object, a new agent
  invalidated_.erase(off);
  for (Thread& u : threads_) u.next_phase.erase(off);  // a new object: its phases from 0
  ++t.pc;
  return absl::OkStatus();
}

// mbarrier.inval: the object ends, and its bytes may be reused (PTX ISA, mbarrier.inval).
absl::Status Cta::MbarrierInval(Thread& t, const Instr& in, uint64_t off) {
  if (const Thread* w = WaiterOn(off))
    return Fail(t, in,
                absl::StrFormat("invalidates the mbarrier at shared offset %d while thread %d "
                                "still waits on it",
                                off, w->linear));
  if (const AsyncLoad* p = LoadCompletingOn(off))
    return Fail(t, in,
                absl::StrFormat("invalidates the mbarrier at shared offset %d while the TMA "
                                "load at %s will still complete on it",
                                off, Where(*p->issued_by)));
  mbarriers_.erase(off);
  invalidated_[off] = &in;
  ++t.pc;
  return absl::OkStatus();
}

const Thread* Cta::WaiterOn(uint64_t off) const {
  for (const Thread& w : threads_)
    if (w.state == Thread::State::kMbarrier && w.mbarrier == off) return &w;
  return nullptr;
}

const Cta::AsyncLoad* Cta::LoadCompletingOn(uint64_t off) const {
  for (const AsyncLoad& p : pending_)
    if ((p.mbarrier & kOffsetMask) == off && (p.mbarrier >> 24) == static_cast<uint64_t>(rank_))
      return &p;
  return nullptr;
}

int64_t Cta::PhasesWaited(uint64_t off) const {
  int64_t waited = 0;
  for (const Thread& t : threads_)
    if (auto it = t.next_phase.find(off); it != t.next_phase.end())
      waited = std::max(waited, it->second);
  return waited;
}

absl::Status Cta::MbarrierComplete(uint64_t offset) {
  MbarrierState& b = mbarriers_[offset];
  if (b.pending != 0 || b.tx != 0) return absl::OkStatus();
  b.phase ^= 1;
  ++b.completed;
  b.pending = b.expected;
  b.completed_by = b.last_arrival;
  b.last_arrival = nullptr;
  b.clocks.Complete();
  for (Thread& w : threads_)
    if (w.state == Thread::State::kMbarrier && w.mbarrier == offset)
      SetState(w, Thread::State::kRun);
  return absl::OkStatus();
}

absl::StatusOr<const EmulatedTensorMap*> Cta::MapAt(Thread& t, const Instr& in, uint64_t generic) {
  absl::StatusOr<uint8_t*> p = Memory(t, in, Space::kGeneric, generic, 16);
  if (!p.ok()) return p.status();
  uint64_t magic, index;
  std::memcpy(&magic, *p, 8);
  std::memcpy(&index, *p + 8, 8);
  if (magic != kTensorMapMagic || !maps_ || index >= maps_->size())
    return Fail(t, in,
                "the tensor map operand does not point at a tensor map the launcher encoded");
  return &(*maps_)[index];
}

// cp.async.bulk.tensor loads (global -> shared, completing on an mbarrier) and stores (shared ->
// global, in bulk groups); cp.async.bulk.commit_group / wait_group. A load lands when the
// scheduler completes it; a store is done at issue (its group is complete at once).
absl::Status Cta::Bulk(Thread& t, const Instr& in) {
  if (in.Has("commit_group")) {
    t.bulk_groups.push_back(std::move(t.bulk_open));
    t.bulk_open.clear();
    return absl::OkStatus();
  }
  if (in.Has("wait_group"))  // .read or not: the groups it covers have read their boxes (and
                             // written them)
    return CompleteBulkGroups(t, Read(t, in.ops.at(0), 32));
  const bool prefetch =
      !in.mods.empty() && in.mods[0] == "prefetch";  // into L2: [map, {coords}] only
  if (!prefetch && (in.mods.empty() || in.mods[0] != "tensor"))
    return Fail(t, in, "this bulk copy is not emulated yet");
  if (!prefetch)
    if (absl::Status s = CheckPriorGridsWaited(t, in); !s.ok()) return s;
  const bool load =
      !prefetch && in.ops.at(1).kind == Operand::Kind::kAddress && !in.ops.at(1).regs.empty();
  const Operand& map_op = load ? in.ops.at(1) : in.ops.at(0);
  absl::StatusOr<const EmulatedTensorMap*> map = MapAt(t, in, Address(t, map_op));
  if (!map.ok()) return map.status();
  std::vector<int64_t> coords;
  for (int r : map_op.regs) coords.push_back(SignExtend(t.r[r], 32));
  if (coords.size() != (*map)->spec.box.size())
    return Fail(t, in,
                absl::StrCat("a rank-", (*map)->spec.box.size(), " tensor map with ", coords.size(),
                             " coordinates"));
  if (prefetch) return absl::OkStatus();  // nothing any thread can see
  // A box's innermost coordinate must fall on a 16-byte boundary of the tensor: the GPU raises an
  // illegal instruction otherwise (Triton's TMA notes state the rule; an H200 raised it for a
  // box of f32 starting 7 elements in).
  const int es = rt::TmaElementBytes((*map)->spec.dtype);
  if (coords[0] * es % 16)
    return Fail(t, in,
                absl::StrFormat("a TMA box's innermost coordinate %d (%d-byte elements) is not on "
                                "a 16-byte boundary: the GPU raises an illegal instruction",
                                coords[0], es));
  // (A box's shared address is the CTA's own or, multicast, the same offset in each CTA's.)
  const uint64_t smem = Address(t, load ? in.ops.at(0) : in.ops.at(1)) & kOffsetMask;
  if (smem % 128)
    return Fail(
        t, in, absl::StrFormat("the shared address %d of a TMA box is not 128-byte aligned", smem));
  if (load) {
    const uint64_t bar = Address(t, in.ops.at(2));
    if (!in.Has("multicast::cluster")) {
      const auto b = mbarriers_.find(bar & kOffsetMask);
      const bool own = (bar >> 24) == static_cast<uint64_t>(rank_);
      pending_.push_back(
          {*map, coords, smem, bar, &in, own && b != mbarriers_.end() ? b->second.completed : -1});
      NoteRelease(t, bar, pending_.back());
      return absl::OkStatus();
    }
    // The box lands at the same offset in every CTA of the mask, each completing on its own
    // barrier at the same offset.
    const uint64_t mask = Read(t, in.ops.at(3), 16);
    for (uint64_t r = 0; r < 16; ++r) {
      if (!(mask >> r & 1)) continue;
      absl::StatusOr<Cta*> peer = Peer(t, in, r);
      if (!peer.ok()) return peer.status();
      (*peer)->pending_.push_back({*map, coords, smem, r << 24 | (bar & kOffsetMask), &in});
      NoteRelease(t, bar, (*peer)->pending_.back());
    }
    return absl::OkStatus();
  }
  // Store: the fence and in-flight loads are checked now; its box is read (and the global bytes
  // written) when a bulk wait covers its group, and until then the box may not be rewritten.
  absl::Status checked =
      ForEachBoxElement(**map, coords, smem, [&](uint64_t shared, uint64_t, bool inside, int es) {
        if (!inside) return absl::OkStatus();
        if (shared + es > shared_.size())
          return Fail(t, in, "a TMA store reads past the block's shared memory");
        if (absl::Status s = CheckFenced(in, shared, es, "a TMA store"); !s.ok()) return s;
        if (absl::Status s = CheckPendingOverlap(&t, in, shared, es, "stores from"); !s.ok())
          return s;
        tma_store_reading_.Add(shared, es, &in, shared_.size());
        return absl::OkStatus();
      });
  if (!checked.ok()) return checked;
  const bool add = in.Has("reduce");
  if (add && (!in.Has("add") || (*map)->spec.dtype != rt::TmaDtype::kF32))
    return Fail(t, in, "a TMA reduction other than .add of f32 is not emulated yet");
  t.bulk_open.push_back({*map, coords, smem, &in, add});
  return absl::OkStatus();
}

absl::Status Cta::WriteTmaStore(const TmaStore& st) {
  return ForEachBoxElement(
      *st.map, st.coords, st.smem, [&](uint64_t shared, uint64_t global, bool inside, int es) {
        if (!inside) return absl::OkStatus();
        tma_store_reading_.Remove(shared, es);
        uint8_t* to = dev_.Find(global, es);
        if (!to) return TmaOutsideMemory(*st.in, *st.map, st.coords, global, "store writes");
        if (st.add) {  // (f32 only: Bulk refuses the rest)
          float sum, part;
          std::memcpy(&sum, to, 4);
          std::memcpy(&part, shared_.data() + shared, 4);
          sum += part;
          std::memcpy(to, &sum, 4);
        } else {
          std::memcpy(to, shared_.data() + shared, es);
        }
        const auto [writer, mma] = shared < shared_writer_.size()
                                       ? shared_writer_[shared]
                                       : std::pair<const Instr*, const Instr*>{nullptr, nullptr};
        auto [site, added] = tma_site_text_.emplace(std::tuple{st.in, writer, mma}, "");
        if (added) {  // built once per store and shared-memory writer
          site->second = absl::StrCat("the TMA store at ", SiteText(*st.in, nullptr));
          if (writer)
            absl::StrAppend(&site->second, ", of shared memory written at ",
                            SiteText(*writer, mma));
        }
        const std::string& what = site->second;
        dev_.NoteWrite(global, es, what, Now(), ctaid_, -1);
        if (global_races_ && !st.add)  // (a reduction is an atomic: ordered among themselves)
          if (std::optional<GlobalRaces::Conflict> c =
                  global_races_->Write(dev_.AllocationOf(global), global, es, st.in, Now()))
            return absl::InvalidArgumentError(absl::StrCat(
                kernel_, ": ", Where(*st.in), ": a TMA store: ", GlobalRaceText(*c, true)));
        return CheckReachesGlobal(nullptr, *st.in,
                                  SharedTaint(shared_.data() + shared, es, *st.in));
      });
}

absl::Status Cta::CompleteBulkGroups(Thread& t, size_t keep) {
  while (t.bulk_groups.size() > keep) {
    for (const TmaStore& st : t.bulk_groups.front())
      if (absl::Status s = WriteTmaStore(st); !s.ok()) return s;
    t.bulk_groups.erase(t.bulk_groups.begin());
  }
  return absl::OkStatus();
}

absl::Status Cta::CheckTmaStoreReading(const Thread& t, const Instr& in, uint64_t off,
                                       uint64_t bytes) {
  uint64_t at = 0;
  const Instr* by = tma_store_reading_.Holder(off, bytes, &at);
  if (!by) return absl::OkStatus();
  bool committed = true;  // a store still in its thread's open group: no wait_group covers it
  for (const Thread& u : threads_)
    for (const TmaStore& st : u.bulk_open) committed &= st.in != by;
  return Fail(
      t, in,
      absl::StrCat("writes shared byte ", at, ", which a TMA store still in flight reads (",
                   Where(*by), "): ",
                   committed ? "its cp.async.bulk.wait_group.read is missing or too shallow"
                             : "it is in no committed bulk group (cp.async.bulk.commit_group "
                               "missing?), so no wait_group covers it"));
}

// Calls fn(shared offset through the swizzle, global address, inside the tensor, element bytes)
// for each element of the box at `coords`, innermost dimension fastest, as TMA lays a box out.
absl::Status Cta::ForEachBoxElement(
    const EmulatedTensorMap& map, const std::vector<int64_t>& coords, uint64_t smem,
    const std::function<absl::Status(uint64_t, uint64_t, bool, int)>& fn) {
  const rt::TensorMapSpec& s = map.spec;
  const int es = rt::TmaElementBytes(s.dtype),
            swz = s.swizzle == rt::TmaSwizzle::kNone ? 0 : 16 << static_cast<int>(s.swizzle);
  int64_t total = 1;
  for (uint32_t b : s.box) total *= b;
  for (int64_t linear = 0; linear < total; ++linear) {
    int64_t rest = linear;
    uint64_t g = map.address;
    bool inside = true;
    for (size_t d = 0; d < s.box.size(); ++d) {
      const int64_t c = coords[d] + rest % s.box[d];
      rest /= s.box[d];
      inside &= c >= 0 && c < static_cast<int64_t>(s.dims[d]);
      g += c * (d == 0 ? es : s.strides_bytes[d - 1]);
    }
    if (absl::Status st = fn(Swizzled(smem + linear * es, swz), g, inside, es); !st.ok()) return st;
  }
  return absl::OkStatus();
}

const Cta::WgmmaOp* Cta::WgmmaStillReading(uint64_t lo, uint64_t hi) const {
  for (const auto& [group, wg] : warpgroups_) {
    for (const std::vector<WgmmaOp>& g : wg.groups)
      for (const WgmmaOp& w : g)
        for (auto [r_lo, r_hi] : w.reads)
          if (lo < r_hi && r_lo < hi) return &w;
    for (const WgmmaOp& w : wg.open)
      for (auto [r_lo, r_hi] : w.reads)
        if (lo < r_hi && r_lo < hi) return &w;
  }
  return nullptr;
}

// The fence.proxy.async that thread t reaches next going forward from where it is (no backward
// branch taken: within the pass of its loop it is in), if any.
const Instr* Cta::ProxyFenceAhead(const Thread& t) const {
  const int at = FirstReachable(
      t.pc,
      [&](int pc) {
        const Instr& in = e_.code[pc];
        return in.op == Op::kFence && !in.mods.empty() && in.mods[0] == "proxy" && in.Has("async");
      },
      /*forward_only=*/true);
  return at < 0 ? nullptr : &e_.code[at];
}

// A TMA load landing on bytes a thread read through the generic proxy with no fence.proxy.async
// after the read: the async write may overtake the read (PTX ISA, memory consistency: proxies).
absl::Status Cta::CheckGenericReadsOvertaken(const Instr& load, uint64_t to, int es) {
  if (generic_reader_.empty()) return absl::OkStatus();
  for (uint64_t b = to; b < to + es; ++b) {
    const int32_t reader = generic_reader_[b] - 1;
    if (reader < 0) continue;
    if (generic_read_epoch_[b] == proxy_fences_[reader]) {
      const std::string load_dsl = m_.DslLine(load);
      const Instr* read = last_generic_read_[reader];
      const std::string read_dsl = read ? m_.DslLine(*read) : "";
      // A reader with its fence still ahead of it: another thread released the stage before
      // this one's reads and fence ended. One that fenced earlier but not after this read: that,
      // or the read came too early.
      const Instr* ahead = ProxyFenceAhead(threads_[reader]);
      const std::string ahead_dsl = ahead ? m_.DslLine(*ahead) : "";
      const std::string hint =
          ahead ? absl::StrFormat(
                      "thread %d has not reached its fence.proxy.async (PTX line %d%s) yet: "
                      "another thread (one lane of its warp, say) released the stage before "
                      "this thread's reads and fence ended; order every reader's reads and "
                      "fence before the release (a SyncWarp before one lane arrives, or a "
                      "barrier of the readers)",
                      reader, ahead->line, ahead_dsl.empty() ? "" : ", " + ahead_dsl)
          : proxy_fences_[reader] > 0
              ? absl::StrFormat(
                    "thread %d ran fence.proxy.async before this read, none after it: "
                    "either another thread (one lane of its warp, say) released the "
                    "stage before this thread's reads ended (order every reader's reads "
                    "and fence before the release: SyncWarp, or a barrier of the "
                    "readers), or the read came before the stage was full and this load "
                    "was issued into it meanwhile (check the parity the reader waited "
                    "on)",
                    reader)
              : "fence.proxy.async before the stage is released to the producer; or, "
                "where that fence is there, the read came before the stage was full and "
                "this load was issued into it meanwhile: check the parity the reader "
                "waited on";
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s%s: PTX line %d (%s): a TMA load lands on shared byte %d, which thread %d "
          "read through the generic proxy (its last such read: PTX line %d%s%s) with no "
          "fence.proxy.async after the read: the async proxy's write may overtake it (%s)",
          load_dsl.empty() ? "" : load_dsl + ": ", kernel_, load.line, load.text, b, reader,
          read ? read->line : 0, read_dsl.empty() ? "" : ", ", read_dsl, hint));
    }
    generic_reader_[b] = 0;
  }
  return absl::OkStatus();
}

absl::Status Cta::CompleteAsync(size_t index) {
  AsyncLoad op = pending_[index];
  pending_.erase(pending_.begin() + index);
  // Landing after every thread has exited: no wait covered it, and the CTA's shared memory may
  // belong to the next block by then (a load past the last stage the consumers wait for).
  if (std::all_of(threads_.begin(), threads_.end(),
                  [](const Thread& x) { return x.state == Thread::State::kDone; }))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): every thread of block (%d,%d,%d) has exited with this TMA load "
        "still in flight: no thread waited for it (a load past the last stage the consumers "
        "wait for?), and on a GPU it may land in shared memory the next block already uses",
        m_.DslLine(*op.issued_by).empty() ? "" : m_.DslLine(*op.issued_by) + ": ", kernel_,
        op.issued_by->line, op.issued_by->text, ctaid_.x, ctaid_.y, ctaid_.z));
  // A wgmma issued but not yet waited for still reads its operands: a box landing on them means
  // the stage was handed back to the producer too early.
  if (const WgmmaOp* w = WgmmaStillReading(op.dst, op.dst + op.Bytes())) {
    const std::string load_dsl = m_.DslLine(*op.issued_by), mma_dsl = m_.DslLine(*w->in);
    bool committed = true;  // an op still in its warpgroup's open group was never committed
    for (const auto& [group, wg] : warpgroups_)
      for (const WgmmaOp& open : wg.open) committed &= &open != w;
    // An open group is also one whose commit has not run yet: a missing commit only where the
    // kernel has no wgmma.commit_group at all.
    for (const Instr& other : e_.code)
      committed |= other.op == w->in->op && other.Has("commit_group");
    // Where it was released: the arrival that let the load's thread past its last wait.
    const std::string released =
        op.released_by && op.after_wait
            ? absl::StrCat(" (released by the arrival at ", Where(*op.released_by),
                           ", on which the load's thread passed its wait at ",
                           Where(*op.after_wait),
                           ": that arrival must come after the wgmma's wait_group)")
            : "";
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): a TMA load lands on shared bytes %d..%d, which the wgmma at "
        "PTX line %d%s still reads (until its wgmma.wait_group): the stage was released to the "
        "producer too early%s%s",
        load_dsl.empty() ? "" : load_dsl + ": ", kernel_, op.issued_by->line, op.issued_by->text,
        op.dst, op.dst + op.Bytes() - 1, w->line, mma_dsl.empty() ? "" : " (" + mma_dsl + ")",
        released,
        committed ? ""
                  : "; that wgmma is in no committed group (a wgmma.commit_group missing before "
                    "the wait_group that should cover it?)"));
  }
  // An initialised mbarrier's bytes are its own until mbarrier.inval (PTX ISA): a box landing on
  // them (larger than its stage, or a stage placed over the barriers) breaks it, and hangs on a
  // GPU.
  if (const std::optional<uint64_t> b = LiveMbarrierIn(op.dst, op.Bytes())) {
    const std::string load_dsl = m_.DslLine(*op.issued_by);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): a TMA load lands on shared bytes %d..%d, which hold the live "
        "mbarrier at shared offset %d: the box is larger than its stage, or the stage lies over "
        "the barriers",
        load_dsl.empty() ? "" : load_dsl + ": ", kernel_, op.issued_by->line, op.issued_by->text,
        op.dst, op.dst + op.Bytes() - 1, *b));
  }
  // The bytes are a write by the agent of the mbarrier the load completes on (this CTA's, or a
  // pair leader's), at a clock of the phase they complete + 1 (races.h).
  std::optional<RaceAccess> agent_write;
  Cta* barrier_cta = (op.mbarrier >> 24) != static_cast<uint64_t>(rank_) && cluster_ &&
                             (op.mbarrier >> 24) < cluster_->ctas.size()
                         ? cluster_->ctas[op.mbarrier >> 24]
                         : this;
  if (auto b = barrier_cta->mbarriers_.find(op.mbarrier & kOffsetMask);
      b != barrier_cta->mbarriers_.end())
    if (std::optional<uint32_t> agent = barrier_cta->TmaAgent(op.mbarrier & kOffsetMask)) {
      agent_write = RaceAccess{*agent, static_cast<uint32_t>(b->second.completed + 1),
                               static_cast<int32_t>(op.issued_by - e_.code.data())};
      WarpClock release(*agent + 1, 0);
      release[*agent] = agent_write->clock;
      JoinClock(b->second.clocks.open, release);
    }
  int64_t bytes = 0;
  const rt::TmaSwizzle sw = op.map->spec.swizzle;
  const int swizzle_span = sw == rt::TmaSwizzle::kNone ? 0 : 16 << static_cast<int>(sw);
  absl::Status landed = ForEachBoxElement(
      *op.map, op.coords, op.dst, [&](uint64_t to, uint64_t g, bool inside, int es) {
        bytes += es;
        if (to + es > shared_.size())
          return absl::InvalidArgumentError(
              absl::StrCat(kernel_, ": a TMA box lands past the block's shared memory"));
        // A TMA store reads its box until a bulk wait covers it: a load landing there first would
        // change what the store writes (a buffer reused for loads without
        // cp.async.bulk.wait_group.read).
        uint64_t at = 0;
        if (const Instr* by = tma_store_reading_.Holder(to, es, &at)) {
          const std::string load_dsl = m_.DslLine(*op.issued_by);
          return absl::InvalidArgumentError(
              absl::StrFormat("%s%s: PTX line %d (%s): a TMA load lands on shared byte %d, which a "
                              "TMA store still in flight reads (%s): "
                              "its cp.async.bulk.wait_group.read is missing or too shallow",
                              load_dsl.empty() ? "" : load_dsl + ": ", kernel_, op.issued_by->line,
                              op.issued_by->text, at, Where(*by)));
        }
        if (!generic_writer_.empty())  // what the async proxy wrote needs no fence to be read by it
          std::fill(generic_writer_.begin() + to, generic_writer_.begin() + to + es, 0);
        if (absl::Status read = CheckGenericReadsOvertaken(*op.issued_by, to, es); !read.ok())
          return read;
        if (tma_swizzle_.empty()) tma_swizzle_.assign(shared_.size(), 0);
        std::fill(tma_swizzle_.begin() + to, tma_swizzle_.begin() + to + es,
                  static_cast<uint8_t>(swizzle_span + 1));
        MarkTmaWritten(to, es, agent_write);
        NoteTmaLanding(to, op.issued_by);
        if (!inside) {  // out of bounds: zero fill
          std::memset(shared_.data() + to, 0, es);
          return absl::OkStatus();
        }
        const uint8_t* from = dev_.Find(g, es);
        if (!from) return TmaOutsideMemory(*op.issued_by, *op.map, op.coords, g, "load reads");
        std::memcpy(shared_.data() + to, from, es);
        return absl::OkStatus();
      });
  if (!landed.ok()) return landed;
  if ((op.mbarrier >> 24) != static_cast<uint64_t>(rank_) &&
      cluster_) {  // completes on a peer's barrier (a CTA pair's leader)
    const uint64_t rank = op.mbarrier >> 24;
    if (rank >= cluster_->ctas.size())
      return absl::InvalidArgumentError(absl::StrCat(
          kernel_, ": a TMA load completes on cluster CTA ", rank, ", outside the cluster"));
    Cta* peer = cluster_->ctas[rank];
    auto pit = peer->mbarriers_.find(op.mbarrier & kOffsetMask);
    if (pit == peer->mbarriers_.end())
      return NoBarrierForLoad(op, op.mbarrier & kOffsetMask,
                              absl::StrCat(" of cluster CTA ", rank));
    pit->second.tx -= bytes;
    pit->second.copy_phase = pit->second.completed, pit->second.copy_by = op.issued_by;
    return peer->MbarrierComplete(op.mbarrier & kOffsetMask);
  }
  op.mbarrier &= kOffsetMask;
  auto it = mbarriers_.find(op.mbarrier);
  if (it == mbarriers_.end()) return NoBarrierForLoad(op, op.mbarrier, "");
  it->second.tx -= bytes;  // the whole box counts, zero fill included
  it->second.copy_phase = it->second.completed, it->second.copy_by = op.issued_by;
  return MbarrierComplete(op.mbarrier);
}

void Cta::NoteRelease(const Thread& t, uint64_t load_barrier, AsyncLoad& load) const {
  // (A wait on the load's own barrier is its previous fill's, not the stage's release.)
  if (!t.passed_wait || t.passed_barrier == (load_barrier & kOffsetMask)) return;
  load.after_wait = t.passed_wait, load.released_by = t.passed_on;
}

absl::Status Cta::NoBarrierForLoad(const AsyncLoad& op, uint64_t offset,
                                   const std::string& cta) const {
  const std::string dsl = m_.DslLine(*op.issued_by);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s%s: PTX line %d (%s): a TMA load completes on shared offset %d%s, which holds no "
      "initialised mbarrier: its mbarrier.init has not run yet there, or nothing orders it before "
      "the load (a SyncThreads after the Inits; where a peer's load lands in this CTA or completes "
      "on its barrier, a ClusterSync after them in every CTA of the cluster)",
      dsl.empty() ? "" : dsl + ": ", kernel_, op.issued_by->line, op.issued_by->text, offset, cta));
}

absl::Status Cta::CheckCopiesWaitedForAtExit() const {
  for (const auto& [off, b] : mbarriers_) {
    if (b.copy_phase < 0) continue;
    const int64_t waited = PhasesWaited(off);
    if (b.copy_phase < waited) continue;
    const std::string dsl = m_.DslLine(*b.copy_by);
    // No wait on the barrier at all is most often a reader that skipped its wait (it read the
    // stage unordered), not a load past the readers' last stage.
    const std::string why =
        waited == 0 ? "no thread ever waited on this mbarrier: does the stage's reader wait for "
                      "its full barrier (Acquire, Wait) before it reads? (or no one reads this "
                      "load)"
                    : absl::StrCat("they waited through ", waited,
                                   " phases: a load no one reads (past the last stage the "
                                   "consumers wait for?)");
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): block (%d,%d,%d) exits, and this TMA load's bytes counted in "
        "phase %d of the mbarrier at shared offset %d, which no thread waited for; %s",
        dsl.empty() ? "" : dsl + ": ", kernel_, b.copy_by->line, b.copy_by->text, ctaid_.x,
        ctaid_.y, ctaid_.z, b.copy_phase, off, why));
  }
  return absl::OkStatus();
}

// wgmma.fence / mma_async / commit_group / wait_group: each a meeting of the warpgroup's 128
// threads. mma_async joins the open group with its descriptors and registers; wait_group N
// computes every group but the newest N, so accumulators change only there, as on the GPU.
// The A fragment of m64k16 (PTX ISA, wgmma register fragments), thread t of the warpgroup's part:
// warp w holds rows 16w..16w+15; register j of lane l holds row 16w + l/4 + 8*(j%2), columns
// 8*(j/2) + 2*(l%4) (low half) and the next column (high half).
void Cta::ReadWgmmaAFragment(WgmmaOp& op, const Thread& th, const Instr& mine, int t) {
  const int warp = t / 32, lane = t % 32;
  for (int j = 0; j < 4; ++j) {
    const uint64_t bits = th.r[mine.ops[1].regs[j]];
    const int row = 16 * warp + lane / 4 + 8 * (j % 2), col = 8 * (j / 2) + 2 * (lane % 4);
    if (!op.a_row_taint[row]) op.a_row_taint[row] = RegTaint(th, mine.ops[1].regs[j]);
    for (int h = 0; h < 2; ++h) {
      const uint16_t e = static_cast<uint16_t>(bits >> (16 * h));
      op.a_from_regs[row * 16 + col + h] =
          op.a_format == OperandFormat::kBF16 ? Bf16ToF32(e) : F16ToF32(e);
    }
  }
}

absl::Status Cta::TryReleaseWarpgroup(int group) {
  const int first = group * 128;
  if (first + 128 > static_cast<int>(threads_.size()))
    return Fail(threads_[first], e_.code[threads_[first].pc],
                "wgmma needs a whole warpgroup of 128 threads");
  Warpgroup& wg = warpgroups_[group];
  // The first arrival checks that no member has exited; the others wait until all 128 are here.
  if (wg.arrived != 1 && wg.arrived < 128) return absl::OkStatus();
  for (int i = first; i < first + 128; ++i) {
    if (threads_[i].state == Thread::State::kDone)
      return Fail(threads_[first], e_.code[threads_[first].pc],
                  absl::StrCat("thread ", i, " of the warpgroup has exited"));
    if (threads_[i].state != Thread::State::kWarp) return absl::OkStatus();
  }
  Thread& t0 = threads_[first];
  const Instr& in = e_.code[t0.pc];
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  for (int i = first; i < first + 128; ++i) {
    const Instr& other = e_.code[threads_[i].pc];
    if (other.op != Op::kWgmma || other.mods.empty() || other.mods[0] != kind)
      return Fail(threads_[i], other,
                  absl::StrCat("the warpgroup is split between wgmma.", kind, " (PTX line ",
                               in.line, ") and this"));
  }
  if (kind == "fence") {
    wg.fenced = true;
    for (int i = first; i < first + 128; ++i) threads_[i].unfenced_wgmma_regs.Clear();
  }
  if (kind == "mma_async" && !wg.fenced)
    return Fail(t0, in,
                "the warpgroup's first wgmma.mma_async with no wgmma.fence before it: the PTX ISA "
                "requires one before a warpgroup's first wgmma.mma_async (and between another "
                "instruction's access of its accumulator or A registers and the wgmma)");
  if (kind == "mma_async") {
    WgmmaOp op;
    op.line = in.line;
    op.in = &in;
    // Modifiers: mma_async.sync.aligned.m64nNkK.dtype.atype.btype (PTX ISA, wgmma.mma_async).
    size_t shape = in.mods.size();
    int shape_k = 0;
    for (size_t i = 0; i < in.mods.size(); ++i) {
      const std::string& m = in.mods[i];
      if (m.size() > 4 && m[0] == 'm' && m.find('n') != std::string::npos &&
          m.find('k') != std::string::npos) {
        op.n = std::atoi(m.substr(m.find('n') + 1).c_str());
        shape_k = std::atoi(m.substr(m.find('k') + 1).c_str());
        shape = i;
      }
    }
    auto format = [](const std::string& t) -> std::optional<OperandFormat> {
      if (t == "bf16") return OperandFormat::kBF16;
      if (t == "f16") return OperandFormat::kF16;
      if (t == "e4m3") return OperandFormat::kE4M3;
      if (t == "e5m2") return OperandFormat::kE5M2;
      return std::nullopt;
    };
    std::optional<OperandFormat> a_format, b_format;
    if (shape + 3 < in.mods.size() && in.mods[shape + 1] == "f32")
      a_format = format(in.mods[shape + 2]), b_format = format(in.mods[shape + 3]);
    // 16-bit inputs: both the same type, k16; 8-bit: e4m3/e5m2 in any mix, k32.
    const bool fp8 = a_format && FormatBytes(*a_format) == 1;
    if (!a_format || !b_format || FormatBytes(*a_format) != FormatBytes(*b_format) ||
        (!fp8 && *a_format != *b_format) || shape_k != (fp8 ? 32 : 16) || op.n % 8 || op.n < 8 ||
        op.n > 256)
      return Fail(t0, in,
                  "only wgmma m64nNk16 with bf16/f16 inputs, m64nNk32 with e4m3/e5m2 inputs, and "
                  "f32 accumulators are emulated");
    op.a_format = *a_format, op.b_format = *b_format, op.k = shape_k;
    // Operands: d, a (a descriptor, or four b32 registers), b-desc, scale-d, imm-scale-a,
    // imm-scale-b, then for 16-bit inputs imm-trans-a (descriptor A only) and imm-trans-b.
    const bool a_regs = in.ops.at(1).kind == Operand::Kind::kVector;
    if (a_regs && fp8)
      return Fail(t0, in, "wgmma of 8-bit floats with A from registers is not emulated yet");
    if (a_regs && in.ops[1].regs.size() != 4)
      return Fail(t0, in,
                  "wgmma A from registers takes four b32 registers (m64k16 of 16-bit elements)");
    const size_t operands = fp8 ? 6u : a_regs ? 7u : 8u;
    if (in.ops.size() != operands)
      return Fail(t0, in,
                  absl::StrCat("wgmma with A from ", a_regs ? "registers" : "a descriptor", " has ",
                               operands, " operands, not ", in.ops.size()));
    if (!a_regs) op.a_desc = Read(t0, in.ops.at(1), 64);
    op.b_desc = Read(t0, in.ops.at(2), 64);
    op.scale_d = Read(t0, in.ops.at(3), 1) & 1;
    op.negate_a = SignExtend(Read(t0, in.ops.at(4), 32), 32) < 0;
    op.negate_b = SignExtend(Read(t0, in.ops.at(5), 32), 32) < 0;
    op.a_mn_major = !fp8 && !a_regs && (Read(t0, in.ops.at(6), 32) & 1);
    op.b_mn_major = !fp8 && (Read(t0, in.ops.back(), 32) & 1);
    if (a_regs) op.a_from_regs.assign(64 * 16, 0.0), op.a_row_taint.assign(64, nullptr);
    for (int i = first; i < first + 128; ++i) {
      const Instr& mine = e_.code[threads_[i].pc];
      if (absl::Status s = CheckWgmmaRegistersFenced(threads_[i], mine); !s.ok()) return s;
      if ((!a_regs && Read(threads_[i], mine.ops.at(1), 64) != op.a_desc) ||
          Read(threads_[i], mine.ops.at(2), 64) != op.b_desc)
        return Fail(threads_[i], mine, "wgmma descriptors differ across the warpgroup");
      if (a_regs) ReadWgmmaAFragment(op, threads_[i], mine, i - first);
      op.d_regs.push_back(mine.ops.at(0).regs);
      for (int r : mine.ops.at(0).regs)
        threads_[i].in_flight_regs.Set(r, &mine);  // until its wait_group
      if (a_regs) {  // the A fragment is read until then too (PTX ISA: accessing it before is
                     // undefined)
        op.a_regs.push_back(mine.ops[1].regs);
        for (int r : mine.ops[1].regs) threads_[i].in_flight_regs.Set(r, &mine);
      }
      if (static_cast<int>(mine.ops.at(0).regs.size()) != op.n / 2)
        return Fail(threads_[i], mine,
                    absl::StrCat("an m64n", op.n, " accumulator has ", op.n / 2, " registers"));
    }
    if (!a_regs) {
      SmemOperand a_operand = WgmmaOperand(op.a_desc);
      a_operand.mn_major = op.a_mn_major;
      a_operand.es = FormatBytes(op.a_format);
      op.reads.push_back(OperandSpan(a_operand, 64, op.k));
    }
    SmemOperand b_operand = WgmmaOperand(op.b_desc);
    b_operand.mn_major = op.b_mn_major;
    b_operand.es = FormatBytes(op.b_format);
    op.reads.push_back(OperandSpan(b_operand, op.n, op.k));
    // The op starts once all 128 threads issued it: it has acquired what any of its warps had.
    for (int w = first / 32; w < first / 32 + 4; ++w) JoinClock(op.issue_clock, ClockOf(w));
    op.issue_warp = ClusterWarp(first / 32);
    wg.open.push_back(std::move(op));
  } else if (kind == "commit_group") {
    wg.groups.push_back(std::move(wg.open));
    wg.open.clear();
  } else if (kind == "wait_group") {
    if (absl::Status s = CompleteWgmmaGroups(group, Read(t0, in.ops.at(0), 32)); !s.ok()) return s;
  } else if (kind != "fence") {
    return Fail(t0, in, "this wgmma instruction is not emulated yet");
  }
  for (int i = first; i < first + 128; ++i) {
    SetState(threads_[i], Thread::State::kRun);
    ++threads_[i].pc;
  }
  wg.arrived = 0;
  return absl::OkStatus();
}

// A descriptor's element (row, k) of a K-major operand (PTX ISA, matrix descriptors): start
// address, leading byte offset (between 8-column core matrices along K, without swizzle), stride
// byte offset (between 8-row groups), and the swizzle mode in bits 62-63 (1: 128B, 2: 64B, 3: 32B).
absl::Status Cta::CompleteWgmmaGroups(int group, size_t keep) {
  Warpgroup& wg = warpgroups_[group];
  while (wg.groups.size() > keep) {
    for (const WgmmaOp& op : wg.groups.front()) {
      operand_clock_ = &op.issue_clock, operand_warp_ = op.issue_warp;
      struct Unset {
        const WarpClock*& clock;
        ~Unset() { clock = nullptr; }
      } unset{operand_clock_};
      auto element = [&](uint64_t desc, OperandFormat f, int row, int k, double* out,
                         bool mn_major = false) {
        SmemOperand o = WgmmaOperand(desc);
        o.mn_major = mn_major;
        o.es = FormatBytes(f);
        return ReadOperand(*op.in, "wgmma", o, row, k, f, out);
      };
      const int K = op.k;
      // D[row][col] reads only A's row and B's column: each carries the first tainted or
      // never-written byte among its own (rows of A past a ragged edge may hold anything, and
      // taint only rows of D that are not stored).
      std::vector<Origin> row_taint =
          op.a_row_taint.empty() ? std::vector<Origin>(64) : op.a_row_taint;
      std::vector<Origin> col_taint(op.n, nullptr);
      std::vector<double> a = op.a_from_regs, b(op.n * K);
      if (a.empty()) {
        a.resize(64 * K);
        for (int r = 0; r < 64; ++r) {
          operand_taint_ = nullptr;
          for (int k = 0; k < K; ++k)
            if (absl::Status s =
                    element(op.a_desc, op.a_format, r, k, &a[r * K + k], op.a_mn_major);
                !s.ok())
              return s;
          row_taint[r] = operand_taint_;
        }
      }
      for (int n = 0; n < op.n; ++n) {
        operand_taint_ = nullptr;
        for (int k = 0; k < K; ++k)
          if (absl::Status s = element(op.b_desc, op.b_format, n, k, &b[n * K + k], op.b_mn_major);
              !s.ok())
            return s;
        col_taint[n] = operand_taint_;
      }
      const double sign = (op.negate_a ? -1.0 : 1.0) * (op.negate_b ? -1.0 : 1.0);
      for (int t = 0; t < 128; ++t) {
        Thread& th = threads_[group * 128 + t];
        const int warp = t / 32, lane = t % 32;
        for (int i = 0; i < op.n / 2; ++i) {
          const int pair = i / 2;
          const int row = 16 * warp + lane / 4 + 8 * (pair % 2),
                    col = 8 * (pair / 2) + 2 * (lane % 4) + i % 2;
          double d = op.scale_d ? F32(th.r[op.d_regs[t][i]]) : 0.0;
          for (int k = 0; k < K; ++k) d += sign * a[row * K + k] * b[col * K + k];
          th.r[op.d_regs[t][i]] = Bits(static_cast<float>(d));
          const Origin was = op.scale_d ? RegTaint(th, op.d_regs[t][i]) : nullptr;
          SetRegTaint(th, op.d_regs[t][i],
                      was              ? was
                      : row_taint[row] ? row_taint[row]
                                       : col_taint[col]);
        }
      }
    }
    wg.groups.erase(wg.groups.begin());
  }
  // Accumulators stay in flight while any op not yet computed (a later group, the open one)
  // writes them: the same registers chain through every group of a mainloop.
  for (int t = 0; t < 128; ++t) {
    Thread& th = threads_[group * 128 + t];
    th.in_flight_regs.ClearWrittenBy(Op::kWgmma);
    auto mark = [&](const WgmmaOp& op) {
      for (int r : op.d_regs[t]) th.in_flight_regs.Set(r, op.in);
      if (!op.a_regs.empty())
        for (int r : op.a_regs[t]) th.in_flight_regs.Set(r, op.in);
    };
    for (const std::vector<WgmmaOp>& g : wg.groups)
      for (const WgmmaOp& op : g) mark(op);
    for (const WgmmaOp& op : wg.open) mark(op);
  }
  return absl::OkStatus();
}

// Element (row, k) of a 16-bit operand in the canonical layouts (PTX ISA, shared memory matrix
// layouts), in 16-byte units T. K-major: 8-row atoms SBO apart, each row one swizzle span of K
// (without swizzle: 8x8 core matrices, LBO along K). MN-major: each k one span of rows, 8 k
// per atom, atoms SBO apart along K and LBO apart along the rows (without swizzle the roles
// swap: core matrices SBO apart along the rows, LBO along K).
uint64_t Cta::OperandAddress(const SmemOperand& o, int row, int k) {
  if (o.mn_major) {
    if (!o.span)
      return o.start + (row % 8) * 2 + (row / 8) * o.sbo + (k % 8) * 16 + (k / 8) * o.lbo;
    const int atom = o.span / 2;  // rows per span
    return Swizzled(
        o.start + (row % atom) * 2 + (row / atom) * o.lbo + (k % 8) * o.span + (k / 8) * o.sbo,
        o.span);
  }
  // K-major: a core matrix is 8 rows of 16 bytes (8 16-bit or 16 8-bit elements of K).
  const int kb = k * o.es;
  return o.span ? Swizzled(o.start + (row / 8) * o.sbo + (row % 8) * o.span + kb, o.span)
                : o.start + (row / 8) * o.sbo + (kb / 16) * o.lbo + (row % 8) * 16 + kb % 16;
}

std::pair<uint64_t, uint64_t> Cta::OperandSpan(const SmemOperand& o, int rows, int k_count) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < k_count; ++k) {
      const uint64_t a = OperandAddress(o, r, k);
      lo = std::min(lo, a), hi = std::max(hi, a + o.es);
    }
  return {lo, hi};
}

Cta::SmemOperand Cta::WgmmaOperand(uint64_t desc) {  // wgmma: swizzle mode in bits 62-63
  const int mode = static_cast<int>(desc >> 62);
  return {(desc & 0x3fff) << 4, ((desc >> 16) & 0x3fff) << 4, ((desc >> 32) & 0x3fff) << 4,
          mode == 1   ? 128
          : mode == 2 ? 64
          : mode == 3 ? 32
                      : 0};
}

absl::Status Cta::ReadOperand(const Instr& in, const char* reader, const SmemOperand& o, int row,
                              int k, OperandFormat format, double* out) {
  const uint64_t addr = OperandAddress(o, row, k);
  const int es = FormatBytes(format);
  if (addr + es > shared_.size())
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: PTX line %d: a %s descriptor reads shared offset %d, past "
                        "the block's %d bytes",
                        kernel_, in.line, reader, addr, shared_.size()));
  if (absl::Status s = CheckFenced(in, addr, es, reader); !s.ok()) return s;
  if (operand_clock_)
    if (std::optional<SharedRaceShadow::Conflict> c =
            races_.UnorderedWrite(addr, es, operand_warp_, *operand_clock_)) {
      const std::string tma = UnwaitedTmaBytes(*c, "its warpgroup", /*read=*/true);
      const std::string dsl = m_.DslLine(in);
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s%s: PTX line %d (%s): the %s reads %s", dsl.empty() ? "" : dsl + ": ", kernel_,
          in.line, in.text, reader,
          !tma.empty()
              ? tma
              : absl::StrFormat("shared byte %d, which %s wrote (%s) with nothing ordering "
                                "the write before the %s's issue (a barrier is missing)",
                                c->byte, EarlierWarp(*c), EarlierWhere(*c), reader)));
    }
  if (!tma_swizzle_.empty() && tma_swizzle_[addr] && tma_swizzle_[addr] != o.span + 1)
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): a %s descriptor with %s reads shared byte %d, which a TMA load "
        "laid out with %s: "
        "the descriptor's swizzle does not match the tensor map's",
        m_.DslLine(in).empty() ? "" : m_.DslLine(in) + ": ", kernel_, in.line, in.text, reader,
        o.span ? absl::StrCat(o.span, "B swizzle") : "no swizzle", addr,
        tma_swizzle_[addr] > 1 ? absl::StrCat(tma_swizzle_[addr] - 1, "B swizzle") : "no swizzle"));
  if (absl::Status s =
          CheckPendingOverlap(nullptr, in, addr, es, absl::StrCat(reader, " reads").c_str());
      !s.ok())
    return s;
  if (!operand_taint_) operand_taint_ = SharedTaint(shared_.data() + addr, es, in);
  if (es == 1) {
    *out = Fp8ToDouble(shared_[addr], format == OperandFormat::kE4M3);
    return absl::OkStatus();
  }
  uint16_t h;
  std::memcpy(&h, shared_.data() + addr, 2);
  *out = format == OperandFormat::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
  return absl::OkStatus();
}

// ---- clusters: peers, distributed shared memory, barrier.cluster, stmatrix

// A CTA of a cluster may start later than its peers, and its shared memory is not there before it
// starts: a thread reaches a peer's shared memory (loads, stores, atomics, arrivals on its
// mbarriers, multicast copies into it) only after a cluster barrier that every CTA's threads
// arrived at (CUDA C++ Programming Guide, "Distributed Shared Memory": the cluster.sync() that
// ensures all thread blocks have started). The emulator starts a cluster's CTAs together, so it
// checks that barrier rather than meeting the fault.
absl::StatusOr<Cta*> Cta::Peer(const Thread& t, const Instr& in, uint64_t rank, bool access) const {
  const uint64_t size = cluster_ ? cluster_->ctas.size() : 1;
  if (rank >= size)
    return Fail(t, in,
                absl::StrCat("cluster CTA rank ", rank, " is outside the cluster of ", size));
  Cta* peer = cluster_ ? cluster_->ctas[rank] : const_cast<Cta*>(this);
  if (access && peer != this && !t.cluster_met)
    return Fail(t, in,
                absl::StrCat("reaches the shared memory of cluster CTA ", rank,
                             " before this thread has passed a cluster barrier: that CTA may not "
                             "have started yet, and its shared memory is not there before it "
                             "starts (CUDA C++ Programming Guide, distributed shared memory). "
                             "Every CTA of the cluster must arrive first: barrier.cluster.arrive "
                             "and wait (ClusterSync, or ClusterArrive(/*relaxed=*/true) and "
                             "ClusterWait) before the first access to a peer"));
  if (access && peer->exited_)
    return Fail(t, in,
                absl::StrCat("cluster CTA ", rank,
                             " has exited: its shared memory is gone (it must wait for its "
                             "peers, e.g. with barrier.cluster, before it exits)"));
  return peer;
}

absl::Status Cta::ArriveOn(uint64_t offset, int64_t tx,
                           const std::function<absl::Status(const std::string&)>& fail,
                           const WarpClock& released, const Instr* by) {
  auto it = mbarriers_.find(offset);
  if (it == mbarriers_.end())
    return fail(absl::StrFormat(
        "the mbarrier at shared offset %d of cluster CTA %d was never initialised", offset, rank_));
  it->second.tx += tx;
  it->second.last_arrival = by;
  JoinClock(it->second.clocks.open, released);
  if (--it->second.pending < 0)
    return fail(absl::StrFormat(
        "an arrival beyond the %d the mbarrier at shared offset %d of cluster CTA %d "
        "expects in this phase",
        it->second.expected, offset, rank_));
  return MbarrierComplete(offset);
}

// barrier.cluster.arrive marks the thread's arrival in the current phase; barrier.cluster.wait
// holds it until every live thread of every CTA in the cluster has arrived.
absl::Status Cta::ClusterBarrier(Thread& t, const Instr& in) {
  if (!cluster_) return Fail(t, in, "barrier.cluster outside a cluster");
  if (in.Has("arrive")) {
    // PTX ISA (barrier.cluster): each thread arrives once before the barrier completes; a second
    // arrival would count for a thread that has not arrived and end the phase early.
    if (t.cluster_phase == cluster_->phase)
      return Fail(t, in,
                  absl::StrCat("a second barrier.cluster.arrive in phase ", cluster_->phase,
                               " of the cluster barrier, before it completed: each thread "
                               "arrives once a phase (a wait missing between the two?)"));
    if (absl::Status s = CheckAlignedArrive(t, in); !s.ok()) return s;
    t.cluster_phase = cluster_->phase;
    ++cluster_->arrived;
    // A relaxed arrive releases nothing; it still closes the warp's epoch, so that a race it
    // leaves can tell the accesses before it from those after (Cta::RelaxedArriveBetween).
    const int warp = t.linear / 32;
    const WarpClock published = Released(warp);
    if (in.Has("relaxed")) {
      cluster_->relaxed_arrives[ClusterWarp(warp)] = {&in, published[ClusterWarp(warp)],
                                                      cluster_->phase};
    } else {
      JoinClock(cluster_->clocks.open, published);
      cluster_->relaxed_arrives.erase(ClusterWarp(warp));
    }
    ++t.pc;
    cluster_->TryRelease();
    return absl::OkStatus();
  }
  if (in.Has("wait")) {
    if (t.cluster_phase < 0)
      return Fail(t, in,
                  t.cluster_met
                      ? "a barrier.cluster.wait with no barrier.cluster.arrive since this thread's "
                        "last wait: it waits for a phase that has completed, so it orders "
                        "nothing (each thread arrives, then waits, once a phase: PTX ISA, "
                        "barrier.cluster)"
                      : "barrier.cluster.wait without an arrive before it");
    if (cluster_->phase > t.cluster_phase) {
      t.cluster_met = true;
      t.cluster_phase = -1;  // (the next wait needs an arrive of its own)
      Synced(t, in);
      Acquire(t, cluster_->clocks.done);
      ++t.pc;
      return absl::OkStatus();
    }
    SetState(t, Thread::State::kBarrier);
    t.barrier = kClusterBarrier;
    return absl::OkStatus();
  }
  return Fail(t, in, "this barrier.cluster form is not emulated yet");
}

// barrier.cluster.arrive.aligned: every thread of the warp runs the same instruction (PTX ISA,
// barrier.cluster); lanes that arrive in one phase at two instructions, either .aligned, break it.
absl::Status Cta::CheckAlignedArrive(const Thread& t, const Instr& in) {
  const size_t warp = t.linear / 32;
  if (cluster_arrive_sites_.size() <= warp) cluster_arrive_sites_.resize(warp + 1);
  ClusterArriveSite& site = cluster_arrive_sites_[warp];
  if (site.phase == cluster_->phase && site.at != &in &&
      (in.Has("aligned") || site.at->Has("aligned"))) {
    const std::string dsl = m_.DslLine(*site.at);
    return Fail(t, in,
                absl::StrCat("lanes of warp ", warp,
                             " arrive at the cluster barrier at two instructions in one phase "
                             "(this one and PTX line ",
                             site.at->line, dsl.empty() ? "" : absl::StrCat(", ", dsl),
                             "): an .aligned barrier.cluster (ClusterSync's) needs every thread "
                             "of the warp at the same instruction (PTX ISA, barrier.cluster); a "
                             "ClusterArrive or ClusterSync that only some lanes run?"));
  }
  site = {cluster_->phase, &in};
  return absl::OkStatus();
}

void ClusterState::TryRelease() {
  int live = 0;
  for (Cta* c : ctas) live += c->LiveThreads();
  if (arrived == 0 || arrived < live) return;
  ++phase;
  arrived = 0;
  clocks.Complete();
  for (Cta* c : ctas) c->WakeClusterWaiters();
}

// stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: the inverse of ldmatrix. Lanes 8i..8i+7
// give the row addresses of matrix i; lane t's register i holds row t/4, columns 2(t%4) and
// 2(t%4)+1 of matrix i (with .trans, of its transpose), the lower column in the lower half.
std::vector<std::vector<uint64_t>> Cta::StMatrix(const std::vector<Thread*>& lanes, const Instr& in,
                                                 absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n);
  const int matrices = in.vec;
  if (n < 32) {
    *s = Fail(*lanes[0], in, "stmatrix needs a whole warp");
    return out;
  }
  if (absl::Status rows = CheckMatrixRows(lanes, in, matrices, 0, "stmatrix"); !rows.ok()) {
    *s = rows;
    return out;
  }
  auto store = [&](int matrix, int row, int col, uint16_t v, Origin taint) {
    Thread& dst = *lanes[8 * matrix + row];
    const uint64_t addr = Address(dst, e_.code[dst.pc].ops.at(0)) + 2 * col;
    absl::StatusOr<uint8_t*> p = Memory(dst, e_.code[dst.pc], Space::kShared, addr, 2);
    if (!p.ok()) {
      if (s->ok()) *s = p.status();
      return;
    }
    const uint64_t off = *p - shared_.data();
    if (absl::Status busy = CheckSharedAccess(dst, e_.code[dst.pc], *p, 2, /*writes=*/true);
        !busy.ok()) {
      if (s->ok()) *s = busy;
      return;
    }
    if (absl::Status race = CheckRace(dst, e_.code[dst.pc], *p, 2, SharedRaceShadow::Kind::kWrite);
        !race.ok()) {
      if (s->ok()) *s = race;
      return;
    }
    std::memcpy(*p, &v, 2);
    SetSharedTaint(*p, 2, taint);
    if (*p >= shared_.data() && off < shared_.size()) {  // a generic-proxy write, as st.shared
      if (generic_writer_.empty()) generic_writer_.assign(shared_.size(), 0);
      generic_writer_[off] = generic_writer_[off + 1] = lanes[0]->linear + 1;
      unfenced_[lanes[0]->linear].push_back({off, 2});
      NoteSharedWrite(off, 2, in, dst);
    }
  };
  for (int t = 0; t < 32; ++t)
    for (int m = 0; m < matrices; ++m) {
      const int reg = e_.code[lanes[t]->pc].ops.at(1).regs.at(m);
      const uint64_t v = lanes[t]->r[reg];
      const int r = t / 4, c = 2 * (t % 4);
      for (int h = 0; h < 2; ++h) {
        const uint16_t x = static_cast<uint16_t>(v >> (16 * h));
        if (in.Has("trans"))
          store(m, c + h, r, x, RegTaint(*lanes[t], reg));
        else
          store(m, r, c + h, x, RegTaint(*lanes[t], reg));
      }
    }
  return out;
}

// ---- the asynchronous proxy's rules

absl::Status Cta::CheckPendingOverlap(const Thread* t, const Instr& in, uint64_t off,
                                      uint64_t bytes, const char* what) {
  for (const AsyncLoad& p : pending_) {
    if (off + bytes <= p.dst || p.dst + p.Bytes() <= off) continue;
    const std::string dsl = m_.DslLine(*p.issued_by);
    // The phase before the load's completed with no copy's bytes in it, and was waited for:
    // the arrive that should have announced this load's bytes (arrive.expect_tx) completed it
    // early, without them.
    int64_t waited = 0, copy_phase = -1, reader_next = -1;
    if (auto b = mbarriers_.find(p.mbarrier & kOffsetMask); p.phase >= 1 && b != mbarriers_.end())
      copy_phase = b->second.copy_phase, waited = PhasesWaited(b->first);
    if (t)
      if (auto it = t->next_phase.find(p.mbarrier & kOffsetMask); it != t->next_phase.end())
        reader_next = it->second;
    std::string why = ": the wait for its mbarrier is missing or comes too late";
    if (p.phase >= 1 && waited >= p.phase && copy_phase < p.phase - 1)
      why = absl::StrFormat(
          ": phase %d of the load's mbarrier (shared offset %d) completed "
          "with no copy's bytes, and was waited for: if that phase was to carry "
          "this load's bytes, the arrive.expect_tx that announces them is missing "
          "them; else the wait for this load's phase is missing",
          p.phase - 1, p.mbarrier & kOffsetMask);
    else if (p.phase >= 1 && reader_next == p.phase)
      // The reader waited for the load before this one into the stage: it reads that load's
      // bytes, and the stage was filled again under it.
      why = absl::StrFormat(
          ": this thread waited for the stage's previous load (phase %d of the mbarrier at "
          "shared offset %d) and still reads it, while the next load into the stage is in "
          "flight: the stage was released before this read (its release, the arrive its "
          "producer waits on, must follow the stage's last read), or its producer does not "
          "wait for the release",
          p.phase - 1, p.mbarrier & kOffsetMask);
    const std::string msg = absl::StrFormat(
        "%s shared bytes %d..%d, which a TMA load still in flight will write (issued at PTX line "
        "%d%s%s)%s",
        what, off, off + bytes - 1, p.issued_by->line, dsl.empty() ? "" : ", ", dsl, why);
    if (t) return Fail(*t, in, msg);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d (%s): %s", m_.DslLine(in).empty() ? "" : m_.DslLine(in) + ": ", kernel_,
        in.line, in.text, msg));
  }
  return absl::OkStatus();
}

void Cta::NoteGenericRead(const Thread& t, const Instr& in, uint64_t off, uint64_t bytes) {
  if (generic_reader_.empty()) {
    generic_reader_.assign(shared_.size(), 0);
    generic_read_epoch_.assign(shared_.size(), 0);
  }
  const int32_t epoch = proxy_fences_[t.linear];
  for (uint64_t b = off; b < off + bytes && b < generic_reader_.size(); ++b) {
    generic_reader_[b] = t.linear + 1;
    generic_read_epoch_[b] = epoch;
  }
  last_generic_read_[t.linear] = &in;
}

absl::Status Cta::TmaOutsideMemory(const Instr& in, const EmulatedTensorMap& map,
                                   const std::vector<int64_t>& coords, uint64_t address,
                                   const char* what) const {
  const std::string dsl = m_.DslLine(in);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s%s: PTX line %d (%s): a TMA %s global address 0x%x, outside any allocation%s: its box "
      "at (%s) of tensor map %s, dims (%s) innermost first, strides (%s) bytes, at 0x%x; the "
      "map describes more than its tensor holds (dims swapped, a stride too large, or another "
      "tensor's sizes?)",
      dsl.empty() ? "" : dsl + ": ", kernel_, in.line, in.text, what, address, dev_.Near(address),
      absl::StrJoin(coords, ", "), map.name, absl::StrJoin(map.spec.dims, ", "),
      absl::StrJoin(map.spec.strides_bytes, ", "), map.address));
}

absl::Status Cta::CheckFenced(const Instr& in, uint64_t off, uint64_t bytes, const char* reader) {
  if (generic_writer_.empty()) return absl::OkStatus();
  for (uint64_t b = off; b < off + bytes && b < generic_writer_.size(); ++b)
    if (generic_writer_[b] != 0) {
      const std::string dsl = m_.DslLine(in);
      // Where the write was: the instruction that last wrote the byte, and its DSL line.
      std::string where;
      if (b < shared_writer_.size() && shared_writer_[b].first) {
        const Instr& w = *shared_writer_[b].first;
        const std::string w_dsl = m_.DslLine(w);
        where =
            absl::StrFormat(" at PTX line %d%s", w.line, w_dsl.empty() ? "" : " (" + w_dsl + ")");
      }
      const bool copied = b < shared_writer_.size() && shared_writer_[b].first &&
                          shared_writer_[b].first->op == Op::kCpAsync;
      const int writer = std::abs(generic_writer_[b]) - 1;
      const bool fenced_before = proxy_fences_.count(writer) && proxy_fences_.at(writer) > 0;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s%s: PTX line %d (%s): %s reads shared byte %d, which thread %d wrote%s "
          "through the generic proxy with no "
          "fence.proxy.async after it (the async proxy may not see the write)%s",
          dsl.empty() ? "" : dsl + ": ", kernel_, in.line, in.text, reader, b, writer, where,
          copied ? ": a cp.async's bytes reach the async proxy once a thread that waited for them "
                   "runs fence.proxy.async"
          : fenced_before
              ? "; that thread has fenced, but before this write: the tile was written again "
                "before this copy was issued (a barrier between the writers and the issuing "
                "thread is missing?)"
              : ""));
    }
  return absl::OkStatus();
}

}  // namespace kiln::emu::detail
