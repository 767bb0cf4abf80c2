// Blackwell: tensor memory and tcgen05.
#include <tuple>

#include "emulator/cta.h"

namespace kiln::emu::detail {

// ---- Blackwell: tensor memory and tcgen05 (PTX ISA: tcgen05 instructions, the instruction
// descriptor for kind::f16, the shared memory descriptor, the 32x32b data path)

absl::Status Cta::Tcgen05(Thread& t, const Instr& in) {
  const std::string kind = in.mods.empty() ? "" : in.mods[0];
  if (kind == "mma") {
    const bool pair = in.Has("cta_group::2");
    // kind::mxf8f6f4.block_scale takes one scale per 32 of K: no vector size, scale_vec::1X or
    // its alias block32 (PTX ISA, tcgen05.mma: the .scale_vectorsize qualifiers).
    const bool block_scaled = in.Has("kind::mxf8f6f4");
    if (block_scaled) {
      if (pair || !in.Has("cta_group::1") || !in.Has("block_scale"))
        return Fail(t, in, "only tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale is emulated");
      for (const char* other : {"scale_vec::2X", "scale_vec::4X", "block16"})
        if (in.Has(other))
          return Fail(t, in,
                      absl::StrCat("kind::mxf8f6f4 takes one scale per 32 of K, not .", other));
    } else if ((!pair && !in.Has("cta_group::1")) ||
               (!in.Has("kind::f16") && !in.Has("kind::f8f6f4"))) {
      return Fail(
          t, in,
          "only tcgen05.mma.cta_group::{1,2}.kind::{f16,f8f6f4,mxf8f6f4} is emulated so far");
    }
    if (pair &&
        (!cluster_ || rank_ % 2 != 0 || rank_ + 1 >= static_cast<int>(cluster_->ctas.size())))
      return Fail(t, in, "a cta_group::2 MMA is issued by the even CTA of a pair in a cluster");
    TcgenMma op;
    op.thread = t.linear;
    op.pair = pair;
    op.d = static_cast<uint32_t>(Address(t, in.ops.at(0)));
    op.a_desc = Read(t, in.ops.at(1), 64);
    op.b_desc = Read(t, in.ops.at(2), 64);
    op.idesc = static_cast<uint32_t>(Read(t, in.ops.at(3), 32));
    // [d], a, b, idesc, then [scale A], [scale B] where block-scaled, then enable-input-d.
    op.block_scaled = block_scaled;
    if (block_scaled) {
      op.sfa = static_cast<uint32_t>(Address(t, in.ops.at(4)));
      op.sfb = static_cast<uint32_t>(Address(t, in.ops.at(5)));
    }
    op.accumulate = Read(t, in.ops.at(block_scaled ? 6 : 4), 1) & 1;
    op.line = in.line;
    op.issued = Now();
    op.in = &in;
    op.fp8 = in.Has("kind::f8f6f4") || block_scaled;
    // M: bits 24-28 (M >> 4), or 27-28 (M >> 7) in kind::mxf8f6f4's descriptor.
    const uint32_t m = block_scaled ? ((op.idesc >> 27) & 3) << 7 : ((op.idesc >> 24) & 0x1f) << 4,
                   n = ((op.idesc >> 17) & 0x3f) << 3;
    if (std::string race =
            TcgenStoreRace("tcgen05.mma's accumulator", 0, pair ? 128 : m, op.d & 0xffff, n);
        !race.empty())
      return Fail(t, in, race);
    if (absl::Status s = CheckMmaAfterAccess(t, in, op.d & 0xffff, n); !s.ok()) return s;
    if (block_scaled) {  // the scales another warp stored: fenced and ordered before this MMA
      for (const auto& [what, at, cols] :
           {std::tuple{"A's scale factors", op.sfa, 4u},
            std::tuple{"B's scale factors", op.sfb, (n + 31) / 32}}) {
        if (std::string race = TcgenStoreRace(what, 0, 128, at & 0xffff, cols); !race.empty())
          return Fail(t, in, race);
        if (absl::Status s = CheckMmaAfterAccess(t, in, at & 0xffff, cols, "reads scales in");
            !s.ok())
          return s;
      }
    }
    if (absl::Status s = CheckMmaAfterTmaLoads(t, in, op.a_desc, op.b_desc, pair); !s.ok())
      return s;
    tcgen_issued_.push_back(op);
    return absl::OkStatus();
  }
  if (kind == "commit") {  // the mbarrier gets one arrival when every earlier tcgen05.mma completes
    const uint64_t bar = Address(t, in.ops.at(0)) & kOffsetMask;
    uint16_t mask = 0;
    if (in.Has("multicast::cluster")) {  // the barrier at this offset in each CTA of the mask
      mask = static_cast<uint16_t>(Read(t, in.ops.at(1), 16));
      if (!cluster_ || mask == 0 || (mask >> cluster_->ctas.size()) != 0)
        return Fail(
            t, in,
            absl::StrFormat("a multicast commit to CTA mask 0x%x outside the cluster", mask));
    } else if (!mbarriers_.count(bar)) {
      return Fail(
          t, in,
          absl::StrFormat("tcgen05.commit to shared offset %d, which holds no initialised mbarrier",
                          bar));
    }
    // PTX ISA (tcgen05.commit): it tracks the asynchronous tcgen05 ops the executing thread
    // issued; another thread's MMAs stay uncommitted (PendingMmaRace names that).
    std::vector<TcgenMma> mine, others;
    for (TcgenMma& op : tcgen_issued_) {
      op.passed_over_by_commit |= op.thread != t.linear;
      (op.thread == t.linear ? mine : others).push_back(op);
    }
    tcgen_commits_.push_back({std::move(mine), bar, mask, in.line, t.linear});
    tcgen_issued_ = std::move(others);
    return absl::OkStatus();
  }
  if (kind == "wait::ld") {  // this thread's tcgen05.ld results are now defined
    t.in_flight_regs.ClearWrittenBy(Op::kTcgen05);
    return absl::OkStatus();
  }
  if (kind == "wait::st") {  // this thread's tcgen05.st have completed
    for (TcgenStoreInFlight& st : tcgen_stores_) std::erase(st.threads, t.linear);
    std::erase_if(tcgen_stores_, [](const TcgenStoreInFlight& st) { return st.threads.empty(); });
    return absl::OkStatus();
  }
  if (absl::StrContains(kind, "after_thread_sync")) {  // orders what follows after its waits
    t.fenced_sync = t.synced;
    return absl::OkStatus();
  }
  if (absl::StrContains(kind, "before_thread_sync")) {  // orders its warp's TMEM accesses so far
    auto mine = unfenced_tmem_access_.find(t.linear / 32);
    if (mine != unfenced_tmem_access_.end()) {
      for (int i : mine->second)
        if (tmem_order_[i].accessor_warp == t.linear / 32) tmem_order_[i].access_fenced = Now();
      unfenced_tmem_access_.erase(mine);
    }
    return absl::OkStatus();
  }
  if (absl::StartsWith(kind, "wait")) return absl::OkStatus();
  return Fail(t, in, "this tcgen05 instruction is not emulated yet");
}

// A warp's tcgen05.ld or st of TMEM columns, for the tcgen05 ordering: checked against the MMAs
// that wrote them; a load takes their last MMA as its lanes' accumulator; and the access is
// recorded for the MMAs that will overwrite the columns.
absl::Status Cta::OrderTcgenAccess(const std::vector<Thread*>& lanes, const Instr& in,
                                   uint32_t quarter, uint32_t col0, uint32_t num, bool store) {
  if (absl::Status order = CheckTcgenAfterWrite(lanes, in, quarter, col0, num); !order.ok())
    return order;
  Thread& t = *lanes[0];
  if (!store) {  // these lanes now hold what the last MMA over these columns wrote
    const Instr* mma = nullptr;
    int64_t when = INT64_MIN;
    for (uint32_t c = col0; c < col0 + num && c < 512; ++c)
      if (const TmemOrder& o = tmem_order_[quarter * 512 + c]; o.writer && o.written > when)
        mma = o.writer, when = o.written;
    if (mma)
      for (Thread* lane : lanes) lane->last_mma = mma;
  }
  for (uint32_t c = col0; c < col0 + num && c < 512; ++c) {  // what a later MMA is ordered after
    TmemOrder& o = tmem_order_[quarter * 512 + c];
    const bool listed = o.accessor_warp == t.linear / 32 && o.access_fenced < o.accessed;
    o.accessed = Now(), o.access_fenced = INT64_MIN, o.accessor_warp = t.linear / 32;
    o.access = &in;
    o.access_read_undefined = !store && tmem_origin_[32 * quarter * 512 + c] == NeverWritten();
    if (!listed)
      unfenced_tmem_access_[t.linear / 32].push_back(static_cast<int>(quarter * 512 + c));
  }
  return absl::OkStatus();
}

// Why thread `t`'s tcgen05 op is not ordered after what another thread made known at `time`
// ("" when it is): it must have passed a wait after that time and fenced it with
// tcgen05.fence::after_thread_sync before this op.
std::string Cta::NotOrderedAfter(const Thread& t, int64_t time) const {
  if (t.fenced_sync > time) return "";
  if (t.synced <= time)
    return "no wait since orders this thread after it (a wait, then "
           "tcgen05.fence::after_thread_sync)";
  const std::string wait = m_.DslLine(*t.synced_by);
  return absl::StrFormat(
      "the wait at PTX line %d%s has no tcgen05.fence::after_thread_sync after it: the wait does "
      "not order this op after it",
      t.synced_by->line, wait.empty() ? "" : " (" + wait + ")");
}

// A tcgen05.ld or st of columns an MMA wrote: the warp's threads learned that the MMA completed
// through a wait (its commit's mbarrier, or a barrier after a thread that waited on it).
absl::Status Cta::CheckTcgenAfterWrite(const std::vector<Thread*>& lanes, const Instr& in,
                                       uint32_t quarter, uint32_t col0, uint32_t num) {
  const TmemOrder* last = nullptr;
  for (uint32_t c = col0; c < col0 + num && c < 512; ++c) {
    const TmemOrder& o = tmem_order_[quarter * 512 + c];
    if (o.writer && (!last || o.written > last->written)) last = &o;
  }
  if (!last) return absl::OkStatus();
  for (Thread* t : lanes)
    if (std::string why = NotOrderedAfter(*t, last->written); !why.empty()) {
      const std::string mma = m_.DslLine(*last->writer);
      return Fail(*t, in,
                  absl::StrFormat("tcgen05.%s TMEM columns %d..%d, which the tcgen05.mma at PTX "
                                  "line %d%s wrote, but %s",
                                  in.mods[0], col0, col0 + num - 1, last->writer->line,
                                  mma.empty() ? "" : " (" + mma + ")", why));
    }
  return absl::OkStatus();
}

// An MMA over accumulator columns another warp read or wrote with tcgen05.ld/st: that warp
// fences its accesses (tcgen05.fence::before_thread_sync) before it signals, and the issuing
// thread is ordered after that fence.
absl::Status Cta::CheckMmaAfterAccess(const Thread& t, const Instr& in, uint32_t col0, uint32_t n,
                                      const char* what) {
  for (uint32_t quarter = 0; quarter < 4; ++quarter)
    for (uint32_t c = col0; c < col0 + n && c < 512; ++c) {
      const TmemOrder& o = tmem_order_[quarter * 512 + c];
      if (!o.access || o.accessor_warp == t.linear / 32 || o.accessed < o.written) continue;
      std::string why = o.access_fenced < o.accessed
                            ? "that warp has run no tcgen05.fence::before_thread_sync since: its "
                              "access may still be in flight (fence it before the arrive or "
                              "barrier that hands these columns to the MMA, and wait for that)"
                            : NotOrderedAfter(t, o.access_fenced);
      if (why.empty()) continue;
      // A load of columns no MMA had written yet most often meant to read this MMA's result
      // and ran ahead of it: its warp did not wait for the commit.
      if (o.access_read_undefined)
        why = absl::StrCat(
            "that load ran before any MMA wrote the column (it read it undefined): if it should "
            "read this MMA's result, its warp is missing the wait on the mbarrier of the "
            "tcgen05.commit that covers this MMA (then tcgen05.fence::after_thread_sync); if it "
            "should come before this MMA, ",
            why);
      const std::string at = m_.DslLine(*o.access);
      return Fail(t, in,
                  absl::StrFormat("tcgen05.mma %s TMEM column %d, which warp %d accessed "
                                  "with the tcgen05.%s at PTX line %d%s, but %s",
                                  what, c, o.accessor_warp, o.access->mods[0], o.access->line,
                                  at.empty() ? "" : " (" + at + ")", why));
    }
  return absl::OkStatus();
}

// A tcgen05.mma reads its operands through the tensor cores' own path: a TMA load that landed on
// them is ordered before the MMA only by a wait that saw it land followed by
// tcgen05.fence::after_thread_sync in the issuing thread (PTX ISA: tcgen05 memory consistency).
// Checked at the first byte of A and of B (in each CTA of a pair): a box lands whole.
absl::Status Cta::CheckMmaAfterTmaLoads(const Thread& t, const Instr& in, uint64_t a_desc,
                                        uint64_t b_desc, bool pair) const {
  std::vector<const Cta*> ctas = {this};
  if (pair) ctas.push_back(cluster_->ctas[rank_ + 1]);
  for (const Cta* cta : ctas)
    for (const auto& [name, desc] : {std::pair{"A", a_desc}, std::pair{"B", b_desc}}) {
      const uint64_t offset = (desc & 0x3fff) << 4;  // the descriptor's start address
      if (offset / 128 >= cta->tma_landed_.size()) continue;
      const TmaLanding& landed = cta->tma_landed_[offset / 128];
      if (!landed.load) continue;
      const std::string why = NotOrderedAfter(t, landed.time);
      if (why.empty()) continue;
      const std::string load = m_.DslLine(*landed.load);
      return Fail(t, in,
                  absl::StrFormat("tcgen05.mma reads its %s operand at shared byte %d%s, where the "
                                  "TMA load at PTX line %d%s landed, but %s",
                                  name, offset, cta == this ? "" : " of the pair's odd CTA",
                                  landed.load->line, load.empty() ? "" : " (" + load + ")", why));
    }
  return absl::OkStatus();
}

// An MMA reads its operands at any moment until it completes (PTX ISA, tcgen05.mma: asynchronous,
// tracked by tcgen05.commit); the emulator reads them at completion, the latest moment. A box
// that landed on them after the issue is then what a GPU may read: the stage was handed back
// while its MMAs still ran.
absl::Status Cta::CheckOperandNotRefilled(const TcgenMma& op, uint64_t addr) const {
  if (addr / 128 >= tma_landed_.size()) return absl::OkStatus();
  const TmaLanding& landed = tma_landed_[addr / 128];
  // (A landing at the issue's own count came after it: the count rises before each step.)
  if (!landed.load || landed.time < op.issued) return absl::OkStatus();
  const std::string mma = m_.DslLine(*op.in), load = m_.DslLine(*landed.load);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s%s: PTX line %d: tcgen05.mma reads shared byte %d, on which the TMA load at PTX line "
      "%d%s landed after the MMA was issued and before it completed: the stage was handed back "
      "to the producer while its MMAs still read it. Release a stage an MMA reads with "
      "tcgen05.commit to its empty mbarrier after the stage's MMAs (it arrives once they "
      "complete), not with an mbarrier arrive or a commit issued before them",
      mma.empty() ? "" : mma + ": ", kernel_, op.line, addr, landed.load->line,
      load.empty() ? "" : " (" + load + ")"));
}

