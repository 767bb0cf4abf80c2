#include "kiln/bundle/manifest.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_replace.h"
#include "examples/gemm_spec.h"
#include "gtest/gtest.h"
#include "kiln/bundle/args.h"
#include "kiln/bundle/schedule.h"

namespace kiln::rt {
namespace {

Manifest Sample() {
  Manifest m;
  m.name = "hopper/k01";
  m.entry = "hopper_k01";
  m.target = "sm_90a";
  m.block = {128, 1, 1};
  m.cluster = {2, 1, 1};
  m.smem_bytes = 8192;
  m.grid[0] = *GridExpr::Parse("N/128");
  m.grid[1] = *GridExpr::Parse("M/128");
  m.grid[2] = *GridExpr::Parse("1");
  m.params = {{"A", ParamSpec::Kind::kPointer},
              {"M", ParamSpec::Kind::kI32},
              {"N", ParamSpec::Kind::kI32}};
  m.requirements = {{"M", 128, "examples/hopper/k01_warptiling.cc:21"}};
  m.attributes = {{"gemm", "bf16 bf16 f32 row col col 128 128 16 examples/hopper/k01_warptiling.cc:21"}};
  m.source = "examples/hopper/k01_warptiling.cc:20";
  return m;
}

TEST(Manifest, ScalarParamsAndNonGemmKernelsRoundTrip) {
  Manifest m = Sample();
  m.attributes.clear();
  m.params = {{"x", ParamSpec::Kind::kPointer}, {"a", ParamSpec::Kind::kF32}, {"n", ParamSpec::Kind::kI64}};
  m.grid[0] = *GridExpr::Parse("n/256");
  m.grid[1] = *GridExpr::Parse("1");
  m.requirements.clear();
  const std::string text = m.Serialize();
  EXPECT_NE(text.find("param a f32\nparam n i64\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("gemm "), std::string::npos) << text;  // no GEMM description to check
  absl::StatusOr<Manifest> back = Manifest::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(examples::GemmOf(*back));
  EXPECT_EQ(back->params[1].kind, ParamSpec::Kind::kF32);
  EXPECT_EQ(back->params[2].kind, ParamSpec::Kind::kI64);
  EXPECT_TRUE(examples::GemmOf(*Manifest::Parse(Sample().Serialize())));
  absl::StatusOr<Manifest> bad = Manifest::Parse(absl::StrReplaceAll(text, {{"param a f32", "param a f16"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad param kind (ptr, i32, i64, f32"), std::string::npos) << bad.status();
}

TEST(Manifest, PointersNameTheirElementType) {
  Manifest m = Sample();
  m.params[0].elem = "bf16";
  const std::string text = m.Serialize();
  EXPECT_NE(text.find("param A ptr bf16\n"), std::string::npos) << text;
  absl::StatusOr<Manifest> back = Manifest::Parse(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->params[0].elem, "bf16");
  // A manifest written before pointers named their type still reads, the type unknown.
  back = Manifest::Parse(absl::StrReplaceAll(text, {{"param A ptr bf16", "param A ptr"}}));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->params[0].elem, "");
  absl::StatusOr<Manifest> bad =
      Manifest::Parse(absl::StrReplaceAll(text, {{"param A ptr bf16", "param A ptr f64"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad pointer element type"), std::string::npos) << bad.status();
}

TEST(Manifest, RoundTrips) {
  const Manifest m = Sample();
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Serialize(), m.Serialize());
  EXPECT_EQ(back->cluster.x, 2u);
  EXPECT_EQ(back->params[1].kind, ParamSpec::Kind::kI32);
  EXPECT_EQ(examples::GemmOf(*back)->c_order, "col");
  EXPECT_EQ(back->requirements.at(0).multiple, 128);
  EXPECT_EQ(*back->Attribute("gemm"), *m.Attribute("gemm"));
  EXPECT_EQ(back->Attribute("nothing"), nullptr);
}

TEST(Manifest, AGridTheClustersDoNotTileNamesBothRules) {
  Manifest m = Sample();
  m.cluster = {4, 1, 1};
  m.cluster_source = "k.cc:12";
  m.grid_source = "k.cc:10";
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->cluster_source, "k.cc:12");
  EXPECT_TRUE(back->CheckClusterTiling({8, 3, 1}).ok());
  EXPECT_EQ(back->CheckClusterTiling({6, 3, 1}).message(),
            "k.cc:12: hopper/k01: clusters of 4x1x1 (ClusterDims) do not tile a grid of 6x3x1: x = 6 is no multiple of 4; the grid rule (k.cc:10) gives x as \"N/128\": \"N/512*4\" covers as much in whole clusters");
  m.cluster = {1, 2, 1};
  m.grid[1] = *GridExpr::Parse("sms");
  EXPECT_NE(m.CheckClusterTiling({6, 3, 1}).message().find("gives y as \"sms\": \"sms/2*2\" covers"), std::string::npos);
  m.grid[1] = *GridExpr::Parse("M/64*N/64");
  EXPECT_NE(m.CheckClusterTiling({6, 3, 1}).message().find("gives y as \"M/64*N/64\": make it a multiple of the cluster's"), std::string::npos);
  // A bundle written before the line was recorded names the kernel.
  m.cluster_source.clear();
  m.grid_source.clear();
  EXPECT_EQ(m.CheckClusterTiling({6, 3, 1}).message(),
            "examples/hopper/k01_warptiling.cc:20: hopper/k01: clusters of 1x2x1 (ClusterDims) do not tile a grid of 6x3x1: y = 3 is no multiple of 2");
}

TEST(Manifest, ABoundFromAboveNamesItsLine) {
  Manifest m = Sample();
  m.requirements.push_back({"N", 1, "k.cc:7", 1024});
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(m.Serialize().find("require_at_most N 1024 k.cc:7\n"), std::string::npos) << m.Serialize();
  EXPECT_EQ(back->Serialize(), m.Serialize());
  EXPECT_TRUE(back->CheckRequirements({{"M", 128}, {"N", 1024}}).ok());
  EXPECT_EQ(back->CheckRequirements({{"M", 128}, {"N", 1500}}).message(),
            "k.cc:7: hopper/k01 requires N to be at most 1024; it is 1500");
  EXPECT_FALSE(Manifest::Parse(absl::StrReplaceAll(m.Serialize(), {{"require_at_most N 1024", "require_at_most N -1"}})).ok());
}

TEST(Manifest, RequirementsNameTheirLine) {
  const Manifest m = Sample();
  EXPECT_TRUE(m.CheckRequirements({{"M", 256}}).ok());
  absl::Status s = m.CheckRequirements({{"M", 1000}});
  EXPECT_EQ(s.message(), "examples/hopper/k01_warptiling.cc:21: hopper/k01 requires M to be a multiple of 128; it is 1000");
  EXPECT_FALSE(m.CheckRequirements({}).ok());
}

TEST(Manifest, DynamicSmemIsARuleOfTheArguments) {
  Manifest m = Sample();
  m.params.push_back({"cols", ParamSpec::Kind::kI64});
  EXPECT_EQ(m.SmemBytes({{"cols", 1000}}), 8192);
  m.smem_extra = *GridExpr::Parse("cols*4");
  m.smem_extra_source = "x.cc:7";
  EXPECT_EQ(m.SmemBytes({{"cols", 1000}}), 8192 + 4000);
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SmemBytes({{"cols", 10}}), 8192 + 40);
  EXPECT_EQ(back->smem_extra_source, "x.cc:7");
  m.params.pop_back();  // a rule of no parameter is refused as the manifest is read
  absl::StatusOr<Manifest> orphan = Manifest::Parse(m.Serialize());
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(orphan.status().message().find("smem_extra rule cols*4 names cols"), std::string::npos)
      << orphan.status();
}

TEST(Manifest, RejectsGarbage) {
  EXPECT_FALSE(Manifest::Parse("").ok());
  EXPECT_FALSE(Manifest::Parse("hello\n").ok());
  // A manifest edited by hand: no block or grid line (1 x 1 x 1 would run a part of the work),
  // a block past CUDA's 1024 threads (the emulator would run it), a target kiln does not know.
  const std::string good = Sample().Serialize();
  for (const auto& [from, to, says] :
       {std::tuple{"block 128 1 1\n", "", "lacks name, entry, target, block or grid"},
        std::tuple{"grid N/128 M/128 1\n", "", "lacks name, entry, target, block or grid"},
        std::tuple{"block 128 1 1", "block 2048 1 1", "past CUDA's 1024"},
        std::tuple{"block 128 1 1", "block 4 4 128", "past CUDA's 1024"},
        std::tuple{"target sm_90a", "target sm_75", "target sm_75 (sm_80, sm_90a or sm_100a)"},
        // A rule or requirement naming no integer parameter: it would read as 0 at launch.
        std::tuple{"grid N/128 M/128 1", "grid N/128 rows/128 1",
                   "grid rule rows/128 names rows, which is not an integer parameter of the "
                   "kernel (it has M, N)"},
        std::tuple{"require M 128", "require K 128", "requirement names K"},
        // A dimension left out before the rule's line: the line is named as no dimension.
        std::tuple{"grid N/128 M/128 1", "grid N/128 1 kernel.cc:14",
                   "'kernel.cc:14' is no grid dimension: a grid line is three dimensions"}}) {
    ASSERT_NE(good.find(from), std::string::npos) << from;
    absl::StatusOr<Manifest> bad = Manifest::Parse(absl::StrReplaceAll(good, {{from, to}}));
    ASSERT_FALSE(bad.ok()) << from;
    EXPECT_NE(bad.status().message().find(says), std::string::npos) << bad.status();
  }
  std::string text = Sample().Serialize() + "smem lots\n";
  absl::StatusOr<Manifest> bad = Manifest::Parse(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("manifest line"), std::string::npos);
}

TEST(Manifest, WatchdogSitesRoundTripInOrder) {
  Manifest m = Sample();
  m.watchdog_ms = 250;
  m.watch_sites = {"a.cc:10", "b.cc:20"};
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->watchdog_ms, 250);
  EXPECT_EQ(back->watch_sites, m.watch_sites);
  std::string text = Sample().Serialize() + "watch 1 b.cc:20\n";  // site 0 missing
  EXPECT_NE(Manifest::Parse(text).status().message().find("watch sites out of order"), std::string::npos);
  EXPECT_FALSE(Manifest::Parse(Sample().Serialize() + "watchdog 0\n").ok());
}

TEST(Manifest, ProgrammaticLaunchRoundTrips) {
  Manifest m = Sample();
  EXPECT_FALSE(Manifest::Parse(m.Serialize())->waits_for_prior_grids);
  m.waits_for_prior_grids = true;
  absl::StatusOr<Manifest> back = Manifest::Parse(m.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->waits_for_prior_grids);
  EXPECT_FALSE(Manifest::Parse(Sample().Serialize() + "waits_for_prior_grids 1\n").ok());
}

TEST(GridExpr, EvaluatesProductsAndCeilings) {
  absl::StatusOr<GridExpr> g = GridExpr::Parse("M/128*N/256");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g->Evaluate({{"M", 1000}, {"N", 512}}, 132), 8u * 2u);  // ceil(1000/128) = 8
  EXPECT_EQ(*GridExpr::Parse("sms")->Evaluate({}, 132), 132u);
  // sms/D rounds down: the largest multiple of 2 CTAs for persistent pairs.
  EXPECT_EQ(*GridExpr::Parse("sms/2*2")->Evaluate({}, 133), 132u);
  EXPECT_EQ(*GridExpr::Parse("sms/2*2")->Evaluate({}, 148), 148u);
  EXPECT_EQ(GridExpr::Parse("M/128*sms*N")->SymbolNames(), (std::vector<std::string>{"M", "N"}));
  EXPECT_EQ(GridExpr::Parse("N/128*M/128")->ToString(), "N/128*M/128");
  EXPECT_FALSE(GridExpr::Parse("2Q/2").ok());  // a symbol is an identifier
  EXPECT_FALSE(GridExpr::Parse("rows-1").ok());
  EXPECT_FALSE(GridExpr::Parse("M/0").ok());
  // Any integer parameter's name, evaluated from the launch's values.
  EXPECT_EQ(*GridExpr::Parse("rows/16*2")->Evaluate(Symbols{{"rows", 33}}, 132), 6u);
  absl::StatusOr<unsigned> missing = GridExpr::Parse("rows/16")->Evaluate(Symbols{{"cols", 33}}, 132);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "grid dimension rows/16 needs rows, which has no value here");
}

// A hand-written rule whose product passes int64 is refused as too large, not wrapped into a
// value the range check passes (2^32 * 2^32 wrapped to 0, and 2^62 * 4 to a negative); the
// rounding up of a value near int64's end does not wrap either.
TEST(GridExpr, AProductPastInt64IsRefusedNotWrapped) {
  const int64_t big = int64_t{1} << 32;
  absl::StatusOr<unsigned> wrapped = GridExpr::Parse("A*B*3")->Evaluate({{"A", big}, {"B", big}}, 132);
  ASSERT_FALSE(wrapped.ok());
  EXPECT_NE(wrapped.status().message().find("2^63 or more"), std::string::npos) << wrapped.status();
  EXPECT_EQ(GridExpr::Parse("A/2")->Value({{"A", std::numeric_limits<int64_t>::max()}}, 132),
            std::numeric_limits<int64_t>::max() / 2 + 1);
  EXPECT_EQ(GridExpr::Parse("A*B")->Value({{"A", -big}, {"B", big * 4}}, 132),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*GridExpr::Parse("A/3")->Evaluate({{"A", 7}}, 132), 3u);
  // Two sizes below 0 would multiply to a grid: a size below 0 is refused by name.
  absl::StatusOr<unsigned> negative =
      GridExpr::Parse("M/128*N/128")->Evaluate({{"M", -1000}, {"N", -1000}}, 132);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("reads M = -1000: a size is 0 or more"),
            std::string::npos)
      << negative.status();
}

TEST(Manifest, UntileableSizeNamesKernelAndLine) {
  const Manifest m = Sample();
  const examples::GemmSpec g = *examples::GemmOf(m);
  absl::Status s = examples::CheckProblem(m, g, {1000, 4096, 4096});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "hopper/k01 cannot tile M=1000: it takes M, N and K in multiples of 128x128x16 "
            "(examples/hopper/k01_warptiling.cc:21), so M must be a multiple of 128");
  EXPECT_TRUE(examples::CheckProblem(m, g, {256, 128, 32}).ok());
  absl::StatusOr<Dim3> grid = examples::GemmGrid(m, g, {256, 512, 32}, 132);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->x, 4u);
  EXPECT_EQ(grid->y, 2u);
}

TEST(Bundle, WritesReadsAndLists) {
  const std::string dir = ::testing::TempDir() + "/kiln_bundles";
  std::filesystem::remove_all(dir);
  Bundle b{Sample(), ".version 8.0\n"};
  ASSERT_TRUE(WriteBundle(dir, b).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/hopper.k01.manifest"));
  absl::StatusOr<Bundle> back = ReadBundle(dir, "hopper/k01");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ptx, b.ptx);
  EXPECT_EQ(*ListBundles(dir), std::vector<std::string>{"hopper/k01"});
  absl::StatusOr<Bundle> missing = ReadBundle(dir, "hopper/k99");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  // The files' name typed as the kernel's: not found, naming the kernel.
  absl::StatusOr<Bundle> dotted = ReadBundle(dir, "hopper.k01");
  EXPECT_TRUE(absl::IsNotFound(dotted.status())) << dotted.status();
  EXPECT_NE(dotted.status().message().find("the kernel is 'hopper/k01'"), absl::string_view::npos)
      << dotted.status();
  // A manifest filed under another kernel's name (copied and edited by hand) is refused, and so
  // is a bundle without its PTX, each saying so rather than that the kernel is unknown.
  std::filesystem::copy_file(dir + "/hopper.k01.manifest", dir + "/hopper.k02.manifest");
  absl::StatusOr<Bundle> renamed = ReadBundle(dir, "hopper/k02");
  ASSERT_FALSE(renamed.ok());
  EXPECT_NE(renamed.status().message().find("describes kernel 'hopper/k01', not 'hopper/k02'"),
            absl::string_view::npos) << renamed.status();
  std::filesystem::remove(dir + "/hopper.k01.ptx");
  absl::StatusOr<Bundle> no_ptx = ReadBundle(dir, "hopper/k01");
  EXPECT_FALSE(absl::IsNotFound(no_ptx.status())) << no_ptx.status();
  EXPECT_NE(no_ptx.status().message().find("has its manifest but not its PTX"),
            absl::string_view::npos) << no_ptx.status();
  EXPECT_NE(ReadBundle(dir + "/none", "hopper/k01").status().message().find("is not a directory"),
            absl::string_view::npos);
}

// A bundle written again replaces both files whole (each renamed into place), leaving nothing
// beside them; a file where its PTX goes (a directory) is a message, and nothing is left half-made.
TEST(Bundle, WrittenAgainReplacesItsFilesWhole) {
  const std::string dir = ::testing::TempDir() + "/kiln_bundles_again";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteBundle(dir, {Sample(), ".version 8.0\n"}).ok());
  ASSERT_TRUE(WriteBundle(dir, {Sample(), ".version 8.7\n"}).ok());
  absl::StatusOr<Bundle> back = ReadBundle(dir, "hopper/k01");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ptx, ".version 8.7\n");
  auto files = [&dir] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  EXPECT_EQ(files(), (std::vector<std::string>{"hopper.k01.manifest", "hopper.k01.ptx"}));
  std::filesystem::remove(dir + "/hopper.k01.ptx");
  std::filesystem::create_directory(dir + "/hopper.k01.ptx");
  std::filesystem::create_directory(dir + "/hopper.k01.ptx/x");
  absl::Status s = WriteBundle(dir, {Sample(), ".version 8.0\n"});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot write " + dir + "/hopper.k01.ptx"), std::string::npos) << s;
  EXPECT_EQ(files(), (std::vector<std::string>{"hopper.k01.manifest", "hopper.k01.ptx"}));
}

}  // namespace
}  // namespace kiln::rt

