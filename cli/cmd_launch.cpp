// `deepinfer launch FILE [--set key=value]...`: starts every node of the cluster file that
// lives on this host as a `deepinfer node` process, supervises them, and prints one line
// `ready: HOST:PORT` (the address clients connect to) when the cluster can serve. Nodes on
// other hosts are listed with the command to start them there. SIGINT/SIGTERM/SIGHUP shut the
// cluster down in order (the coordinator first; stragglers are killed after
// cluster.shutdown_timeout_s); one that comes before the cluster is ready makes launch exit 128 +
// the signal's number, as `serve` does. When the coordinator exits, the other local nodes are
// stopped and launch exits with its code. A local node that exits before the cluster is ready
// stops the rest at once (exit 1): the coordinator would wait for it until
// cluster.startup_timeout_s. Nodes run in their own process group (a terminal's Ctrl-C reaches
// launch only, which shuts them down in order) and get SIGTERM from the kernel when launch dies
// (PR_SET_PDEATHSIG), even by SIGKILL.
#include "actors/tls_files.hpp"
#include "cli/command.hpp"
#include "common/error.hpp"
#include "config/cluster_config.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

namespace {

struct launch_options {
  std::string file;
  std::vector<std::string> sets;
};

struct child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;     // the node's stdout (the ready line)
  std::string buffer;  // partial line
  bool running = true;
  int status = 0;
  bool lost = false;  // exited while the cluster ran (not in a shutdown launch began)
  /// A node that ended with 0 while the cluster ran: lost, unless the coordinator ends with 0
  /// too within the shutdown timeout -- then node 0 was stopping the cluster in order (a
  /// SIGTERM sent to node 0 itself made launch report node 1 lost and exit 1).
  std::optional<std::chrono::steady_clock::time_point> clean_exit_at;
  /// The same before the cluster is ready: when a node ended with 0 (see supervise).
  std::optional<std::chrono::steady_clock::time_point> stopped_at;
};

/// The first stop signal's number (0: none yet).
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int sig) {
  if (g_stop == 0) g_stop = sig;
}

/// Names and addresses that mean "this host".
std::set<std::string> local_names() {
  std::set<std::string> names{"localhost", "127.0.0.1", "::1", "0.0.0.0"};
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) names.insert(host);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (a->ifa_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
      else if (a->ifa_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof(buf));
      if (buf[0] != 0) names.insert(buf);
    }
    freeifaddrs(list);
  }
  return names;
}

