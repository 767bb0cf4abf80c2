// The CUDA-core instructions, warp collectives and named barriers: one thread's step, integer and
// float arithmetic, conversions, loads and stores, atomics, shuffles and reductions, bar.sync.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "emulator/cta.h"

namespace kiln::emu::detail {

namespace {
// The warp instructions that are .sync.aligned (every lane of the warp, at one place); the others
// (shfl.sync, vote.sync, bar.warp.sync, ...) wait for the lanes of their member mask.
bool RunsOnTheWholeWarp(Op op) {
  return op == Op::kLdMatrix || op == Op::kMma || op == Op::kTcgen05 || op == Op::kStMatrix;
}
}  // namespace

// bra and brx.idx: the next pc.
absl::Status Cta::Branch(Thread& t, const Instr& in) {
  if (in.op == Op::kBrx) {  // brx.idx index, list: PTX leaves an index past the list undefined
    const uint64_t index = Read(t, in.ops.at(0), 32);
    const std::vector<int>& targets = in.ops.at(1).regs;
    if (index >= targets.size())
      return Fail(t, in,
                  absl::StrCat("index ", index, " past its ", targets.size(),
                               " targets (undefined in PTX)"));
    t.pc = targets[index];
    return absl::OkStatus();
  }
  // A branch to itself, taken: nothing in its loop changes its guard, so it never leaves. What
  // compilers leave of a loop that waits on a plain load (hoisted out of it).
  if (in.ops.at(0).target == t.pc)
    return Fail(t, in,
                "an endless loop: this branch jumps to itself and nothing in the loop can change "
                "that. Either the loop's condition reads nothing the loop changes (a While whose "
                "counter never advances, a For whose run-time step is 0), or the loop waits for "
                "a flag through a plain load: the compiler sees no store in the loop and loads "
                "the flag once, before it; read such a flag with an acquire load (LoadAcquire: "
                "ld.acquire.gpu) or an atomic");
  t.pc = in.ops.at(0).target;
  if (in.loop_guard != ptx::kNotWatched) {
    if (!in.loop_exit_taken) return WatchLoop(t, in);
    LeaveLoop(t, in);
  }
  return absl::OkStatus();
}

absl::Status Cta::Step(Thread& t) {
  if (t.pc >= static_cast<int>(e_.code.size())) {
    Exit(t);
    return absl::OkStatus();
  }
  const Instr& in = e_.code[t.pc];
  if (in.op == Op::kMma || (in.op == Op::kWgmma && !in.mods.empty() && in.mods[0] == "mma_async"))
    t.last_mma = &in;
  if (!t.in_flight_regs.empty() && in.op != Op::kWgmma &&
      !(in.op == Op::kTcgen05 && in.Has("wait::ld")))
    if (absl::Status s = CheckInFlightRegs(t, in); !s.ok()) return s;
  if (in.guard >= 0 && ((t.r[in.guard] & 1) != 0) == in.guard_negated) {
    ++t.pc;
    if (in.loop_guard != ptx::kNotWatched) {  // a watched loop's branch, not taken
      if (in.loop_exit_taken || in.loop_guard == ptx::kNoWayOut) return WatchLoop(t, in);
      LeaveLoop(t, in);
    }
    return absl::OkStatus();
  }
  if (in.touches_wgmma_regs) NoteWgmmaRegisterAccess(t, in);
  switch (in.op) {
    case Op::kBra:
    case Op::kBrx:
      return Branch(t, in);
    case Op::kRet:
    case Op::kExit:
      Exit(t);
      return absl::OkStatus();
    case Op::kShfl:
    case Op::kRedux:
    case Op::kVote:
    case Op::kLdMatrix:
    case Op::kMma:
      return Collective(t, in);
    case Op::kCpAsync:
      if (absl::Status s = CpAsync(t, in); !s.ok()) return s;
      break;
    case Op::kMbarrier:
      return Mbarrier(t, in);
    case Op::kCpAsyncBulk:
      if (absl::Status s = Bulk(t, in); !s.ok()) return s;
      break;
    case Op::kWgmma:
      SetState(t, Thread::State::kWarp);
      ++warpgroups_[t.linear / 128].arrived;
      return TryReleaseWarpgroup(t.linear / 128);
    case Op::kSetMaxNReg:  // register accounting: no effect on values; an .inc may wait
      return SetMaxNReg(t, in);
    case Op::kElect:
      return Collective(t, in);
    case Op::kTcgen05: {
      const std::string kind = in.mods.empty() ? "" : in.mods[0];
      if (kind == "alloc" || kind == "dealloc" || kind == "ld" || kind == "st" ||
          kind == "relinquish_alloc_permit")
        return Collective(t, in);  // .sync.aligned: the whole warp
      if (absl::Status s = Tcgen05(t, in); !s.ok()) return s;
      break;
    }
    case Op::kMapa: {  // the same shared offset in cluster CTA `rank`
      const uint64_t rank = Read(t, in.ops.at(2), 32);
      if (absl::StatusOr<Cta*> peer = Peer(t, in, rank, /*access=*/false); !peer.ok())
        return peer.status();
      Write(t, in.ops[0], (rank << 24) | (Read(t, in.ops.at(1), 32) & kOffsetMask));
      break;
    }
    case Op::kStMatrix:
      return Collective(t, in);
    case Op::kBar:
      if (in.Has("cluster")) return ClusterBarrier(t, in);
      // bar.warp.sync: the member lanes meet (and their memory accesses before it are ordered
      // before those after it, among them), so none runs past it until all have reached it.
      if (in.Has("warp")) return Collective(t, in);
      if (in.Has("red"))  // (its operands are a destination, an id and a predicate)
        return Fail(t, in, "bar.red is not emulated (the DSL does not emit it)");
      return Arrive(t, in, !in.Has("arrive"));
    case Op::kLd:
    case Op::kSt:
      if (absl::Status s = LoadStore(t, in); !s.ok()) return s;
      break;
    case Op::kAtom:
    case Op::kRed:
      if (absl::Status s = Atomic(t, in); !s.ok()) return s;
      break;
    case Op::kCvt: {
      const Origin o = SourceTaint(t, in);
      if (absl::Status s = Convert(t, in); !s.ok()) return s;
      TaintDestinations(t, in, o);
      break;
    }
    case Op::kMembar:
    case Op::kFence:
      AcquireLanes(t);  // (races inside a warp: any fence may take part in a synchronisation)
      // membar.gl / .sys, fence.sc / acq_rel of gpu or sys scope: what orders global memory
      // between clusters (GlobalRaces); narrower scopes and the proxy fences do not.
      if (global_races_ && !in.Has("proxy") && !in.Has("mbarrier_init") &&
          (in.op == Op::kMembar ? in.Has("gl") || in.Has("sys") : in.Has("gpu") || in.Has("sys")))
        global_races_->Fence(Now());
      if (in.op == Op::kFence && !in.mods.empty() && in.mods[0] == "proxy" && in.Has("async")) {
        for (auto [off, n] :
             unfenced_[t.linear])  // this thread's generic writes now reach the async proxy
          for (uint64_t b = off; b < off + n; ++b)
            if (generic_writer_[b] == t.linear + 1) generic_writer_[b] = 0;
        unfenced_[t.linear].clear();
        FenceCpAsyncLandings(t);
        ++proxy_fences_[t.linear];  // its generic reads so far are ordered before the async proxy's
                                    // writes
      }
      break;
    case Op::kCreatePolicy:
      Write(t, in.ops.at(0), 0);
      break;
    case Op::kGriddepcontrol:  // one grid at a time here: the grids before it have finished
      if (in.Has("wait"))
        t.waited_for_prior_grids = true;
      else if (!in.Has("launch_dependents"))
        return Fail(t, in, "griddepcontrol takes .wait or .launch_dependents");
      break;
    case Op::kNanosleep:  // a hint to suspend for up to the time given: the thread yields here
      yield_ = true;
      break;
    case Op::kTrap:
      return absl::AbortedError(Fail(t, in,
                                     "trap: the kernel stopped itself (on a GPU the launch fails "
                                     "with an illegal instruction, and the context is lost)")
                                    .message());
    case Op::kPrefetch:  // prefetch, prefetchu, prefetch.tensormap: only a cache hint, no value
                         // changes (PTX ISA)
      // The ISA does not promise that a prefetch of global memory outside any allocation is
      // harmless, so it is an error here, as a load would be.
      if (in.Has("global") && !in.Has("tensormap") && !in.ops.empty()) {
        const uint64_t at = Address(t, in.ops.at(0));
        if (!dev_.Find(at, 1))
          return Fail(t, in,
                      absl::StrFormat("prefetches global address 0x%x, outside any allocation%s",
                                      at, dev_.Near(at)));
      }
      break;
    default: {
      const Origin o = SourceTaint(t, in);
      if (absl::Status s = Arith(t, in); !s.ok()) return s;
      TaintDestinations(t, in, o);
    }
  }
  ++t.pc;
  return absl::OkStatus();
}

absl::Status Cta::Arith(Thread& t, const Instr& in) {
  const Ty ty = in.type;
  const int bits = ptx::TyBits(ty);
  auto src = [&](int i) { return Read(t, in.ops.at(i), bits == 1 ? 1 : bits); };
  auto f = [&](int i) { return F32(src(i)); };
  const bool sgn = ptx::TyIsSigned(ty);
  auto si = [&](int i) { return SignExtend(src(i), bits); };
  const bool is_f32 = ty == Ty::kF32, is_f64 = ty == Ty::kF64;
  auto put_f = [&](float v) { Write(t, in.ops[0], Bits(in.ftz ? FlushDenormal(v) : v)); };
  switch (in.op) {
    case Op::kMov: {
      const Operand& d = in.ops.at(0);
      const Operand& s = in.ops.at(1);
      if (d.kind == Operand::Kind::kVector) {  // unpack: element 0 from the lowest bits
        const int part = bits / static_cast<int>(d.regs.size());
        const uint64_t v = Read(t, s, bits);
        for (size_t i = 0; i < d.regs.size(); ++i)
          if (d.regs[i] >= 0) t.r[d.regs[i]] = (v >> (part * i)) & Mask(part);
        return absl::OkStatus();
      }
      if (s.kind == Operand::Kind::kVector) {  // pack
        const int part = bits / static_cast<int>(s.regs.size());
        uint64_t v = 0;
        for (size_t i = 0; i < s.regs.size(); ++i) v |= (t.r[s.regs[i]] & Mask(part)) << (part * i);
        Write(t, d, v);
        return absl::OkStatus();
      }
      Write(t, d, Read(t, s, bits == 0 ? 64 : bits));
      return absl::OkStatus();
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kMad:
    case Op::kFma:
    case Op::kDiv:
    case Op::kRem:
    case Op::kMin:
    case Op::kMax: {
      if (is_f32) {
        float a = f(1), b = f(2), r = 0;
        if (in.ftz) a = FlushDenormal(a), b = FlushDenormal(b);
        switch (in.op) {
          case Op::kAdd:
            r = a + b;
            break;
          case Op::kSub:
            r = a - b;
            break;
          case Op::kMul:
            r = a * b;
            break;
          case Op::kMad:
          case Op::kFma:
            r = std::fma(a, b, in.ftz ? FlushDenormal(f(3)) : f(3));
            break;
          case Op::kDiv:
            r = a / b;
            break;
          case Op::kMin:
            r = std::fmin(a, b);
            break;  // one NaN: the other operand, as PTX's min/max
          case Op::kMax:
            r = std::fmax(a, b);
            break;
          default:
            return Fail(t, in, "not defined on f32");
        }
        // min/max.NaN: a NaN operand gives the canonical NaN.
        if ((in.op == Op::kMin || in.op == Op::kMax) && in.Has("NaN") &&
            (std::isnan(a) || std::isnan(b)))
          r = std::numeric_limits<float>::quiet_NaN();
        put_f(r);
        return absl::OkStatus();
      }
      if (is_f64) {
        double a = F64(src(1)), b = F64(src(2)), r = 0;
        switch (in.op) {
          case Op::kAdd:
            r = a + b;
            break;
          case Op::kSub:
            r = a - b;
            break;
          case Op::kMul:
            r = a * b;
            break;
          case Op::kMad:
          case Op::kFma:
            r = std::fma(a, b, F64(src(3)));
            break;
          case Op::kDiv:
            r = a / b;
            break;
          case Op::kMin:
            r = std::fmin(a, b);
            break;
          case Op::kMax:
            r = std::fmax(a, b);
            break;
          default:
            return Fail(t, in, "not defined on f64");
        }
        Write(t, in.ops[0], Bits(r));
        return absl::OkStatus();
      }
      // Mixed-precision fma.rn.f32.{f16,bf16} (PTX ISA 8.6, sm_100): a and b half-precision (exact
      // in f32), c and d f32, one rounding.
      if (in.op == Op::kFma && in.Has("f32") && (ty == Ty::kBF16 || ty == Ty::kF16)) {
        auto half = [&](int i) {
          const auto h = static_cast<uint16_t>(src(i));
          return ty == Ty::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
        };
        if (!in.Has("rn") || in.ftz || in.Has("sat"))
          return Fail(t, in, "a mixed-precision fma other than .rn is not emulated yet");
        put_f(std::fma(half(1), half(2), F32(Read(t, in.ops.at(3), 32))));
        return absl::OkStatus();
      }
      // min/max on f16, bf16 and their pairs (PTX ISA: per element; one NaN gives the other
      // operand, .NaN or two NaNs the canonical NaN): the result is one operand's bits.
      if ((in.op == Op::kMin || in.op == Op::kMax) &&
          (ty == Ty::kF16 || ty == Ty::kBF16 || ty == Ty::kF16x2 || ty == Ty::kBF16x2)) {
        if (in.Has("xorsign") || in.Has("abs") || in.Has("relu") || in.ftz)
          return Fail(t, in, "min/max with .xorsign.abs, .relu or .ftz is not emulated yet");
        const bool bf = ty == Ty::kBF16 || ty == Ty::kBF16x2;
        const int lanes = bits / 16;
        const uint64_t a = src(1), b = src(2);
        uint64_t r = 0;
        for (int l = 0; l < lanes; ++l) {
          const auto ha = static_cast<uint16_t>(a >> (16 * l)),
                     hb = static_cast<uint16_t>(b >> (16 * l));
          const float fa = bf ? Bf16ToF32(ha) : F16ToF32(ha),
                      fb = bf ? Bf16ToF32(hb) : F16ToF32(hb);
          uint16_t h;
          if (std::isnan(fa) && std::isnan(fb))
            h = 0x7fff;
          else if (std::isnan(fa) || std::isnan(fb))
            h = in.Has("NaN") ? 0x7fff : std::isnan(fa) ? hb : ha;
          else if (fa == fb)  // +0 and -0: max gives +0, min -0
            h = in.op == Op::kMax ? (ha & hb) : (ha | hb);
          else
            h = (in.op == Op::kMax) == (fa > fb) ? ha : hb;
          r |= uint64_t{h} << (16 * l);
        }
        Write(t, in.ops[0], r);
        return absl::OkStatus();
      }
      if (ptx::TyIsFloat(ty)) return Fail(t, in, "this float type is not emulated yet");
      // Integers: .wide doubles the width of the result; .hi keeps the upper half.
      const uint64_t a = src(1), b = src(2);
      const int64_t sa = si(1), sb = si(2);
      uint64_t r = 0;
      int out_bits = in.wide ? 2 * bits : bits;
      switch (in.op) {
        case Op::kAdd:
          r = a + b;
          break;
        case Op::kSub:
          r = a - b;
          break;
        case Op::kMul:
        case Op::kMad: {
          if (in.wide)
            r = sgn ? static_cast<uint64_t>(sa * sb) : a * b;
          else if (in.hi) {
            __int128 p = sgn ? static_cast<__int128>(sa) * sb
                             : static_cast<__int128>(static_cast<unsigned __int128>(a) * b);
            r = static_cast<uint64_t>(p >> bits);
          } else {
            r = a * b;
          }
          if (in.op == Op::kMad) r += Read(t, in.ops.at(3), out_bits);
          break;
        }
        case Op::kDiv:
          if (b == 0)
            r = Mask(bits);
          else
            r = sgn ? static_cast<uint64_t>(sa / sb) : a / b;
          break;
        case Op::kRem:
          if (b == 0)
            r = a;
          else
            r = sgn ? static_cast<uint64_t>(sa % sb) : a % b;
          break;
        case Op::kMin:
          r = sgn ? static_cast<uint64_t>(std::min(sa, sb)) : std::min(a, b);
          break;
        case Op::kMax:
          r = sgn ? static_cast<uint64_t>(std::max(sa, sb)) : std::max(a, b);
          break;
        default:
          break;
      }
      // min/max.relu.s32 (what LLVM makes of max(min(a, b), 0)): a negative result becomes 0.
      if ((in.op == Op::kMin || in.op == Op::kMax) && in.Has("relu")) {
        if (!sgn) return Fail(t, in, ".relu is defined on signed integers");
        if (static_cast<int64_t>(r << (64 - bits)) < 0) r = 0;
      }
      Write(t, in.ops[0], r & Mask(out_bits));
      return absl::OkStatus();
    }
    case Op::kNeg:
    case Op::kAbs:
      if (is_f32) {
        put_f(in.op == Op::kNeg ? -f(1) : std::fabs(f(1)));
      } else if (ty == Ty::kF64 || ty == Ty::kF16 || ty == Ty::kBF16 || ty == Ty::kF16x2 ||
                 ty == Ty::kBF16x2) {
        // PTX ISA: neg flips and abs clears each element's sign bit (a NaN stays a NaN; its
        // payload is unspecified for the 16-bit types).
        const uint64_t signs = ty == Ty::kF64                            ? 1ull << 63
                               : (ty == Ty::kF16x2 || ty == Ty::kBF16x2) ? 0x80008000ull
                                                                         : 0x8000ull;
        const uint64_t v = Read(t, in.ops.at(1), bits);
        Write(t, in.ops[0], in.op == Op::kNeg ? v ^ signs : v & ~signs);
      } else if (ptx::TyIsFloat(ty)) {
        return Fail(t, in, "this float type is not emulated yet");
      } else {
        Write(t, in.ops[0],
              static_cast<uint64_t>(in.op == Op::kNeg ? -si(1) : std::llabs(si(1))) & Mask(bits));
      }
      return absl::OkStatus();
    case Op::kAnd:
      Write(t, in.ops[0], src(1) & src(2));
      return absl::OkStatus();
    case Op::kOr:
      Write(t, in.ops[0], src(1) | src(2));
      return absl::OkStatus();
    case Op::kXor:
      Write(t, in.ops[0], src(1) ^ src(2));
      return absl::OkStatus();
    case Op::kNot:
      Write(t, in.ops[0], ~src(1) & Mask(bits));
      return absl::OkStatus();
    case Op::kPopc:  // (PTX ISA: .b32 or .b64 a; d a .u32 count either way)
    case Op::kClz:
    case Op::kBrev: {
      if (!in.Has("b32") && !in.Has("b64"))
        return Fail(t, in, "popc, clz and brev take .b32 or .b64 (PTX ISA)");
      const uint64_t a = src(1) & Mask(bits);
      uint64_t r = 0;
      if (in.op == Op::kPopc) {
        r = static_cast<uint64_t>(__builtin_popcountll(a));
      } else if (in.op == Op::kClz) {  // clz of 0 is the width
        r = a == 0 ? bits : static_cast<uint64_t>(__builtin_clzll(a) - (64 - bits));
      } else {
        for (int i = 0; i < bits; ++i) r |= ((a >> i) & 1) << (bits - 1 - i);
      }
      Write(t, in.ops[0], r);
      return absl::OkStatus();
    }
    case Op::kShl:
    case Op::kShr: {
      const uint64_t n =
          Read(t, in.ops.at(2), 32);  // shift amounts past the width give 0 (or the sign)
      uint64_t r;
      if (in.op == Op::kShl)
        r = n >= static_cast<uint64_t>(bits) ? 0 : src(1) << n;
      else if (sgn)
        r = static_cast<uint64_t>(si(1) >> std::min<uint64_t>(n, bits - 1));
      else
        r = n >= static_cast<uint64_t>(bits) ? 0 : src(1) >> n;
      Write(t, in.ops[0], r & Mask(bits));
      return absl::OkStatus();
    }
    case Op::kBfe: {  // bits pos..pos+len-1 of a, sign-extended for signed types
      const uint64_t pos = Read(t, in.ops.at(2), 32) & 0xff, len = Read(t, in.ops.at(3), 32) & 0xff;
      uint64_t r = 0;
      if (len > 0) {
        const uint64_t field =
            pos >= static_cast<uint64_t>(bits) ? 0 : (src(1) >> pos) & Mask(static_cast<int>(len));
        r = field;
        if (sgn) {
          const int top = static_cast<int>(std::min<uint64_t>(pos + len, bits) - 1);
          const bool sign = pos + len > static_cast<uint64_t>(bits) ? (src(1) >> (bits - 1)) & 1
                                                                    : (src(1) >> top) & 1;
          if (sign) r |= ~Mask(static_cast<int>(len));
        }
      }
      Write(t, in.ops[0], r & Mask(bits));
      return absl::OkStatus();
    }
    case Op::kPrmt: {  // prmt.b32 d, a, b, c: byte i of d picked from {b, a} by nibble i of c
      if (in.mods.size() > 1)
        return Fail(t, in, "prmt's modes other than the default are not emulated yet");
      const uint64_t bytes = (Read(t, in.ops.at(2), 32) << 32) | Read(t, in.ops.at(1), 32);
      const uint64_t c = Read(t, in.ops.at(3), 32);
      uint64_t r = 0;
      for (int i = 0; i < 4; ++i) {
        const uint64_t sel = (c >> (4 * i)) & 0xf, byte = (bytes >> (8 * (sel & 7))) & 0xff;
        // The selector's top bit replicates the byte's sign bit instead.
        r |= (sel & 8 ? ((byte & 0x80) ? 0xffu : 0u) : byte) << (8 * i);
      }
      Write(t, in.ops[0], r);
      return absl::OkStatus();
    }
    case Op::kSelp:
      Write(t, in.ops[0], (Read(t, in.ops.at(3), 1) & 1) ? src(1) : src(2));
      return absl::OkStatus();
    case Op::kSetp: {
      bool r = false;
      const std::string& c = in.cmp;
      if (ptx::TyIsFloat(ty)) {
        const double a = is_f64 ? F64(src(1)) : f(1), b = is_f64 ? F64(src(2)) : f(2);
        const bool unordered = std::isnan(a) || std::isnan(b);
        if (c == "num")
          r = !unordered;
        else if (c == "nan")
          r = unordered;
        else {
          const bool u = c.size() == 3;  // equ, ltu, ...: true when unordered
          const std::string base = u ? c.substr(0, 2) : c;
          if (unordered)
            r = u;
          else if (base == "eq")
            r = a == b;
          else if (base == "ne")
            r = a != b;
          else if (base == "lt")
            r = a < b;
          else if (base == "le")
            r = a <= b;
          else if (base == "gt")
            r = a > b;
          else if (base == "ge")
            r = a >= b;
        }
      } else {
        const bool s = sgn && c != "lo" && c != "ls" && c != "hi" && c != "hs";
        const uint64_t a = src(1), b = src(2);
        const int64_t x = si(1), y = si(2);
        if (c == "eq")
          r = a == b;
        else if (c == "ne")
          r = a != b;
        else if (c == "lt")
          r = s ? x < y : a < b;
        else if (c == "le")
          r = s ? x <= y : a <= b;
        else if (c == "gt")
          r = s ? x > y : a > b;
        else if (c == "ge")
          r = s ? x >= y : a >= b;
        else if (c == "lo")
          r = a < b;
        else if (c == "ls")
          r = a <= b;
        else if (c == "hi")
          r = a > b;
        else if (c == "hs")
          r = a >= b;
        else
          return Fail(t, in, "unknown comparison");
      }
      Write(t, in.ops[0], r ? 1 : 0);
      return absl::OkStatus();
    }
    case Op::kEx2:
    case Op::kLg2:
    case Op::kRsqrt:
    case Op::kSqrt:
    case Op::kRcp:
    case Op::kTanh: {
      if (!is_f32) return Fail(t, in, "only the f32 forms are emulated");
      float a = in.ftz ? FlushDenormal(f(1)) : f(1), r = 0;
      switch (in.op) {
        case Op::kEx2:
          r = std::exp2(a);
          break;
        case Op::kLg2:
          r = std::log2(a);
          break;
        case Op::kRsqrt:
          r = 1.0f / std::sqrt(a);
          break;
        case Op::kSqrt:
          r = std::sqrt(a);
          break;
        // tanh.approx.f32: the PTX ISA bounds its relative error by 2^-11; the exact value lies
        // within that bound (+-inf give +-1, subnormals pass through, as documented).
        case Op::kTanh:
          r = std::tanh(a);
          break;
        default:
          r = 1.0f / a;
          break;
      }
      put_f(r);
      return absl::OkStatus();
    }
    case Op::kCvta: {
      const bool to = in.Has("to");
      uint64_t v = Read(t, in.ops.at(1), 64);
      if (in.space == Space::kShared) v = to ? v - kSharedWindow : v + kSharedWindow;
      if (in.space == Space::kParam) v = to ? v - kParamWindow : v + kParamWindow;
      Write(t, in.ops[0], v & Mask(bits ? bits : 64));
      return absl::OkStatus();
    }
    default:
      return Fail(t, in, "the emulator does not execute this instruction yet");
  }
}

// setmaxnreg.{inc,dec}.sync.aligned.u32 N: the warpgroup's threads now hold N registers each.
// The warpgroups start from an even split of the SM's 64K registers over the block, or over the
// .minnctapersm CTAs an SM must hold (what ptxas assumes). An .inc that would take the block past
// that share waits, as on the GPU, until a .dec gives registers back; if none does, the deadlock
// report says so.
absl::Status Cta::SetMaxNReg(Thread& t, const Instr& in) {
  const int group = t.linear / 128;
  const int n = static_cast<int>(Read(t, in.ops.at(0), 32));
  if (n < 24 || n > 256 || n % 8)
    return Fail(t, in, absl::StrCat("setmaxnreg takes 24..256 in steps of 8, not ", n));
  // The CTA launches with an even share of the register file per thread (in steps of 8), and
  // setmaxnreg moves registers within that: an inc takes only what decs of the same CTA gave
  // back, never the rest of the SM's 64K (a split that sums past the launch share hung on an
  // H200: docs/perf/2026-11-28-decode-split-kv.md, "The producer's registers").
  const int groups = (static_cast<int>(threads_.size()) + 127) / 128;
  const int even = LaunchRegs();
  for (int g = 0; g < groups; ++g) warpgroup_regs_.try_emplace(g, even);
  int64_t total = 0;
  for (const auto& [g, regs] : warpgroup_regs_) total += int64_t{g == group ? n : regs} * 128;
  if (in.Has("inc") && total > int64_t{even} * groups * 128) {
    SetState(t, Thread::State::kBarrier);
    t.barrier = kRegisterWait;
    return absl::OkStatus();  // the pc stays: it asks again when woken
  }
  warpgroup_regs_[group] = n;
  ++setmaxnreg_runs_[{group, &in}];
  if (in.Has("dec"))
    for (Thread& w : threads_)
      if (w.state == Thread::State::kBarrier && w.barrier == kRegisterWait)
        SetState(w, Thread::State::kRun);
  ++t.pc;
  return absl::OkStatus();
}

absl::Status Cta::CheckSetMaxNRegAtExit() const {
  for (const auto& [at, runs] : setmaxnreg_runs_) {
    const int threads = std::min(128, static_cast<int>(threads_.size()) - at.first * 128);
    if (runs % threads != 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s (%s): run by %d thread(s) of warpgroup %d in all, not whole times its %d: "
          "setmaxnreg is .sync.aligned, every thread of the warpgroup runs it together (is it in "
          "a branch some threads take?)",
          kernel_, Where(*at.second), at.second->text, runs, at.first, threads));
  }
  return absl::OkStatus();
}

// The ISA leaves a register undefined while an asynchronous op may still write it: a wgmma's
// accumulators until the wgmma.wait_group that covers it (other wgmmas may chain on them), a
// tcgen05.ld's destinations until tcgen05.wait::ld. A wgmma's A fragment from registers is read
// until that wait_group as well: an instruction that rewrites it first (a loop's next ldmatrix
// into the same registers) changes what the wgmma multiplies, on the GPU alone.
absl::Status Cta::CheckInFlightRegs(const Thread& t, const Instr& in) const {
  auto check = [&](int reg) -> absl::Status {
    const Instr* in_flight = t.in_flight_regs.Find(reg);
    if (!in_flight) return absl::OkStatus();
    const Instr& by = *in_flight;
    const std::string dsl = m_.DslLine(by);
    const bool wgmma = by.op == Op::kWgmma;
    const std::vector<int>& d = by.ops.at(0).regs;
    if (wgmma && std::find(d.begin(), d.end(), reg) == d.end())
      return Fail(
          t, in,
          absl::StrCat(
              "uses ", e_.reg_names.at(reg), " while the wgmma at PTX line ", by.line,
              dsl.empty() ? "" : " (" + dsl + ")",
              " may still read it: an A fragment's register used before its wgmma.wait_group"));
    return Fail(
        t, in,
        absl::StrCat("uses ", e_.reg_names.at(reg), " while the ", wgmma ? "wgmma" : "tcgen05.ld",
                     " at PTX line ", by.line, dsl.empty() ? "" : " (" + dsl + ")",
                     " may still write it: an accumulator read before its ",
                     wgmma ? "wgmma.wait_group" : "tcgen05.wait::ld"));
  };
  absl::Status status = check(in.guard);
  ptx::ForEachRegister(in, [&](int r) {
    if (status.ok()) status = check(r);
  });
  return status;
}

void Cta::NoteWgmmaRegisterAccess(Thread& t, const Instr& in) const {
  ptx::ForEachRegister(in, [&](int r) {
    if (r >= 0 && r < static_cast<int>(e_.wgmma_regs.size()) && e_.wgmma_regs[r])
      t.unfenced_wgmma_regs.Set(r, &in);
  });
}

absl::Status Cta::CheckWgmmaRegistersFenced(const Thread& t, const Instr& wgmma) const {
  if (t.unfenced_wgmma_regs.empty()) return absl::OkStatus();
  for (size_t i = 0; i < 2 && i < wgmma.ops.size(); ++i) {
    if (wgmma.ops[i].kind != Operand::Kind::kVector) continue;
    for (int r : wgmma.ops[i].regs) {
      const Instr* by = t.unfenced_wgmma_regs.Find(r);
      if (!by) continue;
      const std::string dsl = m_.DslLine(*by);
      // A mov at the wgmma's own line, or with no line, is the compiler's copy into the tied
      // register: the value was written after the fence (zeroed or rescaled there).
      const bool copy = by->op == Op::kMov && (dsl.empty() || dsl == m_.DslLine(wgmma));
      return Fail(
          t, wgmma,
          absl::StrCat("uses ", e_.reg_names.at(r), " as its ",
                       i == 0 ? "accumulator" : "A fragment", ", which PTX line ", by->line,
                       dsl.empty() ? "" : " (" + dsl + ")", " (", by->text,
                       ") accessed with no wgmma.fence since: the PTX ISA requires a "
                       "wgmma.fence between another instruction's access of a wgmma's registers "
                       "and the wgmma",
                       copy ? " (a mov the compiler made into the wgmma's register: the "
                              "accumulator was written after the fence, e.g. zeroed or rescaled "
                              "there; write it before WgmmaFence)"
                            : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status Cta::Convert(Thread& t, const Instr& in) {
  const Ty d = in.type, s = in.src_type;
  const bool fp8_src = s == Ty::kE4M3x2 || s == Ty::kE5M2x2,
             fp8_dst = d == Ty::kE4M3x2 || d == Ty::kE5M2x2;
  if (d == Ty::kF16x2 && fp8_src) {  // each byte to f16 (exact), the upper byte to the upper half
    const uint64_t v = Read(t, in.ops.at(1), 16);
    auto one = [&](uint8_t b) -> uint64_t {
      return F32ToF16(static_cast<float>(Fp8ToDouble(b, s == Ty::kE4M3x2)));
    };
    Write(t, in.ops[0], one(v >> 8 & 0xff) << 16 | one(v & 0xff));
    return absl::OkStatus();
  }
  if (fp8_dst) {  // cvt.rn.satfinite.e4m3x2.f32 d, a, b: a to the upper byte
    if (s != Ty::kF32 || !in.Has("satfinite"))
      return Fail(t, in, "only cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 is emulated");
    const float a = F32(Read(t, in.ops.at(1), 32)), b = F32(Read(t, in.ops.at(2), 32));
    const bool e4 = d == Ty::kE4M3x2;
    Write(t, in.ops[0], uint64_t{F32ToFp8(a, e4)} << 8 | F32ToFp8(b, e4));
    return absl::OkStatus();
  }
  if (d == Ty::kBF16x2 || d == Ty::kF16x2) {  // d = {cvt(a) in the upper half, cvt(b) in the lower}
    const float a = F32(Read(t, in.ops.at(1), 32)), b = F32(Read(t, in.ops.at(2), 32));
    auto one = [&](float v) -> uint64_t { return d == Ty::kBF16x2 ? F32ToBf16(v) : F32ToF16(v); };
    Write(t, in.ops[0], (one(a) << 16) | one(b));
    return absl::OkStatus();
  }
  const uint64_t v = Read(t, in.ops.at(1), ptx::TyBits(s));
  double x;  // the source's value
  if (s == Ty::kF32)
    x = F32(v);
  else if (s == Ty::kF64)
    x = F64(v);
  else if (s == Ty::kBF16)
    x = Bf16ToF32(static_cast<uint16_t>(v));
  else if (s == Ty::kF16)
    x = F16ToF32(static_cast<uint16_t>(v));
  else if (ptx::TyIsSigned(s))
    x = static_cast<double>(SignExtend(v, ptx::TyBits(s)));
  else
    x = static_cast<double>(v);
  const int db = ptx::TyBits(d);
  if (!ptx::TyIsFloat(s) && !ptx::TyIsFloat(d)) {  // integer widths: sign- or zero-extend, truncate
    const uint64_t r =
        ptx::TyIsSigned(s) ? static_cast<uint64_t>(SignExtend(v, ptx::TyBits(s))) : v;
    Write(t, in.ops[0], r & Mask(db));
    return absl::OkStatus();
  }
  if (ptx::TyIsFloat(d)) {
    // Float to float of one width with an integer rounding (cvt.rni.f32.f32, ...): the value
    // rounded to a whole number in the same type (PTX ISA, cvt); NaN and infinities pass.
    if (ptx::TyIsFloat(s) && in.rounding.size() == 3 && in.rounding.back() == 'i') {
      x = in.rounding == "rni"   ? std::nearbyint(x)
          : in.rounding == "rmi" ? std::floor(x)
          : in.rounding == "rpi" ? std::ceil(x)
                                 : std::trunc(x);
    }
    if (d == Ty::kF32) {
      float r = static_cast<float>(x);
      if (in.ftz) r = FlushDenormal(r);
      Write(t, in.ops[0], Bits(r));
    } else if (d == Ty::kF64) {
      Write(t, in.ops[0], Bits(x));
    } else if (d == Ty::kBF16) {
      Write(t, in.ops[0], F32ToBf16(static_cast<float>(x)));
    } else if (d == Ty::kF16) {
      Write(t, in.ops[0], F32ToF16(static_cast<float>(x)));
    } else {
      return Fail(t, in, "this conversion is not emulated yet");
    }
    return absl::OkStatus();
  }
  // Float to integer: the rounding modifier (rzi: toward zero, rni: nearest even, ...), saturated
  // to the destination's range; NaN gives 0.
  double r = x;
  if (in.rounding == "rni")
    r = std::nearbyint(x);
  else if (in.rounding == "rmi")
    r = std::floor(x);
  else if (in.rounding == "rpi")
    r = std::ceil(x);
  else
    r = std::trunc(x);
  if (std::isnan(r)) r = 0;
  if (ptx::TyIsSigned(d)) {
    const double lo = -std::ldexp(1.0, db - 1), hi = std::ldexp(1.0, db - 1) - 1;
    Write(t, in.ops[0],
          static_cast<uint64_t>(static_cast<int64_t>(std::clamp(r, lo, hi))) & Mask(db));
  } else {
    const double hi = std::ldexp(1.0, db) - 1;
    Write(t, in.ops[0], static_cast<uint64_t>(std::clamp(r, 0.0, hi)) & Mask(db));
  }
  return absl::OkStatus();
}

absl::Status Cta::LoadStore(Thread& t, const Instr& in) {
  const int elem = std::max(1, ptx::TyBits(in.type) / 8);
  const bool load = in.op == Op::kLd;
  if (load && in.Has("acquire")) AcquireLanes(t);  // (races inside a warp, races.h)
  const Operand& addr_op = load ? in.ops.at(1) : in.ops.at(0);
  const Operand& val = load ? in.ops.at(0) : in.ops.at(1);
  const uint64_t addr = Address(t, addr_op);
  absl::StatusOr<uint8_t*> p = Memory(t, in, in.space, addr, elem * in.vec);
  if (!p.ok()) return p.status();
  if (*p >= shared_.data() && *p < shared_.data() + shared_.size()) {
    const uint64_t off = *p - shared_.data(), n = static_cast<uint64_t>(elem) * in.vec;
    if (absl::Status s = CheckSharedAccess(t, in, *p, n, !load); !s.ok()) return s;
    if (load) NoteGenericRead(t, in, off, n);
    if (!load) {
      if (generic_writer_.empty()) generic_writer_.assign(shared_.size(), 0);
      std::fill(generic_writer_.begin() + off, generic_writer_.begin() + off + n, t.linear + 1);
      unfenced_[t.linear].push_back({off, n});
      NoteSharedWrite(off, n, in, t);
    }
  }
  std::vector<int> regs = val.kind == Operand::Kind::kVector ? val.regs : std::vector<int>{val.reg};
  const bool shared = *p >= shared_.data() && *p < shared_.data() + shared_.size();
  const bool local_or_param =
      in.space == Space::kParam || in.space == Space::kLocal || in.space == Space::kConst;
  const bool in_shared = shared || (!local_or_param && SharedOwner(*p));  // a peer's, through mapa
  const Origin address_taint = OperandTaint(t, addr_op);
  if (in_shared)
    if (absl::Status s =
            CheckRace(t, in, *p, static_cast<uint64_t>(elem) * in.vec,
                      load ? SharedRaceShadow::Kind::kRead : SharedRaceShadow::Kind::kWrite);
        !s.ok())
      return s;
  if (!load && in_shared && !shared)  // a peer's: its live mbarriers (its copies in flight are
                                      // not looked at)
    if (absl::Status s = CheckStoreOverMbarrier(t, in, *p, static_cast<uint64_t>(elem) * in.vec);
        !s.ok())
      return s;
  if (!load && !in_shared && !local_or_param)
    NoteGlobalWrite(addr, static_cast<uint64_t>(elem) * in.vec, in, t);
  if (!in_shared && !local_or_param) {
    if (StrongAcrossCtas(in)) {
      if (absl::Status s = OrderGlobal(t, in, addr, load, !load); !s.ok()) return s;
    } else if (absl::Status s = CheckGlobalRace(t, in, addr, static_cast<uint64_t>(elem) * in.vec,
                                                !load, load && in.Has("nc"));
               !s.ok()) {
      return s;
    }
  }
  if (load && !local_or_param)
    if (absl::Status s = NoteSpinRead(t, in, shared ? *p - shared_.data() : addr, *p,
                                      static_cast<uint64_t>(elem) * in.vec, in_shared);
        !s.ok())
      return s;
  for (int i = 0; i < in.vec && i < static_cast<int>(regs.size()); ++i) {
    uint8_t* at = *p + i * elem;
    if (load) {
      uint64_t v = 0;
      std::memcpy(&v, at, elem);
      if (ptx::TyIsSigned(in.type)) v = static_cast<uint64_t>(SignExtend(v, elem * 8));
      if (regs[i] >= 0) t.r[regs[i]] = v;
      const Origin o = in_shared ? SharedTaint(at, elem, in) : nullptr;
      SetRegTaint(t, regs[i], o ? o : address_taint);
    } else {
      uint64_t v = val.kind == Operand::Kind::kVector ? t.r[regs[i]] : Read(t, val, elem * 8);
      std::memcpy(at, &v, elem);
      const Origin o =
          val.kind == Operand::Kind::kVector ? RegTaint(t, regs[i]) : OperandTaint(t, val);
      if (in_shared)
        SetSharedTaint(at, elem, o);
      else if (!local_or_param)
        if (absl::Status s = CheckReachesGlobal(&t, in, o); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Cta::CheckSharedAccess(const Thread& t, const Instr& in, const uint8_t* at, uint64_t n,
                                    bool writes) {
  if (at >= shared_.data() && at < shared_.data() + shared_.size()) {
    const uint64_t off = at - shared_.data();
    if (absl::Status s = CheckPendingOverlap(&t, in, off, n, writes ? "writes" : "reads"); !s.ok())
      return s;
    if (!writes) return CheckCpAsyncPending(t, in, off, n);
    if (absl::Status s = CheckCpAsyncWritePending(t, in, off, n); !s.ok()) return s;
    if (absl::Status s = CheckTmaStoreReading(t, in, off, n); !s.ok()) return s;
    if (const WgmmaOp* w = WgmmaStillReading(off, off + n)) {
      const std::string dsl = m_.DslLine(*w->in);
      return Fail(t, in,
                  absl::StrFormat("writes shared bytes %d..%d, which the wgmma at PTX line %d%s "
                                  "still reads (until its wgmma.wait_group)",
                                  off, off + n - 1, w->line, dsl.empty() ? "" : " (" + dsl + ")"));
    }
  }
  return writes ? CheckStoreOverMbarrier(t, in, at, n) : absl::OkStatus();
}

// An mbarrier's bytes are changed by mbarrier ops alone until mbarrier.inval ends it: a plain
// store over a live one, this CTA's or a cluster peer's (st.shared::cluster), is an error.
absl::Status Cta::CheckStoreOverMbarrier(const Thread& t, const Instr& in, const uint8_t* at,
                                         uint64_t n) {
  const Cta* owner = SharedOwner(at);
  if (!owner) return absl::OkStatus();
  const uint64_t off = at - owner->shared_.data();
  const std::optional<uint64_t> b = owner->LiveMbarrierIn(off, n);
  if (!b) return absl::OkStatus();
  return Fail(
      t, in,
      absl::StrFormat("a plain store to shared bytes %d..%d%s, which hold the live "
                      "mbarrier at shared offset %d: reusing its memory needs "
                      "mbarrier.inval first (PTX ISA, mbarrier.inval)",
                      off, off + n - 1,
                      owner == this ? "" : absl::StrCat(" of cluster CTA ", owner->rank_), *b));
}

absl::Status Cta::Atomic(Thread& t, const Instr& in) {
  const bool result = in.op == Op::kAtom;
  if (in.Has("acquire") || in.Has("acq_rel")) AcquireLanes(t);  // (races inside a warp, races.h)
  const int base = result ? 1 : 0;
  const int bits = ptx::TyBits(in.type);
  absl::StatusOr<uint8_t*> p = Memory(t, in, in.space, Address(t, in.ops.at(base)), bits / 8);
  if (!p.ok()) return p.status();
  if (absl::Status s = CheckRace(t, in, *p, bits / 8, SharedRaceShadow::Kind::kAtomic); !s.ok())
    return s;  // (nothing where *p is global: CheckRace looks at shared memory only)
  if (SharedOwner(*p)) {
    if (absl::Status s = CheckSharedAccess(t, in, *p, bits / 8, /*writes=*/true); !s.ok()) return s;
  } else {  // global: ordered among clusters (a .cta-scoped one is not)
    const uint64_t at = Address(t, in.ops.at(base));
    if (StrongAcrossCtas(in)) {
      if (absl::Status s = OrderGlobal(t, in, at, result, true); !s.ok()) return s;
    } else {
      if (absl::Status s = CheckGlobalRace(t, in, at, bits / 8, false); !s.ok()) return s;
      if (absl::Status s = CheckGlobalRace(t, in, at, bits / 8, true); !s.ok()) return s;
    }
  }
  uint64_t old = 0;
  std::memcpy(&old, *p, bits / 8);
  const uint64_t b = Read(t, in.ops.at(base + 1), bits);
  uint64_t r = old;
  const std::string& op = in.cmp;
  if (in.type == Ty::kF32) {
    if (op != "add") return Fail(t, in, "only atom.add on f32 is emulated");
    r = Bits(F32(old) + F32(b));
  } else {
    const bool s = ptx::TyIsSigned(in.type);
    const int64_t so = SignExtend(old, bits), sb = SignExtend(b, bits);
    if (op == "add")
      r = old + b;
    else if (op == "min")
      r = s ? static_cast<uint64_t>(std::min(so, sb)) : std::min(old, b);
    else if (op == "max")
      r = s ? static_cast<uint64_t>(std::max(so, sb)) : std::max(old, b);
    else if (op == "exch")
      r = b;
    else if (op == "and")
      r = old & b;
    else if (op == "or")
      r = old | b;
    else if (op == "xor")
      r = old ^ b;
    else if (op == "cas")
      r = old == b ? Read(t, in.ops.at(base + 2), bits) : old;
    else
      return Fail(t, in, "this atomic operation is not emulated yet");
  }
  r &= Mask(bits);
  std::memcpy(*p, &r, bits / 8);
  if (!SharedOwner(*p) && (r != old || op != "cas"))  // (a failed cas wrote nothing)
    NoteGlobalWrite(Address(t, in.ops.at(base)), bits / 8, in, t);
  if (result) Write(t, in.ops[0], old);
  if (result && r == old)  // a read that changed nothing (a failed cas, an add of 0)
    if (absl::Status s =
            NoteSpinRead(t, in, Address(t, in.ops.at(base)), reinterpret_cast<const uint8_t*>(&old),
                         bits / 8, SharedOwner(*p) != nullptr);
        !s.ok())
      return s;
  // The old value's origin, and the new one's: the old value's or the operands'.
  Origin was = SharedOwner(*p) ? SharedTaint(*p, bits / 8, in) : nullptr,
         operands = SourceTaint(t, in);
  if (result) SetRegTaint(t, in.ops[0].reg, was);
  if (SharedOwner(*p))
    SetSharedTaint(*p, bits / 8, was ? was : operands);
  else if (absl::Status s = CheckReachesGlobal(&t, in, operands); !s.ok())
    return s;
  return absl::OkStatus();
}

bool Cta::StrongAcrossCtas(const Instr& in) {
  if (in.Has("cta") || in.Has("cluster")) return false;      // strong within a cluster at most
  if (in.op == Op::kAtom || in.op == Op::kRed) return true;  // (no scope: .gpu)
  return in.Has("volatile") || ((in.Has("relaxed") || in.Has("acquire") || in.Has("release")) &&
                                (in.Has("gpu") || in.Has("sys")));
}

absl::Status Cta::OrderGlobal(const Thread& t, const Instr& in, uint64_t address, bool reads,
                              bool writes) {
  if (!global_races_) return absl::OkStatus();
  const bool acq_rel = in.Has("acq_rel");
  std::optional<GlobalRaces::Conflict> c =
      global_races_->Strong(dev_.AllocationOf(address), address & ~uint64_t{3}, reads, writes,
                            acq_rel || in.Has("release"), acq_rel || in.Has("acquire"), &in, Now());
  return c ? Fail(t, in, GlobalRaceText(*c, writes)) : absl::OkStatus();
}

std::string Cta::GlobalRaceText(const GlobalRaces::Conflict& c, bool write) const {
  using Kind = GlobalRaces::Conflict::Kind;
  const std::string other =
      absl::StrCat("block (", c.block.x, ",", c.block.y, ",", c.block.z, ")'s cluster",
                   c.in ? absl::StrCat(" at ", Where(*c.in)) : "");
  if (c.kind == Kind::kNonCoherent)
    return absl::StrFormat(
        "%s global word 0x%x, which %s %s in this launch: ld.global.nc is only for data no one "
        "writes while the kernel runs (PTX ISA, ld); load it plainly",
        write ? "writes the" : "loads through the non-coherent path (.nc) the", c.address, other,
        write ? "read through the non-coherent path (.nc)" : "wrote");
  const bool strong_here = c.kind == Kind::kStrongAfterWrite || c.kind == Kind::kStrongAfterRead,
             strong_there = c.kind == Kind::kWriteAfterStrong || c.kind == Kind::kReadAfterStrong;
  return absl::StrFormat(
      "a race on global memory between clusters: this %s word 0x%x, which %s %s with nothing "
      "ordering the two (on a GPU the launch's blocks run at the same time; the PTX memory model "
      "orders them only through a release, a gpu-scope fence before an atomic or a st.release, "
      "that the other side acquires, an atomic or ld.acquire before a gpu-scope fence)%s",
      strong_here ? (write ? "atomic or strong store of the" : "strong read of the")
      : write     ? "writes"
                  : "reads",
      c.address, other,
      c.kind == Kind::kWriteAfterRead    ? "read"
      : c.kind == Kind::kStrongAfterRead ? "read with a plain load"
      : strong_there                     ? "wrote with an atomic or a strong store"
      : strong_here                      ? "wrote with a plain store"
                                         : "wrote",
      strong_here || strong_there
          ? "; an atomic and a plain access of one word race too: give the word its first "
            "value in an earlier launch (or with an atomic), and read it with an atomic or "
            "ld.acquire, or after the others are acquired"
          : "");
}

absl::Status Cta::CheckGlobalRace(const Thread& t, const Instr& in, uint64_t address,
                                  uint64_t bytes, bool write, bool non_coherent) {
  if (!global_races_) return absl::OkStatus();
  std::optional<GlobalRaces::Conflict> c =
      write ? global_races_->Write(dev_.AllocationOf(address), address, bytes, &in, Now())
            : global_races_->Read(dev_.AllocationOf(address), address, bytes, &in, Now(),
                                  non_coherent);
  return c ? Fail(t, in, GlobalRaceText(*c, write)) : absl::OkStatus();
}

// ---- warp collectives: a lane waits until every lane of the member mask is at one

absl::Status Cta::Collective(Thread& t, const Instr& in) {
  SetState(t, Thread::State::kWarp);
  return TryReleaseWarp(t.linear / 32);
}

// A .sync.aligned warp instruction (ldmatrix, stmatrix, mma.sync, tcgen05's warp ops) with every
// lane here: each lane's result, written back, and the warp released.
absl::Status Cta::ReleaseAlignedWarp(const std::vector<Thread*>& lanes, const Instr& in) {
  const int n = static_cast<int>(lanes.size());
  absl::Status s;
  std::vector<std::vector<uint64_t>> out = in.op == Op::kMma        ? Mma(lanes, in, &s)
                                           : in.op == Op::kTcgen05  ? TcgenWarp(lanes, in, &s)
                                           : in.op == Op::kStMatrix ? StMatrix(lanes, in, &s)
                                                                    : LdMatrix(lanes, in, &s);
  if (!s.ok()) return s;
  // ldmatrix: the rows it read; mma.sync: every lane's fragments (a warp-wide origin).
  Origin taint = warp_taint_;
  warp_taint_ = nullptr;
  if (in.op == Op::kMma)
    for (int i = 0; i < n && !taint; ++i) taint = SourceTaint(*lanes[i], e_.code[lanes[i]->pc]);
  // tcgen05.ld: each register its own tensor memory cell's origin.
  const std::vector<std::vector<Origin>> cells = std::exchange(tcgen_ld_taint_, {});
  for (int i = 0; i < n; ++i) {
    Thread& l = *lanes[i];
    static const Operand kNone;  // (tcgen05.relinquish_alloc_permit has no operands)
    const Operand& d = e_.code[l.pc].ops.empty() ? kNone : e_.code[l.pc].ops[0];
    for (size_t k = 0; k < d.regs.size() && k < out[i].size(); ++k) {
      l.r[d.regs[k]] = out[i][k];
      SetRegTaint(l, d.regs[k],
                  i < static_cast<int>(cells.size()) && k < cells[i].size() ? cells[i][k] : taint);
      if (in.op == Op::kTcgen05 && d.regs[k] >= 0)
        l.in_flight_regs.Set(d.regs[k], &in);  // until wait::ld
    }
    SetState(l, Thread::State::kRun);
    ++l.pc;
  }
  return absl::OkStatus();
}

absl::Status Cta::TryReleaseWarp(int warp) {
  // Called as each lane arrives: the lanes' list is built only once all are here.
  const int first = warp * 32, n = std::min<int>(32, static_cast<int>(threads_.size()) - first);
  Thread* some = nullptr;
  for (int i = 0; i < n; ++i)
    if (threads_[first + i].state == Thread::State::kWarp) some = &threads_[first + i];
  if (!some) return absl::OkStatus();
  const Instr& in = e_.code[some->pc];
  const bool whole_warp = RunsOnTheWholeWarp(in.op);
  uint32_t members = whole_warp ? static_cast<uint32_t>(Mask(n))
                                : static_cast<uint32_t>(Read(*some, in.ops.back(), 32));
  if (in.op == Op::kBar)
    members &= static_cast<uint32_t>(Mask(n));  // bar.warp.sync -1 in a block's last, partial warp
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    const Thread& lane = threads_[first + i];
    if (lane.state == Thread::State::kDone)
      return Fail(*some, in, absl::StrCat("lane ", i, " of the member mask has exited"));
    if (lane.state != Thread::State::kWarp) return absl::OkStatus();  // not all here yet
    const Instr& other = e_.code[lane.pc];
    // .sync.aligned: every lane runs the same instruction (PTX ISA); the others (shfl.sync,
    // vote.sync, ...) may meet from different places with the same kind.
    if (other.op != in.op || (whole_warp && lane.pc != some->pc))
      return Fail(*some, in,
                  absl::StrCat("lane ", i, " waits at a different warp instruction (PTX line ",
                               other.line, ")",
                               whole_warp ? ": a .sync.aligned instruction is run by every lane "
                                            "of the warp together, at the same place"
                                          : ""));
  }
  for (int i = n; i < 32; ++i)
    if (members >> i & 1)
      return Fail(
          *some, in,
          absl::StrCat("the member mask names lane ", i, ", which this block does not have"));
  // Everyone is here: compute each member lane's result from the values at this moment.
  std::vector<Thread*> lanes;
  for (int i = 0; i < n; ++i) lanes.push_back(&threads_[first + i]);
  if (whole_warp) return ReleaseAlignedWarp(lanes, in);
  std::vector<uint64_t> results(n, 0);
  std::vector<Origin> taints(n,
                             nullptr);  // a shuffle's: its source lane's; a reduction's: any lane's
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    Thread& l = *lanes[i];
    const Instr& li = e_.code[l.pc];
    if (li.op == Op::kElect) {  // the lowest lane of the member mask is elected
      const int elected = std::countr_zero(members);
      if (li.ops.at(0).kind == Operand::Kind::kVector) {
        if (li.ops[0].regs[0] >= 0) l.r[li.ops[0].regs[0]] = elected;
        l.r[li.ops[0].regs[1]] = i == elected;
      } else {
        Write(l, li.ops[0], i == elected);
      }
      continue;
    } else if (li.op == Op::kShfl) {
      const uint32_t b = static_cast<uint32_t>(Read(l, li.ops.at(2), 32)) & 31;
      const uint32_t c = static_cast<uint32_t>(Read(l, li.ops.at(3), 32));
      const uint32_t segmask = (c >> 8) & 31, cval = c & 31;
      const int lane = i;
      const int max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask;
      int j = lane;
      bool pval;
      if (li.cmp == "up")
        j = lane - static_cast<int>(b), pval = j >= max_lane;
      else if (li.cmp == "down")
        j = lane + static_cast<int>(b), pval = j <= max_lane;
      else if (li.cmp == "bfly")
        j = lane ^ static_cast<int>(b), pval = j <= max_lane;
      else
        j = min_lane | (static_cast<int>(b) & ~static_cast<int>(segmask)), pval = j <= max_lane;
      if (!pval) j = lane;
      if (j < 0 || j >= n || !(members >> j & 1))
        return Fail(l, li,
                    absl::StrCat("shfl reads lane ", j, ", which is not in the member mask"));
      results[i] = Read(*lanes[j], e_.code[lanes[j]->pc].ops.at(1), 32);
      taints[i] = OperandTaint(*lanes[j], e_.code[lanes[j]->pc].ops.at(1));
    } else if (li.op == Op::kRedux || li.op == Op::kVote) {
      uint64_t acc = 0;
      bool first_value = true;
      for (int k = 0; k < n; ++k) {
        if (!(members >> k & 1)) continue;
        const uint64_t v =
            Read(*lanes[k], e_.code[lanes[k]->pc].ops.at(1), li.op == Op::kVote ? 1 : 32);
        if (!taints[i]) taints[i] = OperandTaint(*lanes[k], e_.code[lanes[k]->pc].ops.at(1));
        if (li.op == Op::kVote) {
          acc |= (v & 1) << k;
          continue;
        }
        const bool s = ptx::TyIsSigned(li.type);
        const int64_t sv = SignExtend(v, 32), sa = SignExtend(acc, 32);
        if (first_value)
          acc = v;
        else if (li.cmp == "add")
          acc = (acc + v) & 0xffffffff;
        else if (li.cmp == "min")
          acc = s ? static_cast<uint32_t>(std::min(sa, sv)) : std::min(acc, v);
        else if (li.cmp == "max")
          acc = s ? static_cast<uint32_t>(std::max(sa, sv)) : std::max(acc, v);
        else if (li.cmp == "and")
          acc &= v;
        else if (li.cmp == "or")
          acc |= v;
        else if (li.cmp == "xor")
          acc ^= v;
        first_value = false;
      }
      if (li.op == Op::kVote && li.cmp != "ballot") {
        const uint64_t all = acc == (members & Mask(n)), any = acc != 0;
        acc = li.cmp == "all" ? all : li.cmp == "any" ? any : (all || acc == 0);
      }
      results[i] = acc;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!(members >> i & 1)) continue;
    Thread& l = *lanes[i];
    if (e_.code[l.pc].op != Op::kElect &&
        e_.code[l.pc].op != Op::kBar) {  // bar.warp.sync: no result
      Write(l, e_.code[l.pc].ops.at(0), results[i]);
      TaintDestinations(l, e_.code[l.pc], taints[i]);
    }
    SetState(l, Thread::State::kRun);
    ++l.pc;
  }
  if (in.op == Op::kBar) SyncLanes(warp, members);  // bar.warp.sync orders its lanes' accesses
  return absl::OkStatus();
}

// ---- barriers: bar.sync / barrier.sync id[, count]; bar.arrive id, count

absl::Status Cta::Arrive(Thread& t, const Instr& in, bool wait) {
  const int id = in.ops.empty() ? 0 : static_cast<int>(Read(t, in.ops[0], 32));
  if (id < 0 || id > 15) return Fail(t, in, absl::StrCat("barrier id ", id, " is outside 0..15"));
  const bool counted = in.ops.size() > 1;
  int expected = static_cast<int>(threads_.size());
  if (counted)
    expected = static_cast<int>(Read(t, in.ops[1], 32));
  else
    expected -=
        static_cast<int>(std::count_if(threads_.begin(), threads_.end(), [](const Thread& x) {
          return x.state == Thread::State::kDone;
        }));
  if (expected % 32 && counted)
    return Fail(t, in, absl::StrCat("a thread count of ", expected, " is not whole warps"));
  BarrierState& b = barriers_[id];
  if (b.arrival.empty()) {
    b.expected = expected;
    b.arrival.assign(threads_.size(), nullptr);
    b.warp_counted.assign((threads_.size() + 31) / 32, false);
  } else if (counted && b.expected != expected) {
    return Fail(t, in,
                absl::StrCat("barrier ", id, " expects ", expected, " threads here and ",
                             b.expected, " at the threads already waiting"));
  }
  // PTX ISA (bar, barrier): a warp must not run more barrier instructions on a barrier than
  // meant before it resets (a bar.arrive, then another arrive or a sync on the same id): its
  // second arrival counts for threads that have not come, and the barrier ends early.
  if (const Instr* first = b.arrival[t.linear])
    return Fail(
        t, in,
        absl::StrCat("arrives at barrier ", id, " a second time before it completed (", b.arrived,
                     " of ", b.expected, " arrivals; its first arrival: ", Where(*first),
                     "): a warp runs one barrier instruction on an id "
                     "until the barrier resets"));
  const int warp = t.linear / 32;
  // bar.* and barrier.*.aligned (the parser marks bar.* so): the lanes of a warp run the same
  // instruction, and the warp arrives as one; barrier.sync without .aligned counts threads one
  // by one (PTX ISA, barrier).
  const bool aligned = in.Has("aligned");
  if (aligned)  // its warp-mates here arrived through this instruction
    for (int j = warp * 32; j < std::min<int>(threads_.size(), warp * 32 + 32); ++j)
      if (b.arrival[j] && b.arrival[j] != &in)
        return Fail(
            t, in,
            absl::StrCat("lane ", t.linear % 32, " of warp ", warp, " arrives at barrier ", id,
                         " here while lane ", j % 32, " arrived at ", Where(*b.arrival[j]),
                         ": bar.sync and bar.arrive are .aligned (PTX ISA, barrier), every "
                         "thread of a warp runs the same barrier instruction (one inside a "
                         "branch the lanes take apart is undefined)"));
  b.arrival[t.linear] = &in;
  // (an aligned arrival releases the warp's writes once the warp is counted: CountWarpIfWhole)
  if (!aligned) JoinClock(b.clock, Released(warp));
  ++t.pc;
  if (wait) {
    SetState(t, Thread::State::kBarrier);
    t.barrier = id;
    b.waiting.push_back(t.linear);
  }
  if (aligned)
    CountWarpIfWhole(b, warp);
  else
    ++b.arrived;
  return CompleteIfDue(id, b, &t, &in);
}

// An aligned arrival counts once the warp's threads that have not exited are all there (the warp
// arrives as one): for a counted barrier its warp size (PTX ISA, bar: "incremented by the warp
// size, not the number of active threads"), for a whole-block one its threads alive.
void Cta::CountWarpIfWhole(BarrierState& b, int warp) {
  if (b.warp_counted[warp]) return;
  const Instr* at = nullptr;
  int live = 0;
  for (int j = warp * 32; j < std::min<int>(threads_.size(), warp * 32 + 32); ++j) {
    if (b.arrival[j]) at = b.arrival[j];
    if (threads_[j].state == Thread::State::kDone && !b.arrival[j]) continue;
    if (!b.arrival[j]) return;  // a lane still to come
    ++live;
  }
  if (!at || !at->Has("aligned")) return;
  b.warp_counted[warp] = true;
  JoinClock(b.clock, Released(warp));
  b.arrived += at->ops.size() > 1 ? 32 : live;
}

// Releases the barrier's waiting threads once its arrivals reach its count (`t`, `in`: the
// arrival that may complete it, for messages; null when threads exited).
absl::Status Cta::CompleteIfDue(int id, BarrierState& b, Thread* t, const Instr* in) {
  if (b.arrived > b.expected && t)
    return Fail(*t, *in,
                absl::StrCat("barrier ", id, ": ", b.arrived, " arrivals where ", b.expected,
                             " are expected"));
  if (b.arrived < b.expected) return absl::OkStatus();
  // Two uses of one barrier id meeting: a phase of a counted barrier that its threads complete
  // from two bar.sync instructions, none arriving without waiting, while more threads than its
  // count have waited at the id so far: two groups of threads that each meant a barrier of their
  // own (each waited for some of the other's warps, not its own). Producer and consumer meet
  // through bar.arrive and bar.sync; one barrier of all its threads may be written in two arms of
  // a branch (its count is then theirs); a block-wide barrier may be reached from several places.
  if (t) {
    const Instr* one = nullptr;
    const Instr* other = nullptr;
    bool synced_only = true;
    std::vector<bool>& waiters = barrier_waiters_[id];
    waiters.resize(b.arrival.size(), false);
    for (int j = 0; j < static_cast<int>(b.arrival.size()); ++j) {
      const Instr* at = b.arrival[j];
      if (!at || (at->Has("aligned") && !b.warp_counted[j / 32])) continue;
      if (at->ops.size() < 2 || at->Has("arrive")) {
        synced_only = false;
        continue;
      }
      waiters[j] = true;
      if (!one)
        one = at;
      else if (at != one && !other)
        other = at;
    }
    if (synced_only && one && other &&
        std::count(waiters.begin(), waiters.end(), true) > b.expected)
      return Fail(*t, *in,
                  absl::StrCat("barrier ", id, " (", b.expected,
                               " threads) completes with threads waiting at two barrier "
                               "instructions, ",
                               Where(*one), " and ", Where(*other), ", and ",
                               std::count(waiters.begin(), waiters.end(), true),
                               " threads have waited at it: two uses of one barrier id meet "
                               "(each group then waits for the other's warps, not its own: give "
                               "each its own id)"));
  }
  // A warp with lanes still to come has not arrived (an aligned arrival counts once the warp is
  // whole): the lanes of it that are here take part in the next phase, not this one.
  BarrierState next;
  auto carried = [&](int j) {
    return b.arrival[j] && b.arrival[j]->Has("aligned") && !b.warp_counted[j / 32];
  };
  for (int j = 0; j < static_cast<int>(b.arrival.size()); ++j)
    if (carried(j)) {
      if (next.arrival.empty()) {
        next.expected = b.expected;
        next.arrival.assign(b.arrival.size(), nullptr);
        next.warp_counted.assign(b.warp_counted.size(), false);
      }
      next.arrival[j] = b.arrival[j];  // (its release joins when its warp is counted)
    }
  for (int w : b.waiting) {
    if (carried(w)) {
      next.waiting.push_back(w);
      continue;
    }
    SetState(threads_[w], Thread::State::kRun), threads_[w].barrier = -1;
    const Instr& at = e_.code[threads_[w].pc - 1];
    Synced(threads_[w], at);
    if (at.op == Op::kBar && at.ops.size() < 2) threads_[w].block_barrier = &at;
    Acquire(threads_[w], b.clock);
  }
  b = std::move(next);
  return absl::OkStatus();
}

// A full-block barrier (no thread count) counts the threads alive when it began; when threads
// exit while others wait, the rest may now be complete, and so may a warp whose other lanes exited
// after some of it arrived.
absl::Status Cta::ReleaseBarriersOfExitedThreads() {
  const int live =
      static_cast<int>(std::count_if(threads_.begin(), threads_.end(), [](const Thread& x) {
        return x.state != Thread::State::kDone;
      }));
  for (auto& [id, b] : barriers_) {
    if (b.arrival.empty() || b.waiting.empty()) continue;
    for (int w = 0; w < static_cast<int>(b.warp_counted.size()); ++w) CountWarpIfWhole(b, w);
    const Instr& in = e_.code[threads_[b.waiting.front()].pc - 1];
    if (in.ops.size() <= 1 && b.arrived >= live) b.expected = b.arrived;
    if (absl::Status s = CompleteIfDue(id, b, nullptr, nullptr); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Cta::Deadlock() const {
  std::vector<std::string> who;
  for (const auto& [id, b] : barriers_)
    if (!b.waiting.empty()) {
      const Instr& at = e_.code[threads_[b.waiting.front()].pc - 1];
      const bool counted = at.ops.size() > 1;
      who.push_back(absl::StrCat(
          b.waiting.size(), b.waiting.size() == 1 ? " thread waits" : " threads wait",
          " at barrier ", id, " (", b.arrived, " of ", b.expected,
          counted ? " arrivals of its thread count"
                  : " arrivals: the block-wide barrier counts the threads alive when its phase "
                    "began",
          "; PTX line ", at.line, m_.DslLine(at).empty() ? "" : ", ", m_.DslLine(at),
          counted ? ")"
                  : "): the others wait elsewhere (listed here), so a SyncThreads that only "
                    "some threads reach (inside an If or a warp role) never completes; place it "
                    "where every thread passes"));
    }
  std::map<uint64_t, std::pair<int, const Instr*>> on_mbarrier;
  for (const Thread& t : threads_)
    if (t.state == Thread::State::kMbarrier)
      on_mbarrier[t.mbarrier] = {on_mbarrier[t.mbarrier].first + 1, &e_.code[t.pc]};
  for (const auto& [off, waiters] : on_mbarrier) {
    const MbarrierState& b = mbarriers_.at(off);
    const std::string dsl = m_.DslLine(*waiters.second);
    // With every arrival in, the transaction count says what is wrong: bytes announced by
    // expect_tx that no copy delivers (overflow), or more bytes than announced (underflow).
    std::string why;
    if (b.pending == 0 && b.tx > 0)
      why = absl::StrFormat(": tx-count overflow: %d bytes announced by expect_tx never arrived",
                            b.tx);
    else if (b.pending == 0 && b.tx < 0)
      why = absl::StrFormat(
          ": tx-count underflow: the copies delivered %d bytes more than expect_tx announced",
          -b.tx);
    else if (b.pending > 0)
      why = absl::StrFormat(": arrivals missing (%d)", b.pending);
    // No arrival at all in the phase waited for: the classic wrong parity, a first wait (a
    // producer's for a free stage) on a phase whose arrivals come only after it.
    // On a barrier that has completed phases before, the arrivers stopped short (a producer's
    // loop of fewer rounds than its consumers', or arrivals left out): the other parity is no fix.
    if (b.pending == b.expected && b.tx == 0 && b.completed == 0)
      why += absl::StrFormat(
          "; no thread has arrived in this phase yet: its arrivers wait elsewhere (listed here) "
          "or never arrive; or, if its arrivals come only after this wait (a producer's first "
          "wait for a free stage, not a consumer's for a filled one), wait for the phase before "
          "it instead (parity %d), which counts as complete on a fresh mbarrier",
          1 - b.phase);
    else if (b.pending == b.expected && b.tx == 0)
      why += absl::StrFormat(
          "; no thread has arrived in this phase yet, after %d phases completed: the threads "
          "that arrive on it wait elsewhere (listed here), or stopped before this wait's round "
          "(a loop of fewer rounds, or an arrival left out of a branch)",
          b.completed);
    const bool one = waiters.first == 1;
    who.push_back(absl::StrFormat(
        "%d thread%s on the mbarrier at shared offset %d for its phase of parity %d "
        "(%d of %d arrivals pending, transaction count %d; PTX line %d%s)%s",
        waiters.first, one ? " waits" : "s wait", off, b.phase, b.pending, b.expected, b.tx,
        waiters.second->line, dsl.empty() ? "" : ", " + dsl, why));
  }
  int register_waiters = 0;
  for (const Thread& t : threads_)
    register_waiters += t.state == Thread::State::kBarrier && t.barrier == kRegisterWait;
  if (register_waiters)
    who.push_back(absl::StrFormat(
        "%d threads wait at setmaxnreg.inc for registers no warpgroup gives back (the "
        "warpgroups hold %s registers per thread, of the %d a thread the CTA was launched with)",
        register_waiters, absl::StrJoin(warpgroup_regs_, ", ", absl::PairFormatter(":")),
        LaunchRegs()));
  int cluster_waiters = 0;
  for (const Thread& t : threads_)
    cluster_waiters += t.state == Thread::State::kBarrier && t.barrier == kClusterBarrier;
  if (cluster_waiters && cluster_)
    who.push_back(absl::StrFormat(
        "%d threads at barrier.cluster.wait (%d threads of the cluster have arrived)",
        cluster_waiters, cluster_->arrived));
  int warp_waiters = 0;
  const Instr* collective = nullptr;
  for (const Thread& t : threads_)
    if (t.state == Thread::State::kWarp) ++warp_waiters, collective = &e_.code[t.pc];
  if (warp_waiters) {
    const std::string dsl = m_.DslLine(*collective);
    const bool aligned = RunsOnTheWholeWarp(collective->op);
    who.push_back(absl::StrCat(
        warp_waiters, warp_waiters == 1 ? " thread waits" : " threads wait",
        " at a warp collective (", collective->text, ") whose lanes never all arrive (PTX line ",
        collective->line, dsl.empty() ? "" : ", " + dsl,
        aligned ? "): a .sync.aligned instruction runs on every lane of the warp, not under a "
                  "condition some lanes fail"
                : "): it waits for every lane its member mask names, so it runs under no "
                  "condition some of those lanes fail (or its mask names only the lanes that "
                  "take the branch)"));
  }
  return absl::FailedPreconditionError(
      absl::StrFormat("%s: deadlock in block (%d,%d,%d): every live thread waits: %s", kernel_,
                      ctaid_.x, ctaid_.y, ctaid_.z, absl::StrJoin(who, "; ")));
}

// "PTX line N (file:line); the accumulator's last MMA: PTX line M (file:line)".
const std::string& Cta::SiteText(const Instr& in, const Instr* mma) {
  auto [it, added] = site_text_.emplace(std::pair{&in, mma}, "");
  if (!added) return it->second;
  auto line = [&](const Instr& i) {
    const std::string dsl = m_.DslLine(i);
    return absl::StrCat("PTX line ", i.line, dsl.empty() ? "" : " (" + dsl + ")");
  };
  it->second = line(in);
  if (mma) absl::StrAppend(&it->second, "; the accumulator's last MMA: ", line(*mma));
  return it->second;
}

}  // namespace kiln::emu::detail
