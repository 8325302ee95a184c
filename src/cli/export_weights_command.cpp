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
    "export-weights", "--run DIR [--output FILE] [--step K] [--format torch|safetensors]",
    "Writes the weights and buffers that a `madpipe train` run checkpointed (its newest complete\n"
    "checkpoint, or step K) into one file that PyTorch reads: torch.load gives a dict from the\n"
    "original module's state_dict keys to tensors, for its load_state_dict (for --model script,\n"
    "the TorchScript module's keys, e.g. \"3.weight\" of an nn.Sequential). --format safetensors\n"
    "writes the same keys and tensors as a safetensors file (default FILE model.safetensors)."};

int madpipe::cli::export_weights_command(const std::vector<std::string>& args) {
  std::string run, output, format = "torch";
  int step = 0;
  po::options_description options("Export options", 100);
  options.add_options()("run", po::value(&run)->required()->value_name("DIR"),
                        "the --output-dir of the training run")(
      "output,o", po::value(&output)->value_name("FILE"),
      "where to write the weights (default: model_state.pt, or model.safetensors)")(
      "format", po::value(&format)->default_value(format)->value_name("NAME"),
      "torch (torch.save's dict, for torch.load) or safetensors")(
      "step", po::value(&step)->default_value(0)->value_name("K"),
      "the checkpoint of step K (0: the newest complete one)");
  if (!parse_options(args, kSyntax, options)) return 0;
  if (format != "torch" && format != "safetensors")
    throw_invalid("", "--format", "unknown format '" + format + "' (valid: torch, safetensors)");
  const bool safetensors = format == "safetensors";
  if (output.empty()) output = safetensors ? "model.safetensors" : "model_state.pt";
#ifdef MADPIPE_HAS_RUNTIME
  const runtime::ExportedWeights exported = runtime::export_weights(
      run, output, step,
      safetensors ? runtime::WeightsFormat::Safetensors : runtime::WeightsFormat::Torch);
  std::cout << "wrote " << output << ": " << exported.tensors << " tensors ("
            << format_bytes(static_cast<double>(exported.bytes)) << ") of step " << exported.step
            << " of " << run << "\n";
  return 0;
#else
  (void)step;
  (void)safetensors;
  throw Error(ErrorKind::Unsupported, "", "export-weights",
              "this madpipe was built without the runtime (LibTorch and MPI were not found)");
#endif
}
