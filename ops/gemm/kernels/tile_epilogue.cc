#include "ops/gemm/kernels/tile_epilogue.h"

#include <algorithm>
#include <vector>

namespace kiln::ops {

TileEpilogue::TileEpilogue(TileKernel& tk, WgmmaAccumulator& acc, const Value& c, const Value& wg,
                           const Value& lane, const Value& row0)
    : tk_(tk), k_(tk.k), acc_(acc), c_(c), wg_(wg), lane_(lane), row0_(row0) {
  packed_ = k_.Registers(Type::Of(i32), tk.shape.bn / 4);
  pending_ = k_.Registers(Type::Of(i32), 3);
  if (tk.shape.staged_inputs()) {
    input_phase_ = k_.Registers(Type::Of(i32), 1);
    input_phase_[0] = k_.I32(0);
  }
}

void TileEpilogue::WriteOut() {
  if (tk_.shape.epi().swiglu) return WriteOutSwiglu();
  examples::WritePackedTile(k_, tk_.g, tk_.sC, tk_.shape.consumers(), tk_.shape.bn,
                            tk_.shape.piece_n(), wg_, c_, lane_, packed_, pending_);
}

void TileEpilogue::NothingPending() {
  pending_[0] = 0;
  for (int i = 0; i < packed_.size(); ++i) packed_[i] = k_.I32(0);
}

std::tuple<Value, Value, Value> TileEpilogue::ElementAt(const Value& m0, const Value& n0, int p,
                                                        int e) const {
  Value row = m0 + row0_ + acc_.Row(p), col = n0 + acc_.Col(p) + e;
  return std::tuple{row, col, (row < tk_.g.M) & (col < (col_end_.valid() ? col_end_ : tk_.g.N))};
}

// A thread's two rows share a bias_row, each of its column pairs a bias_col; each load is masked
// by its index alone.
std::pair<Value, Value> TileEpilogue::BiasFor(BiasOfSlot& loaded, const Value& m0, const Value& n0,
                                              int p) const {
  if (tk_.shape.epi().bias == BiasAxis::kNone) return {};
  const bool by_row = tk_.shape.epi().bias == BiasAxis::kRow;
  const int slot = by_row ? WgmmaAccumulator::RowSlot(p) : WgmmaAccumulator::ColSlot(p);
  if (auto it = loaded.find(slot); it != loaded.end()) return it->second;
  auto bias_at = [&](int e) {
    auto [row, col, inside] = ElementAt(m0, n0, p, e);
    return tk_.epilogue.LoadBias(row, col);
  };
  Value b0 = bias_at(0), b1 = by_row ? b0 : bias_at(1);
  return loaded[slot] = {b0, b1};
}

// The fused epilogue's loads (C_in, bias, residual) go out epi_pairs pairs of elements at a time,
// all before any is used (TileShape::epi_pairs, tile_sm90.cc).
void TileEpilogue::InGroups(const Value& m0, const Value& n0,
                            const std::function<void(int, const Epilogue::Inputs*)>& body) {
  const int BN = tk_.shape.bn;
  const bool fused = !tk_.shape.epi().Plain();
  BiasOfSlot bias;
  for (int p0 = 0; p0 < BN / 4; p0 += tk_.shape.epi_pairs()) {
    const int end = std::min(BN / 4, p0 + tk_.shape.epi_pairs());
    std::vector<Epilogue::Inputs> inputs;
    if (fused && !tk_.shape.staged_inputs())
      for (int p = p0; p < end; ++p) {
        const auto [b0, b1] = BiasFor(bias, m0, n0, p);
        for (int e = 0; e < 2; ++e) {
          auto [row, col, inside] = ElementAt(m0, n0, p, e);
          inputs.push_back(tk_.epilogue.LoadMatrices(row, col, inside));
          inputs.back().bias = e == 0 ? b0 : b1;
        }
      }
    for (int p = p0; p < end; ++p) body(p, inputs.empty() ? nullptr : &inputs[2 * (p - p0)]);
  }
}

// RoPE (EpilogueSpec::rope): column slot `slot`'s pairs 2 slot (RowSlot 0, the first 8 rows of a
// block of 16) and 2 slot + 1 (8 rows below) are the two features that turn together, by the
// angle word of the first one's row at each of the slot's two columns. Every word's load is issued
// before the first is used. (Loaded before the tile's last wgmma group was waited for, the words
// made the 128x256 tile spill and run slower: docs/perf/2026-11-30-rope-in-the-qkv-epilogue.md.)
void TileEpilogue::ApplyRope(const Value& m0, const Value& n0) {
  const int slots = tk_.shape.bn / 8;
  std::vector<Value> angles;
  for (int slot = 0; slot < slots; ++slot)
    for (int e = 0; e < 2; ++e) {
      auto [row, col, inside] = ElementAt(m0, n0, 2 * slot, e);
      angles.push_back(tk_.epilogue.RopeAngle(row, col, inside));
    }
  for (int slot = 0; slot < slots; ++slot)
    for (int e = 0; e < 2; ++e) {
      const Value row = m0 + row0_ + acc_.Row(2 * slot);
      auto [y1, y2] =
          tk_.epilogue.Rope(acc_[4 * slot + e], acc_[4 * slot + 2 + e], row, angles[2 * slot + e]);
      acc_[4 * slot + e] = y1;
      acc_[4 * slot + 2 + e] = y2;
    }
}

void TileEpilogue::StoreDirect(const Value& m0, const Value& n0) {
  if (tk_.shape.epi().rope) ApplyRope(m0, n0);
  InGroups(m0, n0, [&](int p, const Epilogue::Inputs* in) {
    for (int e = 0; e < 2; ++e) {
      auto [row, col, inside] = ElementAt(m0, n0, p, e);
      Value x = acc_[2 * p + e];
      StoreGlobal(tk_.g.Cptr.At({row, col}),
                  in ? tk_.epilogue.Output(x, in[e]) : x.To(tk_.shape.out()), {.mask = inside});
    }
  });
}

// Column pair `slot`'s element e: pair 2 slot (RowSlot 0) is the gate row, pair 2 slot + 1 the up
// row 8 below.
Value TileEpilogue::SwigluAt(int slot, int e) const {
  return tk_.epilogue.Swiglu(acc_[4 * slot + e], acc_[4 * slot + 2 + e]);
}

void TileEpilogue::StoreSwiglu(const Value& m0, const Value& n0) {
  const examples::TmaGemmOperands& g = tk_.g;
  Value rows = g.M / 2;  // M is a multiple of 16 (the manifest's tile)
  GlobalTensor c(g.Cptr.base(), {rows, g.N}, {k_.I32(1), rows});
  for (int slot = 0; slot < tk_.shape.bn / 8; ++slot) {
    const int p = 2 * slot;  // RowSlot 0, the gate row; p + 1 is RowSlot 1, 8 rows below
    Value gate_row = m0 + row0_ + acc_.Row(p);
    Value row = gate_row / 16 * 8 + gate_row % 16;  // the inverse of rt::SwigluRowOf
    for (int e = 0; e < 2; ++e) {
      Value col = n0 + acc_.Col(p) + e;
      Value x = SwigluAt(slot, e);
      StoreGlobal(c.At({row, col}), x.To(tk_.shape.out()), {.mask = (row < rows) & (col < g.N)});
    }
  }
}

void TileEpilogue::Pack(const Value& m0, const Value& n0) {
  if (tk_.shape.epi().swiglu) {
    PackSwiglu();
  } else {
    if (tk_.shape.epi().rope) ApplyRope(m0, n0);
    if (tk_.shape.staged_inputs()) ApplyStaged(m0, n0);
    InGroups(m0, n0, [&](int p, const Epilogue::Inputs* in) {
      Value x = acc_[2 * p], y = acc_[2 * p + 1];
      if (in)
        x = tk_.epilogue.Apply(x, in[0]), y = tk_.epilogue.Apply(y, in[1]);  // (none where staged)
      packed_[p] = k_.Vector({x.To(tk_.shape.out()), y.To(tk_.shape.out())}).Bitcast(Type::Of(i32));
    });
  }
  pending_[0] = 1;
  pending_[1] = m0;
  pending_[2] = n0;
}

// packed_[slot]: the thread's two elements of C in column pair `slot` (its row of C, columns
// Col and Col + 1), an 8x8 fragment a slot across the warp.
void TileEpilogue::PackSwiglu() {
  for (int slot = 0; slot < tk_.shape.bn / 8; ++slot) {
    std::vector<Value> pair;
    for (int e = 0; e < 2; ++e) pair.push_back(SwigluAt(slot, e).To(tk_.shape.out()));
    packed_[slot] = k_.Vector(pair).Bitcast(Type::Of(i32));
  }
}

// As examples::WritePackedTile, a consumer's 32 rows of C (8 a warp): stmatrix.trans of up to four
// slots' fragments (columns 8 slot.., rows warp * 8..) into the [n][m] buffer, lane l addressing
// column l of the four, then a TMA store of the piece at row m0 / 2 + consumer * 32.
void TileEpilogue::WriteOutSwiglu() {
  const int BN = tk_.shape.bn, PIECE_N = tk_.shape.piece_n();
  for (int x = 0; x < tk_.shape.consumers(); ++x)
    k_.If(wg_ == x, [&] {
      Value m = c_ / 32 * 8;
      for (int piece = 0; piece < BN / PIECE_N; ++piece) {
        k_.If(c_ == 0, [&] { k_.BulkWait(0, /*smem_reads_only=*/true); });  // buffer read out
        k_.NamedBarrier(wg_ + 2, 128);
        for (int s0 = 0; s0 < PIECE_N / 8; s0 += 4) {
          const int count = std::min(4, PIECE_N / 8 - s0);  // x4, or x2 / x1 at the piece's end
          std::vector<Value> regs;
          for (int j = 0; j < count; ++j) regs.push_back(packed_[piece * PIECE_N / 8 + s0 + j]);
          k_.StMatrix(tk_.sC[x].At(lane_ % (8 * count) + s0 * 8, m), regs, /*trans=*/true);
        }
        k_.FenceProxyAsync();
        k_.NamedBarrier(wg_ + 2, 128);
        k_.If(c_ == 0, [&] {
          k_.TmaStore(tk_.g.C, tk_.sC[x],
                      tk_.g.CBox(pending_[1] / 2 + x * 32, pending_[2] + piece * PIECE_N));
          k_.BulkCommit();
        });
      }
    });
}

// Per piece, C_in's terms through the activation into the accumulator, then the residual, each
// matrix's piece landing in the consumer's C buffer (free once the stores before have read it and
// every thread its last ldmatrix).
void TileEpilogue::ApplyStaged(const Value& m0, const Value& n0) {
  const int BN = tk_.shape.bn, PIECE_N = tk_.shape.piece_n(), CONSUMERS = tk_.shape.consumers();
  const EpilogueSpec& epi = tk_.shape.epi();
  const SmemTile* sC = tk_.sC;
  Value n = lane_ % 8 + lane_ / 16 * 8, m = c_ / 32 * 16 + (lane_ & 8);  // as WriteOut's stmatrix
  // The accumulator changes outside any branch on the warpgroup (inside one, ptxas spilled it):
  // only the copy's issue and the buffer's address depend on it.
  // (Both buffers 1024-byte aligned: the same swizzle at the same offset from either.)
  const int64_t next_buffer =
      CONSUMERS == 1 ? 0
                     : (sC[1].offset_bytes() - sC[0].offset_bytes()) / ScalarBytes(tk_.shape.out());
  auto buffer_at = [&](int row) {
    return sC[0].At(n + row, m) + (wg_ * next_buffer).To(Scalar::kI64);
  };
  BiasOfSlot bias;
  for (int piece = 0; piece < BN / PIECE_N; ++piece) {
    auto stage = [&](const TensorMap& map) {
      // Every thread's ldmatrix reads of the buffer (the piece before) ordered before the async
      // proxy's write of the next box: without it the box may overtake a read (the emulator's
      // proxy check; on a GPU it did in gemm/bf16_tma16_sm90's ring).
      k_.FenceProxyAsync();
      k_.If(c_ == 0, [&] { k_.BulkWait(0, /*smem_reads_only=*/true); });
      k_.NamedBarrier(wg_ + 2, 128);
      k_.If(c_ == 0, [&] {
        for (int x = 0; x < CONSUMERS; ++x)
          k_.If(wg_ == x, [&] {
            tk_.input_bars[x].ArriveExpectTx({&map});
            k_.TmaLoad(map, sC[x], tk_.input_bars[x],
                       tk_.g.CBox(m0 + x * 64, n0 + piece * PIECE_N));
          });
      });
      tk_.input_bars[wg_].Wait(input_phase_[0]);
      input_phase_[0] = input_phase_[0] ^ 1;
    };
    // Pairs 4q .. 4q+3 of the piece: one ldmatrix.x4, each register a pair's two elements.
    auto each_pair = [&](const TensorMap* map, const std::function<void(int, Value, Value)>& body) {
      if (map) stage(*map);
      for (int q = 0; q < PIECE_N / 16; ++q) {
        std::vector<Value> words;
        if (map) words = k_.LdMatrix(buffer_at(q * 16), 4, /*trans=*/true);
        for (int j = 0; j < 4; ++j) {
          Value v = map ? words[j].Bitcast(Type::Vec(tk_.shape.out(), 2)) : Value();
          body(4 * (piece * PIECE_N / 16 + q) + j, map ? v.Lane(0) : Value(),
               map ? v.Lane(1) : Value());
        }
      }
    };
    each_pair(epi.scale ? &tk_.tm_c_in : nullptr, [&](int p, Value c0, Value c1) {
      Epilogue::Inputs in0, in1;
      std::tie(in0.bias, in1.bias) = BiasFor(bias, m0, n0, p);
      in0.c_in = c0, in1.c_in = c1;
      acc_[2 * p] = tk_.epilogue.ApplyBeforeResidual(acc_[2 * p], in0);
      acc_[2 * p + 1] = tk_.epilogue.ApplyBeforeResidual(acc_[2 * p + 1], in1);
    });
    if (epi.residual)
      each_pair(&tk_.tm_residual, [&](int p, Value r0, Value r1) {
        acc_[2 * p] = tk_.epilogue.AddResidual(acc_[2 * p], r0);
        acc_[2 * p + 1] = tk_.epilogue.AddResidual(acc_[2 * p + 1], r1);
      });
  }
}

}  // namespace kiln::ops
