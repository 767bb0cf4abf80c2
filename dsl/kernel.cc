// Kernel construction: the module and function, parameters, ids, control flow, Build().
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dsl/kernel_state.h"
#include "kiln/bundle/source_path.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/Verifier.h"

namespace kiln {
namespace detail {

namespace {

struct BuildingKernels {
  std::mutex mu;
  // Each kernel being built and the thread that made it (none: the one of nobody's, Absorb).
  std::vector<std::pair<KernelState*, std::thread::id>> states;
  std::atomic<uint64_t> ended{0};  // counts EndBuilding calls: a thread's cached answer is stale
};

BuildingKernels& Building() {
  static BuildingKernels* b = new BuildingKernels();  // (never destroyed: states outlive statics)
  return *b;
}

void Register(KernelState* s, std::thread::id thread) {
  std::lock_guard<std::mutex> lock(Building().mu);
  Building().states.emplace_back(s, thread);
}

// The newest kernel this thread is building for which `which` holds, or null.
KernelState* NewestOfThisThread(const std::function<bool(const KernelState*)>& which) {
  KernelState* newest = nullptr;
  std::lock_guard<std::mutex> lock(Building().mu);
  for (const auto& [state, thread] : Building().states)
    if (thread == std::this_thread::get_id() && which(state)) newest = state;
  return newest;
}

}  // namespace

void StartBuilding(KernelState* s) { Register(s, std::this_thread::get_id()); }

void EndBuilding(KernelState* s) {
  BuildingKernels& b = Building();
  std::lock_guard<std::mutex> lock(b.mu);
  auto it =
      std::find_if(b.states.begin(), b.states.end(), [&](const auto& e) { return e.first == s; });
  if (it == b.states.end()) return;
  b.states.erase(it);
  b.ended.fetch_add(1);
}

bool IsBuilding(const KernelState* s) {
  // The builder asks for every op: the last state found, until some kernel ends.
  thread_local const KernelState* last = nullptr;
  thread_local uint64_t last_ended = ~uint64_t{0};
  BuildingKernels& b = Building();
  if (s == last && b.ended.load() == last_ended) return true;
  std::lock_guard<std::mutex> lock(b.mu);
  for (const auto& [state, thread] : b.states)
    if (state == s) {
      last = s, last_ended = b.ended.load();
      return true;
    }
  return false;
}

namespace {

// A state that absorbs an op on a handle no kernel being built owns: the newest kernel this thread
// is building, failed with `message` at its newest line, or where there is none, one of nobody's
// (the message on stderr).
KernelState* Absorb(const std::string& message) {
  KernelState* newest = NewestOfThisThread([](const KernelState*) { return true; });
  if (newest) {
    newest->Fail(message, newest->last_loc);
    return newest;
  }
  thread_local std::unique_ptr<KernelState> nobodys;
  thread_local std::string said;
  if (!nobodys) {
    nobodys = std::make_unique<KernelState>("kiln/nobodys", sm90a(), rt::Dim3{1, 1, 1}, Loc());
    EndBuilding(nobodys.get());
    Register(nobodys.get(), std::thread::id());  // (no thread's newest: a later kernel reports)
  }
  if (said != message) std::cerr << "kiln: " << message << "\n";  // (once for a run of ops)
  said = message;
  return nobodys.get();
}

std::string Made(const Loc* made) {
  return made && made->line() ? absl::StrCat(" made at ", LocString(*made)) : std::string();
}

}  // namespace

KernelState* Usable(KernelState* s, const char* what, const Loc* made) {
  if (!s || IsBuilding(s)) return s;
  return Absorb(absl::StrCat(
      "a kiln::", what, Made(made),
      " belongs to a kernel already built (its KernelDef holds the module) or destroyed, and is "
      "used here: build each kernel from its own handles"));
}

KernelState& Owner(KernelState* s, const char* what, const Loc* made) {
  if (s) return *Usable(s, what, made);
  return *Absorb(absl::StrCat("a kiln::", what, Made(made),
                              " is empty (default-constructed: no kernel made it) and is used "
                              "here: take it from the kernel (k.Smem..., k.SmemBarriers...)"));
}

void CheckParamName(KernelState& s, const std::string& name, const Loc& loc) {
  // Grid rules and launch messages name parameters: a rule's symbol, each once.
  if (!rt::IsSymbol(name) || name == "sms")
    return s.Fail(absl::StrCat("parameter name '", name,
                               "': an identifier (letters, digits and _, not led by a digit) other "
                               "than sms (a grid rule's SM count), as grid rules name it"),
                  loc);
  for (const rt::ParamSpec& p : s.manifest.params)
    if (p.name == name)
      return s.Fail(absl::StrCat("a second parameter named '", name,
                                 "': each parameter's name is its own (grid rules and launch "
                                 "messages name it)"),
                    loc);
}

KernelState& OwnerOfOp(KernelState* s, const char* what, const Loc& use) {
  KernelState& owner = Owner(s, what);
  if (owner.open_bodies > 0) return owner;
  KernelState* inside =
      NewestOfThisThread([&](const KernelState* k) { return k != &owner && k->open_bodies > 0; });
  if (!inside) return owner;
  inside->Fail(absl::StrCat("a kiln::", what,
                            " made by another Kernel (still being built) is used here, inside "
                            "this kernel's If, For or While: take it from this kernel "
                            "(k.SmemBarriers...)"),
               use);
  return *inside;
}

KernelState::~KernelState() { EndBuilding(this); }

void* KernelState::operator new(size_t bytes) { return ::operator new(bytes); }

void KernelState::operator delete(void* p) noexcept {  // kept, reachable (no leak reported)
  static auto* kept = new std::vector<void*>();
  std::lock_guard<std::mutex> lock(Building().mu);
  kept->push_back(p);
}

KernelState::KernelState(std::string name, const Target& t, rt::Dim3 block, const Loc& loc)
    : context(std::make_unique<mlir::MLIRContext>()),
      builder(context.get()),
      alloca_builder(context.get()),
      target(t),
      kernel_loc(loc) {
  EmptyValueRead().reset();  // nothing read by an earlier kernel's ops carries over
  context->loadDialect<mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect, mlir::arith::ArithDialect,
                       mlir::scf::SCFDialect>();
  manifest.name = name;
  manifest.entry = name;
  for (char& c : manifest.entry)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  manifest.target = target.chip;
  manifest.block = block;
  manifest.source = LocString(loc);
  const mlir::Location mloc = ToLoc(loc);
  module = mlir::ModuleOp::create(mloc);
  (*module)->setAttr("kiln.target", builder.getStringAttr(target.chip));
  builder.setInsertionPointToEnd(module->getBody());
  // Dynamic shared memory: one extern array every SmemTile is an offset into.
  auto smem_type = mlir::LLVM::LLVMArrayType::get(builder.getI8Type(), 0);
  mlir::LLVM::GlobalOp::create(builder, mloc, smem_type, /*isConstant=*/false,
                               mlir::LLVM::Linkage::External, kSmemSymbol, mlir::Attribute(),
                               /*alignment=*/1024, /*addrSpace=*/3);
  func = mlir::LLVM::LLVMFuncOp::create(
      builder, mloc, manifest.entry,
      mlir::LLVM::LLVMFunctionType::get(mlir::LLVM::LLVMVoidType::get(context.get()), {}));
  func->setAttr(mlir::NVVM::NVVMDialect::getKernelFuncAttrName(), builder.getUnitAttr());
  func->setAttr(mlir::NVVM::NVVMDialect::getMaxntidAttrName(),
                builder.getDenseI32ArrayAttr({static_cast<int>(block.x), static_cast<int>(block.y),
                                              static_cast<int>(block.z)}));
  // Entry block: allocas, then a branch to the body block where the program goes.
  mlir::Block* entry = func.addEntryBlock(builder);
  mlir::Block* body = new mlir::Block();
  func.getBody().push_back(body);
  builder.setInsertionPointToEnd(entry);
  auto br = mlir::LLVM::BrOp::create(builder, mloc, mlir::ValueRange{}, body);
  alloca_builder.setInsertionPoint(br);
  builder.setInsertionPointToEnd(body);
  StartBuilding(this);  // (last: a constructor that throws leaves nothing registered)
}

namespace {
// kiln's own sources: the files beside this one (dsl/*.cc) and the public headers, in the tree
// (dsl/include/kiln/) or installed (<prefix>/include/kiln/). Keyed by the file name's pointer (a
// literal), so that each is looked at once.
bool IsLibrarySource(const char* file) {
  thread_local std::map<const char*, bool> known;
  if (auto it = known.find(file); it != known.end()) return it->second;
  auto parent = [](std::string_view path) {
    const size_t slash = path.rfind('/');
    return slash == path.npos ? std::string_view() : path.substr(0, slash);
  };
  const std::string_view dir = parent(file);
  return known[file] = dir == parent(__FILE__) || dir.ends_with("include/kiln");
}
}  // namespace

const Loc& KernelState::UserLoc(const Loc& loc) {
  if (!IsLibrarySource(loc.file_name())) return *(last_user_loc = loc);
  return last_user_loc ? *last_user_loc : loc;
}

mlir::Location KernelState::ToLoc(const Loc& at) {
  const Loc& loc = UserLoc(at);
  last_loc = loc;
  const std::string where = LocString(loc);  // file:line
  return mlir::FileLineColLoc::get(context.get(), where.substr(0, where.rfind(':')), loc.line(),
                                   loc.column());
}

std::optional<Loc>& EmptyValueRead() {
  thread_local std::optional<Loc> declared;
  return declared;
}

std::set<std::string>& NumbersOnlyOperations() {
  thread_local std::set<std::string> at;
  return at;
}

void KernelState::Fail(const std::string& message, const Loc& at) {
  const Loc loc = UserLoc(at);
  std::optional<Loc> empty = std::exchange(EmptyValueRead(), std::nullopt);
  if (error) return;
  if (empty && NumbersOnlyOperations().count(LocString(*empty)))
    error = absl::StrCat(LocString(loc),
                         ": this uses the result of an operation on C++ numbers only at ",
                         LocString(*empty),
                         ", which no kernel builds (its operands were kiln::Operand numbers): "
                         "compute it in C++, or make one side a kernel value (k.I32(...))");
  else
    error = empty ? absl::StrCat(LocString(loc), ": a kiln::Value declared empty at ",
                                 LocString(*empty), " is used before the kernel gave it a value")
                  : absl::StrCat(LocString(loc), ": ", message);
}

Value KernelState::Wrap(mlir::Value v, Type t) {
  EmptyValueRead().reset();  // an op went through: an earlier read of an empty Value was harmless
  values.push_back(v);
  value_types.push_back(t);
  value_loops.push_back(loop_stack.back());
  return Access::Make(this, static_cast<int>(values.size()) - 1, t);
}

void KernelState::CheckAssignInLoop(int to, int from) {
  const int n = static_cast<int>(value_loops.size()), loop = loop_stack.back();
  if (loop == 0 || to < 0 || from < 0 || to >= n || from >= n || value_loops[from] != loop) return;
  const int before = value_loops[to];
  if (before == loop || std::find(loop_stack.begin(), loop_stack.end(), before) == loop_stack.end())
    return;
  // Only where the new value is computed from the old one (x = x + 1: meant to carry it); a
  // member or variable that gets a fresh value each iteration (m0 = tile.m0) is fine.
  const mlir::Value old = values[to];
  // A parameter read again in the body (skv = Min(loaded, Skv) where skv held Skv) is fine.
  if (mlir::isa<mlir::BlockArgument>(old)) return;
  std::vector<mlir::Operation*> work;
  if (mlir::Operation* def = values[from].getDefiningOp()) work.push_back(def);
  bool derived = false;
  std::set<mlir::Operation*> seen;
  while (!work.empty() && !derived && seen.size() < 256) {
    mlir::Operation* op = work.back();
    work.pop_back();
    if (!seen.insert(op).second) continue;
    for (mlir::Value operand : op->getOperands()) {
      if (operand == old) derived = true;
      if (mlir::Operation* def = operand.getDefiningOp()) work.push_back(def);
    }
  }
  if (!derived) return;
  Fail(absl::StrCat("a kiln::Value that holds a value from before a loop is assigned one "
                    "computed in the loop's body: the body is built once, so each iteration "
                    "would start again from the value before the loop. Carry it in registers "
                    "(Regs r = k.Registers(type, 1); r[0] = ...; r[0] = r[0] + ...), or declare "
                    "a new Value inside the body"),
       last_loc);  // the op just built: the assignment's right-hand side
}

mlir::Value KernelState::Unwrap(const Value& v, std::optional<Loc> use) {
  const int id = Access::Id(v);
  if (Access::RawState(v) == this && id >= 0 && id < static_cast<int>(values.size()))
    return values[id];
  if (Access::RawState(v) == nullptr && use) {
    EmptyValueRead() = Access::Declared(v);
    Fail("", *use);  // reported as the empty Value's use
  } else if (Access::RawState(v) == nullptr) {
    EmptyValueRead().reset();
    Fail("a kiln::Value declared empty here is used before the kernel gave it a value",
         Access::Declared(v));
  } else {
    Fail("a kiln::Value made by another Kernel is used here", use ? *use : last_loc);
  }
  Type t = Access::TypeOf(v);
  t.lanes = std::max(t.lanes, 1);
  return mlir::LLVM::PoisonOp::create(builder, builder.getUnknownLoc(), ToMlir(t));
}

mlir::Type KernelState::ToMlir(Scalar s) {
  mlir::MLIRContext* c = context.get();
  switch (s) {
    case Scalar::kI1:
      return mlir::IntegerType::get(c, 1);
    case Scalar::kE4M3:  // bytes: no arithmetic on them (kiln/value.h)
    case Scalar::kE5M2:
    case Scalar::kI8:
    case Scalar::kS8:
      return mlir::IntegerType::get(c, 8);
    case Scalar::kI16:
      return mlir::IntegerType::get(c, 16);
    case Scalar::kI32:
    case Scalar::kS32:
      return mlir::IntegerType::get(c, 32);
    case Scalar::kI64:
    case Scalar::kS64:
      return mlir::IntegerType::get(c, 64);
    case Scalar::kF16:
      return mlir::Float16Type::get(c);
    case Scalar::kBF16:
      return mlir::BFloat16Type::get(c);
    case Scalar::kF32:
      return mlir::Float32Type::get(c);
  }
  return {};
}

mlir::Type KernelState::ToMlir(Type t) {
  switch (t.kind) {
    case Type::Kind::kScalar:
      return ToMlir(t.elem);
    case Type::Kind::kVector:
      return mlir::VectorType::get({t.lanes}, ToMlir(t.elem));
    case Type::Kind::kPointer:
      return mlir::LLVM::LLVMPointerType::get(context.get(), t.space == Space::kShared ? 3
                                                             : t.space == Space::kSharedCluster
                                                                 ? 7
                                                                 : 1);
  }
  return {};
}

Value KernelState::Constant(Type t, double v, const Loc& loc) {
  mlir::Type mt = ToMlir(t.elem);
  mlir::TypedAttr attr;
  if (t.IsFloat())
    attr = builder.getFloatAttr(mt, v);
  else
    attr = builder.getIntegerAttr(mt, static_cast<int64_t>(v));
  if (t.kind == Type::Kind::kVector)
    attr = mlir::DenseElementsAttr::get(mlir::cast<mlir::ShapedType>(ToMlir(t)),
                                        mlir::Attribute(attr));
  return Wrap(mlir::arith::ConstantOp::create(builder, ToLoc(loc), attr), t);
}

mlir::Value KernelState::InlineAsm(const std::string& ptx, const std::string& constraints,
                                   llvm::ArrayRef<mlir::Value> operands, mlir::Type result,
                                   mlir::Location l, bool side_effects) {
  auto op = mlir::LLVM::InlineAsmOp::create(
      builder, l, result, operands, ptx, constraints, side_effects,
      /*is_align_stack=*/false, mlir::LLVM::tailcallkind::TailCallKind::None,
      mlir::LLVM::AsmDialectAttr::get(context.get(), mlir::LLVM::AsmDialect::AD_ATT),
      mlir::ArrayAttr());
  return result ? op.getResult(0) : mlir::Value();
}

std::vector<mlir::Value> KernelState::InlineAsmResults(const std::string& ptx,
                                                       const std::string& constraints,
                                                       llvm::ArrayRef<mlir::Value> operands,
                                                       llvm::ArrayRef<mlir::Type> results,
                                                       mlir::Location l, bool side_effects) {
  if (results.size() == 1)
    return {InlineAsm(ptx, constraints, operands, results[0], l, side_effects)};
  mlir::Type st = results.empty() ? mlir::Type()
                                  : mlir::LLVM::LLVMStructType::getLiteral(context.get(), results);
  mlir::Value packed = InlineAsm(ptx, constraints, operands, st, l, side_effects);
  std::vector<mlir::Value> out;
  for (int64_t i = 0; i < static_cast<int64_t>(results.size()); ++i)
    out.push_back(mlir::LLVM::ExtractValueOp::create(builder, l, packed, i));
  return out;
}

void KernelState::SetArgAttrs(unsigned index, llvm::ArrayRef<mlir::NamedAttribute> attrs) {
  const unsigned n = func.getBody().front().getNumArguments();
  llvm::SmallVector<mlir::Attribute> all;
  if (mlir::ArrayAttr old = func.getArgAttrsAttr()) all.assign(old.begin(), old.end());
  all.resize(n, mlir::DictionaryAttr::get(context.get()));
  all[index] = mlir::DictionaryAttr::get(context.get(), attrs);
  func.setArgAttrsAttr(mlir::ArrayAttr::get(context.get(), all));
}

mlir::Value KernelState::SharedAddress32(mlir::Value smem_ptr, mlir::Location l) {
  return mlir::LLVM::PtrToIntOp::create(builder, l, builder.getI32Type(), smem_ptr);
}

Value KernelState::Poison(Type t, const Loc& loc) {
  return Wrap(mlir::LLVM::PoisonOp::create(builder, ToLoc(loc), ToMlir(t)), t);
}

mlir::Value KernelState::Materialize(const Operand& op, Type t) {
  if (!Access::IsImm(op)) return Unwrap(Access::Val(op), op.loc());
  return Unwrap(Constant(t, Access::Imm(op), op.loc()));
}

}  // namespace detail
Value& Value::operator=(const Value& other) {
  if (this != &other && state_ && other.state_ == state_ && detail::IsBuilding(state_))
    state_->CheckAssignInLoop(id_, other.id_);
  state_ = other.state_, id_ = other.id_, type_ = other.type_, declared_ = other.declared_;
  return *this;
}

using detail::Access;
using detail::KernelState;

// A Kernel's own ops go to its state while it is being built; after Build (its MLIR context is the
// KernelDef's), to the kernel being built that reports the misuse (detail::Owner).
namespace {
KernelState& Live(const std::unique_ptr<KernelState>& s) {
  return detail::Owner(s.get(), "Kernel");
}
}  // namespace

// The parts' way back to the kernel they are part of (kiln/memory.h: KernelPart).
template <typename Part>
Kernel& KernelPart<Part>::self() {
  return static_cast<Kernel&>(static_cast<Part&>(*this));
}
template <typename Part>
KernelState& KernelPart<Part>::state() {
  return *Access::State(self());
}
template class KernelPart<MemoryOps>;
template class KernelPart<AmpereOps>;
template class KernelPart<HopperOps>;
template class KernelPart<BlackwellOps>;

void SetSourceRoot(const std::string& dir) { rt::SetSourceRoot(dir); }

std::string LocString(const Loc& loc) {
  return absl::StrCat(rt::SourcePath(loc.file_name()), ":", loc.line());
}

KernelDef::KernelDef(rt::Manifest manifest, Target target, std::shared_ptr<Module> module)
    : manifest_(std::move(manifest)), target_(std::move(target)), module_(std::move(module)) {}

namespace {
int& DefaultWatchdogMs() {
  static int ms = 0;
  return ms;
}
}  // namespace

void SetDefaultWatchdog(int ms) { DefaultWatchdogMs() = ms; }

namespace {
// The kernels KernelsWithoutTheDefaultWatchdog lists: kernels may be built on several threads.
struct WithoutWatchdog {
  std::mutex mu;
  std::vector<std::string> names;
};
WithoutWatchdog& KernelsWithoutWatchdog() {
  static WithoutWatchdog* w = new WithoutWatchdog;
  return *w;
}
}  // namespace

std::vector<std::string> KernelsWithoutTheDefaultWatchdog() {
  WithoutWatchdog& w = KernelsWithoutWatchdog();
  std::lock_guard<std::mutex> lock(w.mu);
  return w.names;
}

void Kernel::Watchdog(int ms, Loc loc) {
  KernelState& s = Live(state_);
  if (ms <= 0 || ms > 3600 * 1000)
    return Fail(absl::StrCat("a watchdog of ", ms, " ms: give 1..3600000"), loc);
  if (s.target.compute_capability < 90)
    return Fail(
        absl::StrCat(
            "the watchdog bounds mbarrier waits, which need sm_90 or later; this kernel targets ",
            s.target.chip),
        loc);
  if (s.waits_built > 0)
    return Fail(absl::StrCat("Watchdog comes after ", s.waits_built,
                             " mbarrier wait(s) it would not cover: call it "
                             "before the first wait"),
                loc);
  if (s.runtime_indices_built > 0)
    return Fail(absl::StrCat("Watchdog comes after ", s.runtime_indices_built,
                             " shared tile index(es) computed at run time that it would not check: "
                             "call it before the first At or Stage"),
                loc);
  s.watchdog_ms = s.manifest.watchdog_ms = ms;
}

Kernel::Kernel(std::string name, const Target& target, rt::Dim3 block, Loc loc)
    : state_(std::make_unique<KernelState>(std::move(name), target, block, loc)) {
  if (block.count() == 0 || block.count() > 1024)
    Fail(absl::StrCat("a block has 1..1024 threads, not ", block.count()), loc);
  // A name is a manifest's word and a bundle's file name ('/' becomes '.'): letters, digits and
  // _ . / + - only, so that what Build writes reads back.
  const std::string& n = state_->manifest.name;
  const bool plain =
      !n.empty() && (std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_') &&
      std::all_of(n.begin(), n.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || (c && std::strchr("_./+-", c));
      });
  if (!plain)
    Fail(absl::StrCat("kernel name '", n,
                      "': letters, digits and _ . / + - only, led by a letter or _ (it names the "
                      "bundle's files, its PTX entry and CLI arguments), such as \"my/saxpy\""),
         loc);
  // The process-wide debug default covers the kernels with mbarriers to wait on (sm_90+).
  if (DefaultWatchdogMs() > 0 && target.compute_capability >= 90)
    Watchdog(DefaultWatchdogMs(), loc);
  else if (DefaultWatchdogMs() > 0) {
    WithoutWatchdog& w = KernelsWithoutWatchdog();
    std::lock_guard<std::mutex> lock(w.mu);
    w.names.push_back(n);
  }
}

Kernel::~Kernel() = default;

const Target& Kernel::target() const { return state_->target; }

void Kernel::Fail(const std::string& message, Loc loc) { state_->Fail(message, loc); }
bool Kernel::failed() const { return state_->error.has_value(); }
void Kernel::CheckAtBuild(std::function<void()> check) {
  Live(state_).final_checks.push_back(std::move(check));
}

namespace {
// The manifest's name of a pointer's element type (rt::ParamSpec::elem).
const char* ElemName(Scalar s) {
  switch (s) {
    case Scalar::kI1:
      return "i1";
    case Scalar::kI8:
    case Scalar::kS8:
      return "i8";
    case Scalar::kI16:
      return "i16";
    case Scalar::kI32:
    case Scalar::kS32:
      return "i32";
    case Scalar::kI64:
    case Scalar::kS64:
      return "i64";
    case Scalar::kF16:
      return "f16";
    case Scalar::kBF16:
      return "bf16";
    case Scalar::kF32:
      return "f32";
    case Scalar::kE4M3:
      return "e4m3";
    case Scalar::kE5M2:
      return "e5m2";
  }
  return "";
}

// Appends a kernel parameter: an entry-block argument, the function type, the manifest entry.
Value AddParam(KernelState& s, const std::string& name, Type t, rt::ParamSpec::Kind kind,
               const Loc& loc) {
  detail::CheckParamName(s, name, loc);
  mlir::Block* entry = &s.func.getBody().front();
  mlir::Value arg = entry->addArgument(s.ToMlir(t), s.ToLoc(loc));
  s.func.setFunctionTypeAttr(mlir::TypeAttr::get(mlir::LLVM::LLVMFunctionType::get(
      mlir::LLVM::LLVMVoidType::get(s.context.get()), llvm::to_vector(entry->getArgumentTypes()))));
  if (s.func.getArgAttrsAttr()) s.SetArgAttrs(entry->getNumArguments() - 1, {});
  rt::ParamSpec p;
  p.name = name;
  p.kind = kind;
  if (kind == rt::ParamSpec::Kind::kPointer) p.elem = ElemName(t.elem);
  s.manifest.params.push_back(p);
  return s.Wrap(arg, t);
}
}  // namespace

Value Kernel::PtrParam(const std::string& name, Scalar elem, Loc loc) {
  return AddParam(Live(state_), name, Type::Ptr(Space::kGlobal, elem),
                  rt::ParamSpec::Kind::kPointer, loc);
}

absl::StatusOr<rt::GridExpr> KernelState::ParseRule(const std::string& what,
                                                    const std::string& text, const Loc& loc) {
  absl::StatusOr<rt::GridExpr> e = rt::GridExpr::Parse(text);
  if (!e.ok()) {
    Fail(std::string(e.status().message()), loc);
    return e.status();
  }
  final_checks.push_back([this, what, expr = *e, loc] {
    std::vector<std::string> ints;
    for (const rt::ParamSpec& p : manifest.params)
      if (p.kind == rt::ParamSpec::Kind::kI32 || p.kind == rt::ParamSpec::Kind::kI64)
        ints.push_back(p.name);
    for (const std::string& symbol : expr.SymbolNames())
      if (std::find(ints.begin(), ints.end(), symbol) == ints.end())
        return Fail(absl::StrCat(what, " rule ", expr.ToString(), " names ", symbol,
                                 ", which is not an integer parameter of this kernel (",
                                 ints.empty() ? "it has none"
                                              : absl::StrCat("it has ", absl::StrJoin(ints, ", ")),
                                 "; sms is the SM count)"),
                    loc);
  });
  return e;
}

Value Kernel::ScheduleTableParam(const std::string& name, const ScheduleTable& spec, Loc loc) {
  rt::ScheduleTableParam t;
  t.groups = spec.groups;
  t.slots = spec.slots;
  if (spec.groups <= 0 || spec.slots <= 0)
    Fail("a schedule table needs positive groups and slots", loc);
  for (auto [text, out] :
       {std::pair{&spec.tiles_m, &t.tiles_m}, std::pair{&spec.tiles_n, &t.tiles_n}}) {
    absl::StatusOr<rt::GridExpr> e = Live(state_).ParseRule("schedule table", *text, loc);
    if (e.ok()) *out = *e;
  }
  if (spec.split.empty() != spec.k_tiles.empty())
    Fail("a work table needs both k_tiles and split (or neither, for a tile table)", loc);
  if (!spec.split.empty()) {
    absl::StatusOr<rt::GridExpr> e = Live(state_).ParseRule("work table", spec.k_tiles, loc);
    if (e.ok()) t.k_tiles = *e;
    t.split = spec.split;
    const auto& params = Live(state_).manifest.params;
    if (std::none_of(params.begin(), params.end(), [&](const rt::ParamSpec& p) {
          return p.name == spec.split &&
                 (p.kind == rt::ParamSpec::Kind::kI32 || p.kind == rt::ParamSpec::Kind::kI64);
        }))
      Fail(absl::StrCat("a work table's split '", spec.split,
                        "' must be an integer parameter declared before it"),
           loc);
  }
  Value v = AddParam(Live(state_), name, Type::Ptr(Space::kGlobal, Scalar::kI32),
                     rt::ParamSpec::Kind::kScheduleTable, loc);
  Live(state_).manifest.params.back().schedule = t;
  return v;
}

Value Kernel::WorkspaceParam(const std::string& name, Scalar elem, const std::string& table,
                             int64_t bytes_per_partial, Loc loc) {
  const auto& params = Live(state_).manifest.params;
  if (!table.empty() && std::none_of(params.begin(), params.end(), [&](const rt::ParamSpec& p) {
        return p.name == table && p.kind == rt::ParamSpec::Kind::kScheduleTable &&
               p.schedule.work();
      }))
    Fail(absl::StrCat("workspace ", name, ": '", table,
                      "' is no work table parameter declared before it"),
         loc);
  if (bytes_per_partial <= 0)
    Fail(absl::StrCat("workspace ", name, ": bytes per partial must be positive"), loc);
  Value v = AddParam(Live(state_), name, Type::Ptr(Space::kGlobal, elem),
                     rt::ParamSpec::Kind::kWorkspace, loc);
  Live(state_).manifest.params.back().workspace = {table, bytes_per_partial};
  return v;
}

Value Kernel::I32Param(const std::string& name, Loc loc) {
  return AddParam(Live(state_), name, Type::Of(Scalar::kI32), rt::ParamSpec::Kind::kI32, loc);
}
Value Kernel::I64Param(const std::string& name, Loc loc) {
  return AddParam(Live(state_), name, Type::Of(Scalar::kI64), rt::ParamSpec::Kind::kI64, loc);
}
Value Kernel::F32Param(const std::string& name, Loc loc) {
  return AddParam(Live(state_), name, Type::Of(Scalar::kF32), rt::ParamSpec::Kind::kF32, loc);
}

void Kernel::Grid(const std::string& x, const std::string& y, const std::string& z, Loc loc) {
  const std::string* dims[] = {&x, &y, &z};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<rt::GridExpr> g = Live(state_).ParseRule("grid", *dims[i], loc);
    if (!g.ok()) return;
    Live(state_).manifest.grid[i] = *g;
  }
  Live(state_).manifest.grid_source = LocString(loc);
}

