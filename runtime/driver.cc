#include "kiln/runtime/driver.h"

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kiln::rt {
namespace {

// dlsym names to try, newest first, for entry points that cuda.h maps to versioned symbols.
std::vector<std::string> SymbolNames(absl::string_view name) {
  static const char* kVersioned[] = {
      "cuMemAlloc",         "cuMemFree",    "cuMemcpyHtoD",
      "cuMemcpyDtoH",       "cuMemsetD8",   "cuEventDestroy",
      "cuEventElapsedTime", "cuMemcpyDtoD", "cuMemHostGetDevicePointer",
      "cuModuleGetGlobal"};
  for (const char* v : kVersioned)
    if (name == v) return {absl::StrCat(name, "_v2"), std::string(name)};
  return {std::string(name)};
}

template <typename Fn>
bool Resolve(void* handle, absl::string_view name, Fn& fn) {
  for (const std::string& symbol : SymbolNames(name)) {
    if (void* p = dlsym(handle, symbol.c_str())) {
      fn = reinterpret_cast<Fn>(p);
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<Driver*> Driver::Get() {
  static Driver* driver = nullptr;
  static absl::Status status;
  static std::once_flag once;
  std::call_once(once, [] {
    std::unique_ptr<Driver> d(new Driver());  // kept for the process only if it initialised
    status = d->Init();
    if (status.ok()) driver = d.release();
  });
  if (!status.ok()) return status;
  cu::CUcontext current = nullptr;
  if (driver->api_.cuCtxGetCurrent(&current) != cu::CUDA_SUCCESS || !current)
    if (absl::Status s = driver->MakeCurrent(); !s.ok()) return s;
  return driver;
}

absl::Status Driver::Init() {
  handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle_)
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver on this machine: dlopen(libcuda.so.1) failed: ", dlerror()));
#define KILN_CU_FN(name)                   \
  if (!Resolve(handle_, #name, api_.name)) \
    return absl::UnavailableError(         \
        absl::StrCat("the CUDA driver lacks " #name, " (driver too old for kiln)"));
#include "kiln/runtime/cuda_functions.def"
#undef KILN_CU_FN
  if (absl::Status s = Check(api_.cuInit(0), "cuInit"); !s.ok())
    return absl::UnavailableError(absl::StrCat("no usable GPU: ", s.message()));
  int count = 0;
  if (absl::Status s = Check(api_.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) return s;
  if (count == 0) return absl::UnavailableError("the CUDA driver reports no GPU");
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cu::CUdevice device = 0;
    if (absl::Status s = Check(api_.cuDeviceGet(&device, ordinal), "cuDeviceGet"); !s.ok())
      return s;
    DeviceInfo info;
    char name[256] = {};
    if (absl::Status s = Check(api_.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName");
        !s.ok())
      return s;
    info.name = name;
    struct {
      int* out;
      int attribute;
    } attrs[] = {{&info.sm_count, cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
                 {&info.cc_major, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
                 {&info.cc_minor, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
                 {&info.max_smem_optin, cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN}};
    for (auto& a : attrs)
      if (absl::Status s =
              Check(api_.cuDeviceGetAttribute(a.out, a.attribute, device), "cuDeviceGetAttribute");
          !s.ok())
        return s;
    devices_.push_back(std::move(info));
  }
  if (absl::Status s = Check(api_.cuDriverGetVersion(&driver_version_), "cuDriverGetVersion");
      !s.ok())
    return s;
  cu::CUdevice device0 = 0;
  if (absl::Status s = Check(api_.cuDeviceGet(&device0, 0), "cuDeviceGet"); !s.ok()) return s;
  return Check(api_.cuDevicePrimaryCtxRetain(&primary0_, device0), "cuDevicePrimaryCtxRetain");
}

absl::Status Driver::MakeCurrent() const {
  return Check(api_.cuCtxSetCurrent(primary0_), "cuCtxSetCurrent");
}

absl::Status Driver::CheckNotCapturing(cu::CUstream stream, absl::string_view what) const {
  int capture = cu::CU_STREAM_CAPTURE_STATUS_NONE;
  const cu::CUresult result = api_.cuStreamIsCapturing(stream, &capture);
  // The capture errors (CUDA_ERROR_STREAM_CAPTURE_* and CUDA_ERROR_CAPTURED_EVENT, 900-908): the
  // legacy stream, say, queried while another stream captures; an allocation could not run then
  // either.
  const bool capture_error = result >= 900 && result <= 908;
  if (result != cu::CUDA_SUCCESS && !capture_error) return Check(result, "cuStreamIsCapturing");
  if (!capture_error && capture == cu::CU_STREAM_CAPTURE_STATUS_NONE) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   " on a stream being captured into a CUDA graph, which cannot allocate: launch "
                   "it once on that stream before capturing (the same shapes; in torch, "
                   "torch.cuda.graph(g, stream=s) after a warm-up call on s)"));
}

cu::CUcontext Driver::context() const {
  cu::CUcontext c = nullptr;
  api_.cuCtxGetCurrent(&c);
  return c;
}

int Driver::device() const {
  cu::CUdevice d = 0;
  if (api_.cuCtxGetDevice(&d) != cu::CUDA_SUCCESS) return 0;
  return static_cast<int>(d);
}

const Driver::DeviceInfo& Driver::Current() const {
  const int d = device();
  return devices_[d >= 0 && d < static_cast<int>(devices_.size()) ? d : 0];
}

absl::Status Driver::Check(cu::CUresult result, absl::string_view what) const {
  if (result == cu::CUDA_SUCCESS) return absl::OkStatus();
  const char* name = "unknown error";
  const char* text = "";
  if (api_.cuGetErrorName) api_.cuGetErrorName(result, &name);
  if (api_.cuGetErrorString) api_.cuGetErrorString(result, &text);
  return absl::InternalError(
      absl::StrCat(what, " failed: ", name ? name : "?", " (", text ? text : "", ")"));
}

absl::Status Synchronize() {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  absl::Status s =
      (*d)->Check((*d)->api().cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)");
  if (std::optional<absl::Status> report = internal::TakeWatchdogReport())
    return absl::Status(
        report->code(),
        absl::StrCat(report->message(),
                     s.ok() ? ""
                            : absl::StrCat("; the trap left this process's CUDA context unusable (",
                                           s.message(), ")")));
  return s;
}

// ---- DeviceBuffer

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  DeviceBuffer buffer;
  if (absl::Status s = (*d)->Check((*d)->api().cuMemAlloc(&buffer.ptr_, bytes),
                                   absl::StrCat("cuMemAlloc(", bytes, " bytes)"));
      !s.ok())
    return s;
  buffer.bytes_ = bytes;
  return buffer;
}

absl::StatusOr<bool> DeviceBuffer::GrowKeepingOld(DeviceBuffer& have,
                                                  std::vector<DeviceBuffer>& outgrown,
                                                  size_t bytes) {
  if (have.ptr() && have.bytes() >= bytes) return false;
  absl::StatusOr<DeviceBuffer> grown = Allocate(bytes);
  if (!grown.ok()) return grown.status();
  if (have.ptr()) outgrown.push_back(std::move(have));
  have = *std::move(grown);
  return true;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  if (absl::StatusOr<Driver*> d = Driver::Get(); d.ok()) (*d)->api().cuMemFree(ptr_);
}

absl::Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes) {
  if (bytes > bytes_) return absl::InvalidArgumentError("copy larger than the device buffer");
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->api().cuMemcpyHtoD(ptr_, src, bytes), "cuMemcpyHtoD");
}

absl::Status DeviceBuffer::CopyToHost(void* dst, size_t bytes) const {
  if (bytes > bytes_) return absl::InvalidArgumentError("copy larger than the device buffer");
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->api().cuMemcpyDtoH(dst, ptr_, bytes), "cuMemcpyDtoH");
}

absl::Status DeviceBuffer::CopyFrom(const DeviceBuffer& src, size_t bytes) {
  if (bytes > bytes_ || bytes > src.bytes_)
    return absl::InvalidArgumentError("copy larger than a device buffer");
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->api().cuMemcpyDtoD(ptr_, src.ptr_, bytes), "cuMemcpyDtoD");
}

absl::Status DeviceBuffer::Fill(uint8_t byte) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->api().cuMemsetD8(ptr_, byte, bytes_), "cuMemsetD8");
}

// ---- Kernel

absl::StatusOr<Kernel> Kernel::Load(absl::string_view image, const std::string& entry) {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const DriverApi& api = (*d)->api();
  // The driver wants a NUL-terminated PTX string.
  std::string owned(image);
  std::string error_log(16384, '\0');
  int options[] = {cu::CU_JIT_ERROR_LOG_BUFFER, cu::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size())};
  Kernel kernel;
  kernel.entry_ = entry;
  cu::CUresult r = api.cuModuleLoadDataEx(&kernel.module_, owned.c_str(), 2, options, values);
  if (r != cu::CUDA_SUCCESS) {
    error_log.resize(error_log.find('\0'));
    absl::Status s = (*d)->Check(r, absl::StrCat("loading the module of ", entry));
    return absl::Status(
        s.code(),
        absl::StrCat(s.message(), "; JIT log: ", error_log.empty() ? "(empty)" : error_log));
  }
  if (absl::Status s =
          (*d)->Check(api.cuModuleGetFunction(&kernel.function_, kernel.module_, entry.c_str()),
                      absl::StrCat("finding kernel '", entry, "' in its module"));
      !s.ok())
    return s;
  return kernel;
}

Kernel& Kernel::operator=(Kernel&& other) noexcept {
  std::swap(module_, other.module_);
  std::swap(function_, other.function_);
  std::swap(entry_, other.entry_);
  std::swap(smem_limit_set_, other.smem_limit_set_);
  return *this;
}

Kernel::~Kernel() {
  if (!module_) return;
  if (absl::StatusOr<Driver*> d = Driver::Get(); d.ok()) (*d)->api().cuModuleUnload(module_);
}

absl::StatusOr<cu::CUdeviceptr> Kernel::Global(const char* name) const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  cu::CUdeviceptr p = 0;
  size_t bytes = 0;
  if (absl::Status s = (*d)->Check((*d)->api().cuModuleGetGlobal(&p, &bytes, module_, name),
                                   absl::StrCat("cuModuleGetGlobal(", name, ")"));
      !s.ok())
    return s;
  return p;
}

absl::StatusOr<int> Kernel::Attribute(int attribute) const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  int value = 0;
  if (absl::Status s = (*d)->Check((*d)->api().cuFuncGetAttribute(&value, attribute, function_),
                                   "cuFuncGetAttribute");
      !s.ok())
    return s;
  return value;
}

