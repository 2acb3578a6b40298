// The MPI bootstrap of an mpirun job started without MASTER_ADDR: mpirun's
// variables say who each process is but not where rank 0 is, so rank 0
// chooses the rendezvous address and port and MPI_Bcast tells every rank.
// MPI is used for that alone: the collectives run over c10d afterwards, so
// MPI is finalized as soon as the broadcast is done (Open MPI 4.1 is content
// with a process that finalizes early and keeps running; mpirun only needs
// MPI_Finalize to have been called before a process exits).
//
// Rank 0's address (see env.hpp), and why in that order:
//   1. MESHRUN_MASTER_INTERFACE=<ifname>: that interface's IPv4 address. The
//      user knows which network the nodes share; nothing below can.
//   2. Every rank on one node (local world size == world size): 127.0.0.1,
//      which every rank reaches without any network.
//   3. The first non-loopback IPv4 address that getaddrinfo() gives for
//      gethostname(): the address the cluster's other hosts know this host
//      by. Debian maps the host name to 127.0.1.1 in /etc/hosts, which the
//      other nodes cannot reach, so loopback answers are skipped.
//   4. The first non-loopback IPv4 address of an interface that is up, in
//      getifaddrs() order, when the host name gives none.
// The port is MASTER_PORT when set (the user may have opened just that one),
// else one that is free on that address when rank 0 looks (choose_free_port:
// free then, not reserved).
//
// Failures that all ranks see alike (a rank or size that differs from the
// launch environment's, rank 0 finding no address) are agreed on over MPI,
// so every rank finalizes and throws. A failing MPI call leaves the other
// ranks' state unknown: it throws without MPI_Finalize, and mpirun then
// ends the whole job because a process exited without finalizing.
#include <spdlog/spdlog.h>

#include <string>

#include "meshrun/launch/env.hpp"

#ifndef MESHRUN_HAVE_MPI
#define MESHRUN_HAVE_MPI 1
#endif

#if MESHRUN_HAVE_MPI
#include <arpa/inet.h>
#include <ifaddrs.h>
// The C API only: the deprecated C++ bindings that mpi.h pulls into C++ code
// warn under -Wextra and would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "launch_internal.hpp"
#include "meshrun/launch/launcher.hpp"
#endif

namespace meshrun {

#if MESHRUN_HAVE_MPI
namespace {

constexpr std::string_view kInterfaceVariable = "MESHRUN_MASTER_INTERFACE";
// Rank 0's answer, "ADDRESS\nHOW" or an error message, fits in this many
// bytes with its terminating NUL; longer error messages are cut short.
constexpr int kAnswerSize = 1024;

std::string mpi_error_string(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(code, text.data(), &length) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return std::string(text.data(), static_cast<size_t>(length));
}

void check_mpi(int code, std::string_view call) {
  if (code != MPI_SUCCESS)
    throw LaunchEnvError(fmt::format("MPI bootstrap: {} failed: {}", call, mpi_error_string(code)));
}

// MPI_COMM_WORLD returns error codes rather than aborting while the
// bootstrap runs, so that they become LaunchEnvErrors; the handler that was
// there (another library's, when MPI was initialized before) comes back after.
class ReturnErrors {
 public:
  ReturnErrors() {
    check_mpi(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &previous_), "MPI_Comm_get_errhandler");
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  ~ReturnErrors() {
    int finalized = 0;
    if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, previous_);
      MPI_Errhandler_free(&previous_);
    }
  }
  ReturnErrors(const ReturnErrors&) = delete;
  ReturnErrors& operator=(const ReturnErrors&) = delete;

 private:
  MPI_Errhandler previous_ = MPI_ERRHANDLER_NULL;
};

bool is_loopback(const in_addr& address) { return (ntohl(address.s_addr) >> 24) == 127; }

std::string address_text(const in_addr& address) {
  std::array<char, INET_ADDRSTRLEN> text{};
  if (!::inet_ntop(AF_INET, &address, text.data(), text.size()))
    throw LaunchEnvError(fmt::format("inet_ntop failed: {}", std::strerror(errno)));
  return text.data();
}

const in_addr* ipv4_of(const ifaddrs* entry) {
  if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET) return nullptr;
  return &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr;
}

