#include "plan/program.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

namespace {
struct InstrName {
  madpipe::plan::InstrKind kind;
  const char* name;
  char peer_mark;  // '>' to, '<' from, 0 none
};
constexpr std::array<InstrName, 7> kInstrNames{{
    {madpipe::plan::InstrKind::Forward, "F", 0},
    {madpipe::plan::InstrKind::Backward, "B", 0},
    {madpipe::plan::InstrKind::SendAct, "SEND_ACT", '>'},
    {madpipe::plan::InstrKind::RecvAct, "RECV_ACT", '<'},
    {madpipe::plan::InstrKind::SendGrad, "SEND_GRAD", '>'},
    {madpipe::plan::InstrKind::RecvGrad, "RECV_GRAD", '<'},
    {madpipe::plan::InstrKind::OptimizerStep, "OPT", 0},
}};

const InstrName& name_of(madpipe::plan::InstrKind kind) {
  for (const InstrName& entry : kInstrNames)
    if (entry.kind == kind) return entry;
  MADPIPE_UNREACHABLE("unknown instruction kind");
}

// A compute op of the unrolled pattern with its planned time.
struct Planned {
  double time = 0;
  int chain_position = 0;
  madpipe::schedule::OpKind kind = madpipe::schedule::OpKind::F;
  int stage = 0;
  int micro_batch = 0;
};
}  // namespace

bool madpipe::plan::operator==(const Instr& a, const Instr& b) {
  return std::tie(a.kind, a.stage, a.micro_batch, a.peer, a.slot) ==
         std::tie(b.kind, b.stage, b.micro_batch, b.peer, b.slot);
}

std::string madpipe::plan::to_string(const Instr& instr) {
  const InstrName& entry = name_of(instr.kind);
  std::string token = entry.name + std::to_string(instr.stage);
  if (instr.kind == InstrKind::OptimizerStep) return token;
  token += "." + std::to_string(instr.micro_batch);
  if (entry.peer_mark) token += entry.peer_mark + std::to_string(instr.peer);
  return token;
}

madpipe::plan::Instr madpipe::plan::instr_from_string(const std::string& token) {
  static const std::regex pattern(R"(^([A-Z_]+?)(\d+)(?:\.(\d+)(?:([<>])(\d+))?)?$)");
  std::smatch m;
  if (std::regex_match(token, m, pattern)) {
    for (const InstrName& entry : kInstrNames) {
      if (m[1] != entry.name) continue;
      const bool is_opt = entry.kind == InstrKind::OptimizerStep;
      if (is_opt != !m[3].matched) break;
      if (m[4].matched != (entry.peer_mark != 0)) break;
      if (m[4].matched && m[4].str()[0] != entry.peer_mark) break;
      Instr instr;
      instr.kind = entry.kind;
      instr.stage = std::stoi(m[2]);
      instr.micro_batch = is_opt ? -1 : std::stoi(m[3]);
      if (m[5].matched) instr.peer = std::stoi(m[5]);
      return instr;
    }
  }
  throw Error(ErrorKind::InvalidInput, "", "instruction",
              "cannot parse '" + token + "' (examples: F2.7, SEND_ACT2.7>1, RECV_GRAD0.3<1, OPT2)");
}

static int residue(int shift, int k) { return ((shift % k) + k) % k; }