// tcgen05.alloc by thread `t`'s warp: the first free run of columns, its address written to the
// shared slot; its cells undefined (PTX ISA) until an MMA or tcgen05.st writes them.
absl::Status Cta::TmemAllocate(Thread& t, const Instr& in) {
  const uint32_t cols = static_cast<uint32_t>(Read(t, in.ops.at(1), 32));
  if (cols < 32 || cols > 512 || (cols & (cols - 1))) {
    return Fail(t, in,
                absl::StrCat("tcgen05.alloc of ", cols, " columns: a power of two from 32 to 512"));
  }
  // A slot that still holds a live allocation's address: legal PTX (its reader may have taken
  // the address), but where that allocation is never freed the exit's report names this alloc.
  const uint64_t slot_at = Address(t, in.ops.at(0));
  if (auto held = tmem_slots_.find(slot_at); held != tmem_slots_.end())
    tmem_overwritten_[held->second] = &in;
  uint32_t first = 512;
  for (uint32_t c = 0; c + cols <= 512 && first == 512; c += cols) {
    bool free = true;
    for (const auto& [start, a] : tmem_allocs_) free &= c + cols <= start || start + a.first <= c;
    if (free) first = c;
  }
  if (first == 512) {
    uint32_t used = 0;
    for (const auto& [start, a] : tmem_allocs_) used += a.first;
    return Fail(t, in,
                absl::StrCat("tensor memory exhausted: ", cols, " more columns asked, ", used,
                             " of 512 already allocated"));
  }
  tmem_allocs_[first] = {cols, &in};
  tmem_slots_[slot_at] = first;
  if (tmem_origin_.empty()) tmem_origin_.assign(tmem_.size(), nullptr);
  for (uint32_t lane = 0; lane < 128; ++lane)
    std::fill_n(tmem_origin_.begin() + lane * 512 + first, cols, NeverWritten());
  for (auto f = tmem_freed_.begin(); f != tmem_freed_.end();)  // (allocated again)
    f = f->first < first + cols && first < f->first + f->second.first ? tmem_freed_.erase(f)
                                                                      : std::next(f);
  absl::StatusOr<uint8_t*> slot = Memory(t, in, Space::kShared, Address(t, in.ops.at(0)), 4);
  if (!slot.ok()) return slot.status();
  const uint32_t address = first;  // lane 0, column `first`
  std::memcpy(*slot, &address, 4);
  return absl::OkStatus();
}

