// shard_launcher.cpp — one child process per device (shard_launcher.hpp),
// started with fork + execv of /proc/self/exe.
#include "bench/shard_launcher.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mc::bench {

static bool starts_with(const std::string& s, const char* p) {
  return s.compare(0, std::strlen(p), p) == 0;
}

static std::string shard_stem(const BenchFlags& f, const std::string& program) {
  if (f.json.empty()) return program;
  const std::string ext = ".json";
  if (f.json.size() > ext.size() && f.json.compare(f.json.size() - ext.size(), ext.size(), ext) == 0)
    return f.json.substr(0, f.json.size() - ext.size());
  return f.json;
}

// The child's argv: the user's flags minus the ones the launcher decides.
static std::vector<std::string> child_args(const BenchFlags& f, int device, int index, int count,
                                           const std::string& json) {
  std::vector<std::string> a{f.original_args.empty() ? std::string("bench") : f.original_args[0]};
  for (size_t i = 1; i < f.original_args.size(); ++i) {
    const std::string& s = f.original_args[i];
    if (starts_with(s, "--devices=") || starts_with(s, "--device=") || starts_with(s, "--shard=") ||
        starts_with(s, "--json=") || starts_with(s, "--benchmark_out=") ||
        starts_with(s, "--benchmark_out_format="))
      continue;
    a.push_back(s);
  }
  a.push_back("--device=" + std::to_string(device));
  a.push_back("--shard=" + std::to_string(index) + "/" + std::to_string(count));
  a.push_back("--json=" + json);
  return a;
}

int run_device_shards(const BenchFlags& f, const std::string& program) {
  const std::string stem = shard_stem(f, program);
  const int n = int(f.devices.size());
  std::vector<pid_t> pids(n, -1);
  std::vector<std::string> txt(n), json(n);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int i = 0; i < n; ++i) {
    const int d = f.devices[i];
    txt[i] = stem + ".dev" + std::to_string(d) + ".txt";
    json[i] = stem + ".dev" + std::to_string(d) + ".json";
    std::vector<std::string> args = child_args(f, d, i, n, json[i]);
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork for device %d failed: %s\n", program.c_str(), d,
                   std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      const int fd = open(txt[i].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) {
        std::fprintf(stderr, "%s: cannot write %s: %s\n", program.c_str(), txt[i].c_str(),
                     std::strerror(errno));
        _exit(1);
      }
      close(fd);
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "%s: execv failed: %s\n", program.c_str(), std::strerror(errno));
      _exit(1);
    }
    pids[i] = pid;
    std::fprintf(stderr, "%s: device %d -> shard %d/%d, pid %d, JSON %s, console %s\n",
                 program.c_str(), d, i, n, int(pid), json[i].c_str(), txt[i].c_str());
  }
  int ok = 0, no_device = 0;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) < 0) {
      std::fprintf(stderr, "%s: waitpid for device %d failed: %s\n", program.c_str(),
                   f.devices[i], std::strerror(errno));
      continue;
    }
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0) {
      ++ok;
    } else if (code == 77) {
      ++no_device;
      std::fprintf(stderr, "%s: device %d: no CUDA device (exit 77)\n", program.c_str(),
                   f.devices[i]);
    } else {
      std::fprintf(stderr, "%s: device %d shard FAILED with exit code %d (see %s)\n",
                   program.c_str(), f.devices[i], code, txt[i].c_str());
    }
  }
  if (ok == n) {
    std::fprintf(stderr, "%s: all %d device shards finished; JSON files:", program.c_str(), n);
    for (const auto& j : json) std::fprintf(stderr, " %s", j.c_str());
    std::fprintf(stderr, "\n");
    return 0;
  }
  return no_device == n ? 77 : 1;
}

}  // namespace mc::bench