namespace kiln::rt {
namespace {
TEST(Manifest, TensorMapAndTableParamsRoundTrip) {
  const std::string text =
      "kiln-bundle 1\nname hopper/x\nentry x\ntarget sm_90a\nblock 384 1 1\ncluster 2 1 1\n"
      "smem 1024\ngrid 128 1 1\nparam tmA tmap A value bf16 64,M,K/64 K*2,128 64,128,1 128B\n"
      "param s table hilbert M/256 N/256 64 128\nparam tmX tmap x value f32 - - 32,8 none\n"
      "param M i32\nparam N i32\nparam K i32\nsource x.cc:1\n";
  absl::StatusOr<Manifest> m = Manifest::Parse(text);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->params.size(), 6u);
  const TensorMapParam& t = m->params[0].tensor_map;
  EXPECT_EQ(t.BoxBytes(), 64 * 128 * 2);
  TensorMapSpec spec = t.Resolve({{"M", 4096}, {"N", 2048}, {"K", 1024}});
  EXPECT_EQ(spec.dims, (std::vector<uint64_t>{64, 4096, 16}));
  EXPECT_EQ(spec.strides_bytes, (std::vector<uint64_t>{2048, 128}));
  EXPECT_EQ(m->params[1].schedule.groups, 64);
  EXPECT_EQ(m->params[1].schedule.tiles_m.Value({{"M", 1000}}, 0), 4);
  EXPECT_TRUE(m->params[2].tensor_map.bound_at_launch());
  EXPECT_EQ(m->params[2].tensor_map.rank(), 2);
  EXPECT_EQ(Manifest::Parse(m->Serialize())->Serialize(), m->Serialize());
  EXPECT_FALSE(Manifest::Parse(text + "param b tmap B value bf16 64,M K*2,128 64,128,1 128B\n").ok());
  // A map's own line, where the bundle recorded it (older bundles have none): kept, and what its
  // launch errors name, as an array too small for its sizes.
  absl::StatusOr<Manifest> lined =
      Manifest::Parse(text + "param tmB tmap B value bf16 64,N 128 64,128 128B y.cc:7\n");
  ASSERT_TRUE(lined.ok()) << lined.status();
  EXPECT_EQ(lined->params.back().tensor_map.source, "y.cc:7");
  EXPECT_EQ(m->params[0].tensor_map.source, "");
  EXPECT_EQ(Manifest::Parse(lined->Serialize())->Serialize(), lined->Serialize());
  TensorMapSpec wraps;  // (a span past 2^64 bytes: no array holds it)
  wraps.dims = {8, 3}, wraps.strides_bytes = {uint64_t{1} << 63};
  EXPECT_EQ(TensorMapSpanBytes(wraps), UINT64_MAX);
  wraps.dims = {8, 2};
  EXPECT_EQ(TensorMapSpanBytes(wraps), (uint64_t{1} << 63) + 16);
  // A source path with spaces (a project in "My Kernels/") stays one word of its lines.
  Manifest spaced = *lined;
  spaced.source = "My Kernels/a 100%.cc:3";
  spaced.params.back().tensor_map.source = "My Kernels/a 100%.cc:9";
  spaced.requirements.push_back({"M", 64, "My Kernels/a 100%.cc:12"});
  absl::StatusOr<Manifest> back = Manifest::Parse(spaced.Serialize());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->source, "My Kernels/a 100%.cc:3");
  EXPECT_EQ(back->params.back().tensor_map.source, "My Kernels/a 100%.cc:9");
  EXPECT_EQ(back->requirements.back().source, "My Kernels/a 100%.cc:12");
  const Symbols sizes = {{"M", 128}, {"N", 256}, {"K", 64}};
  EXPECT_TRUE(TensorOfArg(*lined, 6, Arg::Tensor(1024).Holding(256 * 128), sizes).ok());
  const absl::StatusOr<TensorMapSpec> small =
      TensorOfArg(*lined, 6, Arg::Tensor(1024).Holding(256 * 128 - 2), sizes);
  EXPECT_EQ(small.status().message(),
            "y.cc:7: hopper/x: tensor map tmB over B: its sizes (64 x 256 elements, innermost "
            "first) reach 32768 bytes from its address, but the array given holds 32766 (an array "
            "smaller than the kernel's sizes say)");
  EXPECT_NE(TensorOfArg(*m, 0, Arg::Tensor(1024).Holding(0), sizes).status().message().find(
                "x.cc:1: hopper/x: tensor map tmA over A"),
            std::string::npos);
  // A negative size resolves to a huge dimension: refused as the driver would, saying so (it ran
  // on the emulator, every row masked).
  EXPECT_TRUE(ValidateTensorMap(spec, 0).ok());
  TensorMapSpec negative = t.Resolve({{"M", -5}, {"N", 2048}, {"K", 1024}});
  const absl::Status bad = ValidateTensorMap(negative, 0);
  EXPECT_NE(bad.message().find("tensor map dim 1 is -5: 1 to 2^32 elements (a negative size?)"),
            std::string::npos)
      << bad;
}

