// Blackwell (sm_100a) tcgen05 encodings as plain functions, so that they can be checked field by
// field against the PTX ISA's tables (tests/unit/tcgen05_desc_test.cc cites them).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace kiln::tcgen05 {

// Instruction descriptor of tcgen05.mma .kind::f16, or .kind::f8f6f4 with `fp8` (PTX ISA
// "Instruction descriptor format for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8").
struct InstrF16 {
  int m = 128, n = 256;
  bool f32_accumulator = true;  // else f16 (then the inputs must be f16, or 8-bit)
  bool bf16_inputs = true;      // else f16 (kind::f16)
  // kind::f8f6f4: A's and B's types each e4m3 (0) or e5m2 (1) in the type fields
  bool fp8 = false, a_e5m2 = false, b_e5m2 = false;
  bool negate_a = false, negate_b = false;
  bool transpose_a = false, transpose_b = false;  // false: K-major
};
// Fails for shapes tcgen05.mma kind::f16 and kind::f8f6f4 do not have (M 64/128 with N 8..256
// step 8 for one CTA; M 128/256 with N 16..256 step 16 for a CTA pair) and for an f16
// accumulator of bf16.
absl::StatusOr<uint32_t> EncodeInstr(const InstrF16& d, int cta_group);

// Instruction descriptor of tcgen05.mma .kind::mxf8f6f4.block_scale (PTX ISA "Instruction
// descriptor format for .kind::mxf8f6f4"): 8-bit A and B, one UE8M0 scale per row of A and of B
// for each 32 of K, read from byte `sfa_id` / `sfb_id` of their 32-bit tensor memory columns.
// It has no D type (f32) and keeps M (>> 7) in bits 27-28, where kind::f16 keeps M >> 4 in 24-28.
struct InstrMxf8f6f4 {
  int m = 128, n = 128;
  bool a_e5m2 = false, b_e5m2 = false;
  int sfa_id = 0, sfb_id = 0;  // 0..3
  bool negate_a = false, negate_b = false;
};
// Fails for shapes the kind lacks (one CTA: M 128, N 8..256 step 8; a CTA pair: M 256, N 16..256
// step 16) and for scale IDs past 3.
absl::StatusOr<uint32_t> EncodeInstrBlockScaled(const InstrMxf8f6f4& d, int cta_group);

// Swizzle field of the shared memory descriptor (bits 61-63).
enum class Swizzle : uint8_t { kNone = 0, k128BBase32B = 1, k128B = 2, k64B = 4, k32B = 6 };

// Shared memory (matrix) descriptor (PTX ISA "Shared memory descriptor layout"): byte values;
// the encoder applies matrix-descriptor-encode ((x & 0x3FFFF) >> 4) and sets the fixed 0b001.
struct SmemDesc {
  uint32_t start_address = 0;  // shared-space byte address, 16-byte aligned
  uint32_t leading_byte_offset = 0, stride_byte_offset = 0;
  uint8_t base_offset = 0;  // 0 when the swizzle pattern starts on its boundary
  Swizzle swizzle = Swizzle::kNone;
};
uint64_t EncodeSmem(const SmemDesc& d);

// A tensor memory address: lane in bits 31-16, column in bits 15-0.
constexpr uint32_t TmemAddress(uint32_t lane, uint32_t column) { return lane << 16 | column; }

}  // namespace kiln::tcgen05
