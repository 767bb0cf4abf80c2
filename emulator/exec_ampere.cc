// Ampere's tensor-core data movement and MMA: ldmatrix, mma.sync m16n8k16, cp.async groups.
#include "emulator/cta.h"

namespace kiln::emu::detail {

// ---- Ampere's tensor-core data movement and MMA (PTX ISA: ldmatrix, mma.m16n8k16 fragments)

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i..8i+7 give the row addresses
// of matrix i; lane t receives row t/4, columns 2(t%4) and 2(t%4)+1 of each matrix (with .trans,
// of its transpose), the lower column in the lower half.
std::vector<std::vector<uint64_t>> Cta::LdMatrix(const std::vector<Thread*>& lanes, const Instr& in,
                                                 absl::Status* s) {
  const int matrices = in.vec, n = static_cast<int>(lanes.size());
  std::vector<std::vector<uint64_t>> out(n, std::vector<uint64_t>(matrices, 0));
  if (n < 32) {
    *s = Fail(*lanes[0], in, "ldmatrix needs a whole warp");
    return out;
  }
  if (absl::Status rows = CheckMatrixRows(lanes, in, matrices, 1, "ldmatrix"); !rows.ok()) {
    *s = rows;
    return out;
  }
  auto element = [&](int matrix, int row, int col) -> uint64_t {
    Thread& src = *lanes[8 * matrix + row];
    const uint64_t addr = Address(src, e_.code[src.pc].ops.at(1)) + 2 * col;
    absl::StatusOr<uint8_t*> p = Memory(src, e_.code[src.pc], Space::kShared, addr, 2);
    if (!p.ok()) {
      if (s->ok()) *s = p.status();
      return 0;
    }
    if (absl::Status pending = CheckSharedAccess(src, e_.code[src.pc], *p, 2, /*writes=*/false);
        !pending.ok()) {
      if (s->ok()) *s = pending;
      return 0;
    }
    NoteGenericRead(src, e_.code[src.pc], *p - shared_.data(), 2);
    if (absl::Status race = CheckRace(src, e_.code[src.pc], *p, 2, SharedRaceShadow::Kind::kRead);
        !race.ok()) {
      if (s->ok()) *s = race;
      return 0;
    }
    uint16_t v;
    std::memcpy(&v, *p, 2);
    if (!warp_taint_) warp_taint_ = SharedTaint(*p, 2, in);
    return v;
  };
  for (int t = 0; t < 32; ++t)
    for (int m = 0; m < matrices; ++m) {
      const int r = t / 4, c = 2 * (t % 4);
      const uint64_t lo = in.Has("trans") ? element(m, c, r) : element(m, r, c);
      const uint64_t hi = in.Has("trans") ? element(m, c + 1, r) : element(m, r, c + 1);
      out[t][m] = lo | hi << 16;
    }
  return out;
}

absl::Status Cta::CheckMatrixRows(const std::vector<Thread*>& lanes, const Instr& in, int matrices,
                                  int op, const char* name) {
  for (int lane = 0; lane < 8 * matrices; ++lane) {
    Thread& t = *lanes[lane];
    const uint64_t addr = Address(t, e_.code[t.pc].ops.at(op));
    if (addr % 16)
      return Fail(t, in,
                  absl::StrFormat("%s row address 0x%x (lane %d, row %d of matrix %d) is %d bytes "
                                  "past a 16-byte boundary: each row's 16 bytes start on one",
                                  name, addr, lane, lane % 8, lane / 8, addr % 16));
  }
  return absl::OkStatus();
}

// mma.sync.aligned.m16n8k16.row.col: D (16x8) = A (16x16) * B (16x8) + C with the ISA's fragments
// (g = lane / 4, t = lane % 4): A reg j holds row g + 8(j%2), columns 2t + 8(j/2) and the next;
// B reg j holds rows 2t + 8j and the next of column g; f32 C/D reg j holds row g + 8(j/2),
// column 2t + j%2 (f16: reg j packs row g + 8j, columns 2t and 2t+1).
std::vector<std::vector<uint64_t>> Cta::Mma(const std::vector<Thread*>& lanes, const Instr& in,
                                            absl::Status* s) {
  const int n = static_cast<int>(lanes.size());
  const bool f32_acc = in.type == Ty::kF32;
  std::vector<std::vector<uint64_t>> out(n, std::vector<uint64_t>(f32_acc ? 4 : 2, 0));
  if (!in.Has("m16n8k16") || !in.Has("row") || !in.Has("col") || n < 32 ||
      (in.src_type != Ty::kBF16 && in.src_type != Ty::kF16)) {
    *s = Fail(*lanes[0], in, "only mma.sync m16n8k16.row.col with bf16/f16 inputs is emulated");
    return out;
  }
  auto half = [](uint64_t reg, int which) { return static_cast<uint16_t>(reg >> (16 * which)); };
  auto input = [&](uint16_t h) -> double {
    return in.src_type == Ty::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
  };
  auto reg = [&](int lane, int operand, int j) {
    return lanes[lane]->r[e_.code[lanes[lane]->pc].ops.at(operand).regs.at(j)];
  };
  double a[16][16], b[16][8], c[16][8];
  for (int row = 0; row < 16; ++row)
    for (int k = 0; k < 16; ++k)
      a[row][k] = input(half(reg((row % 8) * 4 + (k % 8) / 2, 1, row / 8 + 2 * (k / 8)), k % 2));
  for (int k = 0; k < 16; ++k)
    for (int col = 0; col < 8; ++col)
      b[k][col] = input(half(reg(col * 4 + (k % 8) / 2, 2, k / 8), k % 2));
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      const int lane = (row % 8) * 4 + col / 2;
      c[row][col] = f32_acc ? F32(reg(lane, 3, (row / 8) * 2 + col % 2))
                            : F16ToF32(half(reg(lane, 3, row / 8), col % 2));
    }
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      double d = c[row][col];
      for (int k = 0; k < 16; ++k) d += a[row][k] * b[k][col];
      const int lane = (row % 8) * 4 + col / 2;
      if (f32_acc)
        out[lane][(row / 8) * 2 + col % 2] = Bits(static_cast<float>(d));
      else
        out[lane][row / 8] |= uint64_t{F32ToF16(static_cast<float>(d))} << (16 * (col % 2));
    }
  return out;
}