TEST(Schedule, HilbertVisitsEveryTileOnce) {
  absl::StatusOr<std::vector<int32_t>> t = HilbertSchedule(6, 4, 5, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  std::set<int32_t> seen;
  for (int32_t e : *t) if (e >= 0) EXPECT_TRUE(seen.insert(e).second) << e;
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_FALSE(HilbertSchedule(64, 64, 2, 8).ok());  // 2048 tiles do not fit 2 x 7 slots
}

// Every k-tile of every tile once, a split tile's parts numbered in k order with one run of
// partial slots, and no group over its slots: whole tiles, split-K, stream-K.
void ExpectCoversEveryKTileOnce(int64_t tiles_m, int64_t tiles_n, int64_t k_tiles, int64_t split, int groups) {
  const int slots = 64;
  absl::StatusOr<WorkTable> t = WorkSchedule(tiles_m, tiles_n, k_tiles, split, groups, slots);
  ASSERT_TRUE(t.ok()) << t.status();
  std::map<int32_t, std::vector<std::array<int32_t, 4>>> by_tile;
  ASSERT_LE(t->words[0], slots);
  ASSERT_EQ(t->words.size(), (1 + static_cast<size_t>(groups) * t->words[0]) * kWorkWords);
  for (int g = 0; g < groups; ++g)
    for (int u = 0; u < t->words[0]; ++u) {
      const int32_t* w = t->Entry(g, u);
      if (w[0] == -1) break;
      ASSERT_LT(u + 1, t->words[0]) << "group " << g << ": no end mark in its row";
      by_tile[w[0]].push_back({w[1] >> 16, w[1] & 0xffff, w[2], w[3]});
    }
  ASSERT_EQ(by_tile.size(), static_cast<size_t>(tiles_m * tiles_n)) << "split " << split;
  std::set<int32_t> first_slots;
  int64_t partials = 0;
  for (auto& [tile, units] : by_tile) {
    std::sort(units.begin(), units.end());
    const int parts = static_cast<int>(units.size());
    int64_t next = 0;
    for (int p = 0; p < parts; ++p) {
      EXPECT_EQ(units[p][0], next) << "tile " << tile << " split " << split;  // contiguous, in order
      EXPECT_LT(units[p][0], units[p][1]);
      next = units[p][1];
      EXPECT_EQ(units[p][3], p << 16 | parts);
      EXPECT_EQ(units[p][2], parts == 1 ? -1 : units[0][2]);
    }
    EXPECT_EQ(next, k_tiles) << "tile " << tile << " split " << split;
    if (parts > 1) {
      EXPECT_TRUE(first_slots.insert(units[0][2]).second);
      partials += parts;
    }
  }
  EXPECT_EQ(t->partials, partials);
}

TEST(Schedule, WorkTablesCoverEveryKTileOnceInPartOrder) {
  for (int64_t split : {1, 2, 3, 0}) {
    ExpectCoversEveryKTileOnce(3, 5, 7, split, 4);   // 15 tiles over 4 groups: a ragged last wave
    ExpectCoversEveryKTileOnce(2, 2, 64, split, 8);  // fewer tiles than groups
    ExpectCoversEveryKTileOnce(4, 4, 5, split, 16);  // whole waves
  }
  ExpectCoversEveryKTileOnce(1, 3, 2, 5, 4);  // a split past the k-tiles: as many parts as k-tiles
  // Stream-K at 15 tiles of 7 k-tiles over 4 groups: 8 whole tiles, the 7 others cut evenly.
  absl::StatusOr<WorkTable> sk = WorkSchedule(3, 5, 7, 0, 4, 64);
  ASSERT_TRUE(sk.ok()) << sk.status();
  for (int g = 0; g < 4; ++g) {
    int64_t k_tiles = 0;
    for (int u = 0; sk->Entry(g, u)[0] != -1; ++u) {
      const int32_t ks = sk->Entry(g, u)[1];
      k_tiles += (ks & 0xffff) - (ks >> 16);
    }
    EXPECT_NEAR(k_tiles, 15 * 7 / 4.0, 1) << "group " << g;
  }
  EXPECT_FALSE(WorkSchedule(64, 64, 8, 4, 2, 8).ok());  // too many units for 2 x 7 slots
  // M = 65536, N = 8192 at 256x256 tiles: 8192 tiles over 64 groups, rows of 128 units + the end
  // mark, only as long as they need to be.
  absl::StatusOr<WorkTable> big = WorkSchedule(256, 32, 64, 1, 64, 1 << 14);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->words[0], 129);
  EXPECT_EQ(big->words.size(), (1 + 64 * 129) * static_cast<size_t>(kWorkWords));
  EXPECT_FALSE(WorkSchedule(2, 2, 8, -1, 2, 8).ok());
  EXPECT_FALSE(WorkSchedule(2, 2, 0, 1, 2, 8).ok());
}