std::vector<std::vector<uint64_t>> Cta::TcgenWarp(const std::vector<Thread*>& lanes,
                                                  const Instr& in, absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n);
  Thread& t = *lanes[0];
  const std::string kind = in.mods[0];
  if (kind == "relinquish_alloc_permit") {
    if (!relinquished_) relinquished_ = &in;
    return out;
  }
  if (kind == "alloc" && relinquished_) {  // (PTX ISA: no alloc once the CTA gave up its permit)
    const std::string at = m_.DslLine(*relinquished_);
    *s = Fail(t, in,
              absl::StrCat("tcgen05.alloc after this CTA relinquished its permit to allocate (the "
                           "tcgen05.relinquish_alloc_permit at PTX line ",
                           relinquished_->line, at.empty() ? "" : " (" + at + ")",
                           "): allocate first, then relinquish"));
    return out;
  }
  if (kind == "alloc") {
    *s = TmemAllocate(t, in);
    return out;
  }
  if (kind == "dealloc") {
    const uint32_t address = static_cast<uint32_t>(Read(t, in.ops.at(0), 32));
    const uint32_t cols = static_cast<uint32_t>(Read(t, in.ops.at(1), 32));
    auto it = tmem_allocs_.find(address & 0xffff);
    if (it == tmem_allocs_.end() || it->second.first != cols || (address >> 16) != 0) {
      *s = Fail(t, in,
                absl::StrFormat("tcgen05.dealloc of %d columns at 0x%x, which is not an allocation",
                                cols, address));
      return out;
    }
    tmem_allocs_.erase(it);
    std::erase_if(tmem_slots_, [&](const auto& held) { return held.second == (address & 0xffff); });
    tmem_overwritten_.erase(address & 0xffff);
    tmem_freed_[address & 0xffff] = {cols, &in};
    return out;
  }
  if (kind == "ld" ||
      kind == "st") {  // 32x32b.xN: lane i of the warp, TMEM lane base + i, N columns
    const bool store = kind == "st";
    if (!in.Has("32x32b")) {
      *s = Fail(t, in, absl::StrCat("only the 32x32b tcgen05.", kind, " shape is emulated so far"));
      return out;
    }
    int num = 0;
    for (const std::string& m : in.mods)
      if (m.size() > 1 && m[0] == 'x' && std::isdigit(static_cast<unsigned char>(m[1])))
        num = std::atoi(m.c_str() + 1);
    const Operand& taddr = in.ops.at(store ? 0 : 1);
    const uint32_t address = static_cast<uint32_t>(Address(t, taddr));
    const uint32_t lane0 = address >> 16, col0 = address & 0xffff;
    // PTX ISA, tcgen05 access restrictions: warp w of a warpgroup reaches lanes 32*(w%4)..+31.
    const int quarter = (t.linear / 32) % 4;
    if (lane0 != static_cast<uint32_t>(32 * quarter)) {
      *s = Fail(t, in,
                absl::StrCat("warp ", t.linear / 32, " may access TMEM lanes ", 32 * quarter, "..",
                             32 * quarter + 31, ", not from lane ", lane0));
      return out;
    }
    bool inside = false;
    for (const auto& [start, a] : tmem_allocs_)
      inside |= col0 >= start && col0 + num <= start + a.first;
    if (!inside) {
      *s = Fail(t, in,
                absl::StrCat("tcgen05.", kind, " of columns ", col0, "..", col0 + num - 1,
                             " outside every tensor memory allocation", FreedBy(col0, num)));
      return out;
    }
    if (std::string race = PendingMmaRace(kind, store, col0, num); !race.empty()) {
      *s = Fail(t, in, race);
      return out;
    }
    // A store in flight (no tcgen05.wait::st yet by the threads that issued it) is not yet in
    // tensor memory for anyone: reading or overwriting its columns races with it.
    if (std::string race = TcgenStoreRace(store ? "tcgen05.st" : "tcgen05.ld", lane0, n, col0, num);
        !race.empty()) {
      *s = Fail(t, in, race);
      return out;
    }
    if (absl::Status order = OrderTcgenAccess(lanes, in, quarter, col0, num, store); !order.ok()) {
      *s = order;
      return out;
    }
    if (store) {  // {r0, .., rN-1}: lane i's registers, one 32-bit column each
      const Operand& values = in.ops.at(1);
      if (values.kind != Operand::Kind::kVector || static_cast<int>(values.regs.size()) != num) {
        *s = Fail(t, in,
                  absl::StrCat("tcgen05.st .x", num, " takes a vector of ", num, " registers"));
        return out;
      }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < num; ++j) {
          tmem_[(lane0 + i) * 512 + col0 + j] = static_cast<uint32_t>(lanes[i]->r[values.regs[j]]);
          tmem_origin_[(lane0 + i) * 512 + col0 + j] = RegTaint(*lanes[i], values.regs[j]);
        }
      TcgenStoreInFlight st{lane0, static_cast<uint32_t>(n), col0, static_cast<uint32_t>(num), {},
                            &in};
      for (Thread* lane : lanes) st.threads.push_back(lane->linear);
      tcgen_stores_.push_back(std::move(st));
      return out;
    }
    // Each register takes its own cell's origin (ReleaseAlignedWarp): this load where the cell
    // is undefined.
    tcgen_ld_taint_.assign(n, std::vector<Origin>(num, nullptr));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < num; ++j) {
        out[i].push_back(tmem_[(lane0 + i) * 512 + col0 + j]);
        const Origin o = tmem_origin_[(lane0 + i) * 512 + col0 + j];
        tcgen_ld_taint_[i][j] = o == NeverWritten() ? &in : o;
      }
    return out;
  }
  *s = Fail(t, in, "this tcgen05 instruction is not emulated yet");
  return out;
}