void Kernel::RequireMultiple(const std::string& name, int64_t multiple, Loc loc) {
  if (multiple <= 0)
    return Fail(
        absl::StrCat("RequireMultiple(", name, ", ", multiple, "): not a positive multiple"), loc);
  if (!Live(state_).ParseRule("requirement", name, loc).ok()) return;
  Live(state_).manifest.requirements.push_back({name, multiple, LocString(loc)});
}

void Kernel::RequireAtMost(const std::string& name, int64_t most, Loc loc) {
  if (most < 0)
    return Fail(
        absl::StrCat("RequireAtMost(", name, ", ", most, "): a bound below 0, which no size meets"),
        loc);
  if (!Live(state_).ParseRule("requirement", name, loc).ok()) return;
  Live(state_).manifest.requirements.push_back({name, 1, LocString(loc), most});
}

void Kernel::Attribute(const std::string& key, const std::string& value, Loc loc) {
  const bool bad_key = key.empty() || key.find_first_of(" \t\n") != std::string::npos;
  if (bad_key || value.find('\n') != std::string::npos)
    return Fail(absl::StrCat("attribute '", key, "': a key is one word and a value one line"), loc);
  for (const auto& [k, v] : Live(state_).manifest.attributes)
    if (k == key) return Fail(absl::StrCat("attribute '", key, "' is already set"), loc);
  Live(state_).manifest.attributes.emplace_back(key, value);
}

