// rlprof's one door into torch's C++ profiler (rlprof_plugins/backends/torch_shim.py builds, gates and loads it).
//
// Why C++ and not ctypes on torch's mangled symbols: a C++ exception cannot cross ctypes (it ends the process),
// and how a function returns a std::unique_ptr differs by machine (a hidden first argument on x86-64, register
// x8 on aarch64). Compiled against the installed torch's own headers, every call below catches what torch throws
// where it is thrown and hands back a message instead, and the compiler handles the ABI. Called through ctypes,
// the GIL is free for each call.
//
// The stop off the engine thread, in two halves:
// - rlprof_detach (the engine thread, in place of torch's _disable_profiler): pops this thread's profiler
//   session and removes its callbacks. The session records thread-locally (torch's default, as native engines
//   record), so the engine thread is the one thread running its callbacks; once this returns, none runs.
// - rlprof_finish (any thread): waits until nothing else owns the session (a task that inherited the engine
//   thread's state while it recorded, at::launch's, holds it until it ends), then pushes it onto this thread and
//   calls torch's own disableProfiler here: torch post-processes and returns the recording.
// rlprof_save writes a recording as torch's export_chrome_trace does; rlprof_free frees it.

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

using torch::autograd::profiler::ProfilerResult;
using torch::profiler::impl::ProfilerStateBase;

namespace {

std::atomic<long> g_results{0};  // recordings handed out and not freed
std::atomic<long> g_detached{0};  // sessions detached and not finished or dropped

struct Detached {
  std::shared_ptr<ProfilerStateBase> state;
  long owners;  // the owners the session had right after it started (its slot, torch's own global reference)
};

void put(char* err, size_t n, const char* what) {
  if (err != nullptr && n > 0) {
    std::strncpy(err, what, n - 1);
    err[n - 1] = 0;
  }
}

// The fault tests' one hook: RLPROF_SHIM_FAULT=<call> throws a C++ exception inside that call, where torch's own
// errors would come from, so the tests prove it is caught there.
void fault(const char* where) {
  const char* wanted = std::getenv("RLPROF_SHIM_FAULT");
  if (wanted != nullptr && std::strcmp(wanted, where) == 0) {
    throw std::runtime_error(std::string("injected C++ fault in ") + where);
  }
}

}  // namespace

#define RLPROF_CATCH(err, n)                                 \
  catch (const std::exception& e) {                          \
    put(err, n, e.what());                                   \
  }                                                          \
  catch (...) {                                              \
    put(err, n, "a C++ exception that is no std::exception"); \
  }

extern "C" {

// What this file's functions are: torch_shim.py refuses a build of another version.
int rlprof_shim_version() { return 2; }

// The engine thread, right after its profiler started: how many own the session (compared at the finish).
long rlprof_owners(char* err, size_t n) {
  try {
    fault("owners");
    auto state = c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE);
    if (!state) {
      put(err, n, "no profiler session on this thread");
      return -1;
    }
    return static_cast<long>(state.use_count()) - 1;  // less this peek's own
  }
  RLPROF_CATCH(err, n)
  return -1;
}

// Whether this thread has a profiler session (1), none (0), or torch could not say (-1). torch 2.13's own
// disableProfiler reads the session it pops before checking there is one: called without one it ends the process,
// so nothing of rlprof calls it where this says 0.
int rlprof_has_session() {
  try {
    return ProfilerStateBase::get(/*global=*/false) != nullptr ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

// The engine thread, in place of torch's _disable_profiler(): the session off this thread, its callbacks gone.
void* rlprof_detach(long owners, char* err, size_t n) {
  try {
    fault("detach");
    auto* peeked = ProfilerStateBase::get(/*global=*/false);
    if (peeked == nullptr) {
      put(err, n, "no profiler session on this thread (it ended elsewhere)");
      return nullptr;
    }
    auto detached = std::make_unique<Detached>();
    detached->owners = owners;
    detached->state = ProfilerStateBase::pop(/*global=*/false);
    detached->state->removeCallback();
    g_detached++;
    return detached.release();
  }
  RLPROF_CATCH(err, n)
  return nullptr;
}

// How many own a detached session besides rlprof (0: nothing else can record into it).
long rlprof_other_owners(void* handle) {
  auto* d = static_cast<Detached*>(handle);
  return static_cast<long>(d->state.use_count()) - d->owners;
}

// Any thread: once nothing else owns the session (waited for, at most timeout_ms), torch post-processes it here.
// The handle is consumed either way; on an error the session is dropped and the message says why.
void* rlprof_finish(void* handle, long timeout_ms, char* err, size_t n) {
  std::unique_ptr<Detached> d(static_cast<Detached*>(handle));
  g_detached--;
  try {
    fault("finish");
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (static_cast<long>(d->state.use_count()) > d->owners) {
      if (std::chrono::steady_clock::now() > until) {
        put(err, n, "another thread still held the profiler session at the wait's end");
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ProfilerStateBase::push(std::move(d->state));
    auto result = torch::autograd::profiler::disableProfiler();
    if (!result) {
      put(err, n, "torch's disableProfiler returned no recording");
      return nullptr;
    }
    g_results++;
    return result.release();
  }
  RLPROF_CATCH(err, n)
  return nullptr;
}

// A detached session given up before its finish (its recording is lost; said by the caller).
void rlprof_drop(void* handle) {
  try {
    delete static_cast<Detached*>(handle);
    g_detached--;
  } catch (...) {
  }
}

// Write a recording as torch's export_chrome_trace does (Kineto's writer). 0: written.
int rlprof_save(void* result, const char* path, char* err, size_t n) {
  try {
    fault("save");
    static_cast<ProfilerResult*>(result)->save(std::string(path));
    return 0;
  }
  RLPROF_CATCH(err, n)
  return -1;
}

void rlprof_free(void* result) {
  try {
    delete static_cast<ProfilerResult*>(result);
    g_results--;
  } catch (...) {
  }
}

// What is still alive: recordings (live_results) and detached sessions (live_detached). The leak tests read them.
long rlprof_live_results() { return g_results.load(); }
long rlprof_live_detached() { return g_detached.load(); }

}  // extern "C"