// An MMA not yet complete (issued, or committed but its arrival not yet made) still writes its
// accumulator columns: reading them now sees a partial sum, writing them races with it. A
// block-scaled one reads its scales until then: a store over them races too.
std::string Cta::PendingMmaRace(const std::string& kind, bool store, uint32_t col0,
                                uint32_t num) const {
  std::vector<const TcgenMma*> pending;
  for (const TcgenMma& op : tcgen_issued_) pending.push_back(&op);
  for (const TcgenCommit& c : tcgen_commits_)
    for (const TcgenMma& op : c.mmas) pending.push_back(&op);
  for (const TcgenMma* op : pending) {
    const uint32_t d_col = op->d & 0xffff, d_cols = ((op->idesc >> 17) & 0x3f) << 3;
    auto at_dsl = [&] {  // looked up for a report only
      const std::string dsl = m_.DslLine(*op->in);
      return dsl.empty() ? dsl : " (" + dsl + ")";
    };
    // Passed over by another thread's commit and in none since: commits are per thread.
    const std::string why =
        op->passed_over_by_commit
            ? absl::StrFormat(
                  ": no tcgen05.commit of thread %d (which issued it) covers it, and a "
                  "commit tracks only its own thread's MMAs (PTX ISA)",
                  op->thread)
            : ": the wait for its commit's mbarrier is missing or comes too late";
    for (const auto& [which, at, cols] : {std::tuple{"A's", op->sfa & 0xffff, 4u},
                                          std::tuple{"B's", op->sfb & 0xffff, (d_cols + 31) / 32}})
      if (store && op->block_scaled && col0 < at + cols && at < col0 + num)
        return absl::StrFormat(
            "tcgen05.st overwrites TMEM columns %d..%d, %s scale factors for the tcgen05.mma at "
            "PTX line %d%s, which still reads them%s",
            std::max(col0, at), std::min(col0 + num, at + cols) - 1, which, op->line, at_dsl(),
            why);
    if (col0 < d_col + d_cols && d_col < col0 + num)
      return absl::StrFormat(
          "tcgen05.%s %s TMEM columns %d..%d, which the tcgen05.mma at PTX line %d%s still "
          "writes%s",
          kind, store ? "writes" : "reads", std::max(col0, d_col),
          std::min(col0 + num, d_col + d_cols) - 1, op->line, at_dsl(), why);
  }
  return "";
}