Value Kernel::I32(int64_t v, Loc loc) {
  return Live(state_).Constant(Type::Of(Scalar::kI32), v, loc);
}
Value Kernel::F32(double v, Loc loc) {
  return Live(state_).Constant(Type::Of(Scalar::kF32), v, loc);
}

namespace {
template <typename X, typename Y, typename Z>
Value SpecialRegister(KernelState& s, int axis, const Loc& loc) {
  if (axis < 0 || axis > 2) {
    s.Fail("axis must be 0, 1 or 2", loc);
    axis = 0;
  }
  mlir::Location l = s.ToLoc(loc);
  mlir::Type i32 = s.builder.getI32Type();
  mlir::Value v = axis == 0   ? X::create(s.builder, l, i32).getResult()
                  : axis == 1 ? Y::create(s.builder, l, i32).getResult()
                              : Z::create(s.builder, l, i32).getResult();
  return s.Wrap(v, Type::Of(Scalar::kI32));
}
}  // namespace

Value Kernel::ThreadIdx(int axis, Loc loc) {
  using namespace mlir::NVVM;
  return SpecialRegister<ThreadIdXOp, ThreadIdYOp, ThreadIdZOp>(Live(state_), axis, loc);
}
Value Kernel::BlockIdx(int axis, Loc loc) {
  using namespace mlir::NVVM;
  return SpecialRegister<BlockIdXOp, BlockIdYOp, BlockIdZOp>(Live(state_), axis, loc);
}
Value Kernel::BlockDim(int axis, Loc loc) {
  using namespace mlir::NVVM;
  return SpecialRegister<BlockDimXOp, BlockDimYOp, BlockDimZOp>(Live(state_), axis, loc);
}
Value Kernel::GridDim(int axis, Loc loc) {
  using namespace mlir::NVVM;
  return SpecialRegister<GridDimXOp, GridDimYOp, GridDimZOp>(Live(state_), axis, loc);
}
Value Kernel::LaneId(Loc loc) {
  KernelState& s = Live(state_);
  return s.Wrap(mlir::NVVM::LaneIdOp::create(s.builder, s.ToLoc(loc), s.builder.getI32Type()),
                Type::Of(Scalar::kI32));
}
Value Kernel::WarpId(Loc loc) { return ThreadIdx(0, loc) / Operand(32, loc); }
Value Kernel::WarpgroupId(Loc loc) { return ThreadIdx(0, loc) / Operand(128, loc); }