// cp.async.{ca,cg}.shared.global [dst], [src], size[, src_size] (bytes past src_size are zeros);
// cp.async.commit_group; cp.async.wait_group N; cp.async.wait_all.
absl::Status Cta::CpAsync(Thread& t, const Instr& in) {
  if (in.Has("mbarrier")) {  // cp.async.mbarrier.arrive.noinc.shared{::cta}.b64 [mbar]
    if (!in.Has("arrive") || !in.Has("noinc"))
      return Fail(t, in,
                  "the emulator runs cp.async.mbarrier.arrive in its .noinc form only (the "
                  "barrier's count then includes the arrival)");
    CpAsyncArrival a;
    a.mbarrier = Address(t, in.ops.at(0));
    if (absl::StatusOr<uint8_t*> p = Memory(t, in, Space::kShared, a.mbarrier, 8); !p.ok())
      return p.status();
    a.mbarrier &= kOffsetMask;  // (the CTA's own: .shared::cta)
    for (std::vector<AsyncCopy>& g : t.groups)
      for (AsyncCopy& c : g) a.copies.push_back(std::move(c));
    for (AsyncCopy& c : t.open_group) a.copies.push_back(std::move(c));
    t.groups.clear();
    t.open_group.clear();
    a.thread = t.linear;
    a.in = &in;
    cp_async_arrivals_.push_back(std::move(a));
    return absl::OkStatus();
  }
  if (in.Has("commit_group") || (in.Has("wait_all") && !t.open_group.empty())) {
    for (AsyncCopy& c : t.open_group) c.group = t.groups_committed;
    ++t.groups_committed;
    t.groups.push_back(std::move(t.open_group));
    t.open_group.clear();
  }
  if (in.Has("commit_group")) return absl::OkStatus();
  if (in.Has("wait_group") || in.Has("wait_all")) {
    // Groups older than the newest N are complete (wait_all: every copy), those an arrival tracks
    // too: they land now, as this thread's own writes.
    const bool all = in.Has("wait_all");
    const int64_t keep = all ? 0 : static_cast<int64_t>(Read(t, in.ops.at(0), 32));
    for (CpAsyncArrival& a : cp_async_arrivals_) {
      if (a.thread != t.linear) continue;
      std::vector<AsyncCopy> flying;
      for (AsyncCopy& c : a.copies)
        if (all || (c.group >= 0 && c.group < t.groups_committed - keep)) {
          LandOwnCopy(t, c);
        } else {
          flying.push_back(std::move(c));
        }
      a.copies = std::move(flying);  // (its arrival still comes when the scheduler picks it)
    }
    OwnLandingsCoveredByWait(t, all, keep);
    CompleteGroups(t, static_cast<size_t>(keep));
    return absl::OkStatus();
  }
  const int size = static_cast<int>(Read(t, in.ops.at(2), 32));
  // cp.async [dst], [src], cp-size{, src-size}{, cache-policy}: the policy (L2::cache_hint) last.
  const size_t operands = in.ops.size() - (in.Has("L2::cache_hint") ? 1 : 0);
  const uint64_t src_bytes = operands > 3 ? Read(t, in.ops.at(3), 32) : size;
  if (size != 4 && size != 8 && size != 16) return Fail(t, in, "cp.async copies 4, 8 or 16 bytes");
  // PTX ISA (cp.async): a src-size larger than cp-size is undefined (a ragged edge's byte count
  // left unclamped, or a negative one, which reads as a huge unsigned value).
  if (src_bytes > static_cast<uint64_t>(size))
    return Fail(
        t, in,
        absl::StrCat("src-size ", SignExtend(src_bytes, 32), " is larger than cp-size ", size,
                     " (undefined in the PTX ISA): give min(max(bytes left, 0), cp-size) "
                     "as the source size"));
  const int src_size = static_cast<int>(src_bytes);
  AsyncCopy copy;
  copy.issued_by = &in;
  copy.shared_offset = Address(t, in.ops.at(0));
  if (absl::StatusOr<uint8_t*> dst = Memory(t, in, Space::kShared, copy.shared_offset, size);
      !dst.ok())
    return dst.status();
  copy.shared_offset &= kOffsetMask;  // (the CTA's own: .shared::cta)
  copy.bytes.assign(size, 0);
  if (src_size > 0) {
    absl::StatusOr<uint8_t*> src =
        Memory(t, in, Space::kGlobal, Address(t, in.ops.at(1)), std::min(size, src_size));
    if (!src.ok()) return src.status();
    std::memcpy(copy.bytes.data(), *src, std::min(size, src_size));
  }
  // The copy may land at any moment from now on (PTX ISA): checked as a write at its issue.
  if (absl::Status s = CheckSharedAccess(t, in, shared_.data() + copy.shared_offset, size,
                                         /*writes=*/true);
      !s.ok())
    return s;
  cp_async_pending_.Add(copy.shared_offset, size, &in, shared_.size());
  t.open_group.push_back(std::move(copy));
  return absl::OkStatus();
}