struct Interfaces {
  ifaddrs* head = nullptr;
  Interfaces() {
    if (::getifaddrs(&head) != 0)
      throw LaunchEnvError(fmt::format("cannot list the network interfaces: {}", std::strerror(errno)));
  }
  ~Interfaces() {
    if (head) ::freeifaddrs(head);
  }
  Interfaces(const Interfaces&) = delete;
  Interfaces& operator=(const Interfaces&) = delete;

  // "eth0 10.0.0.5, lo 127.0.0.1", for error messages.
  std::string describe_ipv4() const {
    std::vector<std::string> parts;
    for (const ifaddrs* entry = head; entry; entry = entry->ifa_next)
      if (const in_addr* address = ipv4_of(entry))
        parts.push_back(fmt::format("{} {}", entry->ifa_name, address_text(*address)));
    return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
  }
};

struct ResolvedAddresses {
  addrinfo* head = nullptr;
  ~ResolvedAddresses() {
    if (head) ::freeaddrinfo(head);
  }
};

struct MasterAddress {
  std::string address;
  std::string how;  // for master_addr_source
};

MasterAddress named_interface_address(const std::string& name) {
  Interfaces interfaces;
  bool seen = false;
  for (const ifaddrs* entry = interfaces.head; entry; entry = entry->ifa_next) {
    if (name != entry->ifa_name) continue;
    seen = true;
    if (const in_addr* address = ipv4_of(entry))
      return {address_text(*address), fmt::format("interface {} from {}", name, kInterfaceVariable)};
  }
  throw LaunchEnvError(fmt::format("{}={}: {} on rank 0's host (interfaces with IPv4 addresses: {})",
                                   kInterfaceVariable, name,
                                   seen ? "that interface has no IPv4 address" : "no such interface",
                                   interfaces.describe_ipv4()));
}

std::string host_name() {
  std::array<char, HOST_NAME_MAX + 1> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0)
    throw LaunchEnvError(fmt::format("gethostname failed: {}", std::strerror(errno)));
  return name.data();
}

// Rule 3. std::nullopt, with `why` saying what was found, when the host name
// resolves to nothing or to loopback addresses only.
std::optional<MasterAddress> host_name_address(const std::string& host, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  ResolvedAddresses addresses;
  if (const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &addresses.head); status != 0) {
    why = fmt::format("the host name '{}' does not resolve ({})", host, ::gai_strerror(status));
    return std::nullopt;
  }
  for (const addrinfo* entry = addresses.head; entry; entry = entry->ai_next) {
    const in_addr& address = reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr;
    if (!is_loopback(address)) return MasterAddress{address_text(address), fmt::format("host name {}", host)};
  }
  why = fmt::format("the host name '{}' resolves to loopback addresses only", host);
  return std::nullopt;
}

// Rule 4.
std::optional<MasterAddress> first_interface_address() {
  Interfaces interfaces;
  for (const ifaddrs* entry = interfaces.head; entry; entry = entry->ifa_next) {
    if (!(entry->ifa_flags & IFF_UP) || (entry->ifa_flags & IFF_LOOPBACK)) continue;
    if (const in_addr* address = ipv4_of(entry); address && !is_loopback(*address))
      return MasterAddress{address_text(*address),
                           fmt::format("interface {}, the first non-loopback one that is up", entry->ifa_name)};
  }
  return std::nullopt;
}

MasterAddress choose_master_address(const LaunchInfo& info) {
  if (std::optional<std::string> name = launch_detail::read_variable(ProcessEnvironment(), kInterfaceVariable))
    return named_interface_address(*name);
  if (info.local_world_size == info.world_size)
    return {std::string(kSingleProcessAddress), "loopback: every rank runs on rank 0's node"};
  const std::string host = host_name();
  std::string why;
  if (std::optional<MasterAddress> address = host_name_address(host, why)) return *address;
  if (std::optional<MasterAddress> address = first_interface_address()) return *address;
  throw LaunchEnvError(fmt::format("rank 0 has no address that other nodes can reach: {}, and no interface that is "
                                   "up has a non-loopback IPv4 address; set MASTER_ADDR, or {} to the interface "
                                   "the nodes share",
                                   why, kInterfaceVariable));
}

// What rank 0 broadcasts: the address and how it was chosen, and the port;
// or, with port 0, why it could not choose.
struct Answer {
  std::array<char, kAnswerSize> text{};
  int port = 0;