std::string Cta::TcgenStoreRace(const char* what, uint32_t lane0, uint32_t lanes, uint32_t col0,
                                uint32_t cols) const {
  for (const TcgenStoreInFlight& st : tcgen_stores_)
    if (lane0 < st.lane0 + st.lanes && st.lane0 < lane0 + lanes && col0 < st.col0 + st.cols &&
        st.col0 < col0 + cols) {
      const std::string dsl = m_.DslLine(*st.in);
      return absl::StrFormat(
          "%s meets TMEM lanes %d..%d, columns %d..%d, which the tcgen05.st at PTX line %d%s "
          "wrote and whose threads have not run tcgen05.wait::st: the store may not have landed",
          what, std::max(lane0, st.lane0), std::min(lane0 + lanes, st.lane0 + st.lanes) - 1,
          std::max(col0, st.col0), std::min(col0 + cols, st.col0 + st.cols) - 1, st.in->line,
          dsl.empty() ? "" : " (" + dsl + ")");
    }
  return "";
}

absl::Status Cta::RunTcgenMma(const TcgenMma& op) {
  const uint32_t d = op.idesc;
  const int n = ((d >> 17) & 0x3f) << 3, m = ((d >> 24) & 0x1f) << 4;
  if (!op.pair) return RunTcgenMmaRows(op, *this, {this}, n);
  // cta_group::2 (PTX ISA, tcgen05 CTA pairs): M = 256 rows, each CTA holding 128 of A's rows
  // and N / 2 of B's, at the descriptors' offsets in its own shared memory; each CTA's tensor
  // memory receives its 128 rows of D, over all N columns (the even CTA's B first).
  Cta& peer = *cluster_->ctas[rank_ + 1];
  if (m != 256) {
    const std::string dsl = m_.DslLine(*op.in);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s%s: PTX line %d: tcgen05.mma: a cta_group::2 shape of M=%d is "
                        "not emulated yet (M=256)",
                        dsl.empty() ? "" : dsl + ": ", kernel_, op.line, m));
  }
  if (absl::Status s = RunTcgenMmaRows(op, *this, {this, &peer}, n); !s.ok()) return s;
  return peer.RunTcgenMmaRows(op, peer, {this, &peer}, n);
}

