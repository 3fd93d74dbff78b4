// harness.h: a command-line driver of the host shim, one kernel launch per run.
//
//   harness SPEC_FILE
//
// SPEC_FILE (written by pagesim/calibrate/host_kernels.py), one item per line:
//   kernel NAME
//   grid X Y Z
//   block X Y Z
//   shared BYTES
//   seed N
//   buffer DTYPE COUNT PATH      a device array: COUNT elements read from PATH, written back
//   scalar DTYPE VALUE           an int32/int64 in decimal, a float32 as a C hex float
// Arguments are given in the kernel's parameter order; each is checked against the kernel's
// C++ parameter type (pointer or scalar, element type), so a launch whose arguments would be
// reinterpreted on the GPU fails here with the argument's index. Exit status 0 on success,
// 2 for a bad spec, 3 for an error found while the kernel ran (see host_cuda.h).
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace pagesim_host {

struct Arg {
  bool is_buffer = false;
  std::string dtype;
  std::string text;                // scalar value
  std::string path;                // buffer file
  std::vector<std::byte> data;     // buffer contents
};

[[noreturn]] inline void bad_spec(const std::string& what) {
  std::fprintf(stderr, "pagesim host harness: %s\n", what.c_str());
  std::_Exit(2);
}

template <typename T>
constexpr const char* dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, __half>) return "float16";
  else if constexpr (std::is_same_v<U, float>) return "float32";
  else if constexpr (std::is_same_v<U, int>) return "int32";
  else if constexpr (std::is_same_v<U, long long>) return "int64";
  else static_assert(sizeof(U) == 0, "kernel parameter type without a dtype");
}

template <typename P>
P convert(Arg& a, std::size_t index, const std::string& kernel) {
  const std::string where = kernel + " argument " + std::to_string(index);
  if constexpr (std::is_pointer_v<P>) {
    using E = std::remove_pointer_t<P>;
    if (!a.is_buffer) bad_spec(where + " is a pointer, got a scalar");
    if (a.dtype != dtype_of<E>()) bad_spec(where + " points to " + dtype_of<E>() + ", got " + a.dtype);
    return reinterpret_cast<P>(a.data.data());
  } else {
    if (a.is_buffer) bad_spec(where + " is a scalar, got a buffer");
    if (a.dtype != dtype_of<P>()) bad_spec(where + " is " + dtype_of<P>() + ", got " + a.dtype);
    if constexpr (std::is_same_v<P, float>) return std::strtof(a.text.c_str(), nullptr);
    else return static_cast<P>(std::stoll(a.text));
  }
}

using Runner = std::function<void(const LaunchConfig&, std::vector<Arg>&)>;

template <typename... P>
std::pair<std::string, Runner> entry(const char* name, void (*kernel)(P...)) {
  return {name, [name, kernel](const LaunchConfig& cfg, std::vector<Arg>& args) {
            if (args.size() != sizeof...(P)) {
              bad_spec(std::string(name) + " takes " + std::to_string(sizeof...(P)) +
                       " arguments, got " + std::to_string(args.size()));
            }
            [&]<std::size_t... I>(std::index_sequence<I...>) {
              const std::tuple<P...> values{convert<P>(args[I], I, name)...};
              launch(cfg, pagesim_dynamic_shared(), [&] { std::apply(kernel, values); });
            }(std::index_sequence_for<P...>{});
          }};
}

inline std::size_t dtype_bytes(const std::string& dtype) {
  if (dtype == "float16") return 2;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "int64") return 8;
  bad_spec("unknown dtype " + dtype + "; allowed: float16, float32, int32, int64");
}

inline int harness_main(int argc, char** argv, const std::map<std::string, Runner>& kernels) {
  if (argc != 2) bad_spec("usage: harness SPEC_FILE");
  std::ifstream spec(argv[1]);
  if (!spec) bad_spec(std::string("cannot read ") + argv[1]);
  LaunchConfig cfg;
  std::string name, line;
  std::vector<Arg> args;
  while (std::getline(spec, line)) {
    std::istringstream in(line);
    std::string key;
    if (!(in >> key)) continue;
    if (key == "kernel") {
      in >> name;
    } else if (key == "grid") {
      in >> cfg.grid.x >> cfg.grid.y >> cfg.grid.z;
    } else if (key == "block") {
      in >> cfg.block.x >> cfg.block.y >> cfg.block.z;
    } else if (key == "shared") {
      in >> cfg.shared_bytes;
    } else if (key == "seed") {
      in >> cfg.seed;
    } else if (key == "buffer") {
      Arg a;
      std::size_t count = 0;
      a.is_buffer = true;
      in >> a.dtype >> count;
      std::getline(in >> std::ws, a.path);  // the rest of the line: paths may hold spaces
      a.data.resize(count * dtype_bytes(a.dtype));
      std::ifstream file(a.path, std::ios::binary);
      if (!file.read(reinterpret_cast<char*>(a.data.data()), std::streamsize(a.data.size()))) {
        bad_spec("cannot read " + std::to_string(a.data.size()) + " bytes from " + a.path);
      }
      args.push_back(std::move(a));
    } else if (key == "scalar") {
      Arg a;
      in >> a.dtype >> a.text;
      dtype_bytes(a.dtype);
      args.push_back(std::move(a));
    } else {
      bad_spec("unknown key " + key + "; allowed: kernel, grid, block, shared, seed, buffer, scalar");
    }
    if (in.fail()) bad_spec("malformed line: " + line);
  }
  const auto it = kernels.find(name);
  if (it == kernels.end()) bad_spec("no kernel named " + name + " in this harness");
  it->second(cfg, args);
  for (const Arg& a : args) {
    if (!a.is_buffer) continue;
    std::ofstream file(a.path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(a.data.data()), std::streamsize(a.data.size()));
    if (!file) bad_spec("cannot write " + a.path);
  }
  return 0;
}

}  // namespace pagesim_host
