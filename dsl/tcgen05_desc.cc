#include "kiln/tcgen05_desc.h"

#include "absl/strings/str_cat.h"

namespace kiln::tcgen05 {

absl::StatusOr<uint32_t> EncodeInstr(const InstrF16& d, int cta_group) {
  if (cta_group != 1 && cta_group != 2)
    return absl::InvalidArgumentError(absl::StrCat("cta_group is 1 or 2, not ", cta_group));
  const bool m_ok = cta_group == 1 ? (d.m == 64 || d.m == 128) : (d.m == 128 || d.m == 256);
  const int n_step = cta_group == 1 ? 8 : 16;
  if (!m_ok || d.n < n_step || d.n > 256 || d.n % n_step != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("tcgen05.mma kind::", d.fp8 ? "f8f6f4" : "f16", " with cta_group::", cta_group,
                     " has M ", cta_group == 1 ? "64 or 128" : "128 or 256", " and N from ", n_step,
                     " to 256 in steps of ", n_step, "; not ", d.m, "x", d.n));
  if (!d.f32_accumulator && d.bf16_inputs && !d.fp8)
    return absl::InvalidArgumentError("an f16 accumulator needs f16 inputs, not bf16");
  // A and B types: kind::f16 F16 0, BF16 1; kind::f8f6f4 E4M3 0, E5M2 1.
  const bool a_type = d.fp8 ? d.a_e5m2 : d.bf16_inputs, b_type = d.fp8 ? d.b_e5m2 : d.bf16_inputs;
  uint32_t bits = 0;
  bits |= uint32_t{d.f32_accumulator} << 4;  // D type: F16 0, F32 1
  bits |= uint32_t{a_type} << 7;
  bits |= uint32_t{b_type} << 10;
  bits |= uint32_t{d.negate_a} << 13;
  bits |= uint32_t{d.negate_b} << 14;
  bits |= uint32_t{d.transpose_a} << 15;
  bits |= uint32_t{d.transpose_b} << 16;
  bits |= static_cast<uint32_t>(d.n >> 3) << 17;
  bits |= static_cast<uint32_t>(d.m >> 4) << 24;
  return bits;
}

absl::StatusOr<uint32_t> EncodeInstrBlockScaled(const InstrMxf8f6f4& d, int cta_group) {
  if (cta_group != 1 && cta_group != 2)
    return absl::InvalidArgumentError(absl::StrCat("cta_group is 1 or 2, not ", cta_group));
  const int m = cta_group == 1 ? 128 : 256, n_step = cta_group == 1 ? 8 : 16;
  if (d.m != m || d.n < n_step || d.n > 256 || d.n % n_step != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "tcgen05.mma kind::mxf8f6f4 with cta_group::", cta_group, " has M ", m, " and N from ",
        n_step, " to 256 in steps of ", n_step, "; not ", d.m, "x", d.n));
  if (d.sfa_id < 0 || d.sfa_id > 3 || d.sfb_id < 0 || d.sfb_id > 3)
    return absl::InvalidArgumentError(
        absl::StrCat("a scale ID picks one of a tensor memory column's 4 bytes (0..3); given A ",
                     d.sfa_id, ", B ", d.sfb_id));
  uint32_t bits = 0;
  bits |= static_cast<uint32_t>(d.sfb_id) << 4;
  bits |= uint32_t{d.a_e5m2} << 7;  // E4M3 0, E5M2 1
  bits |= uint32_t{d.b_e5m2} << 10;
  bits |= uint32_t{d.negate_a} << 13;
  bits |= uint32_t{d.negate_b} << 14;
  bits |= static_cast<uint32_t>(d.n >> 3) << 17;
  bits |= 1u << 23;  // the scales' type: UE8M0
  bits |= static_cast<uint32_t>(d.m >> 7) << 27;
  bits |= static_cast<uint32_t>(d.sfa_id) << 29;
  return bits;
}

uint64_t EncodeSmem(const SmemDesc& d) {
  auto encode = [](uint32_t x) { return static_cast<uint64_t>((x & 0x3FFFF) >> 4); };
  return encode(d.start_address) | encode(d.leading_byte_offset) << 16 |
         encode(d.stride_byte_offset) << 32 | uint64_t{1} << 46 |
         static_cast<uint64_t>(d.base_offset & 7) << 49 | static_cast<uint64_t>(d.swizzle) << 61;
}

}  // namespace kiln::tcgen05
