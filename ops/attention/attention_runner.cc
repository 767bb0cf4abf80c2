#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "call_key.h"
#include "kiln/bundle/manifest.h"
#include "kiln/ops/attention.h"
#include "kiln/runtime/driver.h"

namespace kiln::rt {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("kiln attention: ", message));
}

// An i32 index array's pointer: missing (null), or not 4-byte aligned.
absl::Status IndexPointer(const char* name, cu::CUdeviceptr p, const char* what) {
  if (!p) return Invalid(absl::StrCat(name, " is missing: ", what));
  if (p % 4) return Invalid(absl::StrCat(name, " needs a 4-byte aligned pointer (i32 values)"));
  return absl::OkStatus();
}

// The SMs of an H100 SXM or an H200 (a B200: 148); a decode CTA (one consumer warpgroup, a ring
// of K and V tiles) fills one by its shared memory.
constexpr int64_t kSms = 132, kBlackwellSms = 148;

// Decode: the Hq / Hkv query heads of a KV head read the same keys, so their S rows each, packed,
// are one 64-row tile of one head (Q [B, Hq, S, D] is [B, Hkv, Hq / Hkv * S, D], and so are O
// and lse), run by one consumer warpgroup; the keys split in parts so that B * Hkv * parts CTAs
// fill the GPU once, at least 2 key tiles a part (docs/perf/2026-11-28-decode-split-kv.md). Not
// where a causal mask would need each packed row's own diagonal (S > 1).
bool Decodes(const AttentionSize& z, const AttentionOptions& o) {
  return z.hq / z.hkv * z.s <= 64 && (!o.causal || z.s == 1);
}

// On sm_100 the same with attention/blackwell's split (its one tiling: a 128-row tile), merged by
// attention/combine.sm100a.
void PlanDecode(const AttentionSize& z, const AttentionOptions& o, int compute_capability,
                AttentionPlan& plan) {
  if (!Decodes(z, o)) return;
  const bool blackwell = compute_capability == 100;
  const char* type = o.dtype == "f16" ? ".f16" : "";
  // One CTA an SM: twice the parts at two an SM (".cta2") adds more fixed cost per part and to the
  // combine than it hides (docs/perf/2026-11-28-decode-split-kv.md, "Two CTAs an SM").
  const char* tiling = blackwell    ? ""
                       : z.d == 64  ? ".wg1.bn128.st4"
                       : z.d == 128 ? ".wg1.bn128.st3"
                                    : ".wg1.bn64.st2";  // as much ring as shared memory holds
  const int64_t block_n = z.d == 256 ? 64 : 128, key_tiles = (z.skv + block_n - 1) / block_n;
  plan.kernel =
      absl::StrCat(blackwell ? "attention/blackwell.d" : "attention/hopper.d", z.d, type, tiling,
                   z.page   ? absl::StrCat(".page", z.page)
                   : z.lens ? ".lens"
                            : "",
                   ".split");
  plan.size = z;  // (its lengths and pages too)
  plan.size.hq = z.hkv, plan.size.s = z.hq / z.hkv * z.s;
  plan.splits = static_cast<int>(std::clamp<int64_t>(
      (blackwell ? kBlackwellSms : kSms) / (z.b * z.hkv), 1, std::max<int64_t>(1, key_tiles / 2)));
  if (plan.splits > 1)
    plan.combine = absl::StrCat("attention/combine", type, blackwell ? ".sm100a" : "");
}