namespace {
// The driver's launch config for `config`, its attributes in `attrs` (room for two): the cluster
// dims where it has a cluster (or always: the occupancy query takes them even for clusters of
// one), programmatic dependent launch where it asks for it.
cu::CUlaunchConfig DriverConfig(const LaunchConfig& config, cu::CUlaunchAttribute* attrs,
                                bool cluster_always = false) {
  unsigned count = 0;
  if (cluster_always || config.cluster.count() > 1) {
    attrs[count].id = cu::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[count++].value.clusterDim = {config.cluster.x, config.cluster.y, config.cluster.z};
  }
  if (config.programmatic) {
    attrs[count].id = cu::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  return cu::CUlaunchConfig{config.grid.x,  config.grid.y,  config.grid.z,       config.block.x,
                            config.block.y, config.block.z, config.dynamic_smem, config.stream,
                            attrs,          count};
}
}  // namespace

absl::Status Kernel::Launch(const LaunchConfig& config, void** args) const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const DriverApi& api = (*d)->api();
  if (config.dynamic_smem > static_cast<unsigned>((*d)->max_smem_optin()))
    return absl::InvalidArgumentError(absl::StrCat(
        entry_, " needs ", config.dynamic_smem, " bytes of shared memory; ", (*d)->device_name(),
        " allows at most ", (*d)->max_smem_optin(), " per block"));
  if (absl::Status s = RaiseSmemLimit(**d, config.dynamic_smem); !s.ok()) return s;
  if (absl::Status s = AllowClusterSize(**d, config.cluster.count()); !s.ok()) return s;
  cu::CUlaunchAttribute attrs[2]{};
  cu::CUlaunchConfig launch = DriverConfig(config, attrs);
  const cu::CUresult launched = api.cuLaunchKernelEx(&launch, function_, args, nullptr);
  if (launched == cu::CUDA_SUCCESS) return absl::OkStatus();  // (no message built on this path)
  return (*d)->Check(launched, absl::StrCat("launching ", entry_));
}

