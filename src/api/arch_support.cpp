// Matching a device's compute capability with the compiled architecture list.
#include "api/arch_support.h"

#include <cctype>
#include <sstream>
#include <vector>

namespace flashattn::api {

namespace {

struct ArchEntry {
    int number = 0;       // 80 for sm_80
    char suffix = 0;      // 'a' (arch-specific), 'f' (family-specific) or 0
    bool binary = true;   // SASS
    bool ptx = true;      // PTX
    std::string text;     // as written, e.g. "90a"
};

// Entries CMake resolves at configure time ("native", "all", ...) parse to number 0 and match nothing here.
std::vector<ArchEntry> parse_archs(const std::string& list) {
    std::vector<ArchEntry> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        ArchEntry e;
        e.text = item;
        size_t i = 0;
        while (i < item.size() && std::isdigit(static_cast<unsigned char>(item[i]))) e.number = e.number * 10 + (item[i++] - '0');
        if (i < item.size() && (item[i] == 'a' || item[i] == 'f')) e.suffix = item[i++];
        const std::string rest = item.substr(i);
        if (rest == "-real") e.ptx = false;
        else if (rest == "-virtual") e.binary = false;
        else if (!rest.empty()) e.number = 0;
        out.push_back(e);
    }
    return out;
}

bool binary_runs(const ArchEntry& e, int major, int minor) {
    if (!e.binary || e.number == 0) return false;
    const int em = e.number / 10, en = e.number % 10;
    if (e.suffix == 'a') return major == em && minor == en;
    return major == em && minor >= en;  // plain and family-specific binaries run on later minors of a major
}

bool ptx_runs(const ArchEntry& e, int major, int minor) {
    if (!e.ptx || e.number == 0) return false;
    if (e.suffix != 0) return binary_runs(ArchEntry{e.number, e.suffix, true, true, e.text}, major, minor);
    return major * 10 + minor >= e.number;
}

}  // namespace

ArchSupport arch_support(int major, int minor, const std::string& compiled) {
    const std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
    if (major < kMinComputeMajor)
        return {false, sm + ": flashattn needs compute capability " + std::to_string(kMinComputeMajor) +
                           ".0 or newer (Ampere, Ada, Hopper, Blackwell)"};
    if (compiled.empty()) return {false, sm + ": this build has no GPU code (configured without CUDA)"};
    const std::vector<ArchEntry> archs = parse_archs(compiled);
    const ArchEntry* best_binary = nullptr;
    const ArchEntry* best_ptx = nullptr;
    for (const ArchEntry& e : archs) {
        if (binary_runs(e, major, minor) && (!best_binary || e.number > best_binary->number)) best_binary = &e;
        if (ptx_runs(e, major, minor) && (!best_ptx || e.number > best_ptx->number)) best_ptx = &e;
    }
    if (best_binary)
        return {true, sm + ": runs the compiled sm_" + std::to_string(best_binary->number) +
                          (best_binary->suffix ? std::string(1, best_binary->suffix) : "") + " binary"};
    if (best_ptx)
        return {true, sm + ": runs the compute_" + std::to_string(best_ptx->number) +
                          " PTX, JIT-compiled by the driver at first use (slow start; add " + std::to_string(major) +
                          std::to_string(minor) + " to FLASHATTN_CUDA_ARCHS for a native binary)"};
    for (const ArchEntry& e : archs)
        if (e.number == 0)
            return {true, sm + ": compiled for '" + e.text + "' (resolved at build time), which may include it"};
    return {false, sm + ": no compiled architecture runs on it (compiled: " + compiled +
                       "); rebuild with -DFLASHATTN_CUDA_ARCHS=" + std::to_string(major) + std::to_string(minor)};
}

}  // namespace flashattn::api