// Prefill over a KV cache (sequences of their own lengths, or paged): S query rows a sequence,
// each sequence's causal diagonal its own (bottom-right aligned to its length: a chunk whose
// earlier keys are in the cache), the default tiling (a CTA per query tile, or a CTA per SM where
// PlanCachePrefill says), but 128-key tiles at D = 128 (pages and key tiles one a multiple of the
// other), and at D = 64 over pages of 16 three K/V stages in place of Q's second: its short steps
// outrun a ring of two that fills with eight boxes a tile (docs/perf/2026-11-28-paged-prefill.md,
// "Pages of 16: the producer's registers, and a third stage at D = 64").
void PlanCachePrefill(const AttentionSize& z, const AttentionOptions& o, AttentionPlan& plan) {
  // A CTA per SM (the longest tiles first) for causal prefill at D = 128, and without a mask (its
  // tiles one stream of steps) over a paged cache; else a CTA per tile
  // (docs/perf/2026-11-28-paged-prefill.md, "A CTA per SM over a paged cache";
  // docs/perf/2026-12-02-packed-tiles-in-l2-order.md; pages of 16 and 32 since
  // docs/perf/2026-12-03-rows-zeroed-in-a-loop.md).
  const bool persist = z.d == 128 && (o.causal || z.page != 0);
  plan.kernel = absl::StrCat("attention/hopper.d", z.d, o.dtype == "f16" ? ".f16" : "",
                             o.causal ? ".causal" : "", z.d == 128 && !o.causal ? ".bn128" : "",
                             z.d == 64 && z.page == 16 ? ".st3" : "", persist ? ".persist" : "",
                             z.page ? absl::StrCat(".page", z.page) : ".lens");
}

}  // namespace

namespace {
// The bytes of a paged problem's K (or V) copied dense, B * Hkv * Skv * D * 2, in double: the
// sizes' product may pass 64 bits where no plan would copy it.
double DenseBytes(const AttentionSize& z) { return 2.0 * z.b * z.hkv * z.skv * z.d; }

// A manifest's arguments, each found by its parameter's name in `named`; one that is not there is
// the entry point's mistake (an internal error naming it).
absl::StatusOr<std::vector<Arg>> ArgsByName(const Manifest& m, const NamedArgs& named) {
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    std::optional<Arg> arg = NamedArg(p, named);
    if (!arg)
      return absl::InternalError(absl::StrCat(
          m.name, ": the attention entry point has no value for its parameter '", p.name, "'"));
    args.push_back(*arg);
  }
  return args;
}

// A paged cache's sizes and block table.
absl::Status CheckPagedCache(const AttentionSize& z, const AttentionOperands& o) {
  if (z.page < 16 || z.page > 4096 || (z.page & (z.page - 1)))
    return Invalid(absl::StrCat("page of ", z.page, " tokens: a power of two from 16 to 4096"));
  if (z.pages < 1 || z.max_pages < 1 || z.skv % z.page || z.max_pages != z.skv / z.page)
    return Invalid(
        absl::StrCat("a paged cache needs pages >= 1, max_pages >= 1 and Skv = "
                     "max_pages * page (got pages ",
                     z.pages, ", max_pages ", z.max_pages, ", Skv ", z.skv, ")"));
  if (z.pages > INT32_MAX / z.page || z.max_pages > INT32_MAX / z.b)  // (no overflow)
    return Invalid("the cache's rows and the block table must fit in 32 bits");
  if (absl::Status s = IndexPointer("block_table", o.block_table, "each sequence's pages"); !s.ok())
    return s;
  return absl::OkStatus();
}

