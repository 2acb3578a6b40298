// meshrun's command line: parses arguments with CLI11 and dispatches to the
// subcommands in this folder. Both executables run it: the front end hands
// what needs LibTorch to the engine (engine.hpp).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "engine.hpp"
#include "meshrun/metrics/console.hpp"
#include "meshrun_version.hpp"

namespace {

using namespace meshrun::cli;

void add_common(CLI::App* command, CommonOptions& common) {
  command->add_option("--set", common.sets,
                      "Override a recipe key with a TOML value: section.key=value (repeatable)")
      ->type_name("KEY=VALUE");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meshrun: distributed LLM training and RLHF from declarative recipes", "meshrun"};
  app.option_defaults()->always_capture_default();  // --help shows each option's default
  const EngineCommands* engine = engine_commands();
  app.set_version_flag("--version", [&] {
    if (!engine) std::exit(hand_to_engine(argv));  // the torch, CUDA and NCCL facts are the engine's
    return std::string("meshrun ") + MESHRUN_VERSION + "\n" + engine->build_facts();
  });
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}));
  app.require_subcommand(1);
  app.footer("`meshrun RECIPE` is short for `meshrun run RECIPE`.");

  CommonOptions run_common, lint_common, plan_common;
  std::string run_recipe, plan_recipe, plan_cluster, plan_format = "text", lint_format = "text", docs_topic;
  std::vector<std::string> lint_recipes;

  auto* run = app.add_subcommand("run", "Validate, plan and run a recipe");
  run->add_option("recipe", run_recipe, "Recipe file")->required();
  add_common(run, run_common);

  auto* lint = app.add_subcommand("lint", "Check recipes (schema, rules, hooks, plan) without running them");
  lint->add_option("recipes", lint_recipes, "Recipe files")->required();
  lint->add_option("--format", lint_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  add_common(lint, lint_common);

  auto* plan = app.add_subcommand("plan", "Show where every role lands and whether it fits");
  plan->add_option("recipe", plan_recipe, "Recipe file")->required();
  plan->add_option("--cluster", plan_cluster,
                   "Plan for another cluster: NODESxPROCS[:DEVICE[:MEM_GB]], e.g. 4x8:cuda:80");
  plan->add_option("--format", plan_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  RayPlanOptions plan_ray;
  auto* plan_ray_flag =
      plan->add_flag("--ray", plan_ray.check, "Also ask the Ray cluster whether the recipe's bundles fit it");
  plan->add_option("--address", plan_ray.address,
                   "--ray: the cluster's job server, http://HEAD:8265 (default: launch.address, else RAY_ADDRESS)")
      ->needs(plan_ray_flag);
  add_common(plan, plan_common);

  CommonOptions check_common;
  std::string check_recipe;
  auto* check = app.add_subcommand("check",
                                   "Start the recipe's processes, build every group of its plan and verify "
                                   "collectives on each (a distributed self-test)");
  check->add_option("recipe", check_recipe, "Recipe file")->required();
  add_common(check, check_common);

  CommonOptions submit_common;
  SubmitOptions submit_options;
  std::string submit_recipe;
  auto* submit = app.add_subcommand("submit", "Write (and with --now submit) a batch job for a recipe");
  submit->add_option("recipe", submit_recipe, "Recipe file")->required();
  auto* submit_engine = submit->add_option_group("engine", "Where the job runs");
  auto* submit_slurm = submit_engine->add_flag("--slurm", submit_options.slurm, "A SLURM sbatch script");
  auto* submit_ray = submit_engine->add_flag("--ray", submit_options.ray,
                                             "One job on an existing Ray cluster (ray job submit)");
  submit_engine->require_option(1);
  submit->add_flag("--now", submit_options.now, "Submit it (sbatch, or ray job submit, following the job's log)");
  submit->add_option("--script", submit_options.script,
                     "Where to write it (default: NAME.sbatch, or NAME.ray.sh with --ray)");
  submit->add_option("--address", submit_options.address,
                     "--ray: the cluster's job server, http://HEAD:8265 (default: launch.address, else RAY_ADDRESS)")
      ->needs(submit_ray);
  submit->add_option("--python", submit_options.python,
                     "--ray: the Python with ray that runs the job's entrypoint on the cluster")
      ->needs(submit_ray);
  submit->add_option("--partition", submit_options.partition, "#SBATCH --partition")->needs(submit_slurm);
  submit->add_option("--account", submit_options.account, "#SBATCH --account")->needs(submit_slurm);
  submit->add_option("--time", submit_options.time, "#SBATCH --time, e.g. 2-00:00:00")->needs(submit_slurm);
  add_common(submit, submit_common);

  CommonOptions env_common;
  std::string env_recipe, env_format = "text";
  auto* env = app.add_subcommand("env", "Print what this process learns from its launcher (torchrun, SLURM, MPI)");
  env->add_option("recipe", env_recipe, "Recipe whose [launch] type and world size to check against");
  env->add_option("--format", env_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  add_common(env, env_common);

  auto* docs = app.add_subcommand(
      "docs", "Print documentation: recipes (every key, from the schema), hooks (the Lua API), env (variables read)");
  docs->add_option("topic", docs_topic, "recipes, hooks or env")
      ->required()
      ->check(CLI::IsMember({"recipes", "hooks", "env"}));

  TokenizeOptions tokenize_options;
  auto* tokenize = app.add_subcommand(
      "tokenize", "Encode text to token ids (a JSON array), decode ids to text, or render a conversation");
  tokenize->add_option("model", tokenize_options.model,
                       "Model directory, tokenizer.json or tokenizer.model, builtin:bytes or builtin:PRESET")
      ->required();
  auto* tokenize_input = tokenize->add_option_group("input", "Encode or decode");
  tokenize_input->add_option("--text", tokenize_options.text, "Text to encode");
  tokenize_input->add_option("--decode", tokenize_options.decode, "Ids to decode: a JSON array or a comma list")
      ->type_name("IDS");
  auto* tokenize_chat =
      tokenize_input
          ->add_option("--chat", tokenize_options.chat,
                       "A conversation (JSON list of messages, or an object with messages, tools and other template "
                       "variables) through the chat template; prints its token ids")
          ->type_name("FILE");
  tokenize_input->require_option(1);
  tokenize->add_flag("--no-special", tokenize_options.no_special,
                     "Leave out the special tokens (encode: those the tokenizer adds; decode: all)");
  tokenize->add_flag("--generation-prompt", tokenize_options.generation_prompt,
                     "With --chat: end with the template's generation prompt (add_generation_prompt)")
      ->needs(tokenize_chat);
  tokenize->add_flag("--render", tokenize_options.render, "With --chat: print the rendered text instead of the ids")
      ->needs(tokenize_chat);

  DataOptions data_options;
  auto* data = app.add_subcommand(
      "data",
      "Show the first samples of the recipe's data as the run sees them: tokenised, truncated, and which text "
      "the loss covers (loads the tokenizer and the data only)");
  data->add_option("recipe", data_options.recipe, "Recipe file")->required();
  data->add_option("--samples", data_options.samples, "How many samples (pairs, prompts) to show, 1 to 1000");
  data->add_flag("--eval", data_options.eval, "Show data.eval_path instead of data.path");
  data->add_option("--format", data_options.format, "text or json")->check(CLI::IsMember({"text", "json"}));
  add_common(data, data_options.common);
  data->footer(
      "Text output: per sample a header \"=== sample I/N (FILE:LINE): T tokens, L in the loss\", then the "
      "decoded text (special tokens kept), one line per line of text, each prefixed with what its tokens are: "
      "\"context |\" read but not trained on, \"loss    |\" targets of the loss, \"prompt  |\" a PPO prompt as "
      "the rollout sees it, \"label   |\" its label (JSON). A newline of the text shows as \\n at the end of "
      "its line; a line without one is continued by the next (the next span starts mid-line); \\r and other "
      "control bytes are escaped (\\r, \\xNN). DPO/RM pairs show the shared prompt once, then chosen and "
      "rejected. --format json: one object with the algorithm, the tokenizer and the samples (ids, loss_mask, "
      "segments [{text, loss}], counts).");

  ReportOptions report_options;
  auto* report = app.add_subcommand("report", "Write RUN_DIR/report.html: curves, phases, checkpoints, plan and recipe");
  report->add_option("run_dir", report_options.run_dir, "The run's logging.dir (metrics.jsonl, resolved.toml)")
      ->required();
  report->add_option("--out", report_options.out, "Where to write the page instead of RUN_DIR/report.html")
      ->type_name("FILE");

  GenerateOptions generate_options;
  auto* generate = app.add_subcommand("generate", "Generate continuations of prompts with a model (greedy by default)");
  generate->add_option("model", generate_options.model, "Model directory (config.json, safetensors) or builtin:PRESET")
      ->required();
  auto* generate_input = generate->add_option_group("input", "What to continue");
  generate_input->add_option("--prompt", generate_options.prompt, "One prompt text");
  generate_input->add_option("--prompts", generate_options.prompts_file,
                             "A JSONL file of prompts (--input-key strings or \"messages\" chats)")
      ->type_name("FILE");
  generate_input->require_option(1);
  generate->add_option("--input-key", generate_options.input_key, "JSON key of the prompt text in --prompts lines");
  generate->add_option("--adapter", generate_options.adapter,
                       "A LoRA adapter directory in PEFT format (adapter_config.json, adapter_model.safetensors) "
                       "merged into the model first");
  generate->add_flag("--chat", generate_options.chat, "Render --prompt as a user message with the chat template");
  generate->add_option("--tokenizer", generate_options.tokenizer,
                       "Tokenizer (default: the model directory's; builtin:bytes for builtin: presets)");
  generate->add_option("--max-new-tokens", generate_options.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  generate->add_option("--max-prompt-len", generate_options.max_prompt_len, "Longer prompts keep their last tokens")
      ->check(CLI::Range(1, 1 << 24));
  generate->add_option("--temperature", generate_options.temperature, "0: greedy")->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-p", generate_options.top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  generate->add_option("--top-k", generate_options.top_k, "Sample among the k most probable tokens; -1 or 0: all")
      ->check(CLI::Range(-1, 1 << 30));
  generate->add_option("--seed", generate_options.seed, "Sampling seed (and the weights of a builtin: preset)");
  generate->add_option("--batch", generate_options.batch, "Sequences decoded together (the KV cache's slots)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  generate->add_option("--num-samples", generate_options.num_samples,
                       "Samples per prompt: one prefill of the prompt shared by all, each sample its own random stream")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  generate->add_option("--dtype", generate_options.dtype, "fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  generate->add_option("--device", generate_options.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  generate->add_flag("--eager", generate_options.eager,
                     "On cuda, run every decode step eagerly instead of replaying CUDA graphs");
  generate->add_option("--format", generate_options.format, "text or jsonl")->check(CLI::IsMember({"text", "jsonl"}));

  std::string ckpt_path;
  auto* ckpt = app.add_subcommand("ckpt", "Checkpoints: inspect (list and verify), convert (to Hugging Face)");
  auto* ckpt_inspect = ckpt->add_subcommand("inspect", "List the checkpoints under PATH and verify every file");
  ckpt_inspect->add_option("path", ckpt_path, "A [checkpoint] path, or one global_step_N folder")->required();
  CkptConvertOptions convert_options;
  auto* ckpt_convert =
      ckpt->add_subcommand("convert", "Write a role's model from a checkpoint (any layout) as a Hugging Face directory");
  ckpt_convert->add_option("checkpoint", convert_options.checkpoint,
                           "One global_step_N folder, or a [checkpoint] path (its newest checkpoint that verifies)")
      ->required();
  ckpt_convert->add_option("output", convert_options.output, "The model directory to write")->required();
  ckpt_convert->add_option("--role", convert_options.role, "The trained role to export (actor, critic)");
  ckpt_convert->add_option("--dtype", convert_options.dtype, "fp32, bf16 or fp16 (default: the role's training dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  ckpt->require_subcommand(1);

  std::string completion_shell;
  auto* completion = app.add_subcommand("completion", "Print a shell completion script (bash)");
  completion->add_option("shell", completion_shell, "bash")->required()->check(CLI::IsMember({"bash"}));

  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string> subcommands = {"run",    "lint",     "plan",     "docs", "env", "check",
                                                "submit", "tokenize", "generate", "ckpt", "report", "completion",
                                                "data"};
  if (auto mistyped = mistyped_subcommand(args, subcommands, {"--log-level"})) {
    std::fprintf(stderr, "meshrun: unknown command \"%s\"; did you mean \"%s\"? (meshrun --help lists them)\n",
                 mistyped->first.c_str(), mistyped->second.c_str());
    return kUsage;
  }
  args = with_default_subcommand(std::move(args), subcommands, {"--log-level"});
  std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    int code = app.exit(error);
    return code == 0 ? kOk : kUsage;
  }
  if (!engine && (*run || *check || *generate || *ckpt_convert || ((*lint || *plan) && nvidia_driver_present())))
    return hand_to_engine(argv);

  // Logs go to stderr: stdout carries plans, lint reports and JSON.
  spdlog::set_default_logger(spdlog::stderr_color_mt("meshrun"));
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("[meshrun] %^%l%$: %v");
  meshrun::configure_console(meshrun::console_mode());
  // A progress line still drawn when the command returns keeps its place.
  struct FinishConsole {
    ~FinishConsole() { meshrun::finish_console(); }
  } finish_console_at_exit;

  try {
    if (*run) return engine->run(run_recipe, run_common);
    if (*lint) return lint_command(lint_recipes, lint_common, lint_format);
    if (*plan) return plan_command(plan_recipe, plan_common, plan_cluster, plan_format, plan_ray);
    if (*docs) return docs_command(docs_topic);
    if (*env) return env_command(env_recipe, env_common, env_format);
    if (*check) return engine->check(check_recipe, check_common);
    if (*submit) return submit_command(submit_recipe, submit_common, submit_options);
    if (*tokenize) return tokenize_command(tokenize_options);
    if (*data) return data_command(data_options);
    if (*report) return report_command(report_options);
    if (*completion) {
      std::fputs(bash_completion(app).c_str(), stdout);
      return kOk;
    }
    if (*generate) return engine->generate(generate_options);
    if (*ckpt_inspect) return ckpt_inspect_command(ckpt_path);
    if (*ckpt_convert) return engine->ckpt_convert(convert_options);
  } catch (const std::exception& error) {
    spdlog::error("{}", error.what());
    return kFailed;
  }
  return kUsage;
}