// What the last part of a split tile reads and counts past its mainloop: every other part's
// partial up to a node's 4 children, then a few a level plus a count a level.
TEST(WorkSchedule, PartialRoundTripsOfTheTree) {
  for (int64_t parts : {1, 2, 3, 4}) EXPECT_EQ(PartialRoundTrips(parts), parts - 1);
  EXPECT_EQ(PartialRoundTrips(5), 3 + 2);       // 4 children, then 2 (the second passed up)
  EXPECT_EQ(PartialRoundTrips(8), 3 + 2);
  EXPECT_EQ(PartialRoundTrips(16), 3 + 4);
  EXPECT_EQ(PartialRoundTrips(17), 3 + 4 + 2);  // three levels
  EXPECT_EQ(PartialRoundTrips(64), 3 + 4 + 4);
  // Fewer than reading every other partial from 7 parts on (5 and 6 pay a level's count).
  for (int64_t parts = 7; parts <= 64; ++parts) EXPECT_LT(PartialRoundTrips(parts), parts - 1);
}

// The parts stream-K cuts each tile of a launch into (every tile streamed).
std::map<int32_t, int> StreamedParts(int64_t tiles_m, int64_t tiles_n, int64_t k_tiles, int groups) {
  absl::StatusOr<WorkTable> t = WorkSchedule(tiles_m, tiles_n, k_tiles, 0, groups, 64);
  std::map<int32_t, int> parts;
  if (!t.ok()) return parts;
  for (int g = 0; g < groups; ++g)
    for (int u = 0; t->Entry(g, u)[0] != -1; ++u) parts[t->Entry(g, u)[0]] = t->Entry(g, u)[3] & 0xffff;
  return parts;
}