// Whether the override `kernel` computes the problem the plan gave to `planned`: the same options
// but tiling ones (a message naming what differs where not).
absl::Status OverrideComputes(const std::string& planned, const std::string& kernel) {
  std::vector<std::string> want = absl::StrSplit(planned, '.'), got = absl::StrSplit(kernel, '.');
  auto tiling = [](const std::string& o) {  // options that change how, not what, a kernel computes
    if (o == "persist" || o == "lazy" || o == "eager" || o == "cta2" || o == "gather" ||
        o == "wgshfl" || o == "wgtid" || o == "wgdiag" || o == "ctadiag")
      return true;
    for (absl::string_view prefix : {"wg", "bn", "st", "kst"})  // (a count after it)
      if (absl::StartsWith(o, prefix) && o.size() > prefix.size() &&
          std::all_of(o.begin() + prefix.size(), o.end(), ::isdigit))
        return true;
    return false;
  };
  std::vector<std::string> lacks, extra;    // what the problem needs and the override lacks, and
                                            // what the override has that the problem does not
  for (size_t i = 1; i < want.size(); ++i)  // the plan's tiling: the override's own
    if (!tiling(want[i]) && std::find(got.begin() + 1, got.end(), want[i]) == got.end())
      lacks.push_back(want[i]);
  for (size_t i = 1; i < got.size(); ++i)
    if (!tiling(got[i]) && std::find(want.begin() + 1, want.end(), got[i]) == want.end())
      extra.push_back(got[i]);
  if (got[0] != "attention/hopper" && got[0] != "attention/blackwell")
    return Invalid(absl::StrCat("kernel ", kernel,
                                ": not an attention forward kernel (attention/hopper.* or "
                                "attention/blackwell.*; this problem runs ",
                                planned, ")"));
  if (!lacks.empty() || !extra.empty())
    return Invalid(absl::StrCat(
        "kernel ", kernel, " does not compute this problem (",
        lacks.empty() ? "" : absl::StrCat("it lacks .", absl::StrJoin(lacks, ", .")),
        !lacks.empty() && !extra.empty() ? "; " : "",
        extra.empty() ? "" : absl::StrCat("this problem takes no .", absl::StrJoin(extra, ", .")),
        "): it runs ", planned, ", whose tiling options an override may change: wgN, bnN, ",
        "stN, kstN, persist, lazy, eager, cta2, wgshfl, wgtid, wgdiag, ctadiag, gather"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AttentionPlan> PlanAttention(const AttentionSize& z, const AttentionOptions& options,
                                            const AttentionOperands& o, int compute_capability) {
  if (z.b < 1 || z.hq < 1 || z.hkv < 1 || z.s < 1 || z.skv < 1)
    return Invalid(absl::StrCat("B, Hq, Hkv, S and Skv must be at least 1 (got B=", z.b,
                                " Hq=", z.hq, " Hkv=", z.hkv, " S=", z.s, " Skv=", z.skv, ")"));
  if (z.d != 64 && z.d != 128 && z.d != 256)
    return Invalid(absl::StrCat(
        "head dimension D = ", z.d, ": the kernels take 64, 128 or 256",
        z.d >= 1 && z.d < 256
            ? " (q, k and v padded with zeros to the next of them, with the scale of D, give the "
              "same o's first D columns: kiln.attention pads so)"
            : ""));
  if (z.hq % z.hkv)
    return Invalid(absl::StrCat("Hq = ", z.hq, " is not a multiple of Hkv = ", z.hkv,
                                " (grouped-query heads)"));
  // Grid y and z are Hq and B (65535 at most); the maps' rows and heads are 32-bit.
  if (z.hq > 65535 || z.b > 65535) return Invalid(absl::StrCat("Hq and B must be at most 65535"));
  if (z.s > INT32_MAX || z.skv > INT32_MAX || z.b * z.hq > INT32_MAX ||
      z.b * z.hq * z.s > INT32_MAX)
    return Invalid("S, Skv and B * Hq * S must fit in 32 bits");
  if (options.dtype != "bf16" && options.dtype != "f16")
    return Invalid(absl::StrCat("dtype '", options.dtype, "': bf16 or f16"));
  const float scale =
      options.scale == 0 ? 1.0f / std::sqrt(static_cast<float>(z.d)) : options.scale;
  if (!(scale > 0) || !std::isfinite(scale))
    return Invalid(
        absl::StrCat("scale = ", options.scale, ": a finite positive number (0: 1/sqrt(D))"));
  if (!o.q || !o.k || !o.v || !o.o || !o.lse)
    return Invalid("Q, K, V, O and lse need device pointers");
  if (o.q % 16 || o.k % 16 || o.v % 16 || o.o % 16)
    return Invalid("Q, K, V and O are read and written by TMA: 16-byte aligned pointers");
  if (o.lse % 4) return Invalid("lse must be 4-byte aligned");
  if (z.rows) {
    if (z.varlen || z.lens || z.page || compute_capability != 90)
      return Invalid(
          "the rows layout [B, S, H, D] is for dense prefill on sm_90a: no varlen, lens or pages");
    // (TMA: strides in 16-byte steps below 2^40 bytes, the batch's S rows of the stride too.)
    for (const auto& [what, stride, heads, rows] :
         {std::tuple{"q_stride", z.QStride(), z.hq, z.s},
          std::tuple{"kv_stride", z.KvStride(), z.hkv, z.skv},
          std::tuple{"o_stride", z.OStride(), z.hq, z.s}})
      if (stride < heads * z.d || stride % 8 || static_cast<double>(stride) * rows * 2 >= 0x1p40)
        return Invalid(absl::StrCat(what, " = ", stride, ": a position's row of ", heads,
                                    " heads of ", z.d, " (at least ", heads * z.d,
                                    " elements, a multiple of 8 for TMA's 16-byte strides)"));
  }
  if (z.varlen) {
    if (compute_capability != 90)
      return Invalid(absl::StrCat("packed sequences (varlen) run on sm_90a, not sm_",
                                  compute_capability, "a"));
    if (z.lens || z.page || z.s != z.skv || z.total < 1 ||
        z.total > INT32_MAX / std::max<int64_t>(z.hq, 1))
      return Invalid(absl::StrCat(
          "packed sequences (varlen) are self-attention on sm_90a: S = Skv (the longest "
          "sequence), total tokens >= 1 and total * Hq within 32 bits (got S ",
          z.s, ", Skv ", z.skv, ", total ", z.total, ")"));
    if (absl::Status s = IndexPointer("cu_seqlens", o.cu_seqlens, "packed sequences' offsets");
        !s.ok())
      return s;
  }
  if (z.lens || z.page) {
    if (compute_capability != 90)
      return Invalid("sequences of their own lengths and paged caches run on sm_90a");
    if (absl::Status s = IndexPointer("seq_lens", o.seq_lens,
                                      "each sequence's length, which sequences of their own "
                                      "lengths (lens) and paged caches read");
        !s.ok())
      return s;
  }
  if (z.page)
    if (absl::Status s = CheckPagedCache(z, o); !s.ok()) return s;
  if (compute_capability != 90 && compute_capability != 100)
    return Invalid(absl::StrCat(
        "the attention kernels are for sm_90a (H100, H200) and sm_100a (B200); this device is sm_",
        compute_capability));
  AttentionPlan plan;
  plan.kernel =
      absl::StrCat(compute_capability == 100 ? "attention/blackwell.d" : "attention/hopper.d", z.d,
                   options.dtype == "f16" ? ".f16" : "", options.causal ? ".causal" : "");
  // Hopper's tilings, each where it was the fastest tried (docs/perf/2026-11-24-attention.md,
  // steps 9 and 13): persistent CTAs (".persist": a CTA per SM taking query tiles from a counter)
  // at D = 128 and at D = 64 without a mask. Causal D = 64 by the key tiles a query tile sees on
  // average: under 8 (S < 2048) a CTA per tile in two consumer warpgroups, up to 40 (S <= 10240)
  // persistent, beyond that a CTA per tile in three. Without a mask at D = 128, 160-key tiles where
  // they pad Skv by less than their faster steady state gains over 128 (the speeds weighed below).
  const double mean_keys =
      AttentionFlops(z, options.causal) / (4.0 * z.b * z.hq * z.s * z.d);  // a query row sees
  if (compute_capability == 90) {
    auto padded_time = [&](int block_n, double speed) {
      return std::ceil(static_cast<double>(z.skv) / block_n) * block_n / speed;
    };
    if (z.d == 128 && !options.causal && padded_time(160, 1.02) < padded_time(128, 1.0))
      absl::StrAppend(&plan.kernel, ".bn160");
    const bool short_causal_64 = z.d == 64 && options.causal && mean_keys < 8 * 128;
    if (z.d == 128 ||
        (z.d == 64 && (!options.causal || (!short_causal_64 && mean_keys <= 40 * 128))))
      absl::StrAppend(&plan.kernel, ".persist");
    if (short_causal_64) absl::StrAppend(&plan.kernel, ".wg2");
  }
  plan.scale = scale;
  plan.size = z;
  if (z.varlen) {
    // Persistent CTAs at D = 64 and 128 deal the sequences' tiles by rank (B times the longest
    // sequence's tiles, the shorter sequences' missing ranks empty numbers): where lengths are
    // close. Where the ranks would be mostly empty (lengths far apart, as max_seqlen against the
    // total tells), a CTA per tile (docs/perf/2026-11-28-varlen-prefill.md, "Causal tiles dealt
    // by rank"). Either way the kernel counts its tiles itself.
    const int64_t block_m = z.d == 64 ? 192 : 128;  // (hopper.cc's default warpgroups at D)
    const int64_t ranked = z.b * ((z.s + block_m - 1) / block_m),
                  tiles = (z.total + block_m - 1) / block_m + z.b;
    const bool persist = z.d <= 128 && ranked <= 2 * tiles;
    plan.kernel =
        absl::StrCat("attention/hopper.d", z.d, options.dtype == "f16" ? ".f16" : "",
                     options.causal ? ".causal" : "", persist ? ".persist" : "", ".varlen");
  } else if (z.rows) {  // the prefill kernels read and write it (the decode ones pack heads)
    absl::StrAppend(&plan.kernel, ".rows");
  } else if ((z.lens || z.page) && !Decodes(z, options)) {
    if (CopiesPages(z, options)) {
      // The pages copied into dense K and V, then the dense plan's tiling over sequences of their
      // own lengths (docs/perf/2026-12-03-paged-prefill-over-a-dense-copy.md).
      // (The copy's threads take 16 bytes each, by 32-bit indices.)
      const double bytes = DenseBytes(z);
      if (bytes / 16 > INT32_MAX)
        return Invalid(absl::StrCat(
            "kernel ", options.kernel, ": the paged cache copied dense takes ", bytes,
            " bytes a tensor, past the copy's 32 GiB; run a paged kernel (the plan's, without ",
            "the override)"));
      plan.paged = z;
      plan.size.page = plan.size.pages = plan.size.max_pages = 0;
      plan.size.lens = true;
      plan.copy_pages = absl::StrCat("attention/dense_from_pages.d", z.d);
      absl::StrAppend(&plan.kernel, ".lens");
    } else {
      PlanCachePrefill(z, options, plan);
    }
  } else if (options.kernel.empty() || z.lens || z.page ||
             absl::StrContains(options.kernel, ".split")) {  // (an override's parts planned too)
    PlanDecode(z, options, compute_capability, plan);
  }
  if (!options.kernel.empty()) {
    if (absl::Status s = OverrideComputes(plan.kernel, options.kernel); !s.ok()) return s;
    plan.kernel = options.kernel;
  }
  return plan;
}

bool CopiesPages(const AttentionSize& z, const AttentionOptions& o) {
  if (!z.page || Decodes(z, o)) return false;
  if (!o.kernel.empty()) return absl::StrContains(o.kernel, ".lens");
  const double rows = AttentionFlops(z, o.causal) / (2.0 * DenseBytes(z));
  return z.page <= MostCopiedPage(z.d) && rows >= kLeastCopiedRows &&
         2 * DenseBytes(z) <= kMostCopiedBytes;  // (K and V)
}

// (A plan copies at most 32 GiB a tensor: exact in a double, within int64.)
int64_t CopiedBytes(const AttentionSize& z) { return static_cast<int64_t>(DenseBytes(z)); }

absl::StatusOr<std::vector<Arg>> CopyPagesArgs(const Manifest& m, const AttentionPlan& plan,
                                               const AttentionOperands& o, cu::CUdeviceptr k,
                                               cu::CUdeviceptr v) {
  const AttentionSize& z = plan.paged;
  return ArgsByName(m, {.i32 = {{"Hkv", z.hkv},
                                {"Skv", z.skv},
                                {"page", z.page},
                                {"max_pages", z.max_pages},
                                {"pages", z.pages}},
                        .i64 = {{"units", CopiedBytes(z) / 16}},
                        .pointers = {{"K_pages", o.k},
                                     {"V_pages", o.v},
                                     {"block_table", o.block_table},
                                     {"seq_lens", o.seq_lens},
                                     {"K", k},
                                     {"V", v}}});
}

bool FoldsSplits(const Manifest& m, const AttentionSize& z) {
  const bool has = std::any_of(m.params.begin(), m.params.end(),
                               [](const ParamSpec& p) { return p.name == "fold"; });
  return has && z.b * z.hq * ((z.s + 63) / 64) <= kFoldedTiles;
}

absl::StatusOr<std::vector<Arg>> AttentionArgs(const Manifest& m, const AttentionSize& z,
                                               float scale, const AttentionOperands& o, int splits,
                                               const FoldedOutputs* fold) {
  const int64_t block_m = std::max<int64_t>(AttentionBlockM(m), 1);
  const std::map<std::string, int64_t> ints = {{"B", z.b},
                                               {"Hq", z.hq},
                                               {"Hkv", z.hkv},
                                               {"S", z.s},
                                               {"Skv", z.skv},
                                               {"P", splits},
                                               {"max_pages", z.max_pages},
                                               {"slots", z.pages * z.page},
                                               {"T", z.total},
                                               {"q_stride", z.QStride()},
                                               {"kv_stride", z.KvStride()},
                                               {"o_stride", z.OStride()},
                                               // varlen: a bound on the sequences' query tiles
                                               {"tiles", (z.total + block_m - 1) / block_m + z.b},
                                               {"fold", fold ? 1 : 0}};
  const std::map<std::string, cu::CUdeviceptr> maps = {
      {"Q", o.q}, {"K", o.k}, {"V", o.v}, {"O", o.o}};
  std::vector<Arg> args;
  for (const ParamSpec& p : m.params) {
    using Kind = ParamSpec::Kind;
    if (p.kind == Kind::kI32 && ints.count(p.name)) {
      args.push_back(Arg::I32(static_cast<int32_t>(ints.at(p.name))));
    } else if (p.kind == Kind::kF32 && p.name == "scale") {
      args.push_back(Arg::F32(scale));
    } else if (p.kind == Kind::kPointer && p.name == "lse") {
      args.push_back(Arg::Ptr(o.lse));
    } else if (p.kind == Kind::kPointer && (p.name == "seq_lens" || p.name == "block_table")) {
      args.push_back(Arg::Ptr(p.name == "seq_lens" ? o.seq_lens : o.block_table));
    } else if (p.kind == Kind::kPointer &&
               (p.name == "O_parts" || p.name == "O_out" || p.name == "lse_out")) {
      // (a split kernel's parts, and where it merges them; unread where it does not fold)
      args.push_back(Arg::Ptr(p.name == "O_parts" ? o.o
                              : p.name == "O_out" ? (fold ? fold->o : o.o)
                                                  : (fold ? fold->lse : o.lse)));
    } else if (p.kind == Kind::kPointer && p.name == "cu_seqlens") {
      args.push_back(Arg::Ptr(o.cu_seqlens));
    } else if (p.kind == Kind::kPointer && maps.count(p.name)) {
      // (varlen's partial tiles of O; the rows of a paged cache gathered by threads)
      args.push_back(Arg::Ptr(maps.at(p.name)));
    } else if (p.kind == Kind::kTensorMap && maps.count(p.tensor_map.tensor)) {
      args.push_back(Arg::Tensor(maps.at(p.tensor_map.tensor)));
    } else if (p.kind == Kind::kWorkspace) {
      args.push_back(Arg::Workspace());  // the kernel's tile counter, kept by the launcher
    } else {
      return absl::InternalError(absl::StrCat(m.name, " (", m.source,
                                              "): the attention entry point has no value for its ",
                                              ParamKindName(p.kind), " parameter '", p.name, "'"));
    }
  }
  return args;
}

int64_t AttentionBlockM(const Manifest& m) {
  const std::string* text = m.Attribute("attention");
  const size_t at = text ? text->find("block_m=") : std::string::npos;
  return at == std::string::npos ? 0 : std::atoll(text->c_str() + at + 8);
}

int64_t PartsOBytes(const AttentionPlan& p) {
  return int64_t{p.splits} * p.size.b * p.size.hq * p.size.s * p.size.d * 2;
}
int64_t PartsLseBytes(const AttentionPlan& p) {
  return int64_t{p.splits} * p.size.b * p.size.hq * p.size.s * 4;
}

absl::StatusOr<std::vector<Arg>> CombineArgs(const Manifest& m, const AttentionPlan& plan,
                                             cu::CUdeviceptr o_parts, cu::CUdeviceptr lse_parts,
                                             cu::CUdeviceptr o, cu::CUdeviceptr lse) {
  const AttentionSize& z = plan.size;
  const int64_t rows = z.b * z.hq * z.s;
  return ArgsByName(
      m, {.i32 = {{"rows", rows}, {"P", plan.splits}, {"D", z.d}},
          .i64 = {{"units", rows * z.d / 8}},
          .pointers = {{"O_parts", o_parts}, {"lse_parts", lse_parts}, {"O", o}, {"lse", lse}}});
}

absl::Status RunAttention(const AttentionSize& size, const AttentionOptions& options,
                          const AttentionOperands& operands, int compute_capability,
                          OpDevice& device) {
  absl::StatusOr<AttentionPlan> plan = PlanAttention(size, options, operands, compute_capability);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<const Manifest*> manifest = device.ManifestOf(plan->kernel);
  if (!manifest.ok()) return manifest.status();
  AttentionOperands o = operands;
  if (!plan->copy_pages.empty()) {  // the pages into dense K and V first
    absl::StatusOr<const Manifest*> copy = device.ManifestOf(plan->copy_pages);
    if (!copy.ok()) return copy.status();
    absl::StatusOr<uint64_t> k = device.Scratch(3, CopiedBytes(plan->paged)),
                             v = device.Scratch(4, CopiedBytes(plan->paged));
    if (!k.ok()) return k.status();
    if (!v.ok()) return v.status();
    absl::StatusOr<std::vector<Arg>> args = CopyPagesArgs(**copy, *plan, operands, *k, *v);
    if (!args.ok()) return args.status();
    if (absl::Status st = device.Launch(plan->copy_pages, *std::move(args)); !st.ok()) return st;
    o.k = *k, o.v = *v, o.block_table = 0;
  }
  // The parts go to scratch; the split kernel's last part of each tile merges them into O and
  // lse (FoldsSplits), or attention/combine does after it.
  if (plan->splits > 1) {
    absl::StatusOr<uint64_t> o_parts = device.Scratch(0, PartsOBytes(*plan)),
                             lse_parts = device.Scratch(1, PartsLseBytes(*plan));
    if (!o_parts.ok()) return o_parts.status();
    if (!lse_parts.ok()) return lse_parts.status();
    o.o = *o_parts, o.lse = *lse_parts;
  }
  const bool fold = plan->splits > 1 && FoldsSplits(**manifest, plan->size);
  const FoldedOutputs merged{operands.o, operands.lse};
  absl::StatusOr<std::vector<Arg>> args =
      AttentionArgs(**manifest, plan->size, plan->scale, o, plan->splits, fold ? &merged : nullptr);
  if (!args.ok()) return args.status();
  if (absl::Status st = device.Launch(plan->kernel, *std::move(args)); !st.ok()) return st;
  if (plan->splits == 1 || fold) return absl::OkStatus();
  absl::StatusOr<const Manifest*> combine = device.ManifestOf(plan->combine);
  if (!combine.ok()) return combine.status();
  absl::StatusOr<std::vector<Arg>> merge =
      CombineArgs(**combine, *plan, o.o, o.lse, operands.o, operands.lse);
  if (!merge.ok()) return merge.status();
  return device.Launch(plan->combine, *std::move(merge));
}

double AttentionFlops(const AttentionSize& z, bool causal) {
  const double pairs = static_cast<double>(z.s) * z.skv;
  double kept = pairs;
  if (causal) {  // query i sees min(Skv, max(0, i + 1 + Skv - S)) keys
    kept = 0;
    for (int64_t i = 0; i < z.s; ++i)
      kept += std::min<double>(z.skv, std::max<double>(0, i + 1 + z.skv - z.s));
  }
  return 4.0 * z.b * z.hq * kept * z.d;
}

absl::Status AttentionRunner::Run(const AttentionSize& size, const AttentionOptions& options,
                                  const AttentionOperands& operands, cu::CUstream stream) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  GpuOpDevice device(kernels_, stream, [&](int which, size_t bytes) {
    return scratch_.Get(
        stream, which, bytes,
        which >= 3 ? absl::StrCat("kiln attention: the paged cache's ", which == 3 ? "K" : "V",
                                  " copied dense")
                   : absl::StrCat("kiln attention: split-KV's parts of ", which ? "lse" : "O"));
  });
  const int cc = (*d)->compute_capability();
  return device.RunRemembered(
      memo_, AttentionCallKey('f', size, options, operands, cc, (*d)->context(), stream),
      [&] { return RunAttention(size, options, operands, cc, device); });
}

}  // namespace kiln::rt