absl::Status Cta::RunTcgenMmaRows(const TcgenMma& op, Cta& a_cta, const std::vector<Cta*>& b_ctas,
                                  int n) {
  auto fail = [&](const std::string& what) {
    const std::string dsl = op.in ? a_cta.m_.DslLine(*op.in) : "";
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s%s: PTX line %d: tcgen05.mma: %s%s", dsl.empty() ? "" : dsl + ": ", kernel_, op.line,
        what, op.pair ? absl::StrCat(" (in cluster CTA ", rank_, ")") : ""));
  };
  const uint32_t d = op.idesc;
  const int c_format = (d >> 4) & 3, a_format = (d >> 7) & 7, b_format = (d >> 10) & 7;
  const bool neg_a = (d >> 13) & 1, neg_b = (d >> 14) & 1, a_mn = (d >> 15) & 1,
             b_mn = (d >> 16) & 1;
  const int m = 128;  // rows per CTA
  // kind::mxf8f6f4's descriptor has no D type (f32): bits 4-5 are B's scale ID there, 23 the
  // scales' type (UE8M0 1), 27-28 M >> 7, 29-30 A's scale ID.
  if (op.block_scaled) {
    if (!((d >> 23) & 1))
      return fail("scale type 0 (UE4M3) in the descriptor: kind::mxf8f6f4 takes UE8M0 scales (1)");
    if ((d >> 2) & 1) return fail("sparse block-scaled MMAs are not emulated");
    if (((d >> 27) & 3) != 1) return fail("kind::mxf8f6f4 on one CTA has M = 128 (bits 27-28: 1)");
  } else if (c_format != 1) {
    return fail("only f32 accumulators are emulated so far");
  }
  // A block-scaled MMA's scale of A's row (or B's) `row`: lane row % 32 of every 32-lane quarter
  // (the PTX ISA has the scales duplicated to all four: they must agree), column + row / 32, the
  // byte the descriptor's scale ID picks; UE8M0: 2^(e - 127), 0xff NaN.
  auto block_scale = [&](bool of_b, int row) -> absl::StatusOr<double> {
    const uint32_t at = of_b ? op.sfb : op.sfa, id = of_b ? (d >> 4) & 3 : (d >> 29) & 3;
    const char* name = of_b ? "B" : "A";
    if (at >> 16) return fail(absl::StrCat(name, "'s scales at a lane other than 0"));
    const uint32_t col = (at & 0xffff) + row / 32;
    bool inside = false;
    for (const auto& [start, a] : tmem_allocs_) inside |= col >= start && col < start + a.first;
    if (!inside)
      return fail(
          absl::StrFormat("%s's scales for row %d in TMEM column %d, outside every "
                          "allocation",
                          name, row, col));
    uint32_t e[4];
    for (int q = 0; q < 4; ++q) e[q] = (tmem_[(32 * q + row % 32) * 512 + col] >> (8 * id)) & 0xff;
    for (int q = 1; q < 4; ++q)
      if (e[q] != e[0])
        return fail(absl::StrFormat(
            "%s's scale for row %d (TMEM column %d, byte %d) is 0x%02x in lanes 0..31 but 0x%02x "
            "in lanes %d..%d: the scale factors must be duplicated in all four 32-lane quarters",
            name, row, col, id, e[0], e[q], 32 * q, 32 * q + 31));
    return e[0] == 0xff ? NAN : std::ldexp(1.0, static_cast<int>(e[0]) - 127);
  };
  // The type fields (PTX ISA, instruction descriptor): kind::f16 F16 0, BF16 1, one type for both;
  // kind::f8f6f4 E4M3 0, E5M2 1 each (its 6- and 4-bit types are not emulated yet). K is 32 bytes
  // of each row: 16 elements of kind::f16, 32 of kind::f8f6f4.
  if (a_format > 1 || b_format > 1 || (!op.fp8 && a_format != b_format))
    return fail(op.fp8 ? "A and B must each be e4m3 or e5m2"
                       : "A and B must both be f16 or both bf16");
  const int kk = op.fp8 ? 32 : 16;
  auto format_of = [&](int f) {
    return op.fp8   ? (f == 0 ? OperandFormat::kE4M3 : OperandFormat::kE5M2)
           : f == 1 ? OperandFormat::kBF16
                    : OperandFormat::kF16;
  };
  if ((!op.pair && !op.block_scaled && ((d >> 24) & 0x1f) << 4 != 128) || n < 8 || n > 256 ||
      n % (8 * b_ctas.size()))
    return fail(
        absl::StrCat("the shape M=", ((d >> 24) & 0x1f) << 4, " N=", n, " is not emulated yet"));
  // Transpose A / B (instruction descriptor bits 15 / 16): the operand is MN-major, read through
  // the MN-major canonical layouts (LBO between blocks of M or N, SBO between 8 rows of K).
  auto element = [&](Cta& from, uint64_t desc, bool mn_major, int row, int k, OperandFormat format,
                     double* out) -> absl::Status {
    // tcgen05: version 1 in bits 46-47, base offset 49-51, layout 61-63 (0 none, 2/4/6:
    // 128/64/32B).
    const int version = (desc >> 46) & 3, base = (desc >> 49) & 7,
              layout = static_cast<int>(desc >> 61);
    if (version != 1)
      return fail(absl::StrCat("a shared memory descriptor of version ", version, " (must be 1)"));
    if (base != 0) return fail("descriptor base offsets are not emulated yet");
    const int span = layout == 2 ? 128 : layout == 4 ? 64 : layout == 6 ? 32 : 0;
    if (layout != 0 && span == 0)
      return fail(absl::StrCat("the descriptor layout ", layout, " is not emulated yet"));
    const SmemOperand o{(desc & 0x3fff) << 4,
                        ((desc >> 16) & 0x3fff) << 4,
                        ((desc >> 32) & 0x3fff) << 4,
                        span,
                        mn_major,
                        FormatBytes(format)};
    if (absl::Status s = from.CheckOperandNotRefilled(op, from.OperandAddress(o, row, k)); !s.ok())
      return s;
    return from.ReadOperand(*op.in, "tcgen05.mma", o, row, k, format, out);
  };
  if (op.fp8 && (a_mn || b_mn)) return fail("8-bit operands are emulated K-major only");
  std::vector<double> a(m * kk), b(n * kk);
  for (int r = 0; r < m; ++r)
    for (int k = 0; k < kk; ++k)
      if (absl::Status s =
              element(a_cta, op.a_desc, a_mn, r, k, format_of(a_format), &a[r * kk + k]);
          !s.ok())
        return s;
  const int per_cta = n / static_cast<int>(b_ctas.size());
  for (int c = 0; c < n; ++c)
    for (int k = 0; k < kk; ++k)
      if (absl::Status s = element(*b_ctas[c / per_cta], op.b_desc, b_mn, c % per_cta, k,
                                   format_of(b_format), &b[c * kk + k]);
          !s.ok())
        return s;
  const uint32_t lane0 = op.d >> 16, col0 = op.d & 0xffff;
  bool inside = lane0 == 0;
  if (inside) {
    inside = false;
    for (const auto& [start, a] : tmem_allocs_)
      inside |= col0 >= start && col0 + n <= start + a.first;
  }
  if (!inside)
    return fail(absl::StrFormat("D at TMEM 0x%x (%d columns) is outside every allocation%s", op.d,
                                n, FreedBy(col0, static_cast<uint32_t>(n))));
  const double sign = (neg_a ? -1.0 : 1.0) * (neg_b ? -1.0 : 1.0);
  std::vector<double> scale_a(m, 1.0), scale_b(n, 1.0);
  if (op.block_scaled) {
    for (int r = 0; r < m; ++r) {
      absl::StatusOr<double> v = block_scale(false, r);
      if (!v.ok()) return v.status();
      scale_a[r] = *v;
    }
    for (int c = 0; c < n; ++c) {
      absl::StatusOr<double> v = block_scale(true, c);
      if (!v.ok()) return v.status();
      scale_b[c] = *v;
    }
  }
  WriteTcgenResult(op, a, b, scale_a, scale_b, m, n, kk, sign);
  return absl::OkStatus();
}

