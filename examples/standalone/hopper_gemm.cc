// A Hopper bf16 GEMM in a program of its own: C = A * B^T, with A (M x K) and B (N x K) both
// row-major bf16 and C (M x N) row-major f32. Per 128x128 tile of C, one producer thread streams
// 128x64 boxes of A and B by TMA into a ring of 3 shared-memory stages; two consumer warpgroups
// each multiply their 64 rows with wgmma m64n128k16. Each stage has a full barrier (the TMA bytes
// have landed) and an empty one (both consumers are done with it). The host compiles the kernel,
// runs it on an H100/H200 if there is one, else in kiln's PTX emulator, and checks it in fp64.
//
//   hopper_gemm [--m M] [--n N] [--k K] [--plant]   (M, N multiples of 128; K of 64)
// Exit 0 when the product is correct. docs/DSL.md ("A complete Hopper kernel") walks through it.
#include <bit>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/check.h"
#include "kiln/compile.h"
#include "kiln/emulator.h"
#include "kiln/kernel.h"
#include "kiln/ops/gemm_choice.h"  // kiln::kiln carries the entry points (kiln::ops) too
#include "kiln/pipeline.h"
#include "kiln/runtime/launch.h"

namespace {

using namespace kiln;  // NOLINT: a kernel reads better with the DSL's names unqualified

constexpr int BM = 128, BN = 128, BK = 64, STAGES = 3, CONSUMERS = 2;

// A row-major bf16 operand of `rows` x K, read in 128B-swizzled boxes of box_rows x 64: one box
// row is one 128-byte swizzle span, as wgmma's K-major descriptors expect.
rt::TensorMapParam KMajor(const std::string& tensor, const std::string& rows, int box_rows) {
  rt::TensorMapParam map;
  map.tensor = tensor;
  map.dims = {"K", rows};  // innermost first
  map.strides = {"K*2"};   // bytes from one row to the next
  map.box = {BK, static_cast<uint32_t>(box_rows)};
  map.swizzle = rt::TmaSwizzle::k128B;
  return map;
}

// `planted`: the stage is released before the wgmma that reads it has retired (a mistake the
// emulator reports at this file's lines; --plant).
absl::StatusOr<KernelDef> BuildGemm(bool planted) {
  Kernel k("standalone/hopper_gemm", sm90a(), {128 * (1 + CONSUMERS)});
  k.I32Param("M");  // read by the rules alone (grid, A's map)
  Value N = k.I32Param("N"), K = k.I32Param("K");
  TensorMap tmA = k.TmaParam("tmA", KMajor("A", "M", BM));
  TensorMap tmB = k.TmaParam("tmB", KMajor("B", "N", BN));
  Value C = k.PtrParam("C", f32);
  k.Grid("N/128", "M/128");
  k.RequireMultiple("M", BM), k.RequireMultiple("N", BN), k.RequireMultiple("K", BK);

  SmemTile sA = k.SmemSwizzled(bf16, BM, BK, Swizzle::k128B, STAGES);
  SmemTile sB = k.SmemSwizzled(bf16, BN, BK, Swizzle::k128B, STAGES);
  Barriers full = k.SmemBarriers(STAGES), empty = k.SmemBarriers(STAGES);
  Value m0 = k.BlockIdx(1) * BM, n0 = k.BlockIdx(0) * BN;
  k.If(k.ThreadIdx() == 0, [&] {
    // full: the producer's one arrival, plus the bytes it announces; empty: one per consumer.
    for (int s = 0; s < STAGES; ++s) full[s].Init(1), empty[s].Init(CONSUMERS);
    k.FenceBarrierInit();  // for a cluster's shared barriers; one CTA's SyncThreads suffices
  });
  k.SyncThreads();

  k.Role({.first_thread = 0, .threads = 128}, [&](Value t) {  // producer warpgroup
    k.If(t == 0, [&] {
      RingPosition at(k, STAGES);  // stage and the parity of its barriers' current phase
      k.For(0, K, BK, [&](Value k0) {
        Value s = at.stage();
        empty[s].Wait(at.phase());             // both consumers released this stage
        full[s].ArriveExpectTx({&tmA, &tmB});  // 16 KiB + 16 KiB: the two boxes' bytes
        k.TmaLoad(tmA, sA.Stage(s), full[s], {k0, m0});
        k.TmaLoad(tmB, sB.Stage(s), full[s], {k0, n0});
        at.Advance();  // the parity flips each time the ring wraps
      });
    });
  });
  k.Role({.first_thread = 128, .threads = 128 * CONSUMERS}, [&](Value t) {  // consumers
    Value row0 = t / 128 * 64;  // this warpgroup's 64 rows of the tile
    WgmmaAccumulator acc = k.WgmmaAcc(BN);
    // Every stage starts free: the first phase of each empty barrier completes at once, so the
    // producer's first pass over the ring waits on parity 0 like every later one.
    k.If(t % 128 == 0, [&] {
      for (int s = 0; s < STAGES; ++s) empty[s].Arrive();
    });
    RingPosition at(k, STAGES);
    k.For(0, K, BK, [&](Value) {
      Value s = at.stage();
      full[s].Wait(at.phase());  // the stage's A and B boxes have landed
      k.WgmmaFence();            // order the accumulator's registers before the async MMAs
      for (int kk = 0; kk < BK; kk += 16)
        k.Wgmma(acc, {.a = sA.Stage(s), .a_row0 = row0, .b = sB.Stage(s), .k0 = kk});
      k.WgmmaCommit();  // the four MMAs of this stage as one group...
      if (planted) k.If(t % 128 == 0, [&] { empty[s].Arrive(); });  // too early: --plant
      k.WgmmaWait(0);  // ...done reading shared memory once the group retires
      if (!planted) k.If(t % 128 == 0, [&] { empty[s].Arrive(); });  // hand the stage back
      at.Advance();
    });
    // Register pair (2p, 2p+1) holds row Row(p), columns Col(p) and Col(p)+1: one 8-byte store.
    for (int p = 0; p < BN / 4; ++p) {
      Value row = m0 + row0 + acc.Row(p), col = n0 + acc.Col(p);
      k.Store(C + row.To(i64) * N.To(i64) + col.To(i64),
              k.Vector({Value(acc[2 * p]), Value(acc[2 * p + 1])}));
    }
  });
  return k.Build();
}

uint16_t Bf16Bits(float f) {  // rounded to nearest even (finite inputs)
  uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
double Bf16Value(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

int Fail(const absl::Status& s) {
  std::cerr << "error: " << s << "\n";
  return 1;
}

// Device memory and one launch: on the GPU where `gpu` holds the kernel, else in the emulator.
struct Device {
  std::optional<rt::LoadedKernel> gpu;
  std::vector<rt::DeviceBuffer> buffers;  // the GPU's
  rt::Bundle bundle;                      // the emulator's
  emu::Device emulator;

  absl::StatusOr<uint64_t> Allocate(size_t bytes, const void* data) {  // no data: NaNs
    absl::Status s;
    uint64_t p = 0;
    if (gpu) {
      absl::StatusOr<rt::DeviceBuffer> b = rt::DeviceBuffer::Allocate(bytes);
      if (!b.ok()) return b.status();
      s = data ? b->CopyFromHost(data, bytes) : b->Fill(0xff);
      p = b->ptr();
      buffers.push_back(*std::move(b));
    } else {
      absl::StatusOr<uint64_t> e = emulator.Allocate(bytes);
      if (!e.ok()) return e.status();
      s = data ? emulator.CopyIn(*e, data, bytes) : emulator.Fill(*e, 0xff, bytes);
      p = *e;
    }
    if (!s.ok()) return s;
    return p;
  }
  absl::Status Launch(const std::vector<rt::Arg>& args) {
    if (!gpu) {
      absl::StatusOr<emu::Stats> s = emu::Launch(emulator, bundle, args);
      if (!s.ok()) return s.status();
      // An output some CTAs never reached (a grid rule that covers too little) is told here.
      for (const emu::PartlyWritten& p : s->partly_written) std::cerr << p.message << "\n";
      return absl::OkStatus();
    }
    absl::Status s = gpu->Launch(args);  // the grid from its rule: (N/128, M/128)
    return s.ok() ? rt::Synchronize() : s;
  }
  absl::Status Download(void* dst, uint64_t src, size_t bytes) {
    if (!gpu) return emulator.CopyOut(dst, src, bytes);
    for (const rt::DeviceBuffer& b : buffers)
      if (b.ptr() == src) return b.CopyToHost(dst, bytes);
    return absl::InternalError("not a buffer of this program");
  }
};

// Normal bf16 inputs, a NaN-poisoned C, one launch, and the norm-relative error against fp64.
absl::StatusOr<double> RunAndCheck(Device& device, int M, int N, int K) {
  std::vector<uint16_t> a(size_t{1} * M * K), b(size_t{1} * N * K);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (uint16_t& v : a) v = Bf16Bits(normal(rng));
  for (uint16_t& v : b) v = Bf16Bits(normal(rng));
  std::vector<float> c(size_t{1} * M * N);
  absl::StatusOr<uint64_t> da = device.Allocate(a.size() * 2, a.data()),
                           db = device.Allocate(b.size() * 2, b.data()),
                           dc = device.Allocate(c.size() * 4, nullptr);
  for (const absl::StatusOr<uint64_t>* p : {&da, &db, &dc})
    if (!p->ok()) return p->status();
  // In the parameters' order; a tensor map's argument is its tensor's address, and the launcher
  // encodes the map from the parameter's box, swizzle and its dims and strides rules.
  if (absl::Status s =
          device.Launch({rt::Arg::I32(M), rt::Arg::I32(N), rt::Arg::I32(K), rt::Arg::Tensor(*da),
                         rt::Arg::Tensor(*db), rt::Arg::Ptr(*dc)});
      !s.ok())
    return s;
  if (absl::Status s = device.Download(c.data(), *dc, c.size() * 4); !s.ok()) return s;
  double err = 0, norm = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double want = 0, got = c[size_t{1} * m * N + n];
      for (int i = 0; i < K; ++i)
        want += Bf16Value(a[size_t{1} * m * K + i]) * Bf16Value(b[size_t{1} * n * K + i]);
      if (std::isnan(got)) return absl::InternalError(absl::StrCat("C[", m, "][", n, "] is NaN"));
      err += (got - want) * (got - want), norm += want * want;
    }
  return std::sqrt(err / norm);
}

int Usage() {
  std::cerr << "usage: hopper_gemm [--m M] [--n N] [--k K] [--plant] (M, N multiples of 128; K "
               "of 64; --plant: release each stage too early)\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int M = 256, N = 256, K = 512;  // 8 k-steps: the 3-stage ring wraps twice
  bool planted = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--plant") {
      planted = true;
      continue;
    }
    int* v = a == "--m" ? &M : a == "--n" ? &N : a == "--k" ? &K : nullptr;
    if (!v || i + 1 == argc) return Usage();
    *v = std::atoi(argv[++i]);
  }
  if (M < BM || N < BN || K < BK || M % BM || N % BN || K % BK) return Usage();
  absl::StatusOr<KernelDef> def = BuildGemm(planted);
  if (!def.ok()) return Fail(def.status());
  // `kiln check`'s checks: the builder's findings, and ptxas's registers where it is installed.
  absl::StatusOr<CheckReport> report = CheckKernel(*def);
  if (!report.ok()) return Fail(report.status());
  for (const std::string& f : report->findings) std::cerr << "static check: " << f << "\n";
  std::cout << "kiln check: " << report->Resources() << "\n";
  absl::StatusOr<CompiledKernel> compiled = Compile(*def);
  if (!compiled.ok()) return Fail(compiled.status());

  Device device;
  std::string where = "kiln's PTX emulator";
  absl::StatusOr<rt::Driver*> driver = rt::Driver::Get();
  if (driver.ok() && (*driver)->compute_capability() == 90) {  // sm_90a code runs on Hopper alone
    absl::StatusOr<rt::LoadedKernel> kernel = rt::LoadedKernel::Load(compiled->bundle);
    if (!kernel.ok()) return Fail(kernel.status());
    device.gpu = *std::move(kernel);
    where = (*driver)->device_name();
  } else {
    std::cout << "no Hopper GPU here: running kiln's PTX emulator instead\n";
    device.bundle = compiled->bundle;  // its line tables name this file's lines in any report
  }
  absl::StatusOr<double> rel = RunAndCheck(device, M, N, K);
  if (!rel.ok()) return Fail(rel.status());
  bool correct = *rel < 1e-4 && report->ok();
  std::cout << "hopper_gemm " << (correct ? "correct" : "WRONG") << " (rel error " << *rel << "; "
            << M << "x" << N << "x" << K << " on " << where << ")\n";
  std::cout << "kiln's own GEMM entry point would run " << rt::ChooseGemm({M, N, K}, 90).kernel
            << " at this size\n";
  return correct ? 0 : 1;
}