  void set_text(std::string_view value) {
    const size_t length = std::min(value.size(), text.size() - 1);
    std::memcpy(text.data(), value.data(), length);
    text[length] = '\0';
  }
};

Answer rank0_answer(const LaunchInfo& info) {
  Answer answer;
  try {
    const MasterAddress master = choose_master_address(info);
    const int port = info.master_port_source == "MASTER_PORT" ? info.master_port : choose_free_port(master.address);
    answer.set_text(master.address + "\n" + master.how);
    answer.port = port;
  } catch (const std::exception& error) {
    answer.set_text(error.what());
    answer.port = 0;
  }
  return answer;
}

}  // namespace

void complete_mpi_bootstrap(LaunchInfo& info) {
  if (!info.needs_mpi_bootstrap) return;

  int initialized = 0;
  int finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  if (finalized)
    throw LaunchEnvError(
        "MPI bootstrap: MPI was already finalized in this process and cannot start again; set MASTER_ADDR and "
        "MASTER_PORT");
  // MPI that someone else initialized is theirs to finalize.
  const bool owned = !initialized;
  if (owned) {
    // Every MPI call is made from this thread while the bootstrap runs, so
    // any level that MPI provides will do.
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  }

  Answer answer;
  std::string mismatch;
  int mismatched_ranks = 0;
  {
    ReturnErrors return_errors;
    int mpi_rank = 0;
    int mpi_size = 0;
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size), "MPI_Comm_size");
    if (mpi_rank != info.rank || mpi_size != info.world_size)
      mismatch = fmt::format(
          "MPI bootstrap: MPI says this process is rank {} of {}, but the launch environment ({}) says rank {} of "
          "{}; run each rank of the job under one mpirun, with no other launcher's variables set",
          mpi_rank, mpi_size, info.mpi_implementation.empty() ? "mpi" : info.mpi_implementation, info.rank,
          info.world_size);
    // Every rank learns whether any rank disagrees, so that they all stop
    // here rather than some waiting in the broadcast for a rank 0 that left.
    int local = mismatch.empty() ? 0 : 1;
    check_mpi(MPI_Allreduce(&local, &mismatched_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    if (mismatched_ranks == 0) {
      if (mpi_rank == 0) answer = rank0_answer(info);
      check_mpi(MPI_Bcast(answer.text.data(), kAnswerSize, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast (address)");
      check_mpi(MPI_Bcast(&answer.port, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast (port)");
    }
  }
  if (owned) check_mpi(MPI_Finalize(), "MPI_Finalize");

  if (!mismatch.empty()) throw LaunchEnvError(mismatch);
  if (mismatched_ranks > 0)
    throw LaunchEnvError(fmt::format(
        "MPI bootstrap: on {} rank(s) MPI's rank or size differs from the launch environment's (see their errors)",
        mismatched_ranks));
  answer.text.back() = '\0';
  const std::string text = answer.text.data();
  if (answer.port <= 0)
    throw LaunchEnvError(fmt::format("MPI bootstrap: rank 0 could not choose the master address: {}", text));
  const size_t newline = text.find('\n');
  if (newline == std::string::npos || newline == 0 || answer.port > 65535)
    throw LaunchEnvError(
        fmt::format("MPI bootstrap: rank 0 sent a malformed answer '{}' (port {})", text, answer.port));

  const std::string how = text.substr(newline + 1);
  const bool port_from_variable = info.master_port_source == "MASTER_PORT";
  info.master_addr = text.substr(0, newline);
  info.master_addr_source = fmt::format("rank 0's address, broadcast over MPI ({})", how);
  info.master_port = answer.port;
  info.master_port_source =
      port_from_variable ? "MASTER_PORT of rank 0, broadcast over MPI" : "rank 0's free port, broadcast over MPI";
  info.needs_mpi_bootstrap = false;
  if (info.rank == 0)
    spdlog::info("MPI bootstrap: master {}:{} sent to {} rank(s); address: {}; port: {}", info.master_addr,
                 info.master_port, info.world_size, how, port_from_variable ? "MASTER_PORT" : "free on that address");
}

#else  // !MESHRUN_HAVE_MPI

void complete_mpi_bootstrap(LaunchInfo& info) {
  if (!info.needs_mpi_bootstrap) return;
  throw LaunchEnvError("this meshrun was built without MPI; set MASTER_ADDR and MASTER_PORT for mpirun jobs");
}

#endif

}  // namespace meshrun
