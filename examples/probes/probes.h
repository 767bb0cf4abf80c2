// The op probes' shared vocabulary: the layout of each probe kernel's outputs, read by the
// kernels (examples/probes/*.cc) and by their check (examples/probe_check.cc). Plain constants:
// the check is built without the DSL.
#pragma once

namespace kiln::examples::probe {

inline constexpr int kMathOps = 22;    // f32 results per element of probe/math
inline constexpr int kIntOps = 11;     // s32 results per element of probe/math
inline constexpr int kConvertOps = 8;  // words per pair of probe/convert
inline constexpr int kWarpOps = 15;    // words per thread of probe/warp

// probe/atomics: the global words every thread updates.
enum Word { kCount, kMax, kMin, kCas, kRedSum, kRedMax, kWords };

// probe/memory: one output plane per cache hint, then the plane of masked-load fills.
inline constexpr int kHintCount = 6;
inline constexpr double kFill = -7.0;

// probe/cluster: clusters of kClusterCtas CTAs of kClusterThreads threads; four output planes of
// `stride` floats (a peer's permuted element, what a peer stored here, a peer's four elements
// summed, then each cluster's count).
inline constexpr int kClusterCtas = 4;
inline constexpr int kClusterCtasLargest = 16;  // probe/cluster16
inline constexpr int kClusterThreads = 128;
inline constexpr int kClusterPlanes = 4;

}  // namespace kiln::examples::probe
