#include "solver/isolated_backend.hpp"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include <signal.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {
using madpipe::solver::SolveResult;

// The result as bytes: fixed fields, then the values and the message with their sizes.
std::string encode(const SolveResult& r) {
  std::string bytes;
  auto put = [&bytes](const void* data, std::size_t size) {
    if (size != 0) bytes.append(static_cast<const char*>(data), size);
  };
  const std::int32_t status = static_cast<std::int32_t>(r.status);
  put(&status, sizeof status);
  for (double d : {r.objective, r.bound, r.gap, r.seconds, r.first_solution_seconds})
    put(&d, sizeof d);
  const std::uint64_t values = r.values.size(), message = r.message.size();
  put(&values, sizeof values);
  put(r.values.data(), values * sizeof(double));
  put(&message, sizeof message);
  put(r.message.data(), message);
  return bytes;
}

bool decode(const std::string& bytes, SolveResult& r) {
  std::size_t at = 0;
  auto get = [&](void* data, std::size_t size) {
    if (at + size > bytes.size()) return false;
    if (size != 0) std::memcpy(data, bytes.data() + at, size);
    at += size;
    return true;
  };
  std::int32_t status = 0;
  if (!get(&status, sizeof status)) return false;
  r.status = static_cast<madpipe::solver::Status>(status);
  for (double* d : {&r.objective, &r.bound, &r.gap, &r.seconds, &r.first_solution_seconds})
    if (!get(d, sizeof *d)) return false;
  std::uint64_t values = 0, message = 0;
  if (!get(&values, sizeof values) || values > bytes.size()) return false;
  r.values.resize(values);
  if (!get(r.values.data(), values * sizeof(double))) return false;
  if (!get(&message, sizeof message) || message > bytes.size()) return false;
  r.message.resize(message);
  return get(r.message.data(), message) && at == bytes.size();
}

SolveResult failed(const std::string& message) {
  SolveResult r;
  r.status = madpipe::solver::Status::Error;
  r.message = message;
  return r;
}

class IsolatedBackend final : public madpipe::solver::Backend {
 public:
  explicit IsolatedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }

  SolveResult solve(const madpipe::solver::Model& model,
                    const madpipe::solver::SolveOptions& options) override {
    int fds[2];
    if (pipe(fds) != 0) return inner_->solve(model, options);  // no pipe: run in-process
    const pid_t child = fork();
    if (child < 0) {
      close(fds[0]);
      close(fds[1]);
      return inner_->solve(model, options);
    }
    if (child == 0) {
      close(fds[0]);
      SolveResult result;
      try {
        result = inner_->solve(model, options);
      } catch (const std::exception& e) {
        result = failed(std::string("the solver failed: ") + e.what());
      } catch (...) {
        result = failed("the solver failed with an exception");
      }
      const std::string bytes = encode(result);
      for (std::size_t at = 0; at < bytes.size();) {
        const ssize_t n = write(fds[1], bytes.data() + at, bytes.size() - at);
        if (n <= 0) _exit(3);
        at += static_cast<std::size_t>(n);
      }
      _exit(0);  // no destructors, no atexit handlers of the parent's libraries
    }
    close(fds[1]);
    const double wall_limit_s =
        options.wall_limit_s > 0 ? options.wall_limit_s : 2 * options.time_limit_s + 30;
    bool killed = false;
    std::string bytes = read_all(fds[0], child, wall_limit_s, &killed);
    close(fds[0]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (killed && options.wall_limit_s > 0) {
      SolveResult timeout;
      timeout.status = madpipe::solver::Status::Timeout;
      timeout.backend = std::string(inner_->name());
      timeout.seconds = wall_limit_s;
      timeout.message = "stopped at its wall-clock limit";
      return timeout;
    }
    if (WIFSIGNALED(status))
      return failed("the " + std::string(inner_->name()) + " solver crashed (signal " +
                    std::to_string(WTERMSIG(status)) + ": " + strsignal(WTERMSIG(status)) + ")");
    SolveResult result;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !decode(bytes, result))
      return failed("the " + std::string(inner_->name()) + " solver process failed");
    return result;
  }

 private:
  // Everything the child writes; kills it when it runs past `wall_limit_s` (a request without a
  // time limit has an infinite one, which no clock can add: no deadline then).
  static std::string read_all(int fd, pid_t child, double wall_limit_s, bool* killed) {
    const bool limited = std::isfinite(wall_limit_s) && wall_limit_s < kLongestWall_s;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(limited ? wall_limit_s : 0.0));
    std::string bytes;
    char buffer[1 << 16];
    for (;;) {
      fd_set ready;
      FD_ZERO(&ready);
      FD_SET(fd, &ready);
      timeval wait{0, 100000};
      const int n = select(fd + 1, &ready, nullptr, nullptr, &wait);
      if (n < 0 && errno != EINTR) break;
      if (n > 0) {
        const ssize_t got = read(fd, buffer, sizeof buffer);
        if (got <= 0) break;  // the child closed its end
        bytes.append(buffer, static_cast<std::size_t>(got));
      }
      if (limited && std::chrono::steady_clock::now() > deadline) {
        kill(child, SIGKILL);
        *killed = true;
        break;
      }
    }
    return bytes;
  }

  static constexpr double kLongestWall_s = 1e9;  // 30 years: beyond it, no deadline
  std::unique_ptr<Backend> inner_;
};
}  // namespace

std::unique_ptr<madpipe::solver::Backend> madpipe::solver::isolate_backend(
    std::unique_ptr<Backend> inner) {
  return std::make_unique<IsolatedBackend>(std::move(inner));
}
