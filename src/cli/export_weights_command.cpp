#include "cli/export_weights_command.hpp"

#include "cli/options.hpp"
#include "core/error.hpp"
#include "core/units.hpp"

#include <iostream>

#include <boost/program_options/value_semantic.hpp>

#ifdef MADPIPE_HAS_RUNTIME
#include "runtime/train/export_weights.hpp"
#endif

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "export-weights", "--run DIR [--output FILE] [--step K]",
    "Writes the weights and buffers that a `madpipe train` run checkpointed (its newest complete\n"
    "checkpoint, or step K) into one file that PyTorch reads: torch.load gives a dict from the\n"
    "original module's state_dict keys to tensors, for its load_state_dict (for --model script,\n"
    "the TorchScript module's keys, e.g. \"3.weight\" of an nn.Sequential)."};

int madpipe::cli::export_weights_command(const std::vector<std::string>& args) {
  std::string run, output;
  int step = 0;
  po::options_description options("Export options", 100);
  options.add_options()("run", po::value(&run)->required()->value_name("DIR"),
                        "the --output-dir of the training run")(
      "output,o", po::value(&output)->default_value("model_state.pt")->value_name("FILE"),
      "where to write the weights")("step", po::value(&step)->default_value(0)->value_name("K"),
                                    "the checkpoint of step K (0: the newest complete one)");
  if (!parse_options(args, kSyntax, options)) return 0;
#ifdef MADPIPE_HAS_RUNTIME
  const runtime::ExportedWeights exported = runtime::export_weights(run, output, step);
  std::cout << "wrote " << output << ": " << exported.tensors << " tensors ("
            << format_bytes(static_cast<double>(exported.bytes)) << ") of step " << exported.step
            << " of " << run << "\n";
  return 0;
#else
  (void)step;
  throw Error(ErrorKind::Unsupported, "", "export-weights",
              "this madpipe was built without the runtime (LibTorch and MPI were not found)");
#endif
}