std::vector<std::string> node_args(const launch_options& o, int rank) {
  std::vector<std::string> args{"deepinfer", "node", "--config", o.file, "--rank", std::to_string(rank)};
  for (const std::string& s : o.sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

child start_node(const launch_options& o, int rank) {
  int fds[2];
  DI_CHECK(pipe(fds) == 0, "launch: pipe failed");
  const std::vector<std::string> args = node_args(o, rank);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  DI_CHECK(pid >= 0, "launch: fork failed");
  if (pid == 0) {
    // Its own process group: the SIGINT of a terminal's Ctrl-C (sent to the foreground group)
    // reaches launch alone, which then stops the nodes in order; the nodes got it too and
    // raced that shutdown (node 0 took launch's SIGTERM as a second signal and exited 130
    // at once, node 1 lost its coordinator and exited 1).
    setpgid(0, 0);
    // SIGTERM when launch dies, however it dies (SIGKILL included): the nodes kept running and
    // serving, orphaned. The node's SIGTERM handler shuts it down in order. If launch died
    // before this line, the parent is already someone else: exit now.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent) std::_Exit(1);
    // SIGINT/SIGTERM wait (blocked, across exec) until the node has installed its handlers,
    // which unblock them: one that came earlier killed the node outright (status 143) instead
    // of shutting it down in order -- launch stops the rest at once when a node fails early.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    // Not the terminal's foreground group any more: reading the terminal would stop the node
    // (SIGTTIN), and so would writing its logs there under `stty tostop` (SIGTTOU; an ignored
    // SIGTTOU lets the write through, and stays ignored across exec).
    if (const int null_fd = open("/dev/null", O_RDONLY); null_fd >= 0) {
      dup2(null_fd, STDIN_FILENO);
      if (null_fd != STDIN_FILENO) close(null_fd);
    }
    signal(SIGTTOU, SIG_IGN);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    // This binary by its own path: exec'd as /proc/self/exe the node's process name was "exe"
    // (ps -C deepinfer, pgrep deepinfer and killall missed the nodes). The link itself where
    // the file is gone (replaced or deleted since launch started).
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
      self[len] = '\0';
      if (!std::string_view(self, std::size_t(len)).ends_with(" (deleted)"))
        execv(self, argv.data());
    }
    execv("/proc/self/exe", argv.data());
    std::perror("launch: exec");
    std::_Exit(127);
  }
  setpgid(pid, pid);  // as in the child (whichever runs first); fails harmlessly after its exec
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return {.rank = rank, .pid = pid, .out_fd = fds[0]};
}

/// Forwards complete lines of a node's stdout; `ready` lines of the coordinator once. At the
/// end of the output (the node exited) the pipe is closed, so that poll() no longer wakes for it
/// (it did, at once and forever: launch spun a core after any node exited).
void drain(child& c, bool& printed_ready) {
  char buf[4096];
  ssize_t n = 0;
  while (c.out_fd >= 0 && (n = read(c.out_fd, buf, sizeof(buf))) > 0)
    c.buffer.append(buf, std::size_t(n));
  if (c.out_fd >= 0 && n == 0) {
    close(c.out_fd);
    c.out_fd = -1;  // poll() skips negative descriptors
    if (!c.buffer.empty() && c.buffer.back() != '\n') c.buffer += '\n';
  }
  for (std::size_t nl; (nl = c.buffer.find('\n')) != std::string::npos;) {
    const std::string line = c.buffer.substr(0, nl);
    c.buffer.erase(0, nl + 1);
    if (line.rfind("ready: ", 0) == 0) {
      if (c.rank != 0 || printed_ready) continue;
      printed_ready = true;
    }
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  }
}

/// Reaps exited children; true when `rank` 0 (if it is ours) has exited.
bool reap(std::vector<child>& children) {
  bool coordinator_gone = false;
  for (child& c : children) {
    if (!c.running) continue;
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
    c.running = false;
    c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::fprintf(stderr, "launch: node %d (pid %d) exited with status %d\n", c.rank, int(c.pid), c.status);
    coordinator_gone |= c.rank == 0;
  }
  return coordinator_gone;
}

bool any_running(const std::vector<child>& children) {
  for (const child& c : children)
    if (c.running) return true;
  return false;
}

/// SIGTERM to the coordinator (it stops the other nodes in order), then to every node left
/// after `timeout_s`, then SIGKILL after as long again. True when SIGKILL was needed (a node
/// that ends on the SIGTERM says how by its own status).
bool stop_all(std::vector<child>& children, int timeout_s) {
  bool has_coordinator = false;
  for (child& c : children)
    if (c.running && c.rank == 0) {
      kill(c.pid, SIGTERM);
      has_coordinator = true;
    }
  const auto start = std::chrono::steady_clock::now();
  auto term_at = start + std::chrono::seconds(has_coordinator ? timeout_s : 0);
  auto kill_at = term_at + std::chrono::seconds(timeout_s);
  bool termed = false, killed = false;
  while (any_running(children)) {
    const auto now = std::chrono::steady_clock::now();
    // A coordinator that is gone stops nobody in order (e.g. it was stopped before it
    // installed its handlers): the rest get their SIGTERM now, not after timeout_s.
    if (reap(children) && !termed && term_at > now) {
      term_at = now;
      kill_at = now + std::chrono::seconds(timeout_s);
    }
    for (child& c : children) {
      if (!c.running) continue;
      if (!termed && now >= term_at) kill(c.pid, SIGTERM);
      if (!killed && now >= kill_at) kill(c.pid, SIGKILL);
    }
    termed |= now >= term_at;
    killed |= now >= kill_at;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return killed;
}

int supervise(std::vector<child>& children, int shutdown_timeout_s) {
  bool printed_ready = false;
  bool forced = false;  // SIGKILL was needed
  const bool has_coordinator =
      std::any_of(children.begin(), children.end(), [](const child& c) { return c.rank == 0; });
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    for (const child& c : children) fds.push_back({.fd = c.out_fd, .events = POLLIN});
    poll(fds.data(), fds.size(), 100);
    for (child& c : children) drain(c, printed_ready);
    // Interrupted while the cluster starts (launch runs the coordinator, which prints ready):
    // the nodes are stopped all the same, and the status says so, as serve's does -- it was 0,
    // which a supervisor or a script read as a clean run.
    if (g_stop && has_coordinator && !printed_ready) {
      std::fprintf(stderr, "launch: stopped by signal %d while the cluster was starting\n",
                   int(g_stop));
      stop_all(children, shutdown_timeout_s);
      for (child& c : children) drain(c, printed_ready);
      return 128 + int(g_stop);
    }
    if (g_stop) {
      std::fprintf(stderr, "launch: stopping the cluster\n");
      forced = stop_all(children, shutdown_timeout_s);
      break;
    }
    const bool coordinator_gone = reap(children);
    for (child& c : children)
      if (!c.running && !c.lost) {
        if (c.status == 0 && c.rank != 0 && printed_ready && has_coordinator) {
          const auto now = std::chrono::steady_clock::now();
          if (!c.clean_exit_at) c.clean_exit_at = now;
          if (now - *c.clean_exit_at < std::chrono::seconds(std::max(1, shutdown_timeout_s)))
            continue;  // node 0 may be stopping the cluster in order: decided below
        }
        c.lost = true;
        if (printed_ready && c.rank != 0)
          std::fprintf(stderr,
                       "launch: node %d exited while the cluster ran; its groups cannot serve (the "
                       "router answers their requests with an error) and launch will exit 1\n",
                       c.rank);
      }
    if (coordinator_gone || !any_running(children)) {
      for (child& c : children) drain(c, printed_ready);  // a ready line written before it ended
      if (has_coordinator && !printed_ready) {
        // The coordinator ended before the cluster was ready: the start failed, whatever its
        // status (its log says why).
        const child& c0 = *std::find_if(children.begin(), children.end(),
                                        [](const child& c) { return c.rank == 0; });
        if (!c0.running)
          std::fprintf(stderr,
                       "launch: node 0 exited (status %d) before the cluster was ready; "
                       "stopping the cluster\n",
                       c0.status);
        stop_all(children, shutdown_timeout_s);
        for (child& c : children) drain(c, printed_ready);
        return 1;
      }
      forced = stop_all(children, shutdown_timeout_s);
      break;
    }
    // A node that exits before the cluster is ready: the coordinator would wait for it until
    // cluster.startup_timeout_s (launch hung that long). Only launch's own coordinator prints
    // the ready line; without one here, readiness is unknown: nodes are only reported, as before.
    // A node that ends with 0 was stopped in order, most often by the coordinator, whose own
    // start failed (its router port taken, a bad model folder): launch blamed that node ("node 1
    // exited (status 0) before the cluster was ready", 5 of 5 runs) and then reaped node 0's
    // status 1. The coordinator gets shutdown_timeout_s to end (the branch above names it).
    if (!printed_ready && has_coordinator) {
      const auto now = std::chrono::steady_clock::now();
      const auto gone = std::find_if(children.begin(), children.end(), [&](child& c) {
        if (c.running) return false;
        if (c.rank == 0 || c.status != 0) return true;
        if (!c.stopped_at) c.stopped_at = now;
        return now - *c.stopped_at >= std::chrono::seconds(std::max(1, shutdown_timeout_s));
      });
      if (gone != children.end()) {
        std::fprintf(stderr,
                     "launch: node %d exited (status %d) before the cluster was ready; stopping "
                     "the cluster\n",
                     gone->rank, gone->status);
        stop_all(children, shutdown_timeout_s);
        for (child& c : children) drain(c, printed_ready);
        return 1;
      }
    }
  }
  for (child& c : children) drain(c, printed_ready);
  // Nodes that ended with 0 before the coordinator: an orderly stop where it ended with 0 too.
  const auto coordinator =
      std::find_if(children.begin(), children.end(), [](const child& c) { return c.rank == 0; });
  const bool coordinator_clean =
      coordinator != children.end() && !coordinator->running && coordinator->status == 0;
  for (child& c : children)
    if (c.clean_exit_at && !c.lost && !coordinator_clean) {
      c.lost = true;
      std::fprintf(stderr, "launch: node %d exited while the cluster ran; launch exits 1\n",
                   c.rank);
    }
  // 0 only for an orderly run: no node lost while the cluster ran (a supervisor saw exit 0
  // after a SIGTERM of a cluster that had long stopped serving), none that had to be
  // killed, every node ending with 0 (or with the SIGTERM launch itself sent). Anything else is 1,
  // whichever node was reaped first (it was 0, 130 or 137).
  bool failed = forced;
  for (const child& c : children)
    failed |= (c.lost && c.rank != 0) || !(c.status == 0 || (g_stop && c.status == 128 + SIGTERM));
  return failed ? 1 : 0;
}

void run_launch(const launch_options& o) {
  const di::cluster_config config = di::load_cluster_config(o.file, o.sets);  // errors before forking
  if (config.tls.enabled) di::actors::check_tls_files(config.tls);  // once, not once a node
  const std::set<std::string> local = local_names();
  std::vector<child> children;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // a closed terminal: the same orderly shutdown
  // main() blocked them from the start (block_stop_signals_early): one that came meanwhile is
  // taken now, by the handler.
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  for (std::size_t r = 0; r < config.nodes.size(); ++r) {
    const std::string& host = config.nodes[r].host;
    if (local.contains(host)) {
      children.push_back(start_node(o, int(r)));
      continue;
    }
    std::string cmd = fmt::format("deepinfer node --config {} --rank {}", o.file, r);
    for (const std::string& s : o.sets) cmd += " --set '" + s + "'";
    std::fprintf(stderr, "launch: node %zu lives on %s; start it there with: %s\n", r, host.c_str(), cmd.c_str());
  }
  DI_CHECK(!children.empty(), "{}: no node of the cluster file lives on this host", o.file);
  di::cli::set_exit_code(supervise(children, config.cluster.shutdown_timeout_s));
}

void setup_launch(CLI::App& app) {
  auto o = std::make_shared<launch_options>();
  auto* sub =
      app.add_subcommand("launch",
                         "Start every node of a cluster file that lives on this host "
                         "and print `ready: HOST:PORT` when it can serve (with router.port = 0, "
                         "on a port the system picks: that line names it)");
  sub->add_option("file", o->file, "Cluster file (TOML; see the README's \"Cluster file\")")->required();
  sub->add_option("--set", o->sets, "Override a key of the cluster file: --set model.path=/models/x "
                  "(repeatable; passed on to every node)");
  sub->callback([o] { run_launch(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_launch);
