#include "kernels/cuda/kernel_trace.hpp"

#include "common/error.hpp"

#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace di::cuda {

namespace {

/// The CUPTI entry points the tracer uses, from the library dlopen found.
struct cupti_api {
  void* lib = nullptr;
  std::string path;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char**) = nullptr;
};

template <typename F>
void bind(void* lib, const char* name, F& f, const std::string& path) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  DI_CHECK(f != nullptr, "kernel trace: {} has no {}", path, name);
}

const cupti_api& api() {
  static const cupti_api loaded = [] {
    std::vector<std::string> names;
    if (const char* env = std::getenv("DEEPINFER_CUPTI_LIB")) names.emplace_back(env);
    names.insert(names.end(), {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
                               "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"});
    cupti_api a;
    std::string tried;
    for (const std::string& n : names) {
      a.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (a.lib) {
        a.path = n;
        break;
      }
      tried += (tried.empty() ? "" : ", ") + n;
    }
    DI_CHECK(a.lib != nullptr,
             "kernel trace needs CUPTI (libcupti, part of the CUDA toolkit); none loaded from {} "
             "(set DEEPINFER_CUPTI_LIB to its path)",
             tried);
    bind(a.lib, "cuptiActivityEnable", a.enable, a.path);
    bind(a.lib, "cuptiActivityDisable", a.disable, a.path);
    bind(a.lib, "cuptiActivityRegisterCallbacks", a.register_callbacks, a.path);
    bind(a.lib, "cuptiActivityFlushAll", a.flush_all, a.path);
    bind(a.lib, "cuptiActivityGetNextRecord", a.next_record, a.path);
    bind(a.lib, "cuptiGetTimestamp", a.timestamp, a.path);
    bind(a.lib, "cuptiGetResultString", a.result_string, a.path);
    bind(a.lib, "cuptiGetCallbackName", a.callback_name, a.path);
    return a;
  }();
  return loaded;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = "unknown";
  api().result_string(r, &text);
  DI_FAIL("kernel trace: {} failed: {} ({})", what, text, int(r));
}

constexpr std::size_t buffer_bytes = std::size_t(8) << 20;
constexpr std::size_t buffer_align = 8;

/// What the tracer records: kernels, copies and memsets on the device, runtime calls on the host.
constexpr CUpti_ActivityKind traced_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME};

/// Records from the completed buffers (CUPTI hands them over on its own threads), kernel names
/// demangled and shortened once per distinct mangled name, runtime calls named by callback id.
struct collected {
  std::mutex m;
  timeline_records records;
  std::unordered_map<std::string, std::string> names;
  std::unordered_map<std::uint32_t, std::string> calls;
};
collected g_collected;
std::atomic<bool> g_active{false};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(buffer_align, buffer_bytes));
  *size = *buffer ? buffer_bytes : 0;
  *max_records = 0;  // as many as fit
}

std::string shorten(const char* mangled) {
  if (!mangled) return "(unnamed)";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return short_kernel_name(status == 0 && d ? d.get() : mangled);
}

const char* copy_name(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "[memcpy HtoD]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "[memcpy DtoH]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "[memcpy DtoD]";
    default:
      return "[memcpy]";
  }
}

/// A runtime call's name without its version suffix ("cudaMemcpyAsync_v3020" -> "cudaMemcpyAsync").
std::string call_name(std::uint32_t cbid) {
  const char* name = nullptr;
  if (api().callback_name(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS || !name)
    return "runtime call " + std::to_string(cbid);
  std::string n = name;
  if (const std::size_t v = n.rfind("_v");
      v != std::string::npos && v + 2 < n.size() &&
      n.find_first_not_of("0123456789", v + 2) == std::string::npos)
    n.erase(v);
  return n;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::unique_ptr<uint8_t, decltype(&std::free)> owned(buffer, &std::free);
  std::lock_guard<std::mutex> lock(g_collected.m);
  timeline_records& out = g_collected.records;
  CUpti_Activity* record = nullptr;
  while (api().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    // The fields read here sit at the same offsets in the record versions of CUPTI 12 and 13.
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        const std::string key = k->name ? k->name : "";
        auto it = g_collected.names.find(key);
        if (it == g_collected.names.end())
          it = g_collected.names.emplace(key, shorten(k->name)).first;
        out.device.push_back({it->second, k->start, k->end});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        out.device.push_back({copy_name(c->copyKind), c->start, c->end});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        out.device.push_back({"[memset]", m->start, m->end});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* r = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        auto it = g_collected.calls.find(r->cbid);
        if (it == g_collected.calls.end())
          it = g_collected.calls.emplace(r->cbid, call_name(r->cbid)).first;
        out.host.push_back({it->second, r->start, r->end});
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace

kernel_trace::kernel_trace() {
  DI_CHECK(!g_active.exchange(true), "kernel trace: one tracer at a time");
  try {
    const cupti_api& a = api();
    check(a.register_callbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind k : traced_kinds) check(a.enable(k), "enabling activity records");
  } catch (...) {
    g_active = false;
    throw;
  }
}

kernel_trace::~kernel_trace() {
  const cupti_api& a = api();
  for (CUpti_ActivityKind k : traced_kinds) a.disable(k);
  a.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_collected.m);
  g_collected.records = {};
  g_active = false;
}

std::uint64_t kernel_trace::now_ns() const {
  std::uint64_t t = 0;
  check(api().timestamp(&t), "cuptiGetTimestamp");
  return t;
}

timeline_records kernel_trace::collect() {
  check(api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_collected.m);
  timeline_records out;
  std::swap(out, g_collected.records);
  return out;
}

}  // namespace di::cuda
