// The symbolic run of a program (program.hpp): message orders, deliveries and deadlocks.

#include "plan/program.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace madpipe::plan {
namespace {

// The k-th message from GPU a to GPU b is the k-th receive b posts from a, with the same number.
std::string check_message_orders(const Program& program) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  for (int from = 0; from < gpus; ++from)
    for (int to = 0; to < gpus; ++to) {
      std::vector<const Instr*> sends, posts;
      for (const Instr& instr : program.per_gpu[from])
        if (is_send(instr.kind) && instr.peer == to) sends.push_back(&instr);
      for (const Instr& instr : program.per_gpu[to])
        if (is_post(instr.kind) && instr.peer == from) posts.push_back(&instr);
      const std::string pair = "gpu " + std::to_string(from) + " -> gpu " + std::to_string(to);
      for (std::size_t k = 0; k < std::min(sends.size(), posts.size()); ++k) {
        const Instr& send = *sends[k];
        const Instr& post = *posts[k];
        const bool same = carries_gradient(send.kind) == carries_gradient(post.kind) &&
                          send.stage == post.stage && send.micro_batch == post.micro_batch &&
                          send.sequence == post.sequence &&
                          (send.sequence < 0 || send.sequence == static_cast<int>(k));
        if (!same)
          return "message order differs: " + pair + ": message " + std::to_string(k) + " is " +
                 to_string(send) + " (number " + std::to_string(send.sequence) + ") but receive " +
                 std::to_string(k) + " is " + to_string(post) + " (number " +
                 std::to_string(post.sequence) + ")\n";
      }
      if (sends.size() > posts.size())
        return "messages sent but never received: " + pair + ": " + std::to_string(sends.size()) +
               " sent, " + std::to_string(posts.size()) +
               " receives posted (first unreceived: " + to_string(*sends[posts.size()]) + ")\n";
      if (posts.size() > sends.size())
        return "receives posted for messages never sent: " + pair + ": " +
               std::to_string(sends.size()) + " sent, " + std::to_string(posts.size()) +
               " receives posted (first unmatched: " + to_string(*posts[sends.size()]) + ")\n";
    }
  return "";
}

std::string where(const std::vector<Instr>& list, std::size_t pc) {
  std::ostringstream out;
  const std::size_t from = pc >= 3 ? pc - 3 : 0;
  if (from > 0) out << "... ";
  for (std::size_t i = from; i < list.size() && i < pc + 3; ++i) {
    out << to_string(list[i]);
    if (i == pc) out << " <-- stuck";
    out << ' ';
  }
  if (pc == list.size()) out << "(done)";
  return out.str();
}

}  // namespace

std::string dry_run(const Program& program) {
  const std::string order = check_message_orders(program);
  if (!order.empty()) return order;
  const int gpus = static_cast<int>(program.per_gpu.size());
  const int num_stages = static_cast<int>(program.slots.size());  // 0: deliveries not checked
  using Data = std::tuple<bool, int, int>;                        // (gradient, stage, micro-batch)
  using Message = std::tuple<bool, int, int, int, int>;           // ... from, to
  std::vector<std::size_t> pc(gpus, 0);
  std::vector<std::set<Data>> posted(gpus), delivered(gpus);
  std::set<Message> in_flight;
  auto fail = [&](int g, const std::string& problem) {
    return "gpu " + std::to_string(g) + ": " + problem + ": " + where(program.per_gpu[g], pc[g]) +
           "\n";
  };
  // Runs the instruction at g's position: false when it must wait for a message; sets `problem`
  // when the program is wrong.
  auto run = [&](int g, const Instr& instr, std::string& problem) {
    const int s = instr.stage, i = instr.micro_batch;
    const bool gradient = carries_gradient(instr.kind);
    switch (instr.kind) {
      case InstrKind::SendAct:
      case InstrKind::SendGrad:
        in_flight.insert({gradient, s, i, g, instr.peer});
        break;
      case InstrKind::PostRecvAct:
      case InstrKind::PostRecvGrad:
        posted[g].insert({gradient, s, i});
        break;
      case InstrKind::RecvAct:
      case InstrKind::RecvGrad:
        if (posted[g].count({gradient, s, i}) == 0) {
          problem = "waits for a receive it never posted";
          return false;
        }
        if (in_flight.erase({gradient, s, i, instr.peer, g}) == 0) return false;
        posted[g].erase({gradient, s, i});
        delivered[g].insert({gradient, s, i});
        break;
      case InstrKind::HandAct:
      case InstrKind::HandGrad:
        delivered[g].insert({gradient, s, i});
        break;
      case InstrKind::Forward:
        if (num_stages > 0 && s > 0 && delivered[g].erase({false, s - 1, i}) == 0)
          problem = "the input of " + to_string(instr) + " is not delivered before it";
        break;
      case InstrKind::Backward:
        if (num_stages > 0 && s + 1 < num_stages && delivered[g].erase({true, s, i}) == 0)
          problem = "the gradient that " + to_string(instr) + " needs is not delivered before it";
        break;
      case InstrKind::OptimizerStep:
      case InstrKind::BackwardWeight:
        break;
    }
    return problem.empty();
  };
  // Sends the runtime completes after each instruction (Program::send_completions): a GPU goes
  // on once each has been received or its receive posted.
  std::vector<std::vector<std::vector<std::size_t>>> complete_after(gpus);
  for (int g = 0; g < gpus && g < static_cast<int>(program.send_completions.size()); ++g) {
    const std::vector<int>& completions = program.send_completions[g];
    complete_after[g].resize(program.per_gpu[g].size());
    for (std::size_t x = 0; x < completions.size(); ++x)
      if (completions[x] >= 0 && completions[x] < static_cast<int>(complete_after[g].size()))
        complete_after[g][completions[x]].push_back(x);
  }
  auto sends_taken = [&](int g) {
    if (pc[g] == 0 || complete_after[g].empty()) return true;
    for (std::size_t x : complete_after[g][pc[g] - 1]) {
      const Instr& send = program.per_gpu[g][x];
      const bool gradient = carries_gradient(send.kind);
      const Data data{gradient, send.stage, send.micro_batch};
      if (in_flight.count({gradient, send.stage, send.micro_batch, g, send.peer}) &&
          !posted[send.peer].count(data))
        return false;
    }
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int g = 0; g < gpus; ++g) {
      const std::vector<Instr>& list = program.per_gpu[g];
      std::string problem;
      while (pc[g] < list.size() && sends_taken(g) && run(g, list[pc[g]], problem)) {
        ++pc[g];
        progress = true;
      }
      if (!problem.empty()) return fail(g, problem);
    }
  }
  bool done = true;
  for (int g = 0; g < gpus; ++g) done = done && pc[g] == program.per_gpu[g].size();
  if (done && in_flight.empty()) return "";
  std::ostringstream report;
  report << (done ? "messages sent but never received" : "program deadlocks") << ":\n";
  for (int g = 0; g < gpus; ++g)
    report << "gpu " << g << ": " << where(program.per_gpu[g], pc[g]) << '\n';
  return report.str();
}

}  // namespace madpipe::plan
