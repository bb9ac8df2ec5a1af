// child_process.hpp — running a child program of a suite without letting its
// output reach this process's (and so ctest's) output, and a scratch
// directory: used by the cross-process determinism check (test_determinism,
// CrossProcess.*) and by the device-free check of the runner itself
// (test_determinism_tools, ChildProcess.*). The child is determinism_probe,
// built next to the suites.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace mc::testing {

// A child's log as it may appear in this process's output: a line that could
// read as a gtest verdict ("[  SKIPPED ]", "[  FAILED  ]", ...) would make
// ctest misjudge the parent (its SKIP_REGULAR_EXPRESSION), so brackets are
// neutralised and every line is prefixed.
inline std::string quote_child_log(const std::string& log) {
  std::istringstream is(log);
  std::string out, line;
  while (std::getline(is, line)) {
    for (char& c : line)
      if (c == '[' || c == ']') c = '|';
    out += "    child> " + line + "\n";
  }
  return out;
}

struct ChildResult {
  int exit_code = -1;  // valid when exited
  bool exited = false;
  int signal = 0;
  bool timed_out = false;
  std::string spawn_error;
  std::string log;  // the child's stdout + stderr (from its log file)
  std::string describe() const {
    std::ostringstream os;
    if (!spawn_error.empty()) os << "could not start: " << spawn_error;
    else if (timed_out) os << "timed out and was killed";
    else if (exited) os << "exit status " << exit_code;
    else os << "killed by signal " << signal;
    return os.str();
  }
};

// Runs exe with args, stdin from /dev/null, stdout and stderr into log_path
// (never into this process's output), and waits at most timeout_s.
inline ChildResult run_child(const std::string& exe, const std::vector<std::string>& args,
                      const std::string& log_path, int timeout_s) {
  ChildResult r;
  std::vector<std::string> store{exe};
  store.insert(store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : store) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    r.spawn_error = exe + ": " + std::strerror(rc);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.spawn_error = std::string("waitpid: ") + std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);  // our own child, by its pid
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out) {
    r.exited = WIFEXITED(status);
    r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  std::ifstream f(log_path);
  std::ostringstream os;
  os << f.rdbuf();
  r.log = os.str();
  return r;
}

// The probe sits next to this test binary (same build folder, also after
// scripts/stage_build.sh); MAMBACHECK_DETERMINISM_PROBE overrides.
inline std::string probe_path() {
  if (const char* p = std::getenv("MAMBACHECK_DETERMINISM_PROBE")) return p;
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "determinism_probe";
  std::string self(buf, size_t(n));
  return self.substr(0, self.rfind('/') + 1) + "determinism_probe";
}

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor unless keep().
class TempDir {
 public:
  TempDir() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/mc-determinism-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + tmpl + "): " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    if (keep_) return;
    for (const auto& f : files_) std::remove((path_ + "/" + f).c_str());
    rmdir(path_.c_str());
  }
  std::string file(const std::string& name) {
    files_.push_back(name);
    return path_ + "/" + name;
  }
  void keep() { keep_ = true; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
  bool keep_ = false;
};

}  // namespace mc::testing