TEST(Schedule, StreamKCutsATileIntoAtMostSixteenParts) {
  ExpectCoversEveryKTileOnce(1, 1, 1024, 0, 128);
  ExpectCoversEveryKTileOnce(1, 1, 1023, 0, 128);
  // One tile of 1023 k-tiles over 128 groups: 16 parts, not 128 (the sum's tree grows a level
  // every four times the parts); of 1024 or more, up to 64, and so for up to 4 tiles.
  EXPECT_EQ(StreamedParts(1, 1, 1023, 128), (std::map<int32_t, int>{{0, kMostStreamedParts}}));
  EXPECT_EQ(StreamedParts(1, 1, 1024, 128), (std::map<int32_t, int>{{0, kMostStreamedPartsOverLongK}}));
  for (const auto& [tile, parts] : StreamedParts(2, 2, 1024, 128)) EXPECT_EQ(parts, 32) << tile;
  for (const auto& [tile, parts] : StreamedParts(1, 5, 1024, 128)) EXPECT_EQ(parts, 16) << tile;
  // Four tiles: 16 parts each; eight or more fill the 128 groups at 16 or fewer as before.
  const std::map<int32_t, int> four = StreamedParts(2, 2, 512, 128), many = StreamedParts(1, 32, 512, 128);
  ASSERT_EQ(four.size(), 4u);
  ASSERT_EQ(many.size(), 32u);
  for (const auto& [tile, parts] : four) EXPECT_EQ(parts, 16) << tile;
  for (const auto& [tile, parts] : many) EXPECT_LE(parts, 5) << tile;
  // Short K: shares of 4 k-tiles at least bound the parts first.
  EXPECT_EQ(StreamedParts(1, 1, 32, 128), (std::map<int32_t, int>{{0, 8}}));
}