Value Kernel::ClusterCtaRank(Loc loc) {
  KernelState& s = Live(state_);
  if (s.target.compute_capability < 90) Fail("clusters need sm_90 or later", loc);
  return s.Wrap(mlir::NVVM::ClusterId::create(s.builder, s.ToLoc(loc), s.builder.getI32Type()),
                Type::Of(Scalar::kI32));
}

Value Kernel::ClusterIdx(int axis, Loc loc) {
  if (Live(state_).target.compute_capability < 90) Fail("clusters need sm_90 or later", loc);
  using namespace mlir::NVVM;
  return SpecialRegister<ClusterIdXOp, ClusterIdYOp, ClusterIdZOp>(Live(state_), axis, loc);
}

void Kernel::ClusterDims(rt::Dim3 dims, Loc loc) {
  KernelState& s = Live(state_);
  if (s.target.compute_capability < 90) return Fail("clusters need sm_90 or later", loc);
  if (dims.count() == 0 || dims.count() > 16)
    return Fail(absl::StrCat("a cluster has 1..16 blocks, not ", dims.count()), loc);
  if (s.cluster_dims_at)
    return Fail(absl::StrCat("ClusterDims given twice (first at ", LocString(*s.cluster_dims_at),
                             "): a kernel has one cluster shape"),
                loc);
  s.cluster_dims_at = loc;
  s.manifest.cluster = dims;
  s.manifest.cluster_source = LocString(loc);
  s.func->setAttr(
      mlir::NVVM::NVVMDialect::getClusterDimAttrName(),
      s.builder.getDenseI32ArrayAttr(
          {static_cast<int>(dims.x), static_cast<int>(dims.y), static_cast<int>(dims.z)}));
}