madpipe::plan::Program madpipe::plan::lower(const Plan& plan, int micro_batches) {
  const madpipe::schedule::Pattern& pattern = plan.pattern;
  const int k = pattern.k;
  const int num_stages = static_cast<int>(plan.stages.size());
  if (micro_batches < 1)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "must be >= 1, got " + std::to_string(micro_batches));
  // Planned times of every F and B of micro-batches 0..N-1, grouped by GPU.
  const std::vector<madpipe::schedule::Op> chain = micro_batch_chain(plan.stages, plan.platform);
  std::map<std::pair<int, int>, int> position;  // (kind, stage) -> chain position
  for (std::size_t c = 0; c < chain.size(); ++c)
    position[{static_cast<int>(chain[c].kind), chain[c].stage}] = static_cast<int>(c);
  std::vector<std::vector<Planned>> planned(plan.platform.gpus);
  for (const madpipe::schedule::Op& op : pattern.ops) {
    if (is_transfer(op.kind)) continue;
    for (int i = residue(op.shift, k); i < micro_batches; i += k) {
      const int period = (i - op.shift) / k;
      planned[op.gpu].push_back({period * pattern.period_ms + op.start_ms,
                                 position[{static_cast<int>(op.kind), op.stage}], op.kind, op.stage,
                                 i});
    }
  }
  Program program;
  program.micro_batches = micro_batches;
  program.per_gpu.resize(plan.platform.gpus);
  program.slots.assign(num_stages, 0);
  for (int g = 0; g < plan.platform.gpus; ++g) {
    auto& ops = planned[g];
    std::sort(ops.begin(), ops.end(), [](const Planned& a, const Planned& b) {
      return std::tie(a.time, a.micro_batch, a.chain_position) <
             std::tie(b.time, b.micro_batch, b.chain_position);
    });
    std::vector<std::set<int>> free_slots(num_stages);
    std::map<std::pair<int, int>, int> slot_of;  // (stage, micro-batch) -> slot
    std::vector<Instr>& out = program.per_gpu[g];
    for (const Planned& p : ops) {
      const int s = p.stage;
      const int prev_gpu = s > 0 ? plan.stages[s - 1].gpu : g;
      const int next_gpu = s + 1 < num_stages ? plan.stages[s + 1].gpu : g;
      if (p.kind == madpipe::schedule::OpKind::F) {
        if (prev_gpu != g) out.push_back({InstrKind::RecvAct, s - 1, p.micro_batch, prev_gpu, -1});
        int slot;
        if (free_slots[s].empty()) {
          slot = program.slots[s]++;
        } else {
          slot = *free_slots[s].begin();
          free_slots[s].erase(free_slots[s].begin());
        }
        slot_of[{s, p.micro_batch}] = slot;
        out.push_back({InstrKind::Forward, s, p.micro_batch, -1, slot});
        if (next_gpu != g) out.push_back({InstrKind::SendAct, s, p.micro_batch, next_gpu, -1});
      } else {
        if (next_gpu != g) out.push_back({InstrKind::RecvGrad, s, p.micro_batch, next_gpu, -1});
        const int slot = slot_of.at({s, p.micro_batch});
        out.push_back({InstrKind::Backward, s, p.micro_batch, -1, slot});
        free_slots[s].insert(slot);
        if (prev_gpu != g) out.push_back({InstrKind::SendGrad, s - 1, p.micro_batch, prev_gpu, -1});
      }
    }
    for (int s = 0; s < num_stages; ++s)
      if (plan.stages[s].gpu == g) out.push_back({InstrKind::OptimizerStep, s, -1, -1, -1});
  }
  return program;
}

std::string madpipe::plan::dry_run(const Program& program) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  std::vector<std::size_t> pc(gpus, 0);
  // Messages sent and not yet received: (is_gradient, stage, micro-batch, from, to).
  std::multiset<std::tuple<bool, int, int, int, int>> in_flight;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int g = 0; g < gpus; ++g) {
      while (pc[g] < program.per_gpu[g].size()) {
        const Instr& instr = program.per_gpu[g][pc[g]];
        if (instr.kind == InstrKind::SendAct || instr.kind == InstrKind::SendGrad) {
          in_flight.insert(
              {instr.kind == InstrKind::SendGrad, instr.stage, instr.micro_batch, g, instr.peer});
        } else if (instr.kind == InstrKind::RecvAct || instr.kind == InstrKind::RecvGrad) {
          auto it = in_flight.find(
              {instr.kind == InstrKind::RecvGrad, instr.stage, instr.micro_batch, instr.peer, g});
          if (it == in_flight.end()) break;
          in_flight.erase(it);
        }
        ++pc[g];
        progress = true;
      }
    }
  }
  bool done = true;
  for (int g = 0; g < gpus; ++g) done = done && pc[g] == program.per_gpu[g].size();
  if (done && in_flight.empty()) return "";
  std::ostringstream report;
  report << (done ? "messages sent but never received" : "program deadlocks") << ":\n";
  for (int g = 0; g < gpus; ++g) {
    const auto& list = program.per_gpu[g];
    report << "gpu " << g << ": ";
    const std::size_t from = pc[g] >= 3 ? pc[g] - 3 : 0;
    if (from > 0) report << "... ";
    for (std::size_t i = from; i < list.size() && i < pc[g] + 3; ++i) {
      report << to_string(list[i]);
      if (i == pc[g]) report << " <-- stuck";
      report << ' ';
    }
    if (pc[g] == list.size()) report << "(done)";
    report << '\n';
  }
  return report.str();
}