void Cta::WriteTcgenResult(const TcgenMma& op, const std::vector<double>& a,
                           const std::vector<double>& b, const std::vector<double>& scale_a,
                           const std::vector<double>& scale_b, int m, int n, int kk, double sign) {
  const uint32_t lane0 = op.d >> 16, col0 = op.d & 0xffff;
  for (uint32_t quarter = 0; quarter < 4; ++quarter)
    for (int c = 0; c < n; ++c) {
      TmemOrder& o = tmem_order_[quarter * 512 + col0 + c];
      o.written = Now(), o.writer = op.in;
    }
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      uint32_t& cell = tmem_[(lane0 + r) * 512 + col0 + c];
      double sum = 0;
      for (int k = 0; k < kk; ++k) sum += a[r * kk + k] * b[c * kk + k];
      const double acc = (op.accumulate ? F32(cell) : 0.0) + sign * scale_a[r] * scale_b[c] * sum;
      cell = static_cast<uint32_t>(Bits(static_cast<float>(acc)));
      // Accumulating onto an undefined cell (the first MMA of a tile with enable-input-d set)
      // makes the MMA the value's origin; otherwise the MMA defines it. (Operand bytes nothing
      // wrote are not followed into tensor memory.)
      Origin& o = tmem_origin_[(lane0 + r) * 512 + col0 + c];
      o = op.accumulate ? (o == NeverWritten() ? op.in : o) : nullptr;
    }
}

