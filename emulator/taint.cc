// Uninitialised values. The PTX ISA leaves shared memory undefined at launch, so a kernel whose
// output depends on a byte nothing wrote (a tile loaded short, a stage read before its first
// fill, a reduction over a slot no warp filled) computes garbage that a test may or may not see.
// Each shared byte and register carries an origin: null when defined; for a value computed from
// never-written shared memory, the instruction that read it. Origins flow through arithmetic,
// shuffles, ldmatrix/mma.sync, wgmma and stores to shared memory; a tainted value written to
// global memory is reported with both lines. (Tensor memory and global memory are not tracked.)
#include "emulator/cta.h"

namespace kiln::emu::detail {

Origin Cta::NeverWritten() {
  static const Instr marker;
  return &marker;
}

void Cta::SetRegTaint(Thread& t, int reg, Origin o) {
  if (reg < 0) return;
  if (reg >= static_cast<int>(t.taint.size())) {
    if (!o) return;
    t.taint.resize(t.r.size(), nullptr);
  }
  t.taint[reg] = o;
}

Origin Cta::OperandTaint(const Thread& t, const ptx::Operand& o) const {
  switch (o.kind) {
    case Operand::Kind::kReg:
    case Operand::Kind::kAddress:
      return RegTaint(t, o.reg);
    case Operand::Kind::kVector:
      for (int r : o.regs)
        if (Origin x = RegTaint(t, r)) return x;
      return nullptr;
    default:
      return nullptr;
  }
}

Origin Cta::SourceTaint(const Thread& t, const Instr& in) const {
  if (Origin g = RegTaint(t, in.guard)) return g;
  if (in.op == Op::kSelp && in.ops.size() == 4) {  // selp d, a, b, p: p and the one it picks
    if (Origin p = OperandTaint(t, in.ops[3])) return p;
    const bool pick_a = (Read(t, in.ops[3], 1) & 1) != 0;
    return OperandTaint(t, in.ops[pick_a ? 1 : 2]);
  }
  for (size_t i = 1; i < in.ops.size(); ++i)
    if (Origin x = OperandTaint(t, in.ops[i])) return x;
  return nullptr;
}

void Cta::TaintDestinations(Thread& t, const Instr& in, Origin o) {
  if (in.ops.empty()) return;
  const Operand& d = in.ops[0];
  if (d.kind == Operand::Kind::kReg) SetRegTaint(t, d.reg, o);
  if (d.kind == Operand::Kind::kVector)
    for (int r : d.regs) SetRegTaint(t, r, o);
}

Cta* Cta::SharedOwner(const uint8_t* p) const {
  auto holds = [p](const Cta& c) {
    return p >= c.shared_.data() && p < c.shared_.data() + c.shared_.size();
  };
  if (holds(*this)) return const_cast<Cta*>(this);
  if (cluster_)
    for (Cta* c : cluster_->ctas)
      if (holds(*c)) return c;
  return nullptr;
}

Origin Cta::SharedTaint(const uint8_t* p, size_t n, const Instr& reader) const {
  const Cta* owner = SharedOwner(p);
  if (!owner) return nullptr;
  if (owner->smem_origin_.empty()) return &reader;  // nothing written there yet
  const uint64_t off = p - owner->shared_.data();
  Origin first = nullptr;
  for (size_t i = 0; i < n && off + i < owner->smem_origin_.size(); ++i) {
    Origin o = owner->smem_origin_[off + i];
    if (o == NeverWritten()) return &reader;
    if (!first) first = o;
  }
  return first;
}

void Cta::SetSharedTaint(uint8_t* p, size_t n, Origin o) {
  Cta* owner = SharedOwner(p);
  if (!owner) return;
  if (owner->smem_origin_.empty())
    owner->smem_origin_.assign(owner->shared_.size(), NeverWritten());
  const uint64_t off = p - owner->shared_.data();
  std::fill(owner->smem_origin_.begin() + off,
            owner->smem_origin_.begin() + std::min<uint64_t>(off + n, owner->smem_origin_.size()),
            o);
}

absl::Status Cta::CheckReachesGlobal(const Thread* t, const Instr& in, Origin o) const {
  if (!o) return absl::OkStatus();
  const std::string dsl = m_.DslLine(*o);
  // Tensor memory's origins: a tcgen05.ld of cells nothing wrote since their alloc, or an MMA
  // that accumulated onto such cells.
  if (o->op == Op::kTcgen05 && o != &in) {
    const bool mma = !o->mods.empty() && o->mods[0] == "mma";
    const std::string site =
        absl::StrCat("PTX line ", o->line, dsl.empty() ? "" : " (" + dsl + ")");
    const std::string why = absl::StrCat(
        "writes to global memory a value computed from tensor memory that nothing had written "
        "since its tcgen05.alloc (the ISA leaves it undefined): ",
        mma ? absl::StrCat("the tcgen05.mma at ", site,
                           " accumulated onto it (enable-input-d set: the first MMA into an "
                           "accumulator must not accumulate)")
            : absl::StrCat("the tcgen05.ld at ", site,
                           " read columns no MMA or tcgen05.st had written yet: it ran before the "
                           "MMA that writes them (no wait on the mbarrier of that MMA's "
                           "tcgen05.commit, a wait of the wrong parity, or a commit from a thread "
                           "that issued no MMA), or the MMA writes fewer columns, or others"));
    if (t) return Fail(*t, in, why);
    const std::string here = m_.DslLine(in);
    return absl::InvalidArgumentError(absl::StrFormat("%s%s: PTX line %d (%s): %s",
                                                      here.empty() ? "" : here + ": ", kernel_,
                                                      in.line, in.text, why));
  }
  const std::string what = absl::StrCat(
      o == &in ? "writes to global memory shared bytes that nothing had written"
               : absl::StrCat("writes to global memory a value computed from shared memory that "
                              "nothing had written "
                              "(read at PTX line ",
                              o->line, dsl.empty() ? "" : ", " + dsl, ": ", o->text, ")"),
      ": an uninitialised value reaches the output (a load or fill missing, or a read before the "
      "write: a barrier missing between them, or a wait on an mbarrier phase that had already "
      "completed, such as a wrong parity)");
  if (t) return Fail(*t, in, what);
  const std::string here = m_.DslLine(in);
  return absl::InvalidArgumentError(absl::StrFormat("%s%s: PTX line %d (%s): %s",
                                                    here.empty() ? "" : here + ": ", kernel_,
                                                    in.line, in.text, what));
}

}  // namespace kiln::emu::detail