void Kernel::For(const Operand& lo, const Operand& hi, const Operand& step,
                 const std::function<void(Value)>& body, Loc loc) {
  KernelState& s = Live(state_);
  const Type i32 = Type::Of(Scalar::kI32);
  for (const Operand* o : {&lo, &hi, &step})
    if (!Access::IsImm(*o) && Access::Val(*o).type() != i32)
      return Fail("For bounds must be i32 values or integers", loc);
  if (Access::IsImm(step) && Access::Imm(step) <= 0)
    return Fail(absl::StrCat("For's step is ", Access::Imm(step),
                             ": it must be positive (the loop runs while i < hi, so a step of 0 or "
                             "less would never end)"),
                loc);
  auto op = mlir::scf::ForOp::create(s.builder, s.ToLoc(loc), s.Materialize(lo, i32),
                                     s.Materialize(hi, i32), s.Materialize(step, i32));
  mlir::OpBuilder::InsertionGuard guard(s.builder);
  s.builder.setInsertionPoint(op.getBody()->getTerminator());
  s.loop_stack.push_back(s.next_loop++);
  {
    KernelState::BodyOpen open(s);
    body(s.Wrap(op.getInductionVar(), i32));
  }
  s.loop_stack.pop_back();
}

void Kernel::While(const std::function<Value()>& cond, const std::function<void()>& body, Loc loc) {
  KernelState& s = Live(state_);
  mlir::Location l = s.ToLoc(loc);
  auto op = mlir::scf::WhileOp::create(s.builder, l, mlir::TypeRange{}, mlir::ValueRange{});
  mlir::OpBuilder::InsertionGuard guard(s.builder);
  s.builder.createBlock(&op.getBefore());
  Value c = cond();
  mlir::Value flag = s.Unwrap(c, loc);
  if (c.type() != Type::Of(Scalar::kI1)) {
    Fail("While needs an i1 condition (a comparison)", loc);
    flag = mlir::arith::ConstantIntOp::create(s.builder, l, 0, 1);
  }
  mlir::scf::ConditionOp::create(s.builder, l, flag, mlir::ValueRange{});
  s.builder.createBlock(&op.getAfter());
  s.loop_stack.push_back(s.next_loop++);
  {
    KernelState::BodyOpen open(s);
    body();
  }
  s.loop_stack.pop_back();
  mlir::scf::YieldOp::create(s.builder, l);
}