absl::Status Kernel::RaiseSmemLimit(const Driver& d, unsigned bytes) const {
  if (bytes <= smem_limit_set_) return absl::OkStatus();
  if (absl::Status s = d.Check(
          d.api().cuFuncSetAttribute(function_, cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(bytes)),
          "raising the dynamic shared memory limit");
      !s.ok())
    return s;
  smem_limit_set_ = bytes;
  return absl::OkStatus();
}

// The portable cluster size is 8 CTAs; a larger one (the CUDA Programming Guide: up to 16 on
// sm_90) needs the function's non-portable attribute set first.
absl::Status Kernel::AllowClusterSize(const Driver& d, unsigned ctas) const {
  if (ctas <= 8 || non_portable_clusters_) return absl::OkStatus();
  if (absl::Status s =
          d.Check(d.api().cuFuncSetAttribute(
                      function_, cu::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                  absl::StrCat("allowing clusters of ", ctas,
                               " CTAs (more than the portable 8) for ", entry_));
      !s.ok())
    return s;
  non_portable_clusters_ = true;
  return absl::OkStatus();
}

absl::StatusOr<int> Kernel::MaxActiveClusters(const LaunchConfig& config) const {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  if (absl::Status s = RaiseSmemLimit(**d, config.dynamic_smem); !s.ok()) return s;
  LaunchConfig occupancy = config;
  occupancy.programmatic = false;  // the cluster dims alone
  cu::CUlaunchAttribute attrs[2]{};
  cu::CUlaunchConfig launch = DriverConfig(occupancy, attrs, /*cluster_always=*/true);
  int clusters = 0;
  if (absl::Status s =
          (*d)->Check((*d)->api().cuOccupancyMaxActiveClusters(&clusters, function_, &launch),
                      absl::StrCat("cuOccupancyMaxActiveClusters for ", entry_));
      !s.ok())
    return s;
  return clusters;
}

// ---- EventTimer

absl::StatusOr<EventTimer> EventTimer::Create() {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  EventTimer t;
  for (cu::CUevent* e : {&t.start_, &t.stop_})
    if (absl::Status s =
            (*d)->Check((*d)->api().cuEventCreate(e, cu::CU_EVENT_DEFAULT), "cuEventCreate");
        !s.ok())
      return s;
  return t;
}

EventTimer& EventTimer::operator=(EventTimer&& other) noexcept {
  std::swap(start_, other.start_);
  std::swap(stop_, other.stop_);
  return *this;
}

EventTimer::~EventTimer() {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return;
  if (start_) (*d)->api().cuEventDestroy(start_);
  if (stop_) (*d)->api().cuEventDestroy(stop_);
}

absl::Status EventTimer::Start() {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  return (*d)->Check((*d)->api().cuEventRecord(start_, nullptr), "cuEventRecord");
}

absl::StatusOr<float> EventTimer::StopMs() {
  absl::StatusOr<Driver*> d = Driver::Get();
  if (!d.ok()) return d.status();
  const DriverApi& api = (*d)->api();
  if (absl::Status s = (*d)->Check(api.cuEventRecord(stop_, nullptr), "cuEventRecord"); !s.ok())
    return s;
  if (absl::Status s = (*d)->Check(api.cuEventSynchronize(stop_), "waiting for a timed kernel");
      !s.ok())
    return s;
  float ms = 0;
  if (absl::Status s =
          (*d)->Check(api.cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
      !s.ok())
    return s;
  return ms;
}

}  // namespace kiln::rt
