// tcgen05 encodings, field by field, against the PTX ISA (chapter "TensorCore 5th Generation
// Family Instructions"): Table "Instruction descriptor format for .kind::tf32, .kind::f16,
// .kind::f8f6f4 and .kind::i8", Table "Shared memory descriptor layout", and the tensor memory
// address format (lane in bits 31-16, column in 15-0).
#include "kiln/tcgen05_desc.h"

#include "gtest/gtest.h"

namespace kiln::tcgen05 {
namespace {

uint32_t Instr(const InstrF16& d, int cta_group = 1) {
  absl::StatusOr<uint32_t> bits = EncodeInstr(d, cta_group);
  EXPECT_TRUE(bits.ok()) << bits.status();
  return bits.ok() ? *bits : 0;
}
uint32_t Field(uint32_t bits, int lo, int width) { return bits >> lo & ((1u << width) - 1); }

TEST(InstrDescriptor, EachFieldSitsWhereTheTableSays) {
  const InstrF16 base{.m = 64, .n = 8, .f32_accumulator = false, .bf16_inputs = false};
  const uint32_t b = Instr(base);
  EXPECT_EQ(Field(b, 0, 4), 0u);   // bits 0-1 sparsity selector, 2 sparsity (dense), 3 saturate
  EXPECT_EQ(Field(b, 4, 2), 0u);   // bits 4-5 D type: F16 = 0
  EXPECT_EQ(Field(b, 7, 3), 0u);   // bits 7-9 A type: F16 = 0
  EXPECT_EQ(Field(b, 10, 3), 0u);  // bits 10-12 B type: F16 = 0
  EXPECT_EQ(Field(b, 17, 6), 1u);  // bits 17-22 N >> 3
  EXPECT_EQ(Field(b, 24, 5), 4u);  // bits 24-28 M >> 4
  EXPECT_EQ(Field(b, 6, 1) | Field(b, 23, 1) | Field(b, 29, 3), 0u);  // reserved, max shift

  InstrF16 d = base;
  d.f32_accumulator = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 4);  // D type F32 = 1
  d = base;
  d.f32_accumulator = d.bf16_inputs = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 4 | 1u << 7 | 1u << 10);  // A and B type BF16 = 1
  d = base;
  d.negate_a = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 13);
  d = base;
  d.negate_b = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 14);
  d = base;
  d.transpose_a = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 15);
  d = base;
  d.transpose_b = true;
  EXPECT_EQ(Instr(d) ^ b, 1u << 16);
  d = base;
  d.n = 256;
  EXPECT_EQ(Field(Instr(d), 17, 6), 32u);
  d.m = 128;
  EXPECT_EQ(Field(Instr(d), 24, 5), 8u);
}

// kind::f8f6f4: A and B types E4M3 = 0, E5M2 = 1, each its own; the 16-bit input flag is not
// read.
TEST(InstrDescriptor, EightBitTypesEachTheirOwn) {
  const InstrF16 e4m3{.m = 128, .n = 128, .fp8 = true};
  EXPECT_EQ(Instr(e4m3), 1u << 4 | 16u << 17 | 8u << 24);  // F32 D, E4M3 A and B
  InstrF16 d = e4m3;
  d.b_e5m2 = true;
  EXPECT_EQ(Instr(d) ^ Instr(e4m3), 1u << 10);
  d = e4m3;
  d.a_e5m2 = true;
  EXPECT_EQ(Instr(d) ^ Instr(e4m3), 1u << 7);
  d = e4m3;
  d.bf16_inputs = false;
  EXPECT_EQ(Instr(d), Instr(e4m3));
}

TEST(InstrDescriptor, TheWorklogConstants) {
  // Seed 002's (1<<4)|(1<<7)|(1<<10)|(N>>3<<17)|(M>>4<<24): F32 accumulate, BF16 A and B.
  EXPECT_EQ(Instr({.m = 128, .n = 256}), 0x08400490u);     // v1-v3
  EXPECT_EQ(Instr({.m = 128, .n = 128}), 0x08200490u);     // v4
  EXPECT_EQ(Instr({.m = 256, .n = 256}, 2), 0x10400490u);  // v5-v7, a CTA pair
}

TEST(InstrDescriptor, ShapesOutsideTheTableFail) {
  // Table "Various combinations of .kind and shapes", kind::f16, dense.
  EXPECT_FALSE(EncodeInstr({.m = 256, .n = 256}, 1).ok());  // M 256 needs a CTA pair
  EXPECT_FALSE(EncodeInstr({.m = 128, .n = 260}, 1).ok());
  EXPECT_FALSE(EncodeInstr({.m = 128, .n = 12}, 1).ok());  // N steps by 8
  EXPECT_FALSE(EncodeInstr({.m = 128, .n = 24}, 2).ok());  // N steps by 16 for a pair
  EXPECT_FALSE(EncodeInstr({.m = 64, .n = 64}, 2).ok());
  EXPECT_FALSE(
      EncodeInstr({.m = 128, .n = 64, .f32_accumulator = false}, 1).ok());  // f16 acc of bf16
  EXPECT_TRUE(EncodeInstr({.m = 64, .n = 8}, 1).ok());
  EXPECT_TRUE(EncodeInstr({.m = 128, .n = 16}, 2).ok());
}

uint64_t Bits(uint64_t v, int lo, int width) { return v >> lo & ((uint64_t{1} << width) - 1); }