absl::Status Cta::CheckCpAsyncPending(const Thread& t, const Instr& in, uint64_t off,
                                      uint64_t bytes) {
  uint64_t at = 0;
  const Instr* by = cp_async_pending_.Holder(off, bytes, &at);
  if (!by) return absl::OkStatus();
  return Fail(
      t, in,
      absl::StrCat("reads shared byte ", at, ", which a cp.async still in flight will write (",
                   Where(*by), "): ", PendingCopyCause(at)));
}

// Why the cp.async that will write shared byte `at` has not landed, from its thread's groups: an
// uncommitted copy no wait_group covers; a committed one needs a wait_group that leaves fewer
// groups pending than were committed after it, and a barrier, or it meets the read on one stage.
std::string Cta::PendingCopyCause(uint64_t at) const {
  auto covers = [&](const AsyncCopy& c) {
    return at >= c.shared_offset && at < c.shared_offset + c.bytes.size();
  };
  for (const Thread& th : threads_) {
    for (const AsyncCopy& c : th.open_group)
      if (covers(c))
        return absl::StrCat("thread ", th.linear,
                            " has neither committed it (cp.async.commit_group) nor waited for "
                            "every copy (cp.async.wait_all) since issuing it: a "
                            "cp.async.wait_group waits only for committed groups");
    for (const std::vector<AsyncCopy>& group : th.groups)
      for (const AsyncCopy& c : group)
        if (covers(c)) {
          const int64_t after = th.groups_committed - 1 - c.group;
          return absl::StrCat(
              "thread ", th.linear, " committed ", after, after == 1 ? " group" : " groups",
              " after this copy's, so a cp.async.wait_group ", after == 0 ? "" : "of at most ",
              after, " there, then a barrier before this read, ",
              "lands it; if one does, the copy and this read meet on one stage (a refill of the "
              "stage being read, or a read of the stage being filled: the ring's stage index)");
        }
  }
  return "its cp.async.wait_group is missing or too shallow, or no barrier orders the waiting "
         "thread before this read";
}