TEST(Manifest, WorkTablesAndWorkspacesRoundTrip) {
  const std::string text =
      "kiln-bundle 1\nname t\nentry t\ntarget sm_90a\nblock 128 1 1\ncluster 1 1 1\nsmem 0\ngrid 128 1 1\n"
      "param M i32\nparam N i32\nparam K i32\nparam split i32\n"
      "param schedule table hilbert M/128 N/128 128 128 work K/64 split\n"
      "param partials workspace schedule 65536\nsource x.cc:1\n";
  absl::StatusOr<Manifest> m = Manifest::Parse(text);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->params.size(), 6u);
  EXPECT_TRUE(m->params[4].schedule.work());
  EXPECT_EQ(m->params[4].schedule.split, "split");
  EXPECT_EQ(m->params[5].kind, ParamSpec::Kind::kWorkspace);
  EXPECT_EQ(m->params[5].workspace.bytes_per_partial, 65536);
  EXPECT_EQ(Manifest::Parse(m->Serialize())->Serialize(), m->Serialize());
  absl::StatusOr<WorkTable> t = BuildScheduleTable(m->params[4].schedule, {{"M", 300}, {"N", 256}, {"K", 640}, {"split", 2}});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->partials, 3 * 2 * 2);  // 3 x 2 tiles in 2 parts each
  EXPECT_FALSE(BuildScheduleTable(m->params[4].schedule, {{"M", 300}, {"N", 256}, {"K", 640}}).ok());  // no split
  EXPECT_FALSE(Manifest::Parse(text + "param w workspace schedule 0\n").ok());
}
}  // namespace
}  // namespace kiln::rt
