// `meshrun data RECIPE [--samples N] [--eval] [--format text|json]`: the
// first samples of a recipe's training (or evaluation) data exactly as the
// run will see them, with what the loss covers.
//
// The recipe is linted like every command's; then only the tokenizer
// (load_data_tokenizer, so data.tokenizer and data.chat_template_kwargs
// apply) and the data are loaded, through the loaders the runs use
// (load_sft_dataset, load_preference_dataset, load_prompt_dataset), so that
// truncation to data.max_len, loss masks, data.loss_turns, chat templates
// and the keys agree with training by construction. No worker, runtime or
// model weights. The loaders read only the first lines (DataReadLimit's
// max_lines): --samples of them, and more, four times as many each time,
// while dropped samples leave fewer than asked and the file goes on.
//
// Text output, on stdout: two lines saying what was loaded; per sample a
// header "=== sample I/N (FILE:LINE): T tokens, L in the loss" and the
// decoded text (special tokens kept) as consecutive spans of tokens in the
// loss or not, one output line per line of text, each prefixed with its
// span's marker:
//   context | text the model reads but is not trained on
//   loss    | text whose tokens are targets of the loss
//   prompt  | a PPO prompt, as the rollout sees it
//   label   | a PPO prompt's label (data.label_key), as JSON
// A newline of the text is shown as a literal \n at the end of its output
// line; an output line without one is continued by the next (the next span
// starts mid-line); a carriage return is \r and other control bytes \xNN.
// Preference pairs show the prompt once under "-- prompt" when both
// responses share its tokens, then "-- chosen" and "-- rejected". A last
// line sums up what was read. --format json prints one JSON object instead.
// Each span is decoded on its own, so a character split across a span
// boundary by a byte-level tokenizer shows as replacement characters.
#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "meshrun/data/data.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/data/prompts.hpp"