// A write (a store, or another cp.async) into bytes a cp.async in flight will write: the two are
// unordered until a cp.async.wait_group covers that copy (PTX ISA, cp.async).
absl::Status Cta::CheckCpAsyncWritePending(const Thread& t, const Instr& in, uint64_t off,
                                           uint64_t bytes) {
  uint64_t at = 0;
  const Instr* by = cp_async_pending_.Holder(off, bytes, &at);
  if (!by) return absl::OkStatus();
  return Fail(t, in,
              absl::StrCat("writes shared byte ", at,
                           ", which a cp.async still in flight also "
                           "writes (",
                           Where(*by),
                           "): the two writes are unordered until a "
                           "cp.async.wait_group covers that cp.async"));
}

void Cta::WriteLandedCopy(const AsyncCopy& c, int writer, int32_t mark) {
  const uint64_t n = c.bytes.size();
  std::memcpy(shared_.data() + c.shared_offset, c.bytes.data(), n);
  MarkSharedWritten(c.shared_offset, n);
  races_.Record(c.shared_offset, n, ClusterWarp(writer / 32), ClockOf(writer / 32),
                LanesOf(threads_[writer]), static_cast<int32_t>(c.issued_by - e_.code.data()));
  NoteSharedWrite(c.shared_offset, n, *c.issued_by, threads_[writer]);
  cp_async_pending_.Remove(c.shared_offset, n);
  if (generic_writer_.empty()) generic_writer_.assign(shared_.size(), 0);
  std::fill(generic_writer_.begin() + c.shared_offset,
            generic_writer_.begin() + c.shared_offset + n, mark);
}

// Through the generic proxy (PTX ISA, cp.async), as the waiting thread's own write: its
// fence.proxy.async after the wait orders it before the async proxy.
void Cta::LandOwnCopy(Thread& t, const AsyncCopy& c) {
  WriteLandedCopy(c, t.linear, t.linear + 1);
  unfenced_[t.linear].push_back({c.shared_offset, c.bytes.size()});
}

absl::Status Cta::LandCpAsyncArrival(size_t index) {
  const int thread = cp_async_arrivals_[index].thread;
  for (size_t j = 0; j < index;)
    if (cp_async_arrivals_[j].thread == thread) {
      if (absl::Status s = LandOneCpAsyncArrival(j); !s.ok()) return s;
      --index;
    } else {
      ++j;
    }
  return LandOneCpAsyncArrival(index);
}