absl::Status Cta::CheckTmemAtExit() {
  if (tmem_allocs_.empty()) return absl::OkStatus();
  uint32_t used = 0;
  std::vector<std::string> where;  // the allocs whose columns are left, with their DSL lines
  for (const auto& [start, a] : tmem_allocs_) {
    const auto& [size, at] = a;
    used += size;
    const std::string dsl = m_.DslLine(*at);
    where.push_back(absl::StrFormat("columns %d..%d by the tcgen05.alloc at PTX line %d%s", start,
                                    start + size - 1, at->line,
                                    dsl.empty() ? "" : " (" + dsl + ")"));
    if (auto again = tmem_overwritten_.find(start); again != tmem_overwritten_.end()) {
      const std::string dsl2 = m_.DslLine(*again->second);
      absl::StrAppend(&where.back(),
                      absl::StrFormat(", whose address's slot the tcgen05.alloc at PTX line %d%s "
                                      "wrote again before a dealloc (the same tensor memory "
                                      "allocated twice?)",
                                      again->second->line, dsl2.empty() ? "" : " (" + dsl2 + ")"));
    }
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: block (%d,%d,%d) exits with %d columns of tensor memory still allocated (%s): a "
      "tcgen05.dealloc is missing, or an alloc ran more often than its dealloc",
      kernel_, ctaid_.x, ctaid_.y, ctaid_.z, used, absl::StrJoin(where, "; ")));
}

}  // namespace kiln::emu::detail