TEST(SmemDescriptor, EachFieldSitsWhereTheTableSays) {
  const uint64_t d = EncodeSmem({.start_address = 0x12340,
                                 .leading_byte_offset = 0x800,
                                 .stride_byte_offset = 0x80,
                                 .base_offset = 5,
                                 .swizzle = Swizzle::k64B});
  EXPECT_EQ(Bits(d, 0, 14), 0x12340u >> 4);  // 0-13: encode(start address)
  EXPECT_EQ(Bits(d, 14, 2), 0u);             // reserved
  EXPECT_EQ(Bits(d, 16, 14), 0x800u >> 4);   // 16-29: encode(leading byte offset)
  EXPECT_EQ(Bits(d, 30, 2), 0u);
  EXPECT_EQ(Bits(d, 32, 14), 0x80u >> 4);  // 32-45: encode(stride byte offset)
  EXPECT_EQ(Bits(d, 46, 3), 1u);           // 46-48: fixed constant 0b001
  EXPECT_EQ(Bits(d, 49, 3), 5u);           // 49-51: base offset
  EXPECT_EQ(Bits(d, 52, 9), 0u);           // 52: LBO mode (relative), 53-60: zero
  EXPECT_EQ(Bits(d, 61, 3), 4u);           // 61-63: swizzle, 64B = 4
}

TEST(SmemDescriptor, SwizzleCodesAndTheEncodeMask) {
  EXPECT_EQ(Bits(EncodeSmem({.swizzle = Swizzle::kNone}), 61, 3), 0u);
  EXPECT_EQ(Bits(EncodeSmem({.swizzle = Swizzle::k128BBase32B}), 61, 3), 1u);
  EXPECT_EQ(Bits(EncodeSmem({.swizzle = Swizzle::k128B}), 61, 3), 2u);
  EXPECT_EQ(Bits(EncodeSmem({.swizzle = Swizzle::k32B}), 61, 3), 6u);
  // matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4: bits above 18 are dropped.
  EXPECT_EQ(Bits(EncodeSmem({.start_address = 0x40010}), 0, 14), 1u);
}

// kind::mxf8f6f4.block_scale (PTX ISA, "Instruction descriptor format for .kind::mxf8f6f4"):
// bits 4-5 B's scale ID, 7-9 / 10-12 the types, 13-16 negate and transpose, 17-22 N >> 3, 23 the
// scale type (UE8M0 1), 27-28 M >> 7, 29-30 A's scale ID; no D type, nothing at 24-26 or 31.
TEST(InstrDescriptor, BlockScaledFieldsSitWhereTheTableSays) {
  auto encode = [](const InstrMxf8f6f4& d, int cta_group = 1) {
    absl::StatusOr<uint32_t> bits = EncodeInstrBlockScaled(d, cta_group);
    EXPECT_TRUE(bits.ok()) << bits.status();
    return bits.ok() ? *bits : 0;
  };
  const InstrMxf8f6f4 base{.m = 128, .n = 128};
  const uint32_t b = encode(base);
  EXPECT_EQ(b, 16u << 17 | 1u << 23 | 1u << 27);
  EXPECT_EQ(Field(b, 24, 3) | Field(b, 31, 1) | Field(b, 0, 4) | Field(b, 6, 1), 0u);
  InstrMxf8f6f4 d = base;
  d.sfb_id = 3;
  EXPECT_EQ(encode(d) ^ b, 3u << 4);
  d = base;
  d.sfa_id = 2;
  EXPECT_EQ(encode(d) ^ b, 2u << 29);
  d = base;
  d.a_e5m2 = true;
  EXPECT_EQ(encode(d) ^ b, 1u << 7);
  d = base;
  d.b_e5m2 = true;
  EXPECT_EQ(encode(d) ^ b, 1u << 10);
  d = base;
  d.negate_b = true;
  EXPECT_EQ(encode(d) ^ b, 1u << 14);
  d = base;
  d.n = 8;
  EXPECT_EQ(Field(encode(d), 17, 6), 1u);
  d = {.m = 256, .n = 256};
  EXPECT_EQ(Field(encode(d, 2), 27, 2), 2u);
  // Shapes and IDs the kind lacks.
  EXPECT_FALSE(EncodeInstrBlockScaled(InstrMxf8f6f4{.m = 64, .n = 128}, 1).ok());
  EXPECT_FALSE(EncodeInstrBlockScaled(InstrMxf8f6f4{.m = 128, .n = 132}, 1).ok());
  EXPECT_FALSE(EncodeInstrBlockScaled(InstrMxf8f6f4{.m = 128, .n = 128, .sfa_id = 4}, 1).ok());
  EXPECT_FALSE(EncodeInstrBlockScaled(InstrMxf8f6f4{.m = 256, .n = 8}, 2).ok());
}

TEST(SmemDescriptor, TheWorklogConstants) {
  // Seed 002 v2+: 128B swizzle, SBO 1024 (8 rows of 128 B), LBO unused.
  EXPECT_EQ(EncodeSmem({.stride_byte_offset = 1024, .swizzle = Swizzle::k128B}),
            0x4000404000000000ull);
  // Seed 002 v1: no swizzle, A of 128 rows: LBO = 128 * 16 (next 8-wide K slab), SBO = 8 * 16.
  EXPECT_EQ(
      EncodeSmem(
          {.start_address = 0x400, .leading_byte_offset = 128 * 16, .stride_byte_offset = 128}),
      0x400800800000ull | (0x400 >> 4));
}

TEST(TmemAddress, LaneHighColumnLow) {
  EXPECT_EQ(TmemAddress(0, 0), 0u);
  EXPECT_EQ(TmemAddress(32, 8), (32u << 16) | 8u);
  EXPECT_EQ(TmemAddress(96, 256) >> 16, 96u);
  EXPECT_EQ(TmemAddress(96, 256) & 0xFFFF, 256u);
}

}  // namespace
}  // namespace kiln::tcgen05