int HopperOps::LaunchRegs() { return state().LaunchRegs(); }

void HopperOps::Role(const RoleSpec& role, const std::function<void(Value)>& body, Loc loc) {
  KernelState& s = state();
  const int block = static_cast<int>(s.manifest.block.count());
  if (role.threads <= 0 || role.first_thread < 0 || role.first_thread + role.threads > block)
    return self().Fail(
        absl::StrCat("role of threads [", role.first_thread, ", ", role.first_thread + role.threads,
                     ") is outside the block of ", block),
        loc);
  if (role.max_regs) {
    if (role.first_thread % 128 || role.threads % 128)
      return self().Fail(
          absl::StrCat("setmaxnreg applies to whole warpgroups; this role covers threads [",
                       role.first_thread, ", ", role.first_thread + role.threads,
                       "), which is not a multiple of 128 threads"),
          loc);
    if (role.max_regs < 24 || role.max_regs > 256 || role.max_regs % 8)
      return self().Fail(
          absl::StrCat("setmaxnreg takes 24..256 in steps of 8, not ", role.max_regs), loc);
    if (s.target.compute_capability < 90) return self().Fail("setmaxnreg needs sm_90a", loc);
    if (s.register_roles.empty())
      self().CheckAtBuild([this] {
        // The warpgroups' register budgets after every role's setmaxnreg must fit what the block
        // is launched with (LaunchRegs a thread): setmaxnreg only moves registers between its
        // warpgroups, and an .inc past them waits, as on the GPU, for registers nobody frees
        // (docs/perf/2026-11-28-decode-split-kv.md, "The producer's registers").
        KernelState& st = state();
        const int wgs = (static_cast<int>(st.manifest.block.count()) + 127) / 128;
        std::vector<int> regs(wgs, st.LaunchRegs());
        for (const KernelState::RegisterRole& r : st.register_roles)
          for (int g = r.first_thread / 128; g < (r.first_thread + r.threads) / 128; ++g)
            regs[g] = r.max_regs;
        int64_t total = 0;
        std::string each;
        for (int g = 0; g < wgs; ++g) {
          total += int64_t{regs[g]} * 128;
          absl::StrAppend(&each, g ? ", " : "", "warpgroup ", g, ": ", regs[g]);
        }
        const int64_t launched = int64_t{st.LaunchRegs()} * wgs * 128;
        if (total > launched) {
          const KernelState::RegisterRole* top = &st.register_roles.front();
          for (const KernelState::RegisterRole& r : st.register_roles)
            if (r.max_regs > top->max_regs) top = &r;
          const std::string share =
              st.min_blocks_per_sm > 1
                  ? absl::StrCat(" (MinBlocksPerSm(", st.min_blocks_per_sm, "))")
                  : "";
          self().Fail(absl::StrCat("the roles' register budgets (", each, " per thread) need ",
                                   total, " registers; the block is launched with ",
                                   st.LaunchRegs(), " a thread, ", launched, " in all", share,
                                   ", and setmaxnreg only moves registers between its "
                                   "warpgroups, so this setmaxnreg.inc would wait forever"),
                      top->loc);
        }
      });
    s.register_roles.push_back({role.first_thread, role.threads, role.max_regs, loc});
  }
  Value tid = self().ThreadIdx(0, loc);
  Value inside = role.first_thread == 0
                     ? tid < Operand(role.threads, loc)
                     : (tid - Operand(role.first_thread, loc)) < Operand(role.threads, loc);
  self().If(
      inside,
      [&] {
        if (role.max_regs) {
          mlir::NVVM::SetMaxRegisterOp::create(s.builder, s.ToLoc(loc), role.max_regs,
                                               role.max_regs > s.LaunchRegs()
                                                   ? mlir::NVVM::SetMaxRegisterAction::increase
                                                   : mlir::NVVM::SetMaxRegisterAction::decrease);
        }
        body(role.first_thread == 0 ? tid : tid - Operand(role.first_thread, loc));
      },
      loc);
}