absl::Status Cta::LandOneCpAsyncArrival(size_t index) {
  CpAsyncArrival a = std::move(cp_async_arrivals_[index]);
  cp_async_arrivals_.erase(cp_async_arrivals_.begin() + index);
  const Instr& in = *a.in;
  auto fail = [&](const std::string& what) {
    const std::string dsl = m_.DslLine(in);
    return absl::InvalidArgumentError(absl::StrFormat("%s%s: PTX line %d (%s): %s",
                                                      dsl.empty() ? "" : dsl + ": ", kernel_,
                                                      in.line, in.text, what));
  };
  auto barrier = mbarriers_.find(a.mbarrier);
  if (barrier == mbarriers_.end())
    return fail(
        absl::StrFormat("the mbarrier at shared offset %d was never initialised", a.mbarrier));
  CpAsyncLanding landing{next_landing_id_++, {}, a.mbarrier, barrier->second.completed, a.thread};
  if (cp_landing_id_.empty()) cp_landing_id_.assign(shared_.size(), 0);
  for (const AsyncCopy& c : a.copies) {
    const uint64_t n = c.bytes.size();
    if (const WgmmaOp* w = WgmmaStillReading(c.shared_offset, c.shared_offset + n))
      return fail(absl::StrFormat(
          "a cp.async this arrival tracks lands on shared bytes %d..%d, which the wgmma at PTX "
          "line %d still reads (until its wgmma.wait_group): the stage was released to the "
          "producer too early",
          c.shared_offset, c.shared_offset + n - 1, w->line));
    WriteLandedCopy(c, a.thread, -(a.thread + 1));
    landing.newest_group = std::max(landing.newest_group, c.group < 0 ? INT64_MAX : c.group);
    std::fill(cp_landing_id_.begin() + c.shared_offset,
              cp_landing_id_.begin() + c.shared_offset + n, landing.id);
    landing.spans.push_back({c.shared_offset, n});
  }
  // The latest landing for this mbarrier and writer (a ring's stage refilled after its fence).
  std::erase_if(cp_async_unfenced_, [&](const CpAsyncLanding& l) {
    return l.mbarrier == a.mbarrier && l.writer == a.thread;
  });
  cp_async_unfenced_.push_back(std::move(landing));
  return ArriveOn(a.mbarrier, 0, fail, Released(a.thread / 32));
}

void Cta::OwnLandingsCoveredByWait(Thread& t, bool all, int64_t keep) {
  std::erase_if(cp_async_unfenced_, [&](const CpAsyncLanding& l) {
    if (l.writer != t.linear || !(all || l.newest_group < t.groups_committed - keep)) return false;
    for (auto [off, n] : l.spans) {
      for (uint64_t b = off; b < off + n; ++b)
        if (generic_writer_[b] == -(l.writer + 1) && cp_landing_id_[b] == l.id)
          generic_writer_[b] = t.linear + 1;
      unfenced_[t.linear].push_back({off, n});
    }
    return true;
  });
}

// fence.proxy.async by `t`: the bytes of every landing whose phase `t` has waited for now reach
// the async proxy (the arrival orders them before the wait, the fence after it).
void Cta::FenceCpAsyncLandings(const Thread& t) {
  for (size_t i = 0; i < cp_async_unfenced_.size();) {
    const CpAsyncLanding& l = cp_async_unfenced_[i];
    auto seen = t.next_phase.find(l.mbarrier);
    if (seen == t.next_phase.end() || seen->second <= l.phase) {
      ++i;
      continue;
    }
    for (auto [off, n] : l.spans)
      for (uint64_t b = off; b < off + n; ++b)
        if (generic_writer_[b] == -(l.writer + 1) && cp_landing_id_[b] == l.id)
          generic_writer_[b] = 0;
    cp_async_unfenced_.erase(cp_async_unfenced_.begin() + i);
  }
}

void Cta::CompleteGroups(Thread& t, size_t keep) {
  while (t.groups.size() > keep) {
    for (const AsyncCopy& c : t.groups.front()) LandOwnCopy(t, c);
    t.groups.erase(t.groups.begin());
  }
}

}  // namespace kiln::emu::detail