namespace meshrun::cli {
namespace {

using nlohmann::ordered_json;

struct Span {
  std::string text;
  bool loss = false;
};

// The maximal runs of equal mask values from `from` on.
std::vector<Span> spans_of(const Tokenizer& tokenizer, std::span<const int32_t> ids, std::span<const uint8_t> mask,
                           std::size_t from = 0) {
  std::vector<Span> spans;
  std::size_t start = from;
  for (std::size_t i = from; i <= ids.size(); ++i) {
    if (i < ids.size() && i > start && (mask[i] != 0) == (mask[start] != 0)) continue;
    if (i > start) spans.push_back(Span{tokenizer.decode(ids.subspan(start, i - start), false), mask[start] != 0});
    start = i;
  }
  return spans;
}

std::string escaped(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (const char c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\r') {
      out += "\\r";
    } else if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

// `text` under `marker`, a line of output per line of text.
void append_text(std::string& out, std::string_view marker, std::string_view text) {
  if (text.empty()) {
    out += "  " + std::string(marker) + " | (no text)\n";
    return;
  }
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t newline = text.find('\n', start);
    const std::size_t end = newline == std::string_view::npos ? text.size() : newline;
    out += "  " + std::string(marker) + " | " + escaped(text.substr(start, end - start));
    if (newline != std::string_view::npos) out += "\\n";
    out += '\n';
    start = newline == std::string_view::npos ? text.size() : newline + 1;
  }
}

void append_spans(std::string& out, const std::vector<Span>& spans) {
  for (const Span& span : spans) append_text(out, span.loss ? "loss   " : "context", span.text);
}

ordered_json spans_json(const std::vector<Span>& spans) {
  ordered_json list = ordered_json::array();
  for (const Span& span : spans) list.push_back({{"text", span.text}, {"loss", span.loss}});
  return list;
}

ordered_json sample_json(const Tokenizer& tokenizer, const SftSample& sample) {
  return {{"tokens", sample.size()},
          {"loss_tokens", sample.loss_tokens()},
          {"ids", sample.input_ids},
          {"loss_mask", sample.loss_mask},
          {"segments", spans_json(spans_of(tokenizer, sample.input_ids, sample.loss_mask))}};
}

std::string where(const std::string& path, long long line) {
  return line > 0 ? path + ":" + std::to_string(line) : path;
}

std::string counts(const SftSample& sample) {
  return std::to_string(sample.size()) + " tokens, " + std::to_string(sample.loss_tokens()) + " in the loss";
}

// What a view prints: the samples as text or JSON objects, and the summary.
struct View {
  std::string text;
  ordered_json samples = ordered_json::array();
  std::string path;
  std::string summary;
  long long lines = 0;  // non-blank lines read
  bool whole_file = true;
};

// The first `wanted` items of a loader run over the first lines of the
// file: `wanted` lines, then four times as many each time while fewer
// items came back and the file goes on. `load(limit)` returns the dataset,
// `count(dataset)` its items.
template <class Load, class Count>
auto load_first(int wanted, View& view, Load load, Count count) {
  long long lines = wanted;
  for (;;) {
    bool short_read = false;
    DataReadLimit limit;
    limit.max_lines = lines;
    limit.truncated = &short_read;
    auto dataset = load(limit);
    if (static_cast<long long>(count(dataset)) >= wanted || !short_read) {
      view.whole_file = !short_read;
      return dataset;
    }
    lines *= 4;  // the file is finite: a read that reaches its end stops the loop
  }
}

View sft_view(const DataConfig& config, const Tokenizer& tokenizer, int wanted) {
  View view;
  const SftDataset dataset = load_first(wanted, view, [&](DataReadLimit limit) {
    return load_sft_dataset(config, tokenizer, kDefaultMaxDataErrors, limit);
  }, [](const SftDataset& d) { return d.samples.size(); });
  view.path = dataset.path;
  view.summary = dataset.stats.summary();
  view.lines = dataset.stats.lines;
  const std::size_t shown = std::min<std::size_t>(dataset.samples.size(), static_cast<std::size_t>(wanted));
  for (std::size_t i = 0; i < shown; ++i) {
    const SftSample& sample = dataset.samples[i];
    view.text += "=== sample " + std::to_string(i + 1) + "/" + std::to_string(shown) + " (" +
                 where(dataset.path, sample.line) + "): " + counts(sample) + "\n";
    append_spans(view.text, spans_of(tokenizer, sample.input_ids, sample.loss_mask));
    ordered_json object = {{"index", i + 1}, {"line", sample.line}};
    object.update(sample_json(tokenizer, sample));
    view.samples.push_back(std::move(object));
  }
  return view;
}

// The tokens both responses of a pair start with before either's loss:
// the prompt, shown once. 0 when they differ (each is then shown whole).
int shared_prompt(const PreferencePair& pair) {
  const int length = pair.chosen.prompt_len;
  if (length != pair.rejected.prompt_len || length <= 0) return 0;
  return std::equal(pair.chosen.input_ids.begin(), pair.chosen.input_ids.begin() + length,
                    pair.rejected.input_ids.begin())
             ? length
             : 0;
}

View preference_view(const DataConfig& config, const Tokenizer& tokenizer, int wanted) {
  View view;
  const PreferenceDataset dataset = load_first(wanted, view, [&](DataReadLimit limit) {
    return load_preference_dataset(config, tokenizer, kDefaultMaxDataErrors, limit);
  }, [](const PreferenceDataset& d) { return d.pairs.size(); });
  view.path = dataset.path;
  view.summary = dataset.summary();
  view.lines = dataset.lines;
  const std::size_t shown = std::min<std::size_t>(dataset.pairs.size(), static_cast<std::size_t>(wanted));
  for (std::size_t i = 0; i < shown; ++i) {
    const PreferencePair& pair = dataset.pairs[i];
    view.text += "=== pair " + std::to_string(i + 1) + "/" + std::to_string(shown) + " (" +
                 where(dataset.path, pair.line) + "): chosen " + counts(pair.chosen) + "; rejected " +
                 counts(pair.rejected) + "\n";
    const int prompt = shared_prompt(pair);
    const auto prompt_size = static_cast<std::size_t>(prompt);
    if (prompt > 0) {
      view.text += "  -- prompt (" + std::to_string(prompt) + " tokens)\n";
      append_spans(view.text, spans_of(tokenizer, std::span(pair.chosen.input_ids).first(prompt_size),
                                       std::span(pair.chosen.loss_mask).first(prompt_size)));
    }
    const auto response = [&](const char* name, const SftSample& sample) {
      view.text += std::string("  -- ") + name + "\n";
      append_spans(view.text,
                   spans_of(tokenizer, sample.input_ids, sample.loss_mask, static_cast<std::size_t>(prompt)));
    };
    response("chosen", pair.chosen);
    response("rejected", pair.rejected);
    const auto prompt_ids = std::span(pair.chosen.input_ids).first(prompt_size);
    view.samples.push_back({{"index", i + 1},
                            {"line", pair.line},
                            {"prompt", {{"tokens", prompt}, {"text", tokenizer.decode(prompt_ids, false)}}},
                            {"chosen", sample_json(tokenizer, pair.chosen)},
                            {"rejected", sample_json(tokenizer, pair.rejected)}});
  }
  return view;
}

View prompt_view(const DataConfig& config, const Tokenizer& tokenizer, int max_prompt_len, int wanted) {
  View view;
  const PromptDataset dataset = load_first(wanted, view, [&](DataReadLimit limit) {
    return load_prompt_dataset(config, tokenizer, max_prompt_len, kDefaultMaxDataErrors, limit);
  }, [](const PromptDataset& d) { return d.prompts.size(); });
  view.path = dataset.path;
  view.lines = static_cast<long long>(dataset.prompts.size());  // a line that is no prompt is an error
  view.summary = std::to_string(dataset.prompts.size()) + " prompts";
  if (dataset.truncated > 0)
    view.summary += ", " + std::to_string(dataset.truncated) + " cut to their last rollout.max_prompt_len = " +
                    std::to_string(max_prompt_len) + " tokens";
  const std::size_t shown = std::min<std::size_t>(dataset.prompts.size(), static_cast<std::size_t>(wanted));
  for (std::size_t i = 0; i < shown; ++i) {
    const Prompt& prompt = dataset.prompts[i];
    const std::string text = tokenizer.decode(prompt.ids, false);
    view.text += "=== prompt " + std::to_string(i + 1) + "/" + std::to_string(shown) + " (" +
                 where(dataset.path, prompt.line) + "): " + std::to_string(prompt.ids.size()) + " tokens\n";
    append_text(view.text, "prompt ", text);
    ordered_json object = {{"index", i + 1},
                           {"line", prompt.line},
                           {"tokens", prompt.ids.size()},
                           {"ids", prompt.ids},
                           {"text", text}};
    if (prompt.label) {
      append_text(view.text, "label  ", prompt.label->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      object["label"] = *prompt.label;
    }
    view.samples.push_back(std::move(object));
  }
  return view;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "meshrun data: %s\n", message.c_str());
  return kFailed;
}

}  // namespace

int data_command(const DataOptions& options) {
  if (options.samples < 1 || options.samples > kMaxDataSamples) {
    std::fprintf(stderr, "meshrun data: --samples must be between 1 and %d, got %d\n", kMaxDataSamples,
                 options.samples);
    return kUsage;
  }
  LintReport report;
  if (!lint_for_command(options.recipe, options.common, "nothing was read", report)) return kFailed;
  const Recipe& recipe = *report.recipe;
  const AlgorithmRow& algorithm = row_of(recipe.algorithm);
  DataConfig config = recipe.data;
  if (options.eval) {
    if (!algorithm.evaluates)
      return fail("--eval: a " + std::string(algorithm.name) + " run does not evaluate (data.eval_path is for " +
                  "the algorithms that do: sft, dpo, rm)");
    if (recipe.data.eval_path.empty())
      return fail("--eval: " + recipe.where("data.eval_path").str() + ": the recipe sets no data.eval_path");
    config.path = recipe.data.eval_path;
  }
  try {
    const DataTokenizer loaded = load_data_tokenizer(recipe.data, report.plan->role(Role::actor)->model);
    const Tokenizer& tokenizer = *loaded.tokenizer;
    View view;
    std::string settings = "max_len " + std::to_string(config.max_len);
    switch (algorithm.data) {
      case DataShape::prompt_response:
        settings += ", loss_turns " + name_of(config.loss_turns);
        view = sft_view(config, tokenizer, options.samples);
        break;
      case DataShape::preference:
        view = preference_view(config, tokenizer, options.samples);
        break;
      case DataShape::prompt:
        settings = "rollout.max_prompt_len " + std::to_string(recipe.rollout.max_prompt_len);
        if (!config.label_key.empty()) settings += ", label_key \"" + config.label_key + "\"";
        view = prompt_view(config, tokenizer, recipe.rollout.max_prompt_len, options.samples);
        break;
    }
    // The canonical JSON object the schema checker wrote, or nothing.
    const ordered_json kwargs = config.chat_template_kwargs.empty()
                                    ? ordered_json::object()
                                    : ordered_json::parse(config.chat_template_kwargs);
    if (options.format == "json") {
      ordered_json out = {{"algorithm", std::string(algorithm.name)},
                          {"eval", options.eval},
                          {"path", view.path},
                          {"tokenizer", {{"description", tokenizer.description()}, {"source", loaded.source}}},
                          {"chat_template_kwargs", kwargs},
                          {"settings", settings},
                          {"samples", std::move(view.samples)},
                          {"read", {{"lines", view.lines}, {"whole_file", view.whole_file},
                                    {"summary", view.summary}}}};
      const std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      std::fwrite(text.data(), 1, text.size(), stdout);
      return kOk;
    }
    std::string text = std::string(algorithm.name) + (options.eval ? " evaluation" : "") + " data " + view.path +
                       " (" + settings + ")\n";
    text += "tokenizer " + tokenizer.description() + " from " + loaded.source;
    if (!kwargs.empty()) text += ", chat_template_kwargs " + kwargs.dump();
    text += "\n" + view.text + (view.whole_file ? "read the whole file: " : "read its first lines only: ") +
            view.summary + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kOk;
  } catch (const DataError& error) {
    return fail(error.what());
  } catch (const TokenizerError& error) {
    return fail(error.what());
  }
}

}  // namespace meshrun::cli