namespace {
// scf.if with a then branch and, when `otherwise` is set, an else branch.
void BuildIf(Kernel& k, KernelState& s, const Operand& cond, const std::function<void()>& then,
             const std::function<void()>* otherwise, Loc loc) {
  if (Access::IsImm(cond) || Access::Val(cond).type() != Type::Of(Scalar::kI1))
    return k.Fail("If needs an i1 condition (a comparison)", loc);
  auto op =
      mlir::scf::IfOp::create(s.builder, s.ToLoc(loc), s.Unwrap(Access::Val(cond), cond.loc()),
                              /*withElseRegion=*/otherwise != nullptr);
  mlir::OpBuilder::InsertionGuard guard(s.builder);
  KernelState::BodyOpen open(s);
  s.builder.setInsertionPoint(op.thenBlock()->getTerminator());
  then();
  if (!otherwise) return;
  s.builder.setInsertionPoint(op.elseBlock()->getTerminator());
  (*otherwise)();
}
}  // namespace

void Kernel::If(const Operand& cond, const std::function<void()>& then, Loc loc) {
  BuildIf(*this, Live(state_), cond, then, nullptr, loc);
}

void Kernel::If(const Operand& cond, const std::function<void()>& then,
                const std::function<void()>& otherwise, Loc loc) {
  BuildIf(*this, Live(state_), cond, then, &otherwise, loc);
}

std::vector<Value> Kernel::IfElse(const Operand& cond,
                                  const std::function<std::vector<Value>()>& then,
                                  const std::function<std::vector<Value>()>& otherwise, Loc loc) {
  KernelState& s = Live(state_);
  if (Access::IsImm(cond) || Access::Val(cond).type() != Type::Of(Scalar::kI1)) {
    Fail("IfElse needs an i1 condition (a comparison)", loc);
    return {};
  }
  // The branches are built first, into an scf.if without results; once their values (and so
  // the result types) are known, the regions move into one that yields them.
  mlir::Location l = s.ToLoc(loc);
  auto draft = mlir::scf::IfOp::create(s.builder, l, s.Unwrap(Access::Val(cond), cond.loc()),
                                       /*withElseRegion=*/true);
  std::vector<Value> yielded[2];
  {
    mlir::OpBuilder::InsertionGuard guard(s.builder);
    KernelState::BodyOpen open(s);
    s.builder.setInsertionPoint(draft.thenBlock()->getTerminator());
    yielded[0] = then();
    s.builder.setInsertionPoint(draft.elseBlock()->getTerminator());
    yielded[1] = otherwise();
  }
  std::vector<Type> types;
  std::vector<mlir::Type> mlir_types;
  bool ok = yielded[0].size() == yielded[1].size();
  if (!ok)
    Fail(absl::StrCat("IfElse branches yield ", yielded[0].size(), " and ", yielded[1].size(),
                      " values"),
         loc);
  for (size_t i = 0; ok && i < yielded[0].size(); ++i) {
    for (const Value& v : {yielded[0][i], yielded[1][i]})
      s.Unwrap(v, loc);  // reports an empty one here
    const Type a = yielded[0][i].type(), b = yielded[1][i].type();
    if (!(a == b)) {
      Fail(absl::StrCat("IfElse branches yield different types for value ", i, ": ", a.Str(),
                        " vs ", b.Str(), " (convert with .To())"),
           loc);
      ok = false;
    }
    types.push_back(a);
    mlir_types.push_back(s.ToMlir(a));
  }
  if (!ok || s.error) {  // the build fails; the draft stays (a Value made in it may have uses)
    std::vector<Value> poison;
    for (const Value& v : yielded[0])
      poison.push_back(s.Poison(v.valid() ? v.type() : Type::Of(Scalar::kI32), loc));
    return poison;
  }
  auto op = mlir::scf::IfOp::create(s.builder, l, mlir_types, draft.getCondition(),
                                    /*withElseRegion=*/true);
  for (int branch = 0; branch < 2; ++branch) {
    mlir::Region& to = branch == 0 ? op.getThenRegion() : op.getElseRegion();
    to.takeBody(branch == 0 ? draft.getThenRegion() : draft.getElseRegion());
    mlir::Block& block = to.front();
    block.getTerminator()->erase();
    mlir::OpBuilder::InsertionGuard guard(s.builder);
    s.builder.setInsertionPointToEnd(&block);
    std::vector<mlir::Value> values;
    for (const Value& v : yielded[branch]) values.push_back(s.Unwrap(v, loc));
    mlir::scf::YieldOp::create(s.builder, l, values);
  }
  draft.erase();
  std::vector<Value> results;
  for (size_t i = 0; i < types.size(); ++i) results.push_back(s.Wrap(op.getResult(i), types[i]));
  return results;
}

Value Kernel::IfElse(const Operand& cond, const std::function<Value()>& then,
                     const std::function<Value()>& otherwise, Loc loc) {
  std::vector<Value> r = IfElse(
      cond, [&] { return std::vector<Value>{then()}; },
      [&] { return std::vector<Value>{otherwise()}; }, loc);
  return r.empty() ? Value(loc) : r[0];
}

namespace {
std::string LineOf(mlir::Location l) {
  if (auto f = mlir::dyn_cast<mlir::FileLineColLoc>(l))
    return absl::StrCat(f.getFilename().str(), ":", f.getLine());
  return "?";
}

// A Value made inside an If, For or While body and used after it: the C++ variable outlives the
// MLIR region that defines it. Named at the use and the definition, instead of MLIR's
// "operand does not dominate this use".
absl::Status CheckValuesStayInTheirBodies(mlir::ModuleOp module) {
  mlir::DominanceInfo dominance(module);
  absl::Status status;
  module.walk([&](mlir::Operation* op) {
    for (mlir::Value v : op->getOperands()) {
      if (dominance.properlyDominates(v, op)) continue;
      mlir::Operation* def = v.getDefiningOp();
      status = absl::InvalidArgumentError(absl::StrCat(
          LineOf(op->getLoc()), ": this uses a Value made at ", def ? LineOf(def->getLoc()) : "?",
          " inside an If, For or While body, after that body ended; carry it out in a register ",
          "array (Regs) assigned inside the body"));
      return mlir::WalkResult::interrupt();
    }
    return mlir::WalkResult::advance();
  });
  return status;
}
}  // namespace

