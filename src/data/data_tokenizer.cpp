// load_data_tokenizer (include/meshrun/data/data.hpp).
#include <nlohmann/json.hpp>

#include "meshrun/data/data.hpp"

namespace meshrun {

std::string data_tokenizer_source(const std::string& data_tokenizer, const std::string& model) {
  return data_tokenizer.empty() ? model : data_tokenizer;
}

DataTokenizer load_data_tokenizer(const DataConfig& data, const std::string& model) {
  DataTokenizer out;
  out.source = data_tokenizer_source(data.tokenizer, model);
  out.tokenizer = load_tokenizer(out.source);
  // data.chat_template_kwargs is the canonical JSON object the schema checker wrote.
  if (!data.chat_template_kwargs.empty())
    out.tokenizer->set_chat_template_variables(nlohmann::ordered_json::parse(data.chat_template_kwargs));
  return out;
}

}  // namespace meshrun
