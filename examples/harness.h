// The GEMM harness: runs a bundle on random normal inputs, checks it against an independent
// reference (cuBLAS where present, else kiln's reference kernel) and fp64 CPU spot checks, and
// times it and cuBLAS the same way in the same process.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/gemm_spec.h"
#include "kiln/bundle/manifest.h"
#include "kiln/runtime/driver.h"

namespace kiln::examples {

// A GEMM's device operands: A, B, C and the epilogue's (0 where it has none).
struct GemmBuffers {
  uint64_t a = 0, b = 0, c = 0, c_in = 0, bias = 0, residual = 0;
  float alpha = 1, beta = 0;
  // rope's angle words and sizes (EpilogueInputs)
  uint64_t rope_angles = 0;
  int64_t rope_rows = 0, rope_dim = 0, rope_period = 0;
};

struct RunOptions {
  rt::GemmSize size{4096, 4096, 4096};
  int warmup = 3;
  int iterations = 20;  // timed runs; the median is reported
  uint64_t seed = 1;
  bool time = true;
  bool keep_output = false;  // RunGemm: keep C in GemmResult::output
  // A kernel with a work table's "split": 1 whole tiles, S >= 2 split-K in S parts, 0 stream-K.
  int split = 1;
  // Evict L2 before every timed call (kiln, cuBLAS and the copy alike): cold weights, no
  // advantage to whichever call reads what the one before it read, host launch work untimed.
  bool flush_l2 = true;
  // RunGemm at M <= 64 (weights of 16 MB or more): launches a timed steady-state block makes at
  // least, back to back (more where the weights' copies are more). A block's first launch has
  // nothing before it to overlap, so a block must be long enough that its start does not count
  // (docs/perf/2026-11-27-launches-a-timed-block.md).
  int steady_launches = 32;
  // RunGemm: launches the GEMM under test on the harness's buffers (packed, in the bundle's
  // layout) instead of the bundle's kernel alone, e.g. through kiln::rt::GemmRunner, which may
  // run more than one kernel; checked and timed the same way. The bundle still describes it.
  std::function<absl::Status(const GemmBuffers&)> launch;
  // RunGemm at M <= 64: ops/stream_read, timed on the weights (B) beside the copy, where given.
  const rt::Bundle* stream_read = nullptr;
};

struct GemmResult {
  std::string name;
  rt::GemmSize size;
  // Of the median timed call (how calls are timed:
  // docs/perf/2026-11-24-how-gemm-timings-are-taken.md).
  double ms = 0, tflops = 0;
  double cublas_ms = 0, cublas_tflops = 0;
  double rel_error = 0;   // ||C - ref|| / ||ref|| over every element
  double spot_error = 0;  // same, over fp64 CPU spot checks
  double tolerance = 0;
  std::string reference;  // "cublas" or the reference bundle's name
  bool passed = false;
  std::string failure;  // why it did not pass
  std::string note;     // a caveat about the measurement (e.g. cluster waves)
  double weight_gbps = 0,
         copy_gbps = 0;  // M <= 64: B's bytes / time, and a device copy's (read + write)
  double read_gbps = 0;  // M <= 64, RunOptions::stream_read: B's bytes / a bare read's time
  // M <= 64 in steady state: the same rates over launches back to back, each on the next of
  // `steady_copies` copies of B (so each reads its weights from DRAM); 0 where not measured.
  double steady_weight_gbps = 0, steady_copy_gbps = 0, steady_read_gbps = 0, steady_cublas_gbps = 0;
  int steady_copies = 0;
  uint64_t schedule_seed = 0;  // the emulator's schedule (EmulateGemm)
  // Which clusters the emulator ran, where not all (EmulatedClusters): "clusters 0 and 63 of 64".
  // C's other elements stay NaN in `output`.
  std::string coverage;
  std::vector<uint16_t>
      output;  // a 16-bit C as the kernel wrote it (EmulateGemm; RunGemm with keep_output)
};

// Norm-relative error threshold for the spec's output and accumulator types.
double Tolerance(const GemmSpec& spec);

// What the GEMM timings run (untimed) before each timed call, with RunOptions::flush_l2: a fill
// of 256 MB, which evicts L2. Every call then starts from the same cold cache, and the GPU is still
// busy with the fill while the host records the start event and launches, so host-side launch
// work (cuBLAS's heuristics, kiln's argument checks) stays out of the time. The fill leaves L2
// dirty: each timed call pays for writing back up to L2's bytes, the same for kiln, cuBLAS and
// the copy. (A read of 256 MB would leave it clean, but the one at hand, a cuBLAS GEMM, warms the
// very kernels cuBLAS then runs: docs/perf/2026-11-24-how-gemm-timings-are-taken.md.)
absl::StatusOr<std::function<absl::Status()>> L2Evictor();

// `reference` is used when cuBLAS is unavailable (a reference/<dtype> bundle).
absl::StatusOr<GemmResult> RunGemm(const rt::Bundle& bundle, const rt::Bundle* reference,
                                   const RunOptions& options);

// The same check on kiln's PTX emulator (no GPU, no timing): the output against an fp64 CPU
// product over every element. Kernels that take tensor maps or schedule tables need TMA, which
// the emulator does not run yet (an Unimplemented status says so).
absl::StatusOr<GemmResult> EmulateGemm(const rt::Bundle& bundle, const RunOptions& options,
                                       uint64_t schedule_seed = 1);
// The same inputs under several schedules, run side by side; the first emulator report (a
// deadlock, a race, ...) is the error, with its schedule named.
absl::StatusOr<std::vector<GemmResult>> EmulateGemmSchedules(
    const rt::Bundle& bundle, const RunOptions& options,
    const std::vector<uint64_t>& schedule_seeds);

// Two outputs of one GEMM on the same inputs (the GPU's and the emulator's), element by element.
// Two fp32 sums of the same products in different orders or with different internal rounding
// differ by a small multiple of 2^-24 times the sum of the products' magnitudes, sum_k |a_ik b_kj|
// (`scale`), not of the result, which can cancel to near zero; and two such sums on either side
// of a rounding boundary of the 16-bit output round to neighbouring codes. So an element agrees
// when the two are bit-equal, or within one unit in the last place of the output plus `rel`
// times its scale. An f16 accumulator (cuda_hgemm) rounds after each 16-deep step, so there the
// two may also part by one f16 ulp of the scale per step.
struct OutputAgreement {
  int64_t equal = 0;          // bit-equal
  int64_t close = 0;          // within one output ulp + rel * scale (+ the f16 accumulator's steps)
  int64_t apart = 0;          // further apart, NaN in either, or missing
  double worst = 0;           // the largest |x - y| / scale of any element that is not bit-equal
  std::string worst_element;  // "(i,j): x vs y, scale s"
  double norm_rel = 0;        // ||x - y|| / ||y|| over the elements that are numbers
};
// With `only_where_x_written`, the elements where x is NaN are left out (an emulator run of some
// clusters, GemmResult::coverage).
// sum_k |a_ik b_kj| for every element of the product of the harness's inputs for `seed`
// (RunOptions::seed), row-major M x N.
std::vector<double> ProductScales(const GemmSpec& g, const rt::GemmSize& s, uint64_t seed);
OutputAgreement CompareOutputs(const GemmSpec& g, const rt::GemmSize& s,
                               const std::vector<uint16_t>& x, const std::vector<uint16_t>& y,
                               const std::vector<double>& scale, double rel,
                               bool only_where_x_written = false);

// The table: header once, then one row per result.
std::string TableHeader();
std::string TableRow(const GemmResult& r);
std::string TsvRow(const GemmResult& r);  // machine-readable

}  // namespace kiln::examples