void MemoryOps::SyncThreads(Loc loc) {
  mlir::NVVM::Barrier0Op::create(state().builder, state().ToLoc(loc));
  state().waits.push_back({state().LastOp(), -1, "", loc});
}

void MemoryOps::SyncWarp(Loc loc) {
  mlir::NVVM::SyncWarpOp::create(state().builder, state().ToLoc(loc),
                                 state().Unwrap(self().I32(-1, loc), loc));
}

namespace {
// The static transaction-byte check: within each loop body (a loop iteration is one phase of
// the barriers it uses), every barrier must be announced as many bytes by expect_tx as its TMA
// loads deliver. A mismatch hangs the GPU (too few delivered) or completes the phase early
// (too many), so it is reported with the lines of both sides.
std::vector<std::string> StaticFindings(const KernelState& s) {
  std::map<std::tuple<int, std::string, int>, std::vector<const KernelState::TxRecord*>> by_barrier;
  for (const KernelState::TxRecord& r : s.tx_records)
    by_barrier[{r.array, r.index, r.loop}].push_back(&r);
  std::vector<std::string> findings;
  for (const auto& [key, records] : by_barrier) {
    int64_t announced = 0, delivered = 0;
    std::vector<std::string> announced_at, delivered_at;
    for (const KernelState::TxRecord* r : records) {
      (r->announced ? announced : delivered) += r->bytes;
      (r->announced ? announced_at : delivered_at)
          .push_back(absl::StrCat(LocString(r->loc), " (", r->bytes, ")"));
    }
    if (announced == delivered) continue;
    // (an index the builder knows is a number; a run-time one is keyed by its Value's id)
    const std::string& index = std::get<1>(key);
    const std::string which =
        !index.empty() && index[0] == 'v'
            ? absl::StrCat("the mbarrier array at shared offset ", std::get<0>(key),
                           ", at a run-time index,")
            : absl::StrCat("mbarrier ", index, " of the array at shared offset ", std::get<0>(key));
    findings.push_back(
        absl::StrCat(LocString(records.front()->loc), ": tx-count mismatch: ", which,
                     " is announced ", announced, " bytes by expect_tx",
                     announced_at.empty() ? "" : " at " + absl::StrJoin(announced_at, ", "),
                     " but its TMA loads deliver ", delivered,
                     delivered_at.empty() ? "" : " at " + absl::StrJoin(delivered_at, ", "),
                     announced < delivered ? ": the phase completes before the last bytes land"
                                           : ": the phase never completes (the GPU hangs)"));
  }
  for (std::string& f : ArrivalFindings(s)) findings.push_back(std::move(f));
  for (std::string& f : ReuseFindings(s)) findings.push_back(std::move(f));
  for (std::string& f : FenceFindings(s)) findings.push_back(std::move(f));
  for (std::string& f : ClusterInitFindings(s)) findings.push_back(std::move(f));
  // One finding once: a rule broken at a site that an unrolled loop built several times is
  // reported by each copy in the same words.
  std::vector<std::string> once;
  std::set<std::string> seen;
  for (std::string& f : findings)
    if (seen.insert(f).second) once.push_back(std::move(f));
  return once;
}
}  // namespace

absl::StatusOr<KernelDef> Kernel::Build() {
  if (!detail::IsBuilding(state_.get()))
    return absl::FailedPreconditionError(
        absl::StrCat("kernel ", state_->manifest.name,
                     ": Build() ran already (a Kernel builds once, whether or not that Build "
                     "succeeded: build a new Kernel)"));
  // Whatever the outcome, the kernel is no longer being built: a second Build would append a
  // second return to the module, and its handles are no longer dereferenced.
  absl::StatusOr<KernelDef> def = BuildOnce();
  detail::EndBuilding(state_.get());
  return def;
}

namespace {
// A grid axis whose rule is a constant the cluster does not divide would refuse every launch
// (rt::Manifest::CheckClusterTiling): say so at the build.
void CheckConstantGridInClusters(KernelState& s) {
  if (!s.cluster_dims_at || s.manifest.grid_source.empty()) return;
  const unsigned c[3] = {s.manifest.cluster.x, s.manifest.cluster.y, s.manifest.cluster.z};
  for (int axis = 0; axis < 3; ++axis) {
    const rt::GridExpr& rule = s.manifest.grid[axis];
    if (std::any_of(rule.factors.begin(), rule.factors.end(),
                    [](const rt::GridExpr::Factor& f) { return !f.symbol.empty(); }))
      continue;
    const int64_t dim = rule.Value({}, 0);
    if (dim % c[axis] == 0) continue;
    return s.Fail(
        absl::StrCat("clusters of ", c[0], "x", c[1], "x", c[2], " cannot tile the grid: Grid's ",
                     std::string(1, "xyz"[axis]), " is the constant ", dim, " (",
                     s.manifest.grid_source, "), no multiple of ", c[axis]),
        *s.cluster_dims_at);
  }
}
}  // namespace

absl::StatusOr<KernelDef> Kernel::BuildOnce() {
  KernelState& s = *state_;
  detail::EmptyValueRead().reset();
  s.last_user_loc = s.kernel_loc;  // what the build adds itself names the kernel's line
  for (const auto& check : s.final_checks) check();
  CheckConstantGridInClusters(s);
  if (s.error) return absl::InvalidArgumentError(*s.error);
  s.manifest.smem_bytes = s.smem_top;
  // The deepest ring tells a harness how many K steps wrap every ring (kiln emulate's default
  // size).
  if (s.deepest_ring > 1)
    s.manifest.attributes.emplace_back("ring", std::to_string(s.deepest_ring));
  mlir::LLVM::ReturnOp::create(s.builder, s.ToLoc(s.kernel_loc), mlir::ValueRange{});
  if (absl::Status scoped = CheckValuesStayInTheirBodies(*s.module); !scoped.ok()) return scoped;
  std::string diagnostics;
  {
    mlir::ScopedDiagnosticHandler handler(s.context.get(), [&](mlir::Diagnostic& d) {
      llvm::raw_string_ostream os(diagnostics);
      os << d.getLocation() << ": " << d << "\n";
      return mlir::success();
    });
    if (mlir::failed(mlir::verify(*s.module)))
      return absl::InternalError(
          absl::StrCat("kernel ", s.manifest.name, " failed MLIR verification:\n", diagnostics));
  }
  auto module = std::make_shared<KernelDef::Module>();
  module->context = std::move(s.context);
  module->module = std::move(s.module);
  KernelDef def(s.manifest, s.target, std::move(module));
  def.findings_ = StaticFindings(s);
  return def;
}

}  // namespace kiln

namespace kiln {
void Kernel::MinBlocksPerSm(int blocks, Loc loc) {
  if (blocks < 1) return Fail(absl::StrCat("at least one block per SM, not ", blocks), loc);
  Live(state_).min_blocks_per_sm = blocks;
  Live(state_).func->setAttr(mlir::NVVM::NVVMDialect::getMinctasmAttrName(),
                             Live(state_).builder.getI32IntegerAttr(blocks));
}
}  // namespace kiln
